"""Each figure of the reproduction from the runs: the checks against the papers (compare.Check)
and the per-point statistics the figures with confidence intervals draw.

Thesis figures use the values Spark recomputed from the run logs (analysis.report), which the
report has checked against each run's own summary; the LBDD figures are tree and transfer
properties that only the run's summary holds (run.json), as in the report's LBDD table.
"""

from __future__ import annotations

import functools
import json
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import rangecast.analysis.report.paper as paper
from rangecast.analysis.report.spark_job import received
from rangecast.analysis.reproduce.compare import Check, Stat, stat_of
from rangecast.sim.comparable import THESIS_NETWORK_SIZES, THESIS_NODES

#: The thesis' figures, then the LBDD paper's, in page order.
THESIS_FIGURES = ("4.1", "4.2", "4.3", "4.4", "4.5", "4.6", "4.7", "4.8", "4.9", "4.10")
LBDD_FIGURES = ("LBDD-tree", "LBDD-rate", "LBDD-load", "LBDD-8GB", "LBDD-near")


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One finished run: which part of the reproduction, its seed and parameters, its figures."""

    dir: str
    part: str
    seed: int
    params: dict[str, Any]
    #: Thesis: the recomputed figures; LBDD: the run's summary.
    values: dict[str, Any]
    latency: str
    mean_rtt_ms: float
    #: Thesis: per-node bandwidth values recomputed from the log (sorted), by figure name.
    node_values: dict[str, list[float]] = field(default_factory=dict)


@dataclass
class FigureResult:
    figure: str
    title: str
    checks: list[Check] = field(default_factory=list)
    #: Series for the figure with intervals: name -> [(x, Stat)].
    series: dict[str, list[tuple[float, Stat]]] = field(default_factory=dict)
    #: The paper's stated values as points (drawn as markers, never joined): name -> [(x, y)].
    paper_series: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    #: Axis labels with units, for the figure over the seeds.
    x_label: str = ""
    y_label: str = ""
    #: The full caption: setup, seeds, what differs (never truncated).
    caption: str = ""


def dig(tree: dict[str, Any], path: str) -> float | None:
    node: Any = tree
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    if isinstance(node, bool) or not isinstance(node, int | float):
        return None
    return float(node)


def records(
    report_runs: Sequence[dict[str, Any]], part_of: Callable[[str], str]
) -> list[RunRecord]:
    """RunRecords from build_report's ``runs`` (thesis: recomputed; LBDD: run.json summary)."""
    out = []
    for r in report_runs:
        kind = str(r.get("kind"))
        if kind == "lbdd":
            doc = json.loads((Path(r["dir"]) / "run.json").read_text())
            values = doc["summary"]
        else:
            values = r["recomputed"]
        model = r.get("latency_model") or {}
        out.append(
            RunRecord(
                dir=str(r["dir"]),
                part=part_of(str(r["dir"])),
                seed=int(r["params"]["seed"]),
                params=r["params"],
                values=values,
                latency=str(model.get("name") or r["params"].get("latency", "")),
                mean_rtt_ms=float(model.get("mean_rtt_ms") or 0.0),
                node_values={k: list(v) for k, v in (r.get("node_values") or {}).items()},
            )
        )
    return out


def seed_stat(runs: Sequence[RunRecord], path: str, scale: float = 1.0) -> Stat | None:
    pairs = []
    for r in runs:
        v = dig(r.values, path)
        pairs.append((r.seed, None if v is None else v * scale))
    return stat_of(pairs)


def _rtt_stat(runs: Sequence[RunRecord], path: str) -> Stat | None:
    return stat_of(
        [
            (r.seed, (v / r.mean_rtt_ms) if (v := dig(r.values, path)) is not None else None)
            for r in runs
            if r.mean_rtt_ms > 0
        ]
    )


def base_runs(recs: Sequence[RunRecord], nodes: int) -> list[RunRecord]:
    """Figs 4.1-4.4's runs (also the scalability series' synthetic point at the base size)."""
    return [r for r in recs if r.part == "thesis-base" and r.params.get("nodes") == nodes]


#: Why absolute bytes are shown beside the verdicts and never are one.
ACROSS_ENCODINGS = (
    "absolute bytes across two encodings (the thesis' Java serialisation, our wire encoding): "
    "shown beside the verdicts, never one"
)


def share_of_mean(values: Sequence[float], factor: float, above: bool = False) -> float | None:
    """The share of ``values`` at or below ``factor`` x their mean (``above``: strictly above)."""
    if not values:
        return None
    cut = factor * (sum(values) / len(values))
    n = sum(1 for v in values if (v > cut if above else v <= cut))
    return n / len(values)


def _max_over_mean(values: Sequence[float]) -> float | None:
    mean = sum(values) / len(values) if values else 0.0
    return max(values) / mean if mean > 0 else None


def node_stat(
    runs: Sequence[RunRecord], name: str, f: Callable[[Sequence[float]], float | None]
) -> Stat | None:
    """``f`` of each run's per-node values of ``name``, over the seeds."""
    return stat_of([(r.seed, f(v) if (v := r.node_values.get(name)) else None) for r in runs])


def _share(sh: paper.Share, values: Sequence[float]) -> float | None:
    return share_of_mean(values, sh.factor, sh.above)


def share_checks(runs: Sequence[RunRecord], figure: str, only: str = "") -> list[Check]:
    """Fig ``figure``'s stated shares of nodes relative to the mean (paper.SHARES)."""
    out = []
    for sh in paper.SHARES:
        if sh.figure != figure or only not in sh.quantity:
            continue
        share = functools.partial(_share, sh)
        out.append(
            Check(
                figure,
                sh.quantity,
                "lower" if sh.above else "higher",
                node_stat(runs, sh.values, share),
                "fraction",
                paper=sh.share,
                source=sh.source,
                extra={"factor_of_mean": sh.factor},
                received=node_stat(runs, received(sh.values), share),
            )
        )
    return out


def _info(
    figure: str, quantity: str, ours: Stat | None, unit: str, value: float | None, source: str
) -> Check:
    return Check(
        figure, quantity, "info", ours, unit, paper=value, source=source,
        not_applicable=ACROSS_ENCODINGS,
    )  # fmt: skip


def thesis_run_figures(base: Sequence[RunRecord]) -> list[FigureResult]:
    """Figs 4.1-4.4: every value the thesis states, ours over the seeds. Latencies in units of
    each side's mean RTT (the thesis: Table 4.5's 175 ms at 1,000 nodes); bytes relative to
    their mean (the shares of paper.SHARES), the absolute bytes as ``info``."""
    titles = {
        "4.1": "Subscription installation latency",
        "4.2": "Bandwidth per node during subscription installation",
        "4.3": "Publication (delivery) latency",
        "4.4": "Publication bandwidth per node",
    }
    by_fig = {f: FigureResult(f, t) for f, t in titles.items()}
    king = paper.THESIS_RUN_RTT_MS
    for ref in paper.THESIS_RUN:
        fig = by_fig[ref.figure]
        assert ref.ours is not None
        ours = seed_stat(base, ref.ours)
        if ref.latency:
            rtt = _rtt_stat(base, ref.ours)
            fig.checks.append(
                Check(
                    ref.figure,
                    ref.quantity + ", in mean RTTs",
                    "lower",
                    ours,
                    ref.unit,
                    paper=ref.value,
                    source=f"{ref.source}; RTT: {paper.THESIS_RTT_SOURCE}",
                    normalised=(ref.value / king, rtt.mean) if rtt is not None else None,
                    extra={"ours_rtt": rtt.as_dict() if rtt else None, "paper_rtt_ms": king},
                )
            )
        elif ref.unit == "B":
            fig.checks.append(_info(ref.figure, ref.quantity, ours, "B", ref.value, ref.source))
        else:  # the absolute-threshold shares (below 20 / 60 B/sub): bytes, so info too
            fig.checks.append(
                _info(ref.figure, ref.quantity, ours, ref.unit, ref.value, ref.source)
            )
    by_fig["4.2"].checks += share_checks(base, "4.2")
    by_fig["4.4"].checks += share_checks(base, "4.4")
    lo, hi = paper.PUBLISH_MAX_OVER_MEAN
    publish = "publish_bytes_per_event_per_node"
    by_fig["4.4"].checks.append(
        Check(
            "4.4",
            "busiest node / mean (publication bandwidth)",
            "range",
            node_stat(base, publish, _max_over_mean),
            "x",
            paper_range=(lo, hi),
            paper_text=f"more than 6k and at most 11k over a mean of 1.32k: {lo:.2f}-{hi:.2f}x",
            source=paper.PUBLISH_MAX_SOURCE,
            received=node_stat(base, received(publish), _max_over_mean),
        )
    )
    for f in by_fig.values():
        f.x_label, f.y_label = "stated value", "ours / paper (95% CI)"
    return list(by_fig.values())


def _pairs(
    base: Sequence[RunRecord], variant: Sequence[RunRecord]
) -> list[tuple[RunRecord, RunRecord]]:
    by_seed = {r.seed: r for r in base}
    return [
        (by_seed[v.seed], v) for v in sorted(variant, key=lambda r: r.seed) if v.seed in by_seed
    ]


def pair_figures(
    base: Sequence[RunRecord], variant: Sequence[RunRecord], which: str
) -> list[FigureResult]:
    """Figs 4.5/4.6 (``which`` = probe) or 4.7/4.8 (lb): probe bytes per event per node of the
    base run and its variant, seed by seed. The verdicts: the relative changes (the savings),
    and for Figs 4.5/4.6 the distributions relative to their mean; absolute bytes are info."""
    pairs = _pairs(base, variant)
    name = "probe_bytes_per_event_per_node"
    if which == "probe":
        figs, labels = ("4.5", "4.6"), ("unicast", "multicast")
        mean_pair, top_pair, top_stat = paper.PROBE_MEAN_PAIR, paper.PROBE_MAX_PAIR, "max"
        src1, src2 = paper.PROBE_MEAN.source, paper.PROBE_MAX.source
        titles = (
            "Probe bandwidth: multicast vs unicast probes",
            "The 100 busiest nodes' probe bandwidth",
        )
    else:
        figs, labels = ("4.7", "4.8"), ("LB off", "LB on")
        mean_pair, top_pair, top_stat = paper.LB_MEAN_PAIR, None, "top20_mean"
        src1, src2 = paper.LB_MEAN.source, paper.LB_TOP.source
        titles = (
            "Probe bandwidth without and with load balancing",
            "The 125 busiest nodes' probe bandwidth",
        )
    a = [p[0] for p in pairs]
    b = [p[1] for p in pairs]
    top_word = "max" if top_stat == "max" else "mean of the 20 busiest nodes"
    f1 = FigureResult(figs[0], titles[0])
    f2 = FigureResult(figs[1], titles[1])
    change = stat_of([(x.seed, _change(x, y, f"{name}.mean")) for x, y in pairs])
    f1.checks.append(
        Check(
            figs[0],
            f"mean: change ({labels[0]} -> {labels[1]})",
            "change",
            change,
            "relative",
            paper=mean_pair[1] / mean_pair[0] - 1,
            source=src1,
        )
    )
    if which == "probe":
        f1.checks += share_checks(a, "4.5", "unicast") + share_checks(b, "4.5", "multicast")
    for label, runs, value in ((labels[0], a, mean_pair[0]), (labels[1], b, mean_pair[1])):
        f1.checks.append(
            _info(
                figs[0],
                f"probe bandwidth per event per node, mean ({label})",
                seed_stat(runs, f"{name}.mean"),
                "B",
                value,
                src1,
            )
        )
    top_change = stat_of([(x.seed, _change(x, y, f"{name}.{top_stat}")) for x, y in pairs])
    top_change_received = stat_of(
        [(x.seed, _change(x, y, f"{received(name)}.{top_stat}")) for x, y in pairs]
    )
    if top_pair:
        f2.checks.append(
            Check(
                figs[1],
                f"max: change ({labels[0]} -> {labels[1]})",
                "change",
                top_change,
                "relative",
                paper=top_pair[1] / top_pair[0] - 1,
                source=src2,
                received=top_change_received,
            )
        )
        for label, runs, i in ((labels[0], a, 0), (labels[1], b, 1)):
            f2.checks.append(
                Check(
                    figs[1],
                    f"busiest node / mean ({label})",
                    "lower",
                    node_stat(runs, name, _max_over_mean),
                    "x",
                    paper=top_pair[i] / mean_pair[i],
                    source=f"{src2}; mean: {src1}",
                    received=node_stat(runs, received(name), _max_over_mean),
                )
            )
    else:
        f2.checks.append(
            Check(
                figs[1],
                "top-20 mean: change with load balancing",
                "trend",
                top_change,
                "relative",
                paper_text="'reduced significantly' (no number given): a fall",
                source=src2,
                holds=None if top_change is None else top_change.mean < 0,
                threshold=0.0,
                received=top_change_received,
            )
        )
    for label, runs, i in ((labels[0], a, 0), (labels[1], b, 1)):
        f2.checks.append(
            _info(
                figs[1],
                f"probe bandwidth per event, {top_word} ({label})",
                seed_stat(runs, f"{name}.{top_stat}"),
                "B",
                top_pair[i] if top_pair else None,
                src2,
            )
        )
    for f in (f1, f2):
        f.x_label, f.y_label = "stated value", "ours / paper (95% CI)"
    return [f1, f2]


def _change(x: RunRecord, y: RunRecord, path: str) -> float | None:
    a, b = dig(x.values, path), dig(y.values, path)
    return None if a in (None, 0) or b is None else b / a - 1


def _missing_sizes(ns: Sequence[int], wanted: Sequence[int]) -> str:
    """'' when every size in ``wanted`` was run, else why the check does not apply."""
    gone = [n for n in wanted if n not in ns]
    if not gone:
        return ""
    return (
        "this run has no "
        + " and no ".join(f"{n:,}-node point" for n in gone)
        + (f" (its sizes: {', '.join(f'{n:,}' for n in ns)})")
    )


def scaling_figures(recs: Sequence[RunRecord]) -> list[FigureResult]:
    """Figs 4.9/4.10: per latency model and size, mean and max over seeds. The thesis' growth
    is from 1,000 to 5,000 nodes, in units of Table 4.5's mean RTT per size."""
    scale = [r for r in recs if r.part == "thesis-base" or r.part.startswith("thesis-scale")]
    by: dict[str, dict[int, list[RunRecord]]] = defaultdict(lambda: defaultdict(list))
    for r in scale:
        by[r.latency][int(r.params["nodes"])].append(r)
    f9 = FigureResult("4.9", "Event delivery latency against network size")
    f10 = FigureResult("4.10", "Publication bandwidth per node against network size")
    f9.x_label = f10.x_label = "network size (nodes)"
    f9.y_label = "delivery latency (ms)"
    f10.y_label = "publication bandwidth per node (bytes per event)"
    f9.paper_series["thesis (King): mean"] = sorted(
        (float(n), v) for n, v in paper.SCALE_AVG_LATENCY_MS.items()
    )
    lo_ms, hi_ms = paper.SCALE_MAX_LATENCY_MS
    f9.paper_series["thesis (King): maximum, 1.6-1.8 s at every size"] = [
        (float(n), v) for n in THESIS_NETWORK_SIZES for v in (lo_ms, hi_ms)
    ]
    f10.paper_series["thesis: mean at 1,000 nodes (Java-serialised bytes)"] = [
        (float(THESIS_NODES), paper.PUBLISH_MEAN_B)
    ]
    lat, bw = "delivery_latency_ms", "publish_bytes_per_event_per_node"
    # From the thesis' run size (sim.comparable's) to the largest it states the growth for.
    first_n, last_n = THESIS_NODES, max(paper.SCALE_AVG_LATENCY_MS)
    rtt_src = paper.THESIS_RTT_SOURCE
    for model, sizes in sorted(by.items()):
        ns = sorted(sizes)
        for stat in ("mean", "max"):
            f9.series[f"{model}: {stat}"] = [
                (n, s) for n in ns if (s := seed_stat(sizes[n], f"{lat}.{stat}"))
            ]
            f10.series[f"{model}: {stat}"] = [
                (n, s) for n in ns if (s := seed_stat(sizes[n], f"{bw}.{stat}"))
            ]
        # The thesis' growth, 330 -> 430 ms from 1,000 to 5,000 nodes, in RTTs of each size.
        missing = _missing_sizes(ns, (first_n, last_n))
        p_first = paper.SCALE_AVG_LATENCY_MS[first_n] / paper.thesis_rtt_ms(first_n)
        p_last = paper.SCALE_AVG_LATENCY_MS[last_n] / paper.thesis_rtt_ms(last_n)
        growth = (
            None if missing else _ratio_stat(sizes[first_n], sizes[last_n], f"{lat}.mean", True)
        )
        f9.checks.append(
            Check(
                "4.9",
                f"mean latency growth in mean RTTs, {first_n:,} -> {last_n:,} nodes ({model})",
                "lower",
                growth,
                "x",
                paper=p_last / p_first,
                source=f"{paper.SCALE_AVG_SOURCE}; RTT: {rtt_src}",
                not_applicable=missing,
            )
        )
        if missing and len(ns) > 1:
            f9.checks.append(
                Check(
                    "4.9",
                    f"mean latency growth in mean RTTs, {ns[0]:,} -> {ns[-1]:,} nodes ({model}, "
                    "our sizes only)",
                    "info",
                    _ratio_stat(sizes[ns[0]], sizes[ns[-1]], f"{lat}.mean", True),
                    "x",
                    source="ours: the sizes this run has",
                    not_applicable="not the thesis' sizes: shown, not a verdict",
                )
            )
        at1000 = sizes.get(first_n, [])
        base = _rtt_stat(at1000, f"{lat}.mean") if at1000 else None
        f9.checks.append(
            Check(
                "4.9",
                f"mean latency at {first_n:,} nodes, in mean RTTs ({model})",
                "lower",
                seed_stat(at1000, f"{lat}.mean") if at1000 else None,
                "ms",
                paper=paper.SCALE_AVG_LATENCY_MS[first_n],
                source=f"{paper.SCALE_AVG_SOURCE}; RTT: {rtt_src}",
                normalised=(p_first, base.mean) if base else None,
                not_applicable=_missing_sizes(ns, (first_n,)),
            )
        )
        for n in ns:
            if n not in THESIS_NETWORK_SIZES and n != ns[-1]:
                continue
            king = paper.THESIS_RTT_BY_SIZE_MS.get(n)
            # (A size the thesis did not run is n/a; its range is still in RTTs, of the
            # 1,740-node King network's 180 ms, so that the ratio compares like with like.)
            rtt = king or paper.THESIS_MEAN_RTT_MS
            f9.checks.append(
                Check(
                    "4.9",
                    f"max latency at {n:,} nodes, in mean RTTs ({model})",
                    "range",
                    _rtt_stat(sizes[n], f"{lat}.max"),
                    "RTT",
                    paper_range=(lo_ms / rtt, hi_ms / rtt),
                    paper_text=(
                        f"1.6-1.8 s ({lo_ms / king:.2f}-{hi_ms / king:.2f} RTTs of {king:g} ms)"
                        if king
                        else "1.6-1.8 s"
                    ),
                    source=f"{paper.SCALE_MAX_SOURCE}; RTT: {rtt_src}",
                    not_applicable=""
                    if king
                    else f"the thesis states it for 1,000-5,000 nodes, this point has {n:,}",
                    extra={"max_ms": (seed_stat(sizes[n], f"{lat}.max") or Stat.of([0.0], [0]))
                           .as_dict()},
                )
            )  # fmt: skip
        avg_change = _ratio_stat(sizes[ns[0]], sizes[ns[-1]], f"{bw}.mean")
        max_change = _ratio_stat(sizes[ns[0]], sizes[ns[-1]], f"{bw}.max")
        one = "one network size" if len(ns) < 2 else ""
        f10.checks.append(
            Check(
                "4.10",
                f"mean bandwidth {ns[0]:,} -> {ns[-1]:,} nodes, ratio ({model})",
                "trend",
                avg_change,
                "x",
                paper_text="decreases slightly (ratio at most 1.05)",
                source=paper.SCALE_BANDWIDTH_SOURCE,
                holds=None if avg_change is None or one else avg_change.mean <= 1.05,
                threshold=1.05,
                not_applicable=one,
            )
        )
        f10.checks.append(
            Check(
                "4.10",
                f"max bandwidth {ns[0]:,} -> {ns[-1]:,} nodes, ratio ({model})",
                "trend",
                max_change,
                "x",
                paper_text="increases (ratio above 1)",
                source=paper.SCALE_BANDWIDTH_SOURCE,
                holds=None if max_change is None or one else max_change.mean > 1.0,
                threshold=1.0,
                not_applicable=one,
            )
        )
        if first_n in sizes:
            f10.checks.append(
                _info(
                    "4.10",
                    f"mean bandwidth at 1,000 nodes ({model})",
                    seed_stat(sizes[first_n], f"{bw}.mean"),
                    "B",
                    paper.PUBLISH_MEAN_B,
                    paper.PUBLISH_MEAN_SOURCE + " (Fig 4.4's mean, Fig 4.10's 1,000-node point)",
                )
            )
    return [f9, f10]


def _ratio_stat(
    first: Sequence[RunRecord], last: Sequence[RunRecord], path: str, per_rtt: bool = False
) -> Stat | None:
    """``path`` at ``last`` over ``path`` at ``first``, seed by seed (``per_rtt``: each in
    units of its run's mean RTT)."""

    def value(r: RunRecord) -> float | None:
        v = dig(r.values, path)
        if v is None or (per_rtt and r.mean_rtt_ms <= 0):
            return None
        return v / r.mean_rtt_ms if per_rtt else v

    a = {r.seed: v for r in first if (v := value(r))}
    return stat_of(
        [(r.seed, v / a[r.seed]) for r in last if (v := value(r)) is not None and r.seed in a]
    )


def thesis_figures(recs: Sequence[RunRecord], base_nodes: int) -> list[FigureResult]:
    """Every thesis figure the runs allow, in page order (the LBDD ones: ``lbdd.lbdd_figures``,
    which builds on this module; the measured causes: ``causes.attach_causes``)."""
    out: list[FigureResult] = []
    thesis = [r for r in recs if r.part.startswith("thesis-")]
    if thesis:
        base = base_runs(thesis, base_nodes)
        out += thesis_run_figures(base)
        out += pair_figures(base, [r for r in thesis if r.part == "thesis-probe"], "probe")
        out += pair_figures(base, [r for r in thesis if r.part == "thesis-lb"], "lb")
        out += scaling_figures(thesis)
    return out
