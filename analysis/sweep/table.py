"""A sweep's results as one table: a row per run, with its parameters and key figures.

A thesis plan's columns are fixed (``FIGURES``). A plan of other scenarios keeps those of the
thesis columns its runs report (a broker run has delivery latency and the oracle's counts, say),
then the union, in order of appearance, of the runs' other scalar result fields (a dict of
scalars, such as ``table_entries``, spread out as ``table_entries_mean``, ``table_entries_max``).

Written as ``sweep.parquet`` (for Spark, pandas, DuckDB) and ``sweep.json`` (the plan, the rows
and the sweep's own facts), and printed as text. Rows are in plan order; only the ``wall_s``
column depends on the machine and the scheduling.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from rangecast.analysis.sweep.plan import THESIS, Plan

FORMAT = "rangecast-sweep"
VERSION = 1
#: Columns that depend on the machine, not on the plan.
WALL_COLUMNS = ("wall_s",)

#: Figure columns taken from a thesis run's summary: (column, type, path in the summary).
FIGURES: tuple[tuple[str, pa.DataType, tuple[str, ...]], ...] = (
    ("latency_model", pa.string(), ("latency_model", "name")),
    ("mean_rtt_ms", pa.float64(), ("mean_rtt_ms",)),
    ("subscriptions", pa.int64(), ("subscriptions",)),
    ("events", pa.int64(), ("events",)),
    ("expected_deliveries", pa.int64(), ("expected_deliveries",)),
    ("delivery_latency_mean_ms", pa.float64(), ("delivery_latency_ms", "mean")),
    ("delivery_latency_p90_ms", pa.float64(), ("delivery_latency_ms", "p90")),
    ("delivery_latency_max_ms", pa.float64(), ("delivery_latency_ms", "max")),
    ("delivery_latency_mean_rtt", pa.float64(), ("delivery_latency_rtt", "mean")),
    ("publish_bytes_mean", pa.float64(), ("publish_bytes_per_event_per_node", "mean")),
    ("publish_bytes_max", pa.float64(), ("publish_bytes_per_event_per_node", "max")),
    ("probe_bytes_mean", pa.float64(), ("probe_bytes_per_event_per_node", "mean")),
    ("probe_bytes_max", pa.float64(), ("probe_bytes_per_event_per_node", "max")),
    ("install_latency_mean_ms", pa.float64(), ("install_latency_ms", "mean")),
    ("install_bytes_mean", pa.float64(), ("install_bytes_per_sub_per_node_mean",)),
    ("missed", pa.int64(), ("missed",)),
    ("duplicates", pa.int64(), ("duplicates",)),
    ("false_positives", pa.int64(), ("false_positives",)),
    ("sim_messages", pa.int64(), ("sim_messages",)),
)


#: Summary fields that are no figures of the run: machine-dependent ones (``wall_s`` is the
#: outcome's own column).
NOT_FIGURES = ("wall_s", "wall_phases_s", "sim_messages_per_s")


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, bool | int | float | str)


def extra_figures(summary: Mapping[str, Any], skip: Sequence[str] = ()) -> dict[str, Any]:
    """A non-thesis run's scalar result fields that ``FIGURES`` does not already hold."""
    used = {path[0] for _, _, path in FIGURES}
    out: dict[str, Any] = {}
    for key, value in summary.items():
        if key in used or key in skip or key in NOT_FIGURES or key.startswith("wall_"):
            continue
        if _scalar(value):
            out[key] = value
        elif isinstance(value, Mapping) and value and all(map(_scalar, value.values())):
            out.update({f"{key}_{sub}": x for sub, x in value.items()})
    return out


FIGURE_COLUMNS = frozenset(col for col, _, _ in FIGURES)
#: The table's own columns, never taken from a summary.
OWN_COLUMNS = ("index", "run", "status", "wall_s", "error", "run_dir")


def _dig(doc: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = doc
    for key in path:
        if not isinstance(value, Mapping) or key not in value:
            return None
        value = value[key]
    return value


def _param_value(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def build_rows(plan: Plan, outcomes: Mapping[int, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per run of ``plan``, in plan order; a run without an outcome is 'not run'."""
    rows = []
    extras: dict[int, dict[str, Any]] = {}
    for spec in plan.runs:
        outcome = outcomes.get(spec.index, {})
        summary = outcome.get("summary") or {}
        row: dict[str, Any] = {
            "index": spec.index,
            "run": spec.run_id,
            "status": outcome.get("status", "not run"),
        }
        params = plan.param_columns()
        for col in params:
            if col == "scenario":
                row[col] = spec.scenario
            elif col == "seed":
                row[col] = spec.seed
            elif col in spec.settings:
                row[col] = _param_value(spec.settings[col])
            elif hasattr(spec.params, col):
                row[col] = _param_value(getattr(spec.params, col))
            elif hasattr(getattr(spec.params, "overlay", None), col):
                row[col] = _param_value(getattr(spec.params.overlay, col))
            else:
                row[col] = None  # a parameter this scenario does not have (say, its nodes)
        for col, _, path in FIGURES:
            row[col] = _dig(summary, path)
        if spec.scenario != THESIS:
            extras[spec.index] = extra_figures(summary, skip=[*params, *OWN_COLUMNS])
        row["wall_s"] = outcome.get("wall_s")
        row["error"] = outcome.get("error")
        row["run_dir"] = f"runs/{spec.run_id}"
        rows.append(row)
    if plan.thesis_only:
        return rows
    # Other scenarios: the thesis columns some run reports, then every run's other fields.
    keep = {col for col, _, _ in FIGURES if THESIS in plan.scenarios}
    keep |= {col for col, _, _ in FIGURES for r in rows if r[col] is not None}
    extra_cols = list(dict.fromkeys(k for e in extras.values() for k in e))
    out = []
    for row in rows:
        figures = extras.get(row["index"], {})
        new = {k: v for k, v in row.items() if k not in FIGURE_COLUMNS or k in keep}
        tail = {k: new.pop(k) for k in ("wall_s", "error", "run_dir")}
        new.update({col: figures.get(col) for col in extra_cols}, **tail)
        out.append(new)
    return out


def arrow_table(rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """The rows as an Arrow table: figure columns typed, parameter columns as their values are."""
    typed = {col: typ for col, typ, _ in FIGURES}
    typed.update(index=pa.int64(), wall_s=pa.float64(), error=pa.string(), status=pa.string())
    names = list(rows[0]) if rows else ["index", "run", "status"]
    arrays = []
    for name in names:
        values = [r.get(name) for r in rows]
        typ = typed.get(name)
        if typ is None and all(v is None for v in values):
            typ = pa.string()
        try:
            arrays.append(pa.array(values, typ))
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            # Another scenario's field whose runs disagree on its type: kept, as text.
            arrays.append(pa.array([None if v is None else str(v) for v in values], pa.string()))
    return pa.Table.from_arrays(arrays, names=names)


def write(out: Path, plan: Plan, rows: list[dict[str, Any]], facts: Mapping[str, Any]) -> None:
    """``sweep.parquet`` and ``sweep.json`` into ``out``."""
    pq.write_table(arrow_table(rows), out / "sweep.parquet", compression="zstd")
    (out / "sweep.json").write_text(
        json.dumps(document(plan, rows, facts), sort_keys=True, indent=1) + "\n"
    )


def document(plan: Plan, rows: list[dict[str, Any]], facts: Mapping[str, Any]) -> dict[str, Any]:
    return {"format": FORMAT, "version": VERSION, "plan": plan.describe(), **facts, "rows": rows}


def _fmt(value: Any, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, list):
        return "-".join(map(str, value))
    text = str(value)
    return text.removeprefix("matrix:")


#: The figures ``render`` shows for thesis plans.
THESIS_SHOWN: list[tuple[str, str, int]] = [
    ("RTT ms", "mean_rtt_ms", 0),
    ("deliv ms mean", "delivery_latency_mean_ms", 0),
    ("max", "delivery_latency_max_ms", 0),
    ("publish B mean", "publish_bytes_mean", 0),
    ("max", "publish_bytes_max", 0),
    ("probe B mean", "probe_bytes_mean", 0),
    ("max", "probe_bytes_max", 0),
    ("install ms", "install_latency_mean_ms", 0),
    ("missed", "missed", 0),
    ("dup", "duplicates", 0),
    ("false+", "false_positives", 0),
    ("wall s", "wall_s", 0),
    ("status", "status", 0),
]


#: The figures ``render`` shows for plans of other scenarios, when some run has them.
OTHER_SHOWN: tuple[tuple[str, str, int], ...] = (
    ("deliv ms mean", "delivery_latency_mean_ms", 0),
    ("max", "delivery_latency_max_ms", 0),
    ("msgs/event", "messages_per_event", 1),
    ("B/event", "bytes_per_event", 0),
    ("hops/deliv", "hops_per_delivery", 2),
    ("table mean", "table_entries_mean", 0),
    ("setup msgs", "setup_messages", 0),
    ("missed", "missed", 0),
    ("dup", "duplicates", 0),
    ("false+", "false_positives", 0),
    ("fp recv", "false_positive_receptions", 0),
)


def render(plan: Plan, rows: Sequence[Mapping[str, Any]]) -> str:
    """The table as aligned text: the swept parameters, then the key figures."""
    shown = ["seed"] if len(plan.seeds) > 1 else []
    shown += ["nodes", "latency"]
    shown += [k for k in plan.swept() if k not in ("nodes", "latency", "seed")]
    cols: list[tuple[str, str, int]] = [("#", "index", 0)]
    if not plan.thesis_only:
        cols += [("scenario", "scenario", 0)]
    cols += [(name, name, 0) for name in shown]
    if not plan.thesis_only:
        cols += [c for c in OTHER_SHOWN if any(r.get(c[1]) is not None for r in rows)]
        cols += [("wall s", "wall_s", 0), ("status", "status", 0)]
    else:
        cols += THESIS_SHOWN
    cells = [[title for title, _, _ in cols]]
    for row in rows:
        cells.append([_fmt(row.get(key), digits) for _, key, digits in cols])
    widths = [max(len(r[i]) for r in cells) for i in range(len(cols))]
    text_cols = {
        i for i, (_, key, _) in enumerate(cols) if key in ("latency", "status", "scenario")
    }
    lines = []
    for r in cells:
        parts = [
            c.ljust(w) if i in text_cols else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ]
        lines.append("  ".join(parts).rstrip())
    title = f"Sweep {plan.name}: {len(rows)} runs ({plan.scenario})"
    if plan.description:
        title += f" - {plan.description}"
    units = (
        "latency in ms from publish to delivery; bandwidth in bytes per event per node "
        "(publish = probes + notifications)"
        if plan.thesis_only
        else "latency in ms from publish to delivery; every field of the runs in sweep.json"
    )
    return "\n".join([title, *lines, units])
