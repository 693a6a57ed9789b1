"""The systems comparison page: runs of different systems (the thesis' DHT overlay, the broker
systems) on one workload, lined up; and, for a workload run over several seeds, one more table of
every column's mean and 95% interval over the seeds (``over_seeds``).

For each set of runs that share a workload, size, seed and latency model
(``systems_job.groups``): the table of ``rangecast sim compare``'s columns, recomputed by Spark
from the logs (``systems_job``); the delivery latency CDFs, a line per run; and the per-node load
rank curves (messages sent + received in the event phase, nodes sorted busiest first), a line per
run. Runs of one system that differ in a setting (OctopiA's dynamic routing on and off) are told
apart by that setting.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rangecast.analysis.report.model import Figure, Report, SystemsTable
from rangecast.analysis.report.spark_job import LATENCY_BIN_MS, RunFigures, flatten
from rangecast.analysis.report.systems_job import COLUMNS, LOAD, groups, workload_key
from rangecast.analysis.stats import mean_ci

#: The table's headers, in ``systems_job.COLUMNS`` order.
HEADERS = (
    "msgs/event",
    "bytes/event",
    "traffic ms/event",
    "matchings/event",
    "hops/delivery",
    "latency mean (ms)",
    "latency p90 (ms)",
    "latency max (ms)",
    "false-pos. receptions",
    "table entries mean",
    "table entries max",
    "load max/mean",
    "load Gini",
    "set-up msgs",
    "expected",
    "missed",
    "duplicates",
    "false deliveries",
)
#: Settings that say which run it is, not how it ran.
_NOT_SETTINGS = ("system", "scenario")


def _word(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return f"{name} {'on' if value else 'off'}"
    return f"{name} {value}"


def labels(figs: Sequence[RunFigures]) -> list[str]:
    """Each run's system, and for a system run more than once, the settings its runs differ in
    (``octopia (dynamic on)``)."""
    out = []
    for f in figs:
        same = [g for g in figs if g.run.kind == f.run.kind]
        words = ""
        if len(same) > 1:
            flat = [flatten(g.run.params) for g in same]
            names = sorted({k for d in flat for k in d} - set(_NOT_SETTINGS))
            varying = [
                k for k in names if len({json.dumps(d.get(k), sort_keys=True) for d in flat}) > 1
            ]
            mine = flatten(f.run.params)
            words = ", ".join(_word(k, mine.get(k)) for k in varying)
        out.append(f"{f.run.kind} ({words})" if words else f.run.kind)
    return out


def _cell(x: Any, col: str) -> str:
    if x is None:
        return "-"
    if isinstance(x, int):
        return f"{x:,}"
    if col == "load_gini":
        return f"{x:.3f}"
    if col in ("hops_per_delivery", "load_max_over_mean"):
        return f"{x:.2f}"
    return f"{x:,.1f}" if abs(x) < 100 else f"{x:,.0f}"


def _workload(figs: Sequence[RunFigures], without: Sequence[str] = ()) -> str:
    """The shared workload in words: ``thesis workload, 200 nodes, 5 subs/node, ...``
    (``without``: keys left out, the seed of a table over seeds)."""
    key = {k: json.loads(v) for k, v in workload_key(figs[0].run) if k not in without}
    words = [f"{key.pop('workload')} workload"]
    for k, v in key.items():
        if v is None:
            continue
        if k == "latency":
            words.append(f"{Path(str(v)).stem} latencies")
        elif k == "subs_per_node":
            words.append(f"{v:g} subs/node" if isinstance(v, int | float) else f"{v} subs/node")
        elif k in ("nodes", "events"):
            words.append(f"{v:,} {k}" if isinstance(v, int) else f"{v} {k}")
        else:
            words.append(_word(k.replace("_", " "), v))
    return ", ".join(words)


def identical(series: Sequence[tuple[str, Any]]) -> tuple[list[tuple[str, Any]], str]:
    """Series with the same data drawn once, under one label ("siena = padres (identical)"),
    so that no line hides another; and a sentence saying which coincide ("" when none)."""
    merged: list[tuple[list[str], Any]] = []
    for label, data in series:
        same = next((m for m in merged if m[1] == data), None)
        if same is None:
            merged.append(([label], data))
        else:
            same[0].append(label)
    out = [(" = ".join(ls) + (" (identical)" if len(ls) > 1 else ""), d) for ls, d in merged]
    said = [" and ".join(ls) for ls, _ in merged if len(ls) > 1]
    return out, (" Identical, so drawn as one line: " + "; ".join(said) + "." if said else "")


def _add(report: Report, title: str, drawn: Any, figs: Sequence[RunFigures], what: str) -> None:
    models = sorted({f.run.latency_name for f in figs})
    caption = f"{what} Latency model: {', '.join(models)}."
    dirs = [str(f.run.dir) for f in figs]
    report.figures.append(Figure("systems", title, drawn.path, dirs, caption, drawn.data))


def systems(report: Report, out: Path) -> None:
    """The comparison tables and figures of every set of runs on one workload."""
    import rangecast.analysis.report.plots as plots

    by_index = {f.run.index: f for f in report.runs}
    sets = [[by_index[r.index] for r in g] for g in groups([f.run for f in report.runs])]
    for n, figs in enumerate(sets):
        names = labels(figs)
        work = _workload(figs)
        rows = [
            [
                name + (" *" if f.recomputed["comparison"].get("inactive") else ""),
                *(_cell(f.recomputed["comparison"].get(c), c) for c in COLUMNS),
                _cell(f.recomputed["comparison"].get("migrations"), "migrations"),
            ]
            for name, f in zip(names, figs, strict=True)
        ]
        idle = [
            f"* {name}: its mechanism did not act in this run: {why}."
            for name, f in zip(names, figs, strict=True)
            if (why := f.recomputed["comparison"].get("inactive"))
        ]
        data = [
            {"run": str(f.run.dir), "label": name, **f.recomputed["comparison"]}
            for name, f in zip(names, figs, strict=True)
        ]
        report.systems.append(
            SystemsTable(
                f"Systems compared: {work}",
                ["run", *HEADERS, "migrations"],
                rows,
                data,
                " ".join(idle)
                + (" " if idle else "")
                + "Recomputed by Spark from each run's log (docs/run-logs.md): messages and bytes "
                "of the event phase (from the first publish call on) per event, its "
                "latency-weighted traffic (the messages' one-way delays summed, per event), "
                "delivery "
                "latency of the expected deliveries, table entries per node (brokers: SRT + "
                "PRT entries; thesis: subscription pieces stored), load = messages sent + "
                "received per node in the event phase, set-up = every message before it; "
                "matchings per event (subscription entries an event was tested against: a "
                "broker's whole PRT at every broker it reached, the pieces of each leaf that "
                "matched it) and migrations (POP, GRAPE) from the run's summary. Runs from "
                "'sim compare --out' are also checked against its compare.json.",
            )
        )
        stem = f"systems{n + 1:02d}"
        runs_text = "; ".join(f"{name}: {f.run.dir}" for name, f in zip(names, figs, strict=True))
        what = "delivery latency of every expected delivery, a line per system"
        latency, same = identical(
            [
                (name, list(f.latency_hist.get("delivery_latency_ms", [])))
                for name, f in zip(names, figs, strict=True)
            ]
        )
        drawn = plots.cdfs(
            out / f"{stem}-latency.png",
            f"Delivery latency CDF - {work}",
            "delivery latency (ms)",
            [plots.Dist(name, points, LATENCY_BIN_MS) for name, points in latency],
        )
        _add(
            report,
            "Delivery latency CDF",
            drawn,
            figs,
            f"Cumulative share of the {what} (in {LATENCY_BIN_MS:g} ms bins); {runs_text}." + same,
        )
        load, same = identical(
            [
                (name, sorted(f.node_values.get(LOAD, [])))
                for name, f in zip(names, figs, strict=True)
            ]
        )
        drawn = plots.rank(
            out / f"{stem}-load.png",
            f"Per-node load, busiest first - {work}",
            "messages sent + received in the event phase",
            load,
        )
        _add(
            report,
            "Per-node load rank curves",
            drawn,
            figs,
            "Each node's (broker's) messages sent + received in the event phase, nodes sorted "
            f"busiest first, a line per system; {runs_text}." + same,
        )
    over_seeds(report, sets)


#: The columns a table over seeds summarises (mean and 95% interval), with their headers.
OVER_SEEDS = (
    ("messages_per_event", "msgs/event"),
    ("bytes_per_event", "bytes/event"),
    ("traffic_ms_per_event", "traffic ms/event"),
    ("matchings_per_event", "matchings/event"),
    ("latency_mean_ms", "latency mean (ms)"),
    ("latency_p90_ms", "latency p90 (ms)"),
    ("load_max_over_mean", "load max/mean"),
    ("load_gini", "load Gini"),
    ("table_entries_mean", "table entries mean"),
    ("setup_messages", "set-up msgs"),
    ("migrations", "migrations"),
)


def _spread_cell(values: Sequence[float], col: str) -> str:
    mean, half = mean_ci(values)
    if math.isnan(half):
        return _cell(mean, col)
    return f"{_cell(mean, col)} ± {_cell(half, col)}"


def over_seeds(report: Report, sets: Sequence[Sequence[RunFigures]]) -> None:
    """One more table per workload run over several seeds: every system's columns as the
    mean and 95% interval (Student t) over the seeds, from the per-seed tables' rows
    (``sets``: the runs of each per-seed table)."""
    merged: dict[str, list[Sequence[RunFigures]]] = {}
    for figs in sets:
        merged.setdefault(_workload(figs, ("seed",)), []).append(figs)
    for work, sets in merged.items():
        if len(sets) < 2:
            continue
        seeds = sorted({f.run.params.get("seed") for figs in sets for f in figs}, key=str)
        per_label: dict[str, list[dict[str, Any]]] = {}
        for figs in sets:
            for name, f in zip(labels(figs), figs, strict=True):
                per_label.setdefault(name, []).append(f.recomputed["comparison"])
        rows, data = [], []
        for name, recs in per_label.items():
            cells, values = [], {}
            for col, _ in OVER_SEEDS:
                got = [float(r[col]) for r in recs if isinstance(r.get(col), int | float)]
                values[col] = got
                cells.append(_spread_cell(got, col) if got else "-")
            idle = sum(1 for r in recs if r.get("inactive"))
            rows.append([f"{name} (n={len(recs)})" + (f" *{idle}" if idle else ""), *cells])
            data.append({"label": name, "seeds": len(recs), "inactive_runs": idle, **values})
        report.systems.append(
            SystemsTable(
                f"Systems compared over seeds {', '.join(map(str, seeds))}: {work}",
                ["run", *(h for _, h in OVER_SEEDS)],
                rows,
                data,
                "Each cell: the mean over the seeds ± the half width of its 95% interval "
                "(Student t; n runs per row), from the per-seed tables. '*k': in k of the runs "
                "the system's own mechanism did not act (the per-seed tables say why).",
            )
        )


def as_json(report: Report) -> list[dict[str, Any]]:
    """The comparison tables for ``build_report``'s result."""
    return [
        {"title": t.title, "note": t.note, "columns": t.columns, "rows": t.data}
        for t in report.systems
    ]


__all__ = ["as_json", "identical", "labels", "over_seeds", "systems"]
