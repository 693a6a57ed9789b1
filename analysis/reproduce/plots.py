"""The reproduction's figures: per figure, ours over the seeds (mean and 95% interval) and the
paper's stated values on the same axes, with units.

A figure has up to two kinds of panel:

* a **curve** panel for each series group (``FigureResult.series``: ours as mean and interval
  per x, joined since they are one measured curve) with the paper's points of
  ``FigureResult.paper_series`` as open markers, never joined: each is a separate statement of
  the paper (several values at one x are a stated range, drawn as a vertical bar);
* a **values** panel for each unit among the checks (``FigureResult.checks``): one row per
  stated value, ours as a filled point with its interval and the paper's value (or range) as an
  open marker (or bar) beside it, the tolerance shaded behind, in the units the verdict
  compares (latencies in each side's mean RTT).

Every drawing returns the sentences its caption needs (``Drawn.notes``: what the markers are,
which curves coincide, which checks are not drawn and why), generated from what was drawn.
Nothing is clipped: the limits are computed from every interval's ends and every paper value,
and log axes get plain tick labels (0.5, 1, 2; 30, 1,000, 5,000), thinned so none overlap.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rangecast.analysis.reproduce.compare import Check, Stat
from rangecast.analysis.reproduce.evaluate import FigureResult

#: Panel labels (with units) of series whose name says what they are (the LBDD tree's).
SERIES_LABELS = {
    "depth": "tree depth (levels)",
    "publisher_contribution": "publisher contribution (copies / n)",
    "mean_out_degree": "mean out-degree of a forwarder",
    "max_out_degree": "largest out-degree",
    "bucket_min": "occupied bucket (index)",
    "bucket_max": "occupied bucket (index)",
}
#: Axis labels of the checks' units; values of "fraction" and "relative" are drawn in percent.
UNIT_LABELS = {
    "ms": "latency (ms)",
    "RTT": "latency (units of each side's mean RTT)",
    "B": "bytes",
    "fraction": "share (%)",
    "relative": "relative change (%)",
    "x": "ratio (x)",
    "s": "time (s)",
    "Mbit/s": "rate (Mbit/s)",
    "levels": "tree depth (levels)",
    "": "value (no unit)",
}
#: Kinds of check drawn beside a value of the paper's (a trend: beside the bound it names).
DRAWN_KINDS = ("lower", "higher", "match", "change", "range", "info", "trend")
OURS_MARKERS = ("o", "s", "^", "v", "D", "P", "X", "<", ">")
PAPER_MARKER = "D"
PAPER_COLOUR = "#222222"
#: Curves closer than this share of their panel's value span at every x "coincide".
COINCIDE = 0.015
#: Sideways offset of the k-th of several curves, as a share of the x axis' (log) span.
DODGE = 0.012


@dataclass
class Drawn:
    """A drawn figure: the PNG, the caption's sentences about the drawing, the artists' data."""

    path: Path | None
    notes: list[str] = field(default_factory=list)
    #: Per panel: its title, axis labels and scales, what is drawn (for tests and figures.json).
    panels: list[dict[str, Any]] = field(default_factory=list)

    @property
    def caption(self) -> str:
        return " ".join(self.notes)


def _plots() -> Any:
    import rangecast.analysis.report.plots as plots  # (selects the Agg backend)

    return plots


def _half(s: Stat) -> float:
    return 0.0 if math.isnan(s.half) else s.half


def _seed_text(seeds: Sequence[int]) -> str:
    return ", ".join(map(str, sorted(set(seeds))))


# ------------------------------------------------------------------------------ the data


@dataclass
class _Curve:
    name: str
    points: list[tuple[float, float, float]]  # x, mean, half width
    seeds: tuple[int, ...]


@dataclass
class _CurvePanel:
    label: str
    curves: list[_Curve]
    paper: dict[str, list[tuple[float, float]]]


@dataclass
class _Row:
    label: str
    check: Check
    ours: float
    lo: float
    hi: float
    paper: float | None
    paper_range: tuple[float, float] | None
    band: tuple[float, float] | None


@dataclass
class _ValuesPanel:
    label: str
    rows: list[_Row]
    info: bool


def _series_label(fig: FigureResult, name: str) -> str:
    """What a series measures (its panel's axis label): a known name, by its last part
    ("paper's rule: max out-degree" is a max_out_degree), else the figure's y label."""
    key = name.split(": ")[-1].replace("-", "_").replace(" ", "_")
    return SERIES_LABELS.get(name) or SERIES_LABELS.get(key) or fig.y_label or "value"


def curve_panels(fig: FigureResult) -> list[_CurvePanel]:
    """The figure's series grouped by what they measure (their axis label): one panel each;
    a series of one point is not a curve (its value is among the checks)."""
    panels: dict[str, _CurvePanel] = {}
    for name, pts in fig.series.items():
        if len(pts) < 2:
            continue
        label = _series_label(fig, name)
        seeds = tuple(sorted({s for _, st in pts for s in st.seeds}))
        curve = _Curve(name, [(float(x), st.mean, _half(st)) for x, st in pts], seeds)
        panels.setdefault(label, _CurvePanel(label, [], {})).curves.append(curve)
    if not panels:
        return []
    first = next(iter(panels.values()))
    for name, stated in fig.paper_series.items():
        if not stated:
            continue
        label = _series_label(fig, name)
        (panels.get(label) or first).paper[name] = [(float(x), float(y)) for x, y in stated]
    return list(panels.values())


def _scale(unit: str) -> float:
    return 100.0 if unit in ("fraction", "relative") else 1.0


def _row(c: Check) -> _Row | None:
    """A check as the values panel draws it, in the units its verdict compares."""
    if c.ours is None or c.kind not in DRAWN_KINDS:
        return None
    if c.kind == "trend" and (c.threshold is None or c.holds is None or c.not_applicable):
        return None
    if c.not_applicable and c.kind != "info":
        return None
    k = _scale(c.unit)
    pair = c.compared
    iv = c.interval()
    ours = pair[1] if c.normalised is not None and pair is not None else c.ours.mean
    lo, hi = iv if iv is not None else (ours, ours)
    paper = pair[0] if pair is not None else c.paper
    if c.kind == "trend":
        paper = c.threshold
    if paper is None and c.paper_range is None:
        return None
    bounds = c.bounds() if c.kind != "info" else ()
    band = (min(bounds), max(bounds)) if len(bounds) == 2 and c.kind != "range" else None
    return _Row(
        c.quantity,
        c,
        ours * k,
        lo * k,
        hi * k,
        None if paper is None else paper * k,
        None if c.paper_range is None else (c.paper_range[0] * k, c.paper_range[1] * k),
        None if band is None else (band[0] * k, band[1] * k),
    )


def _unit_of(c: Check) -> str:
    return "RTT" if c.normalised is not None else c.unit


def values_panels(fig: FigureResult) -> tuple[list[_ValuesPanel], list[Check]]:
    """The checks with a paper's value to draw, by unit (judged ones first, info after), and
    the checks that are not drawn."""
    panels: dict[tuple[bool, str], _ValuesPanel] = {}
    skipped: list[Check] = []
    for c in fig.checks:
        row = _row(c)
        if row is None:
            skipped.append(c)
            continue
        info = c.kind == "info"
        unit = _unit_of(c)
        label = UNIT_LABELS.get(unit, unit)
        panel = panels.setdefault((info, unit), _ValuesPanel(label, [], info))
        panel.rows.append(row)
    ordered = sorted(panels.items(), key=lambda kv: kv[0][0])  # judged before info
    return [p for _, p in ordered], skipped


# ------------------------------------------------------------------------------ axes helpers


def _plain(x: float, _pos: Any = None) -> str:
    """A tick label in plain decimals, never scientific nor an offset: 0.5, 1, 2, 30, 1,000,
    0.00012 (three significant digits at most)."""
    if x == 0:
        return "0"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return np.format_float_positional(x, precision=3, unique=True, fractional=False, trim="-")


def _plain_axis(axis: Any) -> None:
    """Plain decimal tick labels on a linear axis (matplotlib's default would switch to an
    offset or to powers of ten for ratios close to 1 or very small values)."""
    from matplotlib.ticker import FuncFormatter

    axis.set_major_formatter(FuncFormatter(_plain))


def _log_ticks(lo: float, hi: float, candidates: Sequence[float]) -> list[float]:
    """Ticks on a log axis from ``candidates`` (and 1-2-5 steps), at least 7% of the axis'
    log span apart so their labels never overlap."""
    span = math.log10(hi / lo)
    steps = [
        m * 10.0**e
        for e in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1)
        for m in (1, 2, 5)
    ]
    pool = sorted({round(c, 12) for c in candidates if lo <= c <= hi})
    pool += sorted(s for s in steps if lo <= s <= hi and s not in pool)
    kept: list[float] = []
    for t in pool:  # candidates (the data's own x values) first, then the round steps
        if all(abs(math.log10(t / k)) >= 0.07 * span for k in kept):
            kept.append(t)
    return sorted(kept)


def _limits(values: Sequence[float], zero: bool) -> tuple[float, float]:
    """Linear limits holding every value (and 0 when ``zero``), padded by 6% each side."""
    lo, hi = min(values), max(values)
    if zero:
        lo, hi = min(lo, 0.0), max(hi, 0.0)
    pad = (hi - lo) * 0.06 or abs(hi) * 0.1 or 1.0
    return (lo if zero and lo == 0 else lo - pad), hi + pad


def _wrap(text: str, width: int) -> str:
    return "\n".join(textwrap.wrap(text, width)) or text


# ------------------------------------------------------------------------------ drawing


def _draw_curves(ax: Any, fig: FigureResult, panel: _CurvePanel, notes: list[str]) -> dict:
    plots = _plots()
    xs = [x for c in panel.curves for x, _, _ in c.points]
    xs += [x for pts in panel.paper.values() for x, _ in pts]
    positive = all(x > 0 for x in xs)
    log = positive and max(xs) > 8 * min(xs)
    lo_x, hi_x = min(xs), max(xs)
    span = math.log10(hi_x / lo_x) if log and hi_x > lo_x else (hi_x - lo_x) or 1.0
    colours: dict[str, str] = {}
    styles: dict[str, str] = {}
    k = len(panel.curves)
    ys: list[float] = []
    for i, curve in enumerate(panel.curves):
        group, _, stat = curve.name.rpartition(": ")
        colour = colours.setdefault(group or curve.name, plots.COLOURS[len(colours) % 8])
        style = styles.setdefault(stat if group else "", ("-", "--", "-.", ":")[len(styles) % 4])
        off = (i - (k - 1) / 2) * DODGE * span if k > 1 else 0.0
        px = [x * 10**off if log else x + off for x, _, _ in curve.points]
        py = [m for _, m, _ in curve.points]
        pe = [h for _, _, h in curve.points]
        ax.errorbar(
            px, py, yerr=pe, fmt=style, marker=OURS_MARKERS[i % len(OURS_MARKERS)],
            color=colour, capsize=3, ms=6, lw=1.4, label=f"ours: {curve.name.replace('_', ' ')}",
            gid="ours",
        )  # fmt: skip
        ys += [m - h for m, h in zip(py, pe, strict=True)]
        ys += [m + h for m, h in zip(py, pe, strict=True)]
    paper_art = []
    for j, (name, pts) in enumerate(panel.paper.items()):
        by_x: dict[float, list[float]] = {}
        for x, y in pts:
            by_x.setdefault(x, []).append(y)
        ys += [y for _, y in pts]
        single = sorted((x, v[0]) for x, v in by_x.items() if len(v) == 1)
        ranges = sorted((x, min(v), max(v)) for x, v in by_x.items() if len(v) > 1)
        marker = (PAPER_MARKER, "o", "s", "^")[j % 4]
        label = name if name.startswith(("paper", "thesis")) else f"paper: {name}"
        if single:
            (line,) = ax.plot(
                [x for x, _ in single], [y for _, y in single], linestyle="none", marker=marker,
                mfc="white", mec=PAPER_COLOUR, mew=1.6, ms=9, label=label, gid="paper", zorder=5,
            )  # fmt: skip
            paper_art.append(line)
            label = "_"  # (one legend entry per paper series)
        if ranges:
            mid = [(a + b) / 2 for _, a, b in ranges]
            ax.errorbar(
                [x for x, _, _ in ranges], mid, yerr=[[m - a for m, (_, a, _) in
                zip(mid, ranges, strict=True)], [b - m for m, (_, _, b) in
                zip(mid, ranges, strict=True)]], fmt="none", ecolor=PAPER_COLOUR, elinewidth=3,
                capsize=6, capthick=1.6, label=label + " (stated range)" if label != "_" else "_",
                gid="paper-range", zorder=5,
            )  # fmt: skip
    if log:
        ax.set_xscale("log")
        lo, hi = lo_x / 1.3, hi_x * 1.3
        ax.set_xlim(lo, hi)
        from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

        ax.xaxis.set_major_locator(FixedLocator(_log_ticks(lo, hi, xs)))
        ax.xaxis.set_major_formatter(FuncFormatter(_plain))
        ax.xaxis.set_minor_locator(NullLocator())
    else:
        pad = (hi_x - lo_x) * 0.06 or 1.0
        # The sideways offsets of several curves stay inside the padding.
        pad = max(pad, DODGE * span * k)
        ax.set_xlim(lo_x - pad, hi_x + pad)
        _plain_axis(ax.xaxis)
    ax.set_ylim(*_limits(ys, zero=all(y >= 0 for y in ys)))
    _plain_axis(ax.yaxis)
    ax.set_xlabel(_plots().log_label(fig.x_label or "x") if log else (fig.x_label or "x"))
    ax.set_ylabel(panel.label)
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if len(colours) > 1 and len(styles) > 1:
        # "ours: planetlab: mean", "ours: planetlab: max", ... repeat each part: one entry per
        # group (its colour) and one per statistic (its line style) say the same once each.
        from matplotlib.lines import Line2D

        kept = [(h, lab) for h, lab in zip(handles, labels, strict=True) if lab.startswith("ours")]
        others = [(h, lab) for h, lab in zip(handles, labels, strict=True) if (h, lab) not in kept]
        proxies = [
            (Line2D([], [], color=c, lw=2.5), f"ours: {g.replace('_', ' ')}")
            for g, c in colours.items()
        ]
        proxies += [
            (Line2D([], [], color="#555555", ls=ls, lw=1.4), f"ours, {st.replace('_', ' ')}")
            for st, ls in styles.items()
        ]
        handles = [h for h, _ in proxies + others]
        labels = [lab for _, lab in proxies + others]
    order = sorted(range(len(labels)), key=lambda i: not labels[i].startswith("ours"))
    ax.legend(
        [handles[i] for i in order], [labels[i] for i in order], fontsize=8, ncols=2,
        loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False,
    )  # fmt: skip
    # Which curves coincide: same x values, closer than COINCIDE of the panel's span throughout.
    y_span = (max(ys) - min(ys)) or 1.0
    for a_i, a in enumerate(panel.curves):
        for b in panel.curves[a_i + 1 :]:
            ax_, bx_ = [p[0] for p in a.points], [p[0] for p in b.points]
            if ax_ != bx_:
                continue
            gap = max(abs(p[1] - q[1]) for p, q in zip(a.points, b.points, strict=True))
            if gap <= COINCIDE * y_span:
                notes.append(
                    f"Ours '{a.name}' and '{b.name}' coincide (at most {_plain(gap)} apart in "
                    f"{panel.label}): drawn with different markers, offset sideways."
                )
    if k > 1:
        notes.append(
            f"In the {panel.label} panel, ours' {k} curves are offset sideways by up to "
            f"{DODGE * (k - 1) / 2:.1%} of the axis so their intervals stay visible."
        )
    return {
        "kind": "curves",
        "y_label": panel.label,
        "x_label": fig.x_label,
        "x_log": log,
        "ours": [c.name for c in panel.curves],
        "paper": list(panel.paper),
        "ylim": list(ax.get_ylim()),
        "xlim": list(ax.get_xlim()),
    }


def _draw_values(ax: Any, panel: _ValuesPanel) -> dict:
    plots = _plots()
    n = len(panel.rows)
    ys = list(range(n))[::-1]
    vals: list[float] = []
    legend_done: set[str] = set()

    def once(label: str) -> str:
        if label in legend_done:
            return "_"
        legend_done.add(label)
        return label

    for y, r in zip(ys, panel.rows, strict=True):
        if r.band is not None:
            ax.fill_betweenx(
                [y - 0.38, y + 0.38], r.band[0], r.band[1], color="#9e9e9e", alpha=0.22,
                lw=0, label=once("tolerance around the paper's value"),
            )  # fmt: skip
            vals += list(r.band)
        colour = plots.COLOURS[0]
        got = r.check.received
        ax.errorbar(
            [r.ours], [y + (0.26 if got else 0.14)], xerr=[[r.ours - r.lo], [r.hi - r.ours]],
            fmt="o", color=colour, capsize=4, ms=7, label=once("ours: mean of the seeds, 95% CI"),
            gid="ours",
        )  # fmt: skip
        vals += [r.lo, r.hi, r.ours]
        if got is not None:
            # The same runs with each node charged the bytes it receives (the thesis does not
            # say which end it counts): beside ours, never the verdict's value.
            k = _scale(r.check.unit)
            m = got.mean * k
            h = 0.0 if math.isnan(got.half) else got.half * k  # one seed: no interval
            ax.errorbar(
                [m], [y + 0.06], xerr=[[h], [h]], fmt="s", color=plots.COLOURS[1], mfc="white",
                capsize=3, ms=6, label=once("ours, each node charged the bytes it receives"),
                gid="ours-received",
            )  # fmt: skip
            vals += [m - h, m + h]
        if r.paper_range is not None:
            a, b = r.paper_range
            ax.errorbar(
                [(a + b) / 2], [y - 0.14], xerr=[[(b - a) / 2], [(b - a) / 2]], fmt="none",
                ecolor=PAPER_COLOUR, elinewidth=3, capsize=6, capthick=1.6,
                label=once("paper: stated range"), gid="paper-range",
            )  # fmt: skip
            vals += [a, b]
        elif r.paper is not None and r.check.kind == "trend":
            # The paper states a direction, not a value: an arrowhead at the bound ours must
            # pass, pointing to the stated side (which side: from where ours is and whether
            # it holds).
            below = (r.ours <= r.paper) == bool(r.check.holds)
            ax.plot(
                [r.paper], [y - 0.14], linestyle="none", marker="<" if below else ">",
                mfc="white", mec=PAPER_COLOUR, mew=1.6, ms=10,
                label=once("paper: stated direction, from this bound"), gid="paper",
            )  # fmt: skip
            vals.append(r.paper)
        elif r.paper is not None:
            ax.plot(
                [r.paper], [y - 0.14], linestyle="none", marker=PAPER_MARKER, mfc="white",
                mec=PAPER_COLOUR, mew=1.6, ms=9, label=once("paper: stated value"), gid="paper",
            )  # fmt: skip
            vals.append(r.paper)
    positive = all(v > 0 for v in vals)
    log = positive and max(vals) > 40 * min(vals)
    if log:
        ax.set_xscale("log")
        lo, hi = min(vals) / 1.4, max(vals) * 1.4
        ax.set_xlim(lo, hi)
        from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

        ax.xaxis.set_major_locator(FixedLocator(_log_ticks(lo, hi, [])))
        ax.xaxis.set_major_formatter(FuncFormatter(_plain))
        ax.xaxis.set_minor_locator(NullLocator())
    else:
        ax.set_xlim(*_limits(vals, zero=all(v >= 0 for v in vals)))
        _plain_axis(ax.xaxis)
    ax.set_yticks(ys, [_wrap(r.label, 46) for r in panel.rows], fontsize=8)
    ax.set_ylim(-0.6, n - 0.4)
    label = panel.label + (" (shown, not judged)" if panel.info else "")
    label = _plots().log_label(label) if log else label
    ax.set_xlabel(label)
    ax.grid(alpha=0.3, axis="x")
    return {
        "kind": "values",
        "x_label": label,
        "x_log": log,
        "rows": [r.label for r in panel.rows],
        "info": panel.info,
        "xlim": list(ax.get_xlim()),
    }


def build(fig: FigureResult) -> tuple[Any, Drawn]:
    """The matplotlib figure (not saved) and what it holds; (None, Drawn) when there is
    nothing to draw."""
    plots = _plots()
    curves = curve_panels(fig)
    values, skipped = values_panels(fig)
    drawn = Drawn(None)
    if not curves and not values:
        drawn.notes.append("Nothing to draw: no value of ours has a stated value of the paper's.")
        return None, drawn
    cols = 2 if len(curves) >= 3 else 1
    curve_rows = math.ceil(len(curves) / cols)
    heights = [4.6 if cols == 1 else 3.9] * curve_rows
    heights += [0.9 + 0.55 * len(p.rows) for p in values]
    tall = sum(heights) + 0.5 + (0.3 if values else 0.0)
    f = plots.plt.figure(figsize=(9.6 if cols == 1 else 12.0, tall), layout="constrained")
    grid = f.add_gridspec(len(heights), cols, height_ratios=heights)
    axs = [f.add_subplot(grid[i // cols, i % cols]) for i in range(len(curves))]
    axs += [f.add_subplot(grid[curve_rows + i, :]) for i in range(len(values))]
    notes: list[str] = []
    for ax, panel in zip(axs, curves, strict=False):
        drawn.panels.append(_draw_curves(ax, fig, panel, notes))
    for ax, vpanel in zip(axs[len(curves) :], values, strict=True):
        drawn.panels.append(_draw_values(ax, vpanel))
    if values:  # one legend for every values panel (the same four kinds of mark), below them
        seen: dict[str, Any] = {}
        for ax in axs[len(curves) :]:
            for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
                seen.setdefault(lab, h)
        order = sorted(seen, key=lambda lab: (not lab.startswith("ours"), lab))
        # At most three entries a row: five side by side run past the figure's edges.
        f.legend(
            [seen[k] for k in order], order, loc="outside lower center",
            ncols=min(len(order), 3), fontsize=8, frameon=False,
        )  # fmt: skip
    f.suptitle(f"Fig {fig.figure}: {fig.title}", fontsize=10)
    seeds = sorted(
        {s for c in fig.checks if c.ours for s in c.ours.seeds}
        | {s for p in curves for c in p.curves for s in c.seeds}
    )
    drawn.notes.append(
        f"Ours: filled markers, the mean over seeds {_seed_text(seeds) or 'none'} with its 95% "
        "interval (Student t); the paper's stated values: open black markers, never joined "
        "(each is a separate statement), a thick bar where the paper states a range."
    )
    if values:
        drawn.notes.append(
            "In the rows of stated values, each value of the paper sits beside ours, in "
            "the units the verdict compares"
            + (" (latencies in units of each side's mean RTT)" if _has_rtt(values) else "")
            + "; the grey band is the tolerance."
            + (
                " Open squares: ours from the same runs with each node charged the bytes it "
                "receives rather than those it sends (the thesis does not say which), shown "
                "beside the verdict's value."
                if any(r.check.received is not None for p in values for r in p.rows)
                else ""
            )
        )
    drawn.notes += notes
    if skipped:  # by reason, each reason once
        reasons: dict[str, int] = {}
        for c in skipped:
            if c.not_applicable:
                why = c.not_applicable
            elif c.ours is None:
                why = "no value of ours"
            elif c.kind == "trend":
                why = "a stated trend with no bound to draw"
            else:
                why = "ours only: the paper states no value"
            reasons[why] = reasons.get(why, 0) + 1
        said = "; ".join(f"{n} x {why}" if n > 1 else why for why, n in reasons.items())
        drawn.notes.append(f"Not drawn, {len(skipped)} of the table's checks: {said}.")
    return f, drawn


def _has_rtt(panels: Sequence[_ValuesPanel]) -> bool:
    return any(r.check.normalised is not None for p in panels for r in p.rows)


def save(path: Path, fig: FigureResult) -> Drawn:
    """Draw ``fig`` into ``path`` (PNG); ``Drawn.path`` is None when there is nothing to draw."""
    plots = _plots()
    f, drawn = build(fig)
    if f is None:
        return drawn
    path.parent.mkdir(parents=True, exist_ok=True)
    f.savefig(path, dpi=plots.DPI)
    plots.plt.close(f)
    drawn.path = path
    return drawn
