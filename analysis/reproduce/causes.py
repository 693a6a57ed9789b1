"""Measured causes: why a figure of ours differs from the paper's, from runs of the reproduction.

A ``differs, explained`` verdict needs a run of the same reproduction that measures the cause:
the same figure with one cause removed or varied (a cause part, ``plans.CAUSE_PARTS``). After
every figure is built, ``attach_causes`` hands each figure's explainer (``CAUSE_EXPLAINERS``)
the runs of every part by name; the explainer computes what the cause runs say, writes a
sentence from those numbers, and attaches it to the checks it explains (``explain``). It
attaches a cause only when the measurement supports it (the varied run brings ours within the
paper's tolerance, or the paper's value lies between ours with and without the cause); when it
does not, the numbers are kept in the check's ``extra["measured"]`` and the verdict stays
``differs``. Finally every cause naming a part this reproduction did not run is dropped.

Data flows one way: compare <- evaluate (the figures) <- causes <- command.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

import rangecast.analysis.report.paper as paper
from rangecast.analysis.reproduce.compare import (
    CHANGE_TOL,
    REL_TOL,
    Cause,
    Check,
    Stat,
    fmt_stat,
    fmt_value,
    stat_of,
)
from rangecast.analysis.reproduce.evaluate import FigureResult, RunRecord, dig
from rangecast.analysis.reproduce.plans import FWD_UNICAST_PART, LB_P_PART, PROBE_LEVELS_PART

Explainer = Callable[[FigureResult, Mapping[str, Sequence[RunRecord]]], None]
#: figure -> the functions that attach measured causes to its checks, in order.
CAUSE_EXPLAINERS: dict[str, list[Explainer]] = defaultdict(list)

PROBE = "probe_bytes_per_event_per_node"


def register_cause(*figures: str) -> Callable[[Explainer], Explainer]:
    """Decorator: ``@register_cause("4.7")`` makes the function one of Fig 4.7's explainers
    (run in the order registered)."""

    def wrap(f: Explainer) -> Explainer:
        for figure in figures:
            CAUSE_EXPLAINERS[figure].append(f)
        return f

    return wrap


def explain(check: Check, text: str, *parts: str) -> None:
    """Attach a measured cause to ``check`` (only when it differs: a reproduced check needs
    no explanation). A second measured cause of the same check is added to the first."""
    if check.verdict not in ("differs", "differs, explained"):
        return
    if check.cause is not None:
        text = f"{check.cause.text} {text}"
        parts = tuple(dict.fromkeys((*check.cause.measured_by, *parts)))
    check.cause = Cause(text, tuple(parts))


def attach_causes(figures: Sequence[FigureResult], recs: Sequence[RunRecord]) -> None:
    """Run every registered explainer whose figure was produced, with the runs by part; then
    drop any cause that names a part this reproduction did not run."""
    by_part: dict[str, list[RunRecord]] = defaultdict(list)
    for r in recs:
        by_part[r.part].append(r)
    for f in figures:
        for explainer in CAUSE_EXPLAINERS.get(f.figure, ()):
            explainer(f, by_part)
        for c in f.checks:
            if c.cause is not None and not all(p in by_part for p in c.cause.measured_by):
                c.cause = None


# ------------------------------------------------------------------------------- helpers


def _by_seed(runs: Sequence[RunRecord], path: str) -> dict[int, float]:
    return {r.seed: v for r in runs if (v := dig(r.values, path)) is not None}


def _paired_change(
    base: Sequence[RunRecord], variant: Sequence[RunRecord], path: str
) -> Stat | None:
    """variant / base - 1 of ``path``, seed by seed, over the seeds both have."""
    a, b = _by_seed(base, path), _by_seed(variant, path)
    return stat_of([(s, b[s] / a[s] - 1) for s in sorted(a) if s in b and a[s]])


def _mean(values: Mapping[int, float]) -> float:
    return sum(values.values()) / len(values) if values else float("nan")


def _change_check(fig: FigureResult, prefix: str) -> Check | None:
    return next(
        (c for c in fig.checks if c.kind == "change" and c.quantity.startswith(prefix)), None
    )


def _overlay(r: RunRecord, key: str) -> object:
    """An overlay parameter of a run (thesis runs log them under ``overlay``)."""
    overlay = r.params.get("overlay")
    return overlay.get(key) if isinstance(overlay, dict) else r.params.get(key)


def _p_of(r: RunRecord) -> float | None:
    p = _overlay(r, "p")
    return float(p) if isinstance(p, int | float) else None


# ------------------------------------------------------------------- Fig 4.7: RndRegionProbe p


@register_cause("4.7")
def _load_balancing_and_p(fig: FigureResult, runs: Mapping[str, Sequence[RunRecord]]) -> None:
    """The mean probe saving of load balancing against RndRegionProbe's p, which is ours (the
    thesis states no p): part ``thesis-lb-p`` runs p = 0.5 and 0.9 with and without load
    balancing, beside the base pair (our p)."""
    check = _change_check(fig, "mean")
    sweep = runs.get(LB_P_PART, [])
    base, lb = runs.get("thesis-base", []), runs.get("thesis-lb", [])
    if check is None or check.paper is None or not (sweep and base and lb):
        return
    ours_p = _p_of(base[0])
    if ours_p is None:
        return
    off: dict[float, list[RunRecord]] = {ours_p: list(base)}
    on: dict[float, list[RunRecord]] = {ours_p: list(lb)}
    for r in sweep:
        p = _p_of(r)
        if p is not None:
            (on if r.params.get("lb") else off).setdefault(p, []).append(r)
    ps = sorted(p for p in off if p in on)
    changes = {p: _paired_change(off[p], on[p], f"{PROBE}.mean") for p in ps}
    saving = {p: s for p, s in changes.items() if s is not None}
    if len(saving) != len(ps):
        return
    off_b = {p: _mean(_by_seed(off[p], f"{PROBE}.mean")) for p in ps}
    on_b = {p: _mean(_by_seed(on[p], f"{PROBE}.mean")) for p in ps}
    seeds = sorted({r.seed for r in sweep})

    def pct(p: float) -> str:
        return f"{-saving[p].mean:.0%}"

    others = [p for p in ps if p != ours_p]
    text = (
        f"Load balancing saves {pct(ours_p)} of the mean probe bandwidth with our "
        f"RndRegionProbe p = {ours_p:g} (the thesis states no p), the thesis "
        f"{-check.paper:.0%}. With load balancing the probe bandwidth hardly depends on p ("
        + ", ".join(f"{on_b[p]:.1f}" for p in ps)
        + " B per event per node at p = "
        + ", ".join(f"{p:g}" for p in ps)
        + "); without it, it does ("
        + ", ".join(f"{off_b[p]:.1f}" for p in ps)
        + " B): the saving is "
        + " and ".join(f"{pct(p)} at p = {p:g}" for p in others)
        + f" (part {LB_P_PART}, seeds {', '.join(map(str, seeds))})."
    )
    close = [p for p in ps if abs(saving[p].mean - check.paper) <= CHANGE_TOL]
    if close:
        explain(
            check,
            text
            + " At p = "
            + ", ".join(f"{p:g}" for p in close)
            + f" the saving is within ±{CHANGE_TOL:.0%} of the thesis'. The thesis' own Fig 4.7 "
            f"baseline ({paper.LB_MEAN_PAIR[0] / paper.KB:.2f}k) is "
            f"{paper.LB_MEAN_PAIR[0] / paper.PROBE_MEAN_PAIR[0]:.2f} times its Fig 4.5 unicast "
            "baseline of the same workload; ours at p = "
            + ", ".join(
                f"{p:g} is {off_b[p] / off_b[ours_p]:.2f} times" for p in others if off_b[ours_p]
            )
            + f" ours at p = {ours_p:g}.",
            "thesis-base",
            "thesis-lb",
            LB_P_PART,
        )
    else:
        check.extra["measured"] = text + " No p run brings the saving within the tolerance."


# --------------------------------------------------- Fig 4.6: grouped leaf-table forwards


@register_cause("4.6")
def _fig_4_6(fig: FigureResult, runs: Mapping[str, Sequence[RunRecord]]) -> None:
    """Fig 4.6 has two measured causes: the busiest node's multicast saving against how
    leaf-table forwards are sent, and the busiest node over the mean against the minimum
    probe level."""
    _multicast_and_forwards(fig, runs)
    _busiest_and_min_level(fig, runs)


def _busiest_over_mean(runs: Sequence[RunRecord]) -> Stat | None:
    return stat_of(
        [
            (r.seed, mx / mean)
            if isinstance(mx := dig(r.values, f"{PROBE}.max"), int | float)
            and isinstance(mean := dig(r.values, f"{PROBE}.mean"), int | float)
            and mean
            else (r.seed, None)
            for r in runs
        ]
    )


def _within(value: float, paper_value: float) -> bool:
    return 1 / (1 + REL_TOL) <= value / paper_value <= 1 + REL_TOL


def _busiest_and_min_level(fig: FigureResult, runs: Mapping[str, Sequence[RunRecord]]) -> None:
    """The busiest node over the mean against RndRegionProbe's minimum level, which is ours
    (part ``thesis-probe-levels``): a publisher selects no zone above it, so the peers hosting
    the zones at and just below it receive and forward the probes of nearly every event."""
    sweep = runs.get(PROBE_LEVELS_PART, [])
    if not sweep:
        return
    for probe, base_part in (("unicast", "thesis-base"), ("multicast", "thesis-probe")):
        check = next(
            (c for c in fig.checks if c.quantity == f"busiest node / mean ({probe})"), None
        )
        base = runs.get(base_part, [])
        if check is None or check.paper is None or not base:
            continue
        ours_level = _overlay(base[0], "min_level")
        by_level: dict[int, list[RunRecord]] = {}
        for r in sweep:
            level = _overlay(r, "min_level")
            if _overlay(r, "probe") == probe and isinstance(level, int):
                by_level.setdefault(level, []).append(r)
        if not isinstance(ours_level, int) or not by_level:
            continue
        by_level[ours_level] = list(base)
        stats = {lv: _busiest_over_mean(rs) for lv, rs in sorted(by_level.items())}
        got = {lv: st for lv, st in stats.items() if st is not None}
        if len(got) != len(stats):
            continue
        seeds = sorted({r.seed for r in sweep})
        levels = sorted(got)
        close = [lv for lv in levels if _within(got[lv].mean, check.paper)]
        lo, hi = min(st.mean for st in got.values()), max(st.mean for st in got.values())
        text = (
            f"With {probe} probes the busiest node sends {got[ours_level].mean:.1f} times the "
            f"mean probe bandwidth here, {check.paper:.1f} times in the thesis. RndRegionProbe's "
            f"minimum level is ours ({ours_level}; 3.4.1 names 'a minimum and maximum tree "
            "level: mini and maxi' and states only maxi, 10), and no zone above it is ever "
            "selected. With the minimum level at "
            + ", ".join(f"{lv}" for lv in levels)
            + " the busiest node sends "
            + ", ".join(f"{got[lv].mean:.1f}" for lv in levels)
            + f" times the mean (part {PROBE_LEVELS_PART}, seeds {', '.join(map(str, seeds))})"
        )
        if close:
            explain(
                check,
                text
                + ": within ±"
                + f"{REL_TOL:.0%} of the thesis' at level "
                + ", ".join(map(str, close))
                + ".",
                base_part,
                PROBE_LEVELS_PART,
            )
        elif lo <= check.paper <= hi:
            explain(
                check,
                text + f": the thesis' {check.paper:.1f} lies between them.",
                base_part,
                PROBE_LEVELS_PART,
            )
        else:
            check.extra["measured"] = (
                text + f": none comes within ±{REL_TOL:.0%} of the thesis' {check.paper:.1f}."
            )


def _multicast_and_forwards(fig: FigureResult, runs: Mapping[str, Sequence[RunRecord]]) -> None:
    """The busiest node's multicast saving against how internal tree nodes forward probes to
    the leaves of their leaf tables: grouped per next hop like the publisher's probes (our
    default, the reading of Program 3.3) or one by one (section 4.2.1's "ProbePubMessage ... is
    currently sent by unicast instead of multicast", part ``thesis-probe-fwd-unicast``)."""
    check = _change_check(fig, "max")
    base, grouped = runs.get("thesis-base", []), runs.get("thesis-probe", [])
    single = runs.get(FWD_UNICAST_PART, [])
    if check is None or check.paper is None or not (base and grouped and single):
        return
    max_g = _paired_change(base, grouped, f"{PROBE}.max")
    max_u = _paired_change(base, single, f"{PROBE}.max")
    mean_g = _paired_change(base, grouped, f"{PROBE}.mean")
    mean_u = _paired_change(base, single, f"{PROBE}.mean")
    if max_g is None or max_u is None or mean_g is None or mean_u is None:
        return
    lo, hi = sorted((max_g.mean, max_u.mean))
    between = lo <= check.paper <= hi
    mean_paper = paper.PROBE_MEAN_PAIR[1] / paper.PROBE_MEAN_PAIR[0] - 1
    seeds = sorted({r.seed for r in single})
    text = (
        f"Multicast changes the busiest node's probe bandwidth by {max_g.mean:+.0%} here, the "
        f"thesis by {check.paper:+.0%}. The busiest nodes host upper tree nodes, which forward "
        "probes to the leaves of their leaf tables, and our multicast groups those forwards per "
        "next hop as it groups the publisher's probes (Program 3.3). Sent one by one, as "
        "section 4.2.1 says ProbePubMessage 'is currently sent by unicast instead of "
        f"multicast' (part {FWD_UNICAST_PART}, seeds {', '.join(map(str, seeds))}), the "
        f"maximum changes by {max_u.mean:+.0%} and the mean by {mean_u.mean:+.0%} (grouped: "
        f"{mean_g.mean:+.0%}; the thesis {mean_paper:+.0%}): the thesis' "
        f"{check.paper:+.0%} lies {'between' if between else 'outside'} the two readings."
    )
    if between:
        explain(check, text, "thesis-base", "thesis-probe", FWD_UNICAST_PART)
    else:
        check.extra["measured"] = text


# ------------------------------------------- Figs 4.2-4.8: which bytes a node is charged

#: The parts whose runs each per-node bandwidth figure compares (its checks' runs).
_NODE_FIGURE_PARTS = {
    "4.2": ("thesis-base",),
    "4.4": ("thesis-base",),
    "4.5": ("thesis-base", "thesis-probe"),
    "4.6": ("thesis-base", "thesis-probe"),
    "4.8": ("thesis-base", "thesis-lb"),
}


def _value(check: Check, stat: Stat) -> str:
    """``stat`` in the check's unit, with its interval."""
    return fmt_stat(stat, check.unit) + ("x" if check.unit == "x" else "")


def _paper_value(check: Check) -> str:
    if check.paper_range is not None:
        lo, hi = check.paper_range
        return f"{fmt_value(lo, '')}-{fmt_value(hi, check.unit)}"
    assert check.paper is not None
    return fmt_value(check.paper, check.unit)


@register_cause(*_NODE_FIGURE_PARTS)
def _received_bytes(fig: FigureResult, runs: Mapping[str, Sequence[RunRecord]]) -> None:
    """Per-node bandwidth counted at the other end. The thesis names the messages its
    per-node bandwidth includes, not whether a node is charged what it sends or what it
    receives (paper.OUR_PARAMETERS); ours charges the sender, which is what each run's summary
    gives. The same runs, with every node charged the bytes that arrived at it (the report
    recomputes both from the message log), explain a differing check when that count is within
    the tolerance; otherwise the check keeps its verdict and the count stays in the JSON
    (``ours_received_bytes``)."""
    parts = _NODE_FIGURE_PARTS[fig.figure]
    if not all(runs.get(p) for p in parts):
        return
    for check in fig.checks:
        got = check.received
        if got is None or check.kind in ("info", "trend") or check.ours is None:
            continue
        if check.verdict not in ("differs", "differs, explained"):
            continue
        alt = replace(check, ours=got, cause=None, received=None)
        if alt.verdict != "reproduced":
            continue
        wide = " (its interval too wide to decide)" if alt.undecided else ""
        explain(
            check,
            f"The thesis does not say whether a node's bandwidth is the bytes it sends or those "
            f"it receives (4.3.2 names only the messages counted); ours charges the sender "
            f"({_value(check, check.ours)}). Charging each node the bytes that arrive at it, in "
            f"the same runs ({', '.join(parts)}; seeds {', '.join(map(str, got.seeds))}), ours "
            f"is {_value(check, got)} against the thesis' {_paper_value(check)}: within the "
            f"tolerance{wide}.",
            *parts,
        )
