"""The words beside each figure, every one generated from the numbers it is about: the context
(latency models, mean RTTs, seeds), the caption (setup, seeds, what differs from the paper) and
"why ours differs" (each differing check's numbers, and its measured cause when a run of the
reproduction measures one; otherwise it says plainly that the cause is not measured).

Nothing here is fixed prose about our results: a sentence either formats a measured value (a
ratio, a mean message size, a mean RTT) or states what the check or run set-up is."""

from __future__ import annotations

import math
from collections.abc import Sequence

import rangecast.analysis.report.paper as paper
from rangecast.analysis.reproduce.compare import (
    CHANGE_TOL,
    EXACT_TOL,
    REL_TOL,
    Check,
    fmt_stat,
    fmt_value,
)
from rangecast.analysis.reproduce.evaluate import FigureResult, RunRecord
from rangecast.sim.comparable import THESIS_NODES, thesis_comparison

#: Figures drawn from the base run and its variants (the thesis' 1,000-node run).
RUN_FIGURES = ("4.1", "4.2", "4.3", "4.4", "4.5", "4.6", "4.7", "4.8")


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def _msg_size(runs: Sequence[RunRecord], types: Sequence[str]) -> float:
    """Mean encoded bytes per message of ``types`` over ``runs`` (from the recomputed log)."""
    b = m = 0.0
    for r in runs:
        by_type = r.values.get("messages_by_type") or {}
        for t in types:
            b += float((by_type.get(t) or {}).get("bytes", 0))
            m += float((by_type.get(t) or {}).get("messages", 0))
    return b / m if m else float("nan")


def _seeds(f: FigureResult) -> list[int]:
    return sorted({s for c in f.checks if c.ours for s in c.ours.seeds})


def _runs_of(recs: Sequence[RunRecord], figure: str) -> list[RunRecord]:
    """The runs a figure is drawn from (its parts' runs; cause parts are named by the causes)."""
    if figure in ("4.1", "4.2", "4.3", "4.4"):
        parts: tuple[str, ...] = ("thesis-base",)
    elif figure in ("4.5", "4.6"):
        parts = ("thesis-base", "thesis-probe")
    elif figure in ("4.7", "4.8"):
        parts = ("thesis-base", "thesis-lb")
    elif figure in ("4.9", "4.10"):
        return [r for r in recs if r.part == "thesis-base" or r.part.startswith("thesis-scale")]
    else:
        return [r for r in recs if r.part.startswith("lbdd-")]
    return [r for r in recs if r.part in parts]


def context(recs: Sequence[RunRecord], figures: Sequence[FigureResult]) -> dict[str, str]:
    """Per figure: the latency model(s) with their measured mean RTTs, and the seeds."""
    out: dict[str, str] = {}
    for f in figures:
        runs = _runs_of(recs, f.figure)
        models: dict[str, list[float]] = {}
        for r in runs:
            if r.latency and r.mean_rtt_ms > 0:
                models.setdefault(r.latency, []).append(r.mean_rtt_ms)
        shown = [f"{m} (mean RTT {_mean(v):.0f} ms)" for m, v in sorted(models.items())]
        thesis = f.figure[0].isdigit()
        king = (
            f"; the thesis: King, mean RTT {paper.THESIS_RUN_RTT_MS:g} ms at 1,000 nodes "
            "(Table 4.5, per size for Fig 4.9)"
            if thesis
            else ""
        )
        seeds = _seeds(f)
        out[f.figure] = (
            (f"Latency model: {', '.join(shown)}{king}. " if shown or thesis else "")
            + f"Seeds: {', '.join(map(str, seeds)) or 'none'} ({len(seeds)} independent runs"
            " per point)."
        )
    return out


def describe(c: Check) -> str:
    """One check's comparison in words, generated from its numbers ("" when it has none)."""
    if c.ours is None:
        return ""
    ours = fmt_stat(c.ours, c.unit)
    if c.kind == "change" and c.compared is not None:
        p, o = c.compared
        return (
            f"{c.quantity}: ours {fmt_value(o, 'relative')} against the paper's "
            f"{fmt_value(p, 'relative')}, {abs(o - p) * 100:.1f} points apart (tolerance "
            f"{CHANGE_TOL * 100:.0f})"
        )
    if c.kind == "range" and c.paper_range is not None:
        lo, hi = c.paper_range
        m = c.ours.mean
        where = "below" if m < lo else "above" if m > hi else "inside"
        stated = f"{fmt_value(lo, '')}-{fmt_value(hi, '')}"
        return f"{c.quantity}: ours {ours} is {where} the stated {stated}"
    if c.kind == "trend":
        follows = "follows" if c.holds else "does not follow"
        return f"{c.quantity}: ours {ours} {follows} the stated trend ({c.paper_text})"
    r = c.ratio
    if r is None or c.compared is None:
        return ""
    tol = EXACT_TOL if c.kind == "match" else REL_TOL
    p, o = c.compared
    if r >= 1:
        how = f"{r:.2f}x the paper's"
    elif r > 0:
        how = f"{1 / r:.2f}x lower than the paper's"
    else:
        how = "zero against the paper's"
    if c.normalised is not None:
        unit = " mean RTTs"
    else:
        unit = "" if c.unit in ("", "fraction", "relative", "x") else f" {c.unit}"
    return (
        f"{c.quantity}: ours {fmt_value(o, c.unit)}{unit} is {how} {fmt_value(p, c.unit)}{unit} "
        f"(tolerance {1 / (1 + tol):.2f}-{1 + tol:.2f}x)"
    )


def explanations(recs: Sequence[RunRecord], figures: Sequence[FigureResult]) -> dict[str, str]:
    """Per figure: every differing check in numbers, each with its measured cause or the plain
    statement that no run of this reproduction measures one; the too-wide intervals; then the
    measured facts that bear on the comparison (our message sizes, our mean RTT)."""
    base = [r for r in recs if r.part == "thesis-base"]
    rtt = _mean([r.mean_rtt_ms for r in base if r.mean_rtt_ms > 0])
    probe_b = _msg_size(base, ("ProbePub", "ProbePubMulticast", "ProbeSub"))
    deliver_b = _msg_size(base, ("EventDelivery",))
    nodes = int(base[0].params.get("nodes", 0)) if base else 0
    out: dict[str, str] = {}
    for f in figures:
        parts: list[str] = []
        for c in f.checks:
            if c.verdict not in ("differs", "differs, explained"):
                continue
            said = describe(c)
            if c.cause is not None:
                parts.append(
                    f"{said}. Measured cause ({', '.join(c.cause.measured_by)}): {c.cause.text}"
                )
                if c.extra.get("measured"):
                    # A cause run that alone would not explain it: its numbers all the same.
                    parts.append(f"Also measured, not enough alone: {c.extra['measured']}")
            elif c.extra.get("measured"):
                # A cause run that ran but does not bring ours to the paper: its numbers, and
                # plainly no explanation.
                parts.append(
                    f"{said}. Not explained: {c.extra['measured']} (not enough to explain it)"
                )
            else:
                parts.append(f"{said}. Cause not measured by this reproduction.")
        wide = [f"{c.quantity}: {c.undecided_note}" for c in f.checks if c.undecided]
        if wide:
            parts.append("Too wide to decide: " + "; ".join(wide))
        if not parts:
            judged = [c for c in f.checks if c.verdict != "n/a"]
            parts.append(
                f"All {len(judged)} applicable checks are within their tolerance."
                if judged
                else "No check here is a verdict (our variant, or values shown beside)."
            )
        if f.figure in ("4.2", "4.4", "4.5", "4.6", "4.7", "4.8", "4.10") and not math.isnan(
            probe_b
        ):
            parts.append(
                f"Absolute bytes are shown, not judged: in these runs a probe is {probe_b:.0f} B "
                f"and a delivery {deliver_b:.0f} B in our wire encoding; the thesis' sizes are "
                "Java-serialised (4.3.1), which it does not give per message."
            )
        if f.figure in ("4.1", "4.3", "4.9") and not math.isnan(rtt):
            parts.append(
                f"Our synthetic model's mean RTT is {rtt:.0f} ms, "
                f"{rtt / paper.THESIS_RUN_RTT_MS:.2f}x Table 4.5's "
                f"{paper.THESIS_RUN_RTT_MS:g} ms: latencies are judged in mean RTTs."
            )
        # The one rule (sim.comparable), asked about the base network's size alone: the
        # other ways a quick size differs are the page's banner's to say.
        if f.figure in RUN_FIGURES and nodes and not thesis_comparison({"nodes": nodes}).applies:
            parts.append(f"Our base network has {nodes:,} nodes, the thesis' {THESIS_NODES:,}.")
        out[f.figure] = " ".join(p if p.endswith(".") else p + "." for p in parts)
    return out


def captions(
    recs: Sequence[RunRecord], figures: Sequence[FigureResult], size_note: str
) -> dict[str, str]:
    """Per figure, the full caption (setup, seeds, what differs), set on the figure unless its
    builder wrote one (then only the size's note is added)."""
    ctx = context(recs, figures)
    out: dict[str, str] = {}
    for f in figures:
        runs = _runs_of(recs, f.figure)
        setups = sorted(
            {
                ", ".join(
                    f"{k} {v}"
                    for k, v in sorted(r.params.items())
                    if k in ("nodes", "events", "subs_per_node", "subscribers", "data_bytes")
                )
                for r in runs
            }
        )
        parts = sorted({r.part for r in runs})
        kinds = {c.kind for c in f.checks}
        verdicts = sum(c.verdict != "n/a" for c in f.checks)
        judged = (
            f"{verdicts} of {len(f.checks)} values judged"
            + (", absolute bytes shown beside them (info)" if "info" in kinds else "")
            + "."
        )
        if f.caption:  # the figure builder wrote its own: keep it, add the size's note
            if size_note and size_note not in f.caption:
                f.caption = f"{f.caption.rstrip()} Size: {size_note}."
            out[f.figure] = f.caption
            continue
        f.caption = (
            f"Fig {f.figure}, {f.title}. Runs: {', '.join(parts) or 'none'}"
            + (f" ({'; '.join(setups)})" if setups else "")
            + f". {ctx.get(f.figure, '')} {judged} Error bars: 95% Student t over the seeds. "
            + (f"Size: {size_note}." if size_note else "")
        ).strip()
        out[f.figure] = f.caption
    return out
