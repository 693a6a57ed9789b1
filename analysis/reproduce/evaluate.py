"""Each figure of the reproduction from the runs: the checks against the papers (compare.Check)
and the per-point statistics the figures with confidence intervals draw.

Thesis figures use the values Spark recomputed from the run logs (analysis.report), which the
report has checked against each run's own summary; the LBDD figures are tree and transfer
properties that only the run's summary holds (run.json), as in the report's LBDD table.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import rangecast.analysis.report.paper as paper
from rangecast.analysis.reproduce.compare import Check, Stat, stat_of

#: The thesis' figures, then the LBDD paper's, in page order.
THESIS_FIGURES = ("4.1", "4.2", "4.3", "4.4", "4.5", "4.6", "4.7", "4.8", "4.9", "4.10")
LBDD_FIGURES = ("LBDD-tree", "LBDD-rate", "LBDD-8GB")


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


@dataclass
class FigureResult:
    figure: str
    title: str
    checks: list[Check] = field(default_factory=list)
    #: Series for the figure with intervals: name -> [(x, Stat)].
    series: dict[str, list[tuple[float, Stat]]] = field(default_factory=dict)


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


def thesis_run_figures(base: Sequence[RunRecord]) -> list[FigureResult]:
    """Figs 4.1-4.4: every value the thesis states, ours over the seeds."""
    by_fig: dict[str, FigureResult] = {}
    titles = {
        "4.1": "Subscription installation latency",
        "4.2": "Bandwidth per node during subscription installation",
        "4.3": "Publication (delivery) latency",
        "4.4": "Publication bandwidth per node",
    }
    for ref in paper.THESIS_RUN:
        fig = by_fig.setdefault(ref.figure, FigureResult(ref.figure, titles[ref.figure]))
        assert ref.ours is not None
        ours = seed_stat(base, ref.ours)
        unit = ref.unit
        if ref.latency:
            rtt = _rtt_stat(base, ref.ours)
            normalised = (
                (ref.value / paper.THESIS_MEAN_RTT_MS, rtt.mean) if rtt is not None else None
            )
            kind = "lower"
            extra = {"ours_rtt": rtt.as_dict() if rtt else None}
        else:
            normalised = None
            kind = "higher" if unit == "fraction" else "lower"
            extra = {}
        fig.checks.append(
            Check(
                ref.figure,
                ref.quantity,
                kind,
                ours,
                unit,
                paper=ref.value,
                source=ref.source,
                normalised=normalised,
                extra=extra,
            )
        )
    return [by_fig[f] for f in ("4.1", "4.2", "4.3", "4.4")]


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
    base run and its variant, seed by seed, and the change."""
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
    for label, runs, value in ((labels[0], a, mean_pair[0]), (labels[1], b, mean_pair[1])):
        f1.checks.append(
            Check(
                figs[0],
                f"probe bandwidth per event per node, mean ({label})",
                "lower",
                seed_stat(runs, f"{name}.mean"),
                "B",
                paper=value,
                source=src1,
            )
        )
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
    for label, runs, i in ((labels[0], a, 0), (labels[1], b, 1)):
        f2.checks.append(
            Check(
                figs[1],
                f"probe bandwidth per event, {top_word} ({label})",
                "lower",
                seed_stat(runs, f"{name}.{top_stat}"),
                "B",
                paper=top_pair[i] if top_pair else None,
                paper_text="" if top_pair else "not given",
                source=src2,
            )
        )
    top_change = stat_of([(x.seed, _change(x, y, f"{name}.{top_stat}")) for x, y in pairs])
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
            )
        )
    else:
        f2.checks.append(
            Check(
                figs[1],
                "top-20 mean: falls with load balancing",
                "trend",
                top_change,
                "relative",
                paper_text="'reduced significantly'",
                source=src2,
                holds=None if top_change is None else top_change.mean < 0,
            )
        )
    return [f1, f2]


def _change(x: RunRecord, y: RunRecord, path: str) -> float | None:
    a, b = dig(x.values, path), dig(y.values, path)
    return None if a in (None, 0) or b is None else b / a - 1


def scaling_figures(recs: Sequence[RunRecord]) -> list[FigureResult]:
    """Figs 4.9/4.10: per latency model and size, mean and max over seeds."""
    scale = [r for r in recs if r.part == "thesis-base" or r.part.startswith("thesis-scale")]
    by: dict[str, dict[int, list[RunRecord]]] = defaultdict(lambda: defaultdict(list))
    for r in scale:
        by[r.latency][int(r.params["nodes"])].append(r)
    f9 = FigureResult("4.9", "Event delivery latency against network size")
    f10 = FigureResult("4.10", "Publication bandwidth per node against network size")
    lat, bw = "delivery_latency_ms", "publish_bytes_per_event_per_node"
    lo, hi = paper.SCALE_MAX_LATENCY_MS
    king = paper.THESIS_MEAN_RTT_MS
    for model, sizes in sorted(by.items()):
        ns = sorted(sizes)
        for stat in ("mean", "max"):
            f9.series[f"{model}: {stat}"] = [
                (n, s) for n in ns if (s := seed_stat(sizes[n], f"{lat}.{stat}"))
            ]
            f10.series[f"{model}: {stat}"] = [
                (n, s) for n in ns if (s := seed_stat(sizes[n], f"{bw}.{stat}"))
            ]
        first, last = sizes[ns[0]], sizes[ns[-1]]
        growth = _ratio_stat(first, last, f"{lat}.mean")
        f9.checks.append(
            Check(
                "4.9",
                f"mean latency growth, {ns[0]:,} -> {ns[-1]:,} nodes ({model})",
                "lower",
                growth,
                "x",
                paper=paper.SCALE_AVG_LATENCY_MS[5000] / paper.SCALE_AVG_LATENCY_MS[1000],
                source=paper.SCALE_AVG_SOURCE + " (x1.30 over 5x the nodes; ours over our sizes)",
                not_applicable="" if len(ns) > 1 else "one network size",
            )
        )
        base = _rtt_stat(first, f"{lat}.mean")
        f9.checks.append(
            Check(
                "4.9",
                f"mean latency at {ns[0]:,} nodes, in mean RTTs ({model})",
                "lower",
                seed_stat(first, f"{lat}.mean"),
                "ms",
                paper=paper.SCALE_AVG_LATENCY_MS[1000],
                source=paper.SCALE_AVG_SOURCE,
                normalised=(
                    paper.SCALE_AVG_LATENCY_MS[1000] / paper.THESIS_RTT_BY_SIZE_MS[1000],
                    base.mean,
                )
                if base
                else None,
            )
        )
        peak = _rtt_stat(last, f"{lat}.max")
        f9.checks.append(
            Check(
                "4.9",
                f"max latency at {ns[-1]:,} nodes, in mean RTTs ({model})",
                "range",
                peak,
                "RTT",
                paper_range=(lo / king, hi / king),
                paper_text="1.6-1.8 s (8.9-10 King RTTs)",
                source=paper.SCALE_MAX_SOURCE,
                extra={
                    "lower_better": True,
                    "max_ms": (seed_stat(last, f"{lat}.max") or Stat.of([0.0], [0])).as_dict(),
                },
            )
        )
        avg_change = _ratio_stat(first, last, f"{bw}.mean")
        max_change = _ratio_stat(first, last, f"{bw}.max")
        f10.checks.append(
            Check(
                "4.10",
                f"mean bandwidth {ns[0]:,} -> {ns[-1]:,} nodes, ratio ({model})",
                "trend",
                avg_change,
                "x",
                paper_text="decreases slightly",
                source=paper.SCALE_BANDWIDTH_SOURCE,
                holds=None if avg_change is None or len(ns) < 2 else avg_change.mean <= 1.0 + 0.05,
            )
        )
        f10.checks.append(
            Check(
                "4.10",
                f"max bandwidth {ns[0]:,} -> {ns[-1]:,} nodes, ratio ({model})",
                "trend",
                max_change,
                "x",
                paper_text="increases",
                source=paper.SCALE_BANDWIDTH_SOURCE,
                holds=None if max_change is None or len(ns) < 2 else max_change.mean > 1.0,
            )
        )
        if paper.THESIS_NODES in sizes:
            f10.checks.append(
                Check(
                    "4.10",
                    f"mean bandwidth at 1,000 nodes ({model})",
                    "lower",
                    seed_stat(sizes[paper.THESIS_NODES], f"{bw}.mean"),
                    "B",
                    paper=paper.PUBLISH_MEAN_B,
                    source="Fig 4.4's mean (4.3.2)",
                )
            )
    return [f9, f10]


def _ratio_stat(first: Sequence[RunRecord], last: Sequence[RunRecord], path: str) -> Stat | None:
    a = {r.seed: v for r in first if (v := dig(r.values, path))}
    return stat_of(
        [
            (r.seed, v / a[r.seed])
            for r in last
            if (v := dig(r.values, path)) is not None and r.seed in a
        ]
    )


def thesis_figures(recs: Sequence[RunRecord], base_nodes: int) -> list[FigureResult]:
    """Every thesis figure the runs allow, in page order (the LBDD ones: ``lbdd.lbdd_figures``,
    which builds on this module)."""
    out: list[FigureResult] = []
    thesis = [r for r in recs if r.part.startswith("thesis-")]
    if thesis:
        base = base_runs(thesis, base_nodes)
        out += thesis_run_figures(base)
        out += pair_figures(base, [r for r in thesis if r.part == "thesis-probe"], "probe")
        out += pair_figures(base, [r for r in thesis if r.part == "thesis-lb"], "lb")
        out += scaling_figures(thesis)
    return out
