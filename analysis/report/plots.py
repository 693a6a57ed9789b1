"""The thesis' figures, drawn from the report's figures with matplotlib (Agg: no display).

The thesis' Chapter 4 charts are spreadsheet charts: a histogram (count per bin, a last bin for
the tail) under a cumulative-percentage line on a second axis, per-node rank curves, and
value-against-network-size lines. The same shapes here, so a reader can hold them side by side,
with every value the thesis states drawn on axes wide enough to hold it: latencies on the
histogram's own axis (as published, King, mean RTT 180 ms, and scaled to our model's mean RTT);
bytes, which Java serialisation made several times ours, on a second, logarithmic panel.

Every function returns a ``Drawn``: the PNG's path and what its axes hold (lines, bars, shaded
spans in data units, limits and labels), read back from the matplotlib artists, which the report
writes next to the PNGs (``figures.json``) for anyone who wants the numbers behind a figure.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from numpy.typing import ArrayLike

from rangecast.sim.percentiles import percentile

matplotlib.use("Agg")

# The backend is chosen before pyplot loads (pyplot would pick an interactive one).
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.collections import PolyCollection
from matplotlib.legend_handler import HandlerTuple
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
from matplotlib.ticker import FuncFormatter, PercentFormatter

COLOURS = ("#1f4e9c", "#c0392b", "#2e8b57", "#8e44ad", "#d68910", "#34495e", "#17a2b8", "#e84393")
#: Dash patterns cycled beside the colours on the many-line figures (the systems comparison),
#: so runs whose curves coincide (SIENA, PADRES, POP and GRAPE often do) stay tellable apart.
DASHES = ("-", "--", "-.", ":")
THESIS = "#222222"
DPI = 110
FIG_W = 10.0


@dataclass
class Dist:
    """One series of a distribution figure: ``(x, count)`` points, x ascending.

    ``bin_width`` > 0 says the points are histogram bins starting at x (the report's latency
    histograms); 0 says they are exact values.
    """

    label: str
    points: list[tuple[float, int]]
    bin_width: float = 0.0

    @classmethod
    def of_values(cls, label: str, values: Iterable[float]) -> Dist:
        return cls(label, sorted(Counter(values).items()))

    @property
    def n(self) -> int:
        return sum(c for _, c in self.points)

    def quantile(self, q: float) -> float:
        """The ``q``-quantile by the project's one rule (``sim.percentiles``), a bin's end for
        binned points."""
        if not self.points:
            return 0.0
        xs, counts = zip(*self.points, strict=True)
        return percentile(xs, q, counts) + self.bin_width

    def cdf(self) -> tuple[list[float], list[float]]:
        """Step points of the cumulative share (percent) of values at or below x."""
        n = self.n or 1
        xs: list[float] = []
        ys: list[float] = []
        seen = 0
        for x, c in self.points:
            if not xs:
                xs.append(x)
                ys.append(0.0)
            seen += c
            xs.append(x + self.bin_width)
            ys.append(100.0 * seen / n)
        return xs, ys


@dataclass
class Curve:
    """Published points of a cumulative curve: ``pct`` percent of the values at or below ``x``.

    The thesis states a few such points per figure; they are drawn as markers, never joined:
    each is a separate statement, and the thesis gives nothing between them.
    """

    label: str
    points: list[tuple[float, float]]
    colour: str = THESIS
    marker: str = "o"


@dataclass
class VLine:
    x: float
    label: str
    colour: str = "#555555"
    dash: str = "--"


@dataclass
class Scaled:
    """A secondary x axis in another unit (ms in units of mean RTT)."""

    factor: float
    label: str


@dataclass
class Drawn:
    """A figure written: its PNG and the data its axes show."""

    path: Path
    data: list[dict[str, Any]]


def _nice(raw: float) -> float:
    """The smallest 1, 2, 2.5 or 5 times a power of ten at or above ``raw``."""
    if raw <= 0:
        return 1.0
    mag = 10.0 ** math.floor(math.log10(raw))
    for m in (1.0, 2.0, 2.5, 5.0, 10.0):
        if m * mag >= raw * (1 - 1e-12):
            return m * mag
    return 10.0 * mag


def distribution(
    path: Path,
    title: str,
    xlabel: str,
    series: Sequence[Dist],
    *,
    counted: str,
    unit: str,
    curves: Sequence[Curve] = (),
    vlines: Sequence[VLine] = (),
    top_axis: Scaled | None = None,
    log_panel: bool = False,
) -> Drawn:
    """Histogram bars (``counted`` per bin, a last bin for everything from its start on) under
    cumulative lines, with the published ``curves`` and ``vlines``.

    Without ``log_panel`` everything shares one axis, widened to hold every published value.
    With it (bytes: the thesis' are several times ours), the histogram keeps our own range and
    a second panel puts our cumulative curves next to the published values on a log axis.
    """
    series = [s for s in series if s.n]
    ncols = 2 if log_panel else 1
    fig, axes = plt.subplots(
        1,
        ncols,
        figsize=(FIG_W, 4.8),
        layout="constrained",
        width_ratios=(3, 2) if log_panel else None,
        squeeze=False,
    )
    ax: Axes = axes[0][0]
    if not series:
        ax.text(0.5, 0.5, "no values", ha="center", va="center", transform=ax.transAxes)
        return _save(fig, path, title)
    upper = max(s.quantile(0.995) for s in series)
    if not log_panel:
        # Wide enough for the published points and lines, which may lie beyond our tail.
        upper = max([upper, *(x for c in curves for x, _ in c.points), *(v.x for v in vlines)])
    width = _nice(upper / 24)
    width = max(width, max(s.bin_width for s in series))
    nbins = max(1, math.ceil(upper / width))
    lowest = min(s.points[0][0] for s in series)
    start = math.floor(min(0.0, lowest) / width) * width
    edges = [start + k * width for k in range(nbins + 1 - round(start / width))]
    more = edges[-1]
    group = 0.8 * width / len(series)
    twin = ax.twinx()
    together: list[tuple[Any, str]] = []
    for k, s in enumerate(series):
        colour = COLOURS[k % len(COLOURS)]
        counts = [0] * len(edges)  # the last: everything from ``more`` on
        for x, c in s.points:
            idx = len(edges) - 1 if x >= more else int((x - start) // width)
            counts[max(0, idx)] += c
        lefts = [e + 0.1 * width + k * group for e in edges]
        bars = ax.bar(
            lefts, counts, width=group, align="edge", color=colour, alpha=0.45, label=s.label
        )
        xs, ys = s.cdf()
        capped = [min(x, more + width) for x in xs]
        (line,) = twin.step(capped, ys, where="post", color=colour, lw=1.8, label=s.label)
        # One legend entry per series, its bar and its cumulative line side by side.
        together.append(((bars, line), s.label))
    here = [] if log_panel else list(curves)
    for curve in here:
        _curve(twin, curve)
    for v in [] if log_panel else vlines:
        ax.axvline(v.x, color=v.colour, ls=v.dash, lw=1.2, label=v.label)
    step = max(1, len(edges) // 9)
    # No regular tick right before the last bin's wider "≥ X" label: they would overlap.
    ticks = [t for t in edges[:-1][::step] if more - t >= step * width - 1e-9]
    ax.set_xticks([*ticks, more + width / 2])
    ax.set_xticklabels([_fmt(t) for t in ticks] + [f"≥ {_fmt(more)}{unit}"], fontsize=8)
    ax.set_xlim(start, more + width)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(f"{counted} per bin")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _p: f"{y:,.0f}"))
    twin.set_ylim(0, 105)
    twin.yaxis.set_major_formatter(PercentFormatter(100))
    twin.set_ylabel(f"cumulative share of {counted}")
    if top_axis is not None:
        f = top_axis.factor

        def to_top(x: ArrayLike) -> np.ndarray:
            return np.asarray(x) / f

        def from_top(x: ArrayLike) -> np.ndarray:
            return np.asarray(x) * f

        top = ax.secondary_xaxis("top", functions=(to_top, from_top))
        top.set_xlabel(top_axis.label, fontsize=8)
        top.tick_params(labelsize=8)
    handles = [h for h, _ in together]
    labels = [lab for _, lab in together]
    # The published curves and lines; our series are in ``together`` already.
    ours = set(labels)
    h2, l2 = [], []
    for axis in (ax, twin):
        for h, lab in zip(*axis.get_legend_handles_labels(), strict=True):
            if lab not in ours:
                h2.append(h)
                l2.append(lab)
    if log_panel:
        right: Axes = axes[0][1]
        _log_panel(right, series, curves, vlines, counted, xlabel)
        h3, l3 = right.get_legend_handles_labels()
        # Ours appear on both panels: one legend entry each.
        h2, l2 = (
            h2 + [h for h, lab in zip(h3, l3, strict=True) if lab not in l2],
            l2 + [lab for lab in l3 if lab not in l2],
        )
    _legend(fig, handles + h2, labels + l2)
    return _save(fig, path, title)


def _curve(ax: Axes, c: Curve) -> None:
    xs, ys = zip(*c.points, strict=True)
    ax.plot(xs, ys, ls="none", marker=c.marker, color=c.colour, ms=7, mfc="none", label=c.label)


def _log_panel(
    ax: Axes,
    series: Sequence[Dist],
    curves: Sequence[Curve],
    vlines: Sequence[VLine],
    counted: str,
    xlabel: str,
) -> None:
    """Our cumulative curves and the published values on one logarithmic axis."""
    xs_all: list[float] = []
    for k, s in enumerate(series):
        xs, ys = s.cdf()
        pos = [(x, y) for x, y in zip(xs, ys, strict=True) if x > 0]
        if not pos:
            continue
        px, py = zip(*pos, strict=True)
        xs_all += px
        ax.step(px, py, where="post", color=COLOURS[k % len(COLOURS)], lw=1.8)
    for c in curves:
        _curve(ax, c)
        xs_all += [x for x, _ in c.points]
    for v in vlines:
        ax.axvline(v.x, color=v.colour, ls=v.dash, lw=1.2, label=v.label)
        xs_all.append(v.x)
    pos_x = [x for x in xs_all if x > 0]
    if pos_x:
        ax.set_xscale("log")
        ax.set_xlim(min(pos_x) / 1.6, max(pos_x) * 1.6)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _p: _fmt(x)))
    ax.set_ylim(0, 105)
    ax.yaxis.set_major_formatter(PercentFormatter(100))
    # The same share as the histogram's right axis, which says what it counts right beside.
    ax.set_xlabel(log_label(xlabel))
    ax.set_title("the same share against the thesis' values", fontsize=9)
    ax.grid(alpha=0.3, which="major")
    ax.grid(alpha=0.08, which="minor")


def rank(
    path: Path,
    title: str,
    ylabel: str,
    series: Sequence[tuple[str, Sequence[float]]],
    *,
    top: int | None = None,
    published: Sequence[tuple[str, int, float, str]] = (),
) -> Drawn:
    """Per-node values, busiest first: x is the node's rank, y its value. ``published``:
    (label, rank, value, colour) points from the thesis; the y axis turns logarithmic when
    they lie far above ours (Java-serialised bytes)."""
    fig, ax = plt.subplots(figsize=(FIG_W, 4.6), layout="constrained")
    peak = 0.0
    for k, (label, values) in enumerate(series):
        ys = sorted(values, reverse=True)[:top] if top else sorted(values, reverse=True)
        xs = list(range(1, len(ys) + 1))
        peak = max([peak, *ys])
        style: dict[str, Any] = dict(marker="o", ms=2.5) if top and top <= 150 else {}
        if len(series) > 2:
            style["ls"] = DASHES[k % len(DASHES)]
        ax.plot(xs, ys, color=COLOURS[k % len(COLOURS)], lw=1.4, label=label, **style)
    for label, r, value, colour in published:
        ax.plot([r], [value], "D", color=colour, mfc="none", ms=9, label=label)
    ax.set_xlabel("rank (nodes, busiest first)")
    ax.set_ylabel(ylabel)
    ax.set_xlim(left=0)
    if published and peak > 0 and max(v for _, _, v, _ in published) > 3 * peak:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda x, _p: _fmt(x)))
        ax.set_ylabel(log_label(ylabel))
    else:
        ax.set_ylim(bottom=0)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda x, _p: _fmt(x)))
    ax.grid(alpha=0.3, which="major")
    _legend(fig, *ax.get_legend_handles_labels())
    return _save(fig, path, title)


def cdfs(path: Path, title: str, xlabel: str, series: Sequence[Dist]) -> Drawn:
    """Cumulative shares of several distributions on one axis, a line each (the systems
    comparison's latency CDFs)."""
    fig, ax = plt.subplots(figsize=(FIG_W, 4.6), layout="constrained")
    for k, d in enumerate(series):
        xs, ys = d.cdf()
        ax.step(
            xs,
            ys,
            where="post",
            color=COLOURS[k % len(COLOURS)],
            ls=DASHES[k % len(DASHES)],
            lw=1.6,
            label=d.label,
        )
    ax.set_xlabel(xlabel)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _p: _fmt(x)))
    ax.set_ylabel("share at or below")
    ax.yaxis.set_major_formatter(PercentFormatter(100))
    ax.set_xlim(left=0)
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    _legend(fig, *ax.get_legend_handles_labels())
    return _save(fig, path, title)


@dataclass
class Line:
    """One line of a scalability figure: (nodes, value) points, one per network size."""

    label: str
    points: list[tuple[int, float]] = field(default_factory=list)


def scaling(
    path: Path,
    title: str,
    ylabel: str,
    avg: Sequence[Line],
    peak: Sequence[Line],
    *,
    paper_avg: Sequence[Line] = (),
    paper_band: tuple[float, float, float, float] | None = None,
) -> Drawn:
    """Average (solid, circles) and maximum (dashed, squares) against network size, on one y
    axis: both are the same quantity in the same unit, and two scales would draw a smaller
    maximum above a larger average.

    ``avg``/``peak``: a line per setting, the same settings in the same order (one colour
    each; the legend names each setting once and says which style is which statistic). A
    setting with one size is drawn as points, not a line; when every one of ours has the same
    single size the axes say so, since no trend can be read from one size.
    ``paper_avg``: the thesis' averages (and the same scaled), drawn as they are stated;
    ``paper_band``: (first size, last size, low, high), the thesis' range for the maximum.
    The x axis holds our sizes and the thesis' (1,000-5,000): logarithmic (and labelled so)
    when they are far apart, so neither is squeezed against the edge.
    """
    fig, ax = plt.subplots(figsize=(FIG_W, 4.8), layout="constrained")
    sizes: set[int] = set()
    ours: set[int] = set()
    handles: list[Any] = []
    labels: list[str] = []
    for stat, lines, dash, marker, mfc in (
        ("average", avg, "-", "o", None),
        ("maximum", peak, "--", "s", "white"),
    ):
        for k, line in enumerate(lines):
            xs, ys = zip(*sorted(line.points), strict=True) if line.points else ((), ())
            sizes.update(xs)
            ours.update(xs)
            colour = COLOURS[k % len(COLOURS)]
            ax.plot(
                xs,
                ys,
                ls=dash if len(xs) > 1 else "none",
                marker=marker,
                color=colour,
                mfc=mfc or colour,
                label=f"_{line.label}: {stat}",  # (the legend is built below, a line each)
            )
            if stat == "average":
                handles.append(Line2D([], [], color=colour, marker="o", lw=2.5))
                labels.append(line.label)
    # Which style is which statistic: once, not on every setting's entry.
    handles += [
        Line2D([], [], color="#555555", ls="-", marker="o"),
        Line2D([], [], color="#555555", ls="--", marker="s", mfc="white"),
    ]
    labels += ["ours, average (solid)", "ours, maximum (dashed, open)"]
    for k, line in enumerate(paper_avg):
        px, py = zip(*line.points, strict=True)
        sizes.update(px)
        (art,) = ax.plot(
            px, py, "D" if k == 0 else "^", color=THESIS, mfc="none", ms=8, label=line.label
        )
        handles.append(art)
        labels.append(line.label)
    if paper_band:
        lo_n, hi_n, lo, hi = paper_band
        sizes.update((int(lo_n), int(hi_n)))
        band = ax.fill_between(
            [lo_n, hi_n], lo, hi, color="#999999", alpha=0.25, label="thesis (King): maximum"
        )
        handles.append(band)
        labels.append("thesis (King): maximum")
    log = bool(sizes) and max(sizes) > 8 * min(sizes)
    if log:
        ax.set_xscale("log")
        ax.set_xlim(min(sizes) / 1.25, max(sizes) * 1.25)
    elif sizes:
        pad = 0.06 * (max(sizes) - min(sizes) or max(sizes))
        ax.set_xlim(min(sizes) - pad, max(sizes) + pad)
    ax.set_xticks(sorted(sizes))
    ax.set_xticks([], minor=True)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _p: f"{x:,.0f}"))
    ax.tick_params(axis="x", labelsize=8)
    ax.set_xlabel(log_label("network size (nodes)") if log else "network size (nodes)")
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _p: f"{y:,.0f}"))
    if len(ours) == 1:
        (only,) = ours
        ax.text(
            0.02,
            0.97,
            f"ours: one network size only ({only:,} nodes): points, no trend",
            transform=ax.transAxes,
            ha="left",
            va="top",
            fontsize=9,
            color="#8a4b00",
            bbox={"boxstyle": "round", "fc": "#fff1d6", "ec": "#e0b000"},
        )
    ax.grid(alpha=0.3)
    _legend(fig, handles, labels)
    return _save(fig, path, title)


def _legend(fig: Any, handles: list[Any], labels: list[str]) -> None:
    """The legend under the plot, in columns: it hides no data and takes a strip of the
    height, not a third of the width."""
    keep: list[tuple[Any, str]] = []
    for h, lab in zip(handles, labels, strict=True):
        # Hidden artists and a label already given (the same series on two axes): once each.
        if lab and lab[0] != "_" and lab not in [k[1] for k in keep]:
            keep.append((h, lab))
    if keep:
        hs, ls = zip(*keep, strict=True)
        # As many columns as the longest label leaves room for across the figure.
        longest = max(len(lab) for lab in ls)
        ncol = min(len(ls), 3 if longest <= 48 else 2 if longest <= 75 else 1)
        fig.legend(
            hs,
            ls,
            fontsize=7.5,
            loc="outside lower center",
            ncol=ncol,
            frameon=False,
            handler_map={tuple: HandlerTuple(ndivide=None)},
        )


def log_label(label: str) -> str:
    """An axis label that says its axis is logarithmic: "bytes per event (probes only, log
    scale)", "network size (nodes, log scale)"."""
    if label.endswith(")"):
        return label[:-1] + ", log scale)"
    return label + " (log scale)"


def _fmt(x: float) -> str:
    """A tick label in plain decimals (never 1e+05 nor an offset): 0.25, 30, 1,000, 120,000."""
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    if x == 0:
        return "0"
    return np.format_float_positional(x, precision=4, unique=True, fractional=False, trim="-")


def _num(x: Any) -> float | None:
    """A plotted coordinate as JSON allows it (a masked or non-finite one as None)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def figure_data(fig: Any) -> list[dict[str, Any]]:
    """What each axes of ``fig`` draws, in data units: lines (and steps), bars, shaded spans;
    its limits, scales, labels and tick labels."""
    out = []
    for ax in fig.axes:
        lines = [
            {
                "label": str(ln.get_label()),
                "x": [_num(x) for x in ln.get_xdata()],
                "y": [_num(y) for y in ln.get_ydata()],
            }
            for ln in ax.get_lines()
        ]
        bars = [
            {
                "label": str(c.get_label()),
                "x": [_num(r.get_x() + r.get_width() / 2) for r in c],
                "height": [_num(r.get_height()) for r in c],
            }
            for c in ax.containers
        ]
        spans = []
        for coll in ax.collections:
            if isinstance(coll, PolyCollection):
                for p in coll.get_paths():
                    v = np.asarray(p.vertices)
                    spans.append(
                        {
                            "label": str(coll.get_label()),
                            "x": [_num(v[:, 0].min()), _num(v[:, 0].max())],
                            "y": [_num(v[:, 1].min()), _num(v[:, 1].max())],
                        }
                    )
        bar_rects = {id(r) for c in ax.containers for r in c}
        for p in ax.patches:
            if isinstance(p, Rectangle) and id(p) not in bar_rects:
                spans.append(
                    {
                        "label": str(p.get_label()),
                        "x": [_num(p.get_x()), _num(p.get_x() + p.get_width())],
                        "y": [_num(p.get_y()), _num(p.get_y() + p.get_height())],
                    }
                )
        out.append(
            {
                "title": ax.get_title(),
                "xlabel": ax.get_xlabel(),
                "ylabel": ax.get_ylabel(),
                "xscale": ax.get_xscale(),
                "yscale": ax.get_yscale(),
                "xlim": [_num(x) for x in ax.get_xlim()],
                "ylim": [_num(y) for y in ax.get_ylim()],
                "xticklabels": [t.get_text() for t in ax.get_xticklabels()],
                "lines": lines,
                "bars": bars,
                "spans": spans,
            }
        )
    return out


def _save(fig: Any, path: Path, title: str) -> Drawn:
    """``title``: the figure's name, then `` - `` and what the run was (a second line)."""
    fig.suptitle(title.replace(" - ", "\n", 1), fontsize=10)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    # Read back after drawing: tick labels and limits are final only once the figure is laid out.
    data = figure_data(fig)
    plt.close(fig)
    return Drawn(path, data)
