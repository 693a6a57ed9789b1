"""The thesis' figures, drawn from the report's figures with matplotlib (Agg: no display).

The thesis' Chapter 4 charts are spreadsheet charts: a histogram (count per bin, a last "More"
bin for the tail) under a cumulative-percentage line on a second axis, per-node rank curves, and
value-against-network-size lines. The same shapes here, so a reader can hold them side by side;
the thesis' stated points are marked where they fall inside our axes, both as published (King,
mean RTT 180 ms) and, for latencies, scaled to our model's mean RTT.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

# The backend is chosen before pyplot loads (pyplot would pick an interactive one).
import matplotlib.pyplot as plt
from matplotlib.ticker import PercentFormatter

COLOURS = ("#1f4e9c", "#c0392b", "#2e8b57", "#8e44ad", "#d68910", "#34495e")
DPI = 110
FIG_W = 11.0
#: Where the legend column starts, as a fraction of the figure's width.
LEGEND_X = 0.75


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
        """Nearest-rank quantile (a bin's end for binned points)."""
        n = self.n
        if n == 0:
            return 0.0
        rank = min(n, max(1, math.ceil(q * n)))
        seen = 0
        for x, c in self.points:
            seen += c
            if seen >= rank:
                return x + self.bin_width
        return self.points[-1][0] + self.bin_width

    def cdf(self) -> tuple[list[float], list[float]]:
        """Step points of the cumulative share (percent) of values at or below x."""
        n = self.n or 1
        xs, ys, seen = [], [], 0
        for x, c in self.points:
            if not xs:
                xs.append(x)
                ys.append(0.0)
            seen += c
            xs.append(x + self.bin_width)
            ys.append(100.0 * seen / n)
        return xs, ys


@dataclass
class Marker:
    """A published point on a cumulative curve: ``pct`` percent at or below ``x``."""

    x: float
    pct: float
    label: str
    style: str = "o"


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
    markers: Sequence[Marker] = (),
    vlines: Sequence[VLine] = (),
    top_axis: Scaled | None = None,
    note: str = "",
) -> Path:
    """Histogram bars (count per bin, a last bin for everything beyond) under cumulative lines."""
    series = [s for s in series if s.n]
    fig, ax = plt.subplots(figsize=(FIG_W, 4.6))
    if not series:
        ax.text(0.5, 0.5, "no values", ha="center", va="center", transform=ax.transAxes)
        return _save(fig, path, title)
    upper = max(s.quantile(0.995) for s in series)
    width = _nice(upper / 24)
    width = max(width, max(s.bin_width for s in series))
    nbins = max(1, math.ceil(upper / width))
    lowest = min(s.points[0][0] for s in series)
    start = math.floor(min(0.0, lowest) / width) * width
    edges = [start + k * width for k in range(nbins + 1 - round(start / width))]
    more = edges[-1]
    group = 0.8 * width / len(series)
    twin = ax.twinx()
    for k, s in enumerate(series):
        colour = COLOURS[k % len(COLOURS)]
        counts = [0] * len(edges)  # the last is "more"
        for x, c in s.points:
            idx = len(edges) - 1 if x >= more else int((x - start) // width)
            counts[max(0, idx)] += c
        lefts = [e + 0.1 * width + k * group for e in edges]
        ax.bar(lefts, counts, width=group, align="edge", color=colour, alpha=0.45, label=s.label)
        xs, ys = s.cdf()
        capped = [min(x, more + width) for x in xs]
        twin.step(capped, ys, where="post", color=colour, lw=1.8, label=f"{s.label}, cumulative")
    for m in markers:
        if m.x <= more + width:
            twin.plot([m.x], [m.pct], m.style, color="black", ms=7, mfc="none", label=m.label)
    for v in vlines:
        if v.x <= more + width:
            ax.axvline(v.x, color=v.colour, ls=v.dash, lw=1.2, label=v.label)
    ticks = edges[:-1][:: max(1, len(edges) // 10)]
    ax.set_xticks([*ticks, more + width / 2])
    ax.set_xticklabels([_fmt(t) for t in ticks] + ["More"], fontsize=8)
    ax.set_xlim(start, more + width)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("count")
    twin.set_ylim(0, 105)
    twin.yaxis.set_major_formatter(PercentFormatter(100))
    twin.set_ylabel("cumulative")
    if top_axis is not None:
        f = top_axis.factor
        top = ax.secondary_xaxis("top", functions=(lambda x: x / f, lambda x: x * f))
        top.set_xlabel(top_axis.label, fontsize=8)
        top.tick_params(labelsize=8)
    handles, labels = ax.get_legend_handles_labels()
    h2, l2 = twin.get_legend_handles_labels()
    _legend(fig, handles + h2, labels + l2)
    if note:
        fig.text(0.01, 0.01, note, fontsize=7, color="#444444")
    return _save(fig, path, title)


def rank(
    path: Path,
    title: str,
    ylabel: str,
    series: Sequence[tuple[str, Sequence[float]]],
    *,
    top: int | None = None,
    note: str = "",
) -> Path:
    """Per-node values, busiest first: x is the node's rank, y its value."""
    fig, ax = plt.subplots(figsize=(FIG_W, 4.4))
    for k, (label, values) in enumerate(series):
        ys = sorted(values, reverse=True)[:top] if top else sorted(values, reverse=True)
        xs = list(range(1, len(ys) + 1))
        style = dict(marker="o", ms=2.5) if top and top <= 150 else {}
        ax.plot(xs, ys, color=COLOURS[k % len(COLOURS)], lw=1.4, label=label, **style)
    ax.set_xlabel("rank (nodes, busiest first)")
    ax.set_ylabel(ylabel)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    _legend(fig, *ax.get_legend_handles_labels())
    if note:
        fig.text(0.01, 0.01, note, fontsize=7, color="#444444")
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
    twin_ylabel: str | None = None,
    paper_avg: Sequence[tuple[int, float]] = (),
    paper_band: tuple[float, float] | None = None,
    note: str = "",
) -> Path:
    """Average (solid) and maximum (dashed) against network size; with ``twin_ylabel`` the
    maxima get their own axis on the right (Fig 4.10), else they share the left one (Fig 4.9)."""
    fig, ax = plt.subplots(figsize=(FIG_W, 4.6))
    ax2 = ax.twinx() if twin_ylabel else ax
    sizes: set[int] = set()
    for k, line in enumerate(avg):
        xs, ys = zip(*sorted(line.points), strict=True) if line.points else ((), ())
        sizes.update(xs)
        ax.plot(xs, ys, "-o", color=COLOURS[k % len(COLOURS)], label=f"{line.label}: average")
    for k, line in enumerate(peak):
        xs, ys = zip(*sorted(line.points), strict=True) if line.points else ((), ())
        sizes.update(xs)
        ax2.plot(xs, ys, "--s", color=COLOURS[k % len(COLOURS)], label=f"{line.label}: maximum")
    # The thesis' sizes (1,000-5,000) are drawn only when ours reach near them: a sweep of
    # small networks would otherwise be squeezed against the axis.
    if sizes:
        paper_avg = [(x, y) for x, y in paper_avg if min(sizes) / 1.5 <= x <= max(sizes) * 1.5]
    if paper_avg:
        px, py = zip(*paper_avg, strict=True)
        ax.plot(px, py, "kD", mfc="none", ms=8, label="thesis: average (King)")
    if paper_band:
        ax2.axhspan(*paper_band, color="#999999", alpha=0.2, label="thesis: maximum (King)")
    ax.set_xticks(sorted(sizes | {x for x, _ in paper_avg}))
    ax.set_xlabel("network size (nodes)")
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    if twin_ylabel:
        ax2.set_ylabel(twin_ylabel)
        ax2.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if ax2 is not ax:
        h2, l2 = ax2.get_legend_handles_labels()
        handles, labels = handles + h2, labels + l2
    _legend(fig, handles, labels)
    if note:
        fig.text(0.01, 0.01, note, fontsize=7, color="#444444")
    return _save(fig, path, title)


def _legend(fig: plt.Figure, handles: list, labels: list[str]) -> None:
    """The legend in its own column right of the plot, so it hides no data."""
    keep = [(h, lab) for h, lab in zip(handles, labels, strict=True) if lab and lab[0] != "_"]
    if keep:
        hs, ls = zip(*keep, strict=True)
        fig.legend(hs, ls, fontsize=7, loc="upper left", bbox_to_anchor=(LEGEND_X, 0.86))


def _fmt(x: float) -> str:
    return f"{x:g}" if abs(x) < 1e5 else f"{x:.3g}"


def _save(fig: plt.Figure, path: Path, title: str) -> Path:
    """``title``: the figure's name, then `` - `` and what the run was (a second line)."""
    fig.suptitle(title.replace(" - ", "\n", 1), fontsize=10)
    fig.tight_layout(rect=(0, 0.03, LEGEND_X - 0.01, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path
