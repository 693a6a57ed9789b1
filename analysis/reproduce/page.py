"""The reproduction's page: per figure, ours over the seeds with 95% intervals beside the paper's
values, the report's own drawing of the figure, the checks, and why we differ.

The per-run figures (histograms, rank curves) are the report's (analysis.report), drawn into
``figures/``; this module draws only what the report does not: the same quantities over seeds,
with error bars, next to the papers' values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import Any

from rangecast.analysis.reproduce.compare import (
    CHANGE_TOL,
    EXACT_TOL,
    REL_TOL,
    Check,
    figure_verdict,
    fmt_stat,
)
from rangecast.analysis.reproduce.evaluate import FigureResult
from rangecast.analysis.reproduce.lbdd import LBDD_RATE_MBPS

_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1400px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: .6em 0 1.2em; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: right; vertical-align: top; }
th { background: #f0f3f8; } td.l, th.l { text-align: left; }
.within { color: #1e7b34; font-weight: 600; } .better { color: #0b5394; font-weight: 600; }
.outside { color: #b00020; font-weight: 600; } .na { color: #777; }
figure { display: inline-block; margin: .5em 1em 1em 0; vertical-align: top; }
figure img { max-width: 660px; border: 1px solid #ddd; }
figcaption { font-size: 12px; color: #444; max-width: 660px; }
.why { background: #fff8e5; border-left: 4px solid #e0b000; padding: .4em .8em; max-width: 1300px; }
.note { color: #555; font-size: 12px; } code { background: #f4f4f4; padding: 0 3px; }
"""


# ------------------------------------------------------------------------------ figures


def _plt() -> Any:
    import rangecast.analysis.report.plots as plots  # (selects the Agg backend)

    return plots


def ratio_figure(path: Path, fig: FigureResult) -> Path | None:
    """Ours over the paper's value for each stated quantity (latencies in mean RTTs), the 95%
    interval as an error bar, on a log axis around 1 with the tolerance band shaded."""
    plots = _plt()
    plt = plots.plt
    rows = [c for c in fig.checks if c.kind in ("lower", "higher", "match") and c.ratio and c.ours]
    if not rows:
        return None
    h = 1.3 + 0.42 * len(rows)
    f, ax = plt.subplots(figsize=(8.6, h), layout="constrained")
    ys = list(range(len(rows)))[::-1]
    for y, c in zip(ys, rows, strict=True):
        assert c.ours is not None  # (rows have ours)
        paper_v, ours_v = c.compared or (1.0, 1.0)
        r = ours_v / paper_v
        scale = r / c.ours.mean if c.ours.mean else 0.0  # the interval, in ratio units
        err = 0.0 if math.isnan(c.ours.half) else c.ours.half * abs(scale)
        colour = {"within": "#1e7b34", "better": "#0b5394"}.get(c.verdict, "#b00020")
        ax.errorbar([r], [y], xerr=[[min(err, r * 0.999)], [err]], fmt="o", color=colour, capsize=4)
    tol = EXACT_TOL if all(c.kind == "match" for c in rows) else REL_TOL
    ax.axvspan(1 / (1 + tol), 1 + tol, color="#999999", alpha=0.2, label=f"tolerance ±{tol:.0%}")
    ax.axvline(1.0, color=plots.THESIS, lw=1)
    ax.set_xscale("log")
    ratios = [c.ratio or 1.0 for c in rows]
    lo, hi = min([*ratios, 0.5]), max([*ratios, 2.0])
    ax.set_xlim(lo / 1.6, hi * 1.6)
    ax.set_yticks(ys, [_short(c) for c in rows], fontsize=8)
    # Only latencies are rescaled (to each side's mean RTT); bytes are compared as they are.
    latency = any("latency" in _short(c) for c in rows)
    unit = " (latencies in units of each side's mean RTT)" if latency else ""
    ax.set_xlabel(f"ours / paper{unit}; bars: 95% CI")
    ax.grid(alpha=0.3, axis="x")
    ax.legend(loc="lower right", fontsize=8)
    f.suptitle(f"Fig {fig.figure}: ours over the paper's values, mean of the seeds", fontsize=10)
    return _save(f, path)


def _short(c: Check) -> str:
    q = c.quantity
    return q if len(q) <= 58 else q[:55] + "..."


def _save(f: Any, path: Path) -> Path:
    plots = _plt()
    path.parent.mkdir(parents=True, exist_ok=True)
    f.savefig(path, dpi=plots.DPI)
    plots.plt.close(f)
    return path


def _errorbar(ax: Any, pts: Sequence[tuple[float, Any]], label: str, colour: str, fmt: str) -> None:
    if not pts:
        return
    xs = [x for x, _ in pts]
    ys = [s.mean for _, s in pts]
    es = [0.0 if math.isnan(s.half) else s.half for _, s in pts]
    ax.errorbar(xs, ys, yerr=es, fmt=fmt, color=colour, capsize=4, label=label)


def scaling_figure(path: Path, fig: FigureResult, ylabel: str, paper_pts: Any) -> Path:
    """Fig 4.9 or 4.10 over seeds: mean (solid) and maximum (dashed) per latency model."""
    plots = _plt()
    f, ax = plots.plt.subplots(figsize=(8.6, 4.6), layout="constrained")
    ax2 = ax.twinx() if fig.figure == "4.10" else ax
    models = sorted({k.split(":")[0] for k in fig.series})
    for i, model in enumerate(models):
        colour = plots.COLOURS[i % len(plots.COLOURS)]
        _errorbar(ax, fig.series.get(f"{model}: mean", []), f"{model}: mean", colour, "-o")
        _errorbar(ax2, fig.series.get(f"{model}: max", []), f"{model}: maximum", colour, "--s")
    for label, pts, style in paper_pts:
        if style == "band":
            (x0, x1), (y0, y1) = pts
            ax2.fill_between([x0, x1], y0, y1, color="#999999", alpha=0.25, label=label)
        else:
            xs, ys = zip(*pts, strict=True)
            ax.plot(xs, ys, ":D", color=plots.THESIS, mfc="none", ms=8, label=label)
    sizes = [x for pts in fig.series.values() for x, _ in pts]
    if sizes and max(sizes) > 8 * min(sizes):  # our sizes far below the thesis': log axis
        ax.set_xscale("log")
    ax.set_xlabel("network size (nodes)")
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    if ax2 is not ax:
        ax2.set_ylabel("maximum per node")
        ax2.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels() if ax2 is not ax else ([], [])
    f.legend(h1 + h2, l1 + l2, loc="outside lower center", ncols=3, fontsize=8)
    f.suptitle(f"Fig {fig.figure}: {fig.title} (mean of the seeds, 95% CI)", fontsize=10)
    return _save(f, path)


def lbdd_tree_figure(path: Path, fig: FigureResult, depth: tuple[int, int]) -> Path:
    plots = _plt()
    f, (a1, a2) = plots.plt.subplots(1, 2, figsize=(10, 4.2), layout="constrained")
    _errorbar(a1, fig.series.get("depth", []), "ours: tree depth", plots.COLOURS[0], "-o")
    a1.axhspan(depth[0], depth[1], color="#999999", alpha=0.25, label="paper: 5..9 (n = 100..500)")
    a1.set_xlabel("subscribers n")
    a1.set_ylabel("tree depth (levels)")
    a1.set_ylim(bottom=0)
    a1.legend(fontsize=8)
    _errorbar(a2, fig.series.get("publisher_contribution", []), "ours", plots.COLOURS[1], "-o")
    a2.set_xlabel("subscribers n")
    a2.set_ylabel("publisher contribution (copies / n)")
    a2.set_ylim(bottom=0)
    a2.legend(fontsize=8, title="paper (Fig. 4): falls as n grows", title_fontsize=8)
    for a in (a1, a2):
        a.grid(alpha=0.3)
    f.suptitle("LBDD tree shape against subscribers (mean of the seeds, 95% CI)", fontsize=10)
    return _save(f, path)


def lbdd_rate_figure(path: Path, fig: FigureResult) -> Path:
    plots = _plt()
    f, ax = plots.plt.subplots(figsize=(8.6, 4.4), layout="constrained")
    for i, (label, pts) in enumerate(sorted(fig.series.items())):
        _errorbar(ax, pts, f"ours: {label}", plots.COLOURS[i], "-o")
    ax.axhline(LBDD_RATE_MBPS, color=plots.THESIS, ls=":", label="paper: LBDD about 24 Mbit/s")
    ax.set_xlabel("subscribers n")
    ax.set_ylabel("rate per subscriber (Mbit/s)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    f.suptitle("LBDD rate as subscribers grow (100 Mbit/s uplinks; 95% CI)", fontsize=10)
    return _save(f, path)


def lbdd_transfer_figure(path: Path, fig: FigureResult) -> Path | None:
    plots = _plt()
    times = [c for c in fig.checks if c.unit == "s" and c.ours is not None]
    if not times:
        return None
    f, ax = plots.plt.subplots(figsize=(7.5, 4.0), layout="constrained")
    x = range(len(times))
    ax.bar([i - 0.2 for i in x], [c.paper or 0 for c in times], 0.4, color="#bbbbbb", label="paper")
    assert all(c.ours for c in times)
    ax.bar(
        [i + 0.2 for i in x],
        [c.ours.mean for c in times if c.ours],
        0.4,
        yerr=[0.0 if math.isnan(c.ours.half) else c.ours.half for c in times if c.ours],
        capsize=4,
        color=plots.COLOURS[0],
        label="ours (mean, 95% CI)",
    )
    ax.set_xticks(list(x), [c.quantity for c in times], fontsize=8)
    ax.set_ylabel("seconds for 8 GB to 11 subscribers")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    f.suptitle("LBDD vs point-to-point: 8 GB to 11 subscribers", fontsize=10)
    return _save(f, path)


# ------------------------------------------------------------------------------ page


def _cell(c: Check) -> tuple[str, str]:
    if c.paper_range is not None:
        paper_cell = escape(c.paper_text or f"{c.paper_range[0]:g}..{c.paper_range[1]:g}")
    elif c.paper is None:
        paper_cell = escape(c.paper_text)
    else:
        paper_cell = fmt_stat_value(c.paper, c.unit)
    ours = fmt_stat(c.ours, c.unit)
    if c.ours is not None:
        ours += f" <span class=note>({len(c.ours.values)} seeds)</span>"
    if c.normalised is not None:
        rtt = c.extra.get("ours_rtt")
        paper_cell += f"<br><span class=note>{c.normalised[0]:.2f} RTT</span>"
        if rtt:
            half = f" ± {rtt['ci95']:.2f}" if rtt.get("ci95") is not None else ""
            ours += f"<br><span class=note>{rtt['mean']:.2f}{half} RTT</span>"
    return paper_cell, ours


def fmt_stat_value(x: float, unit: str) -> str:
    if unit == "fraction":
        return f"{x:.0%}"
    if unit == "relative":
        return f"{x:+.0%}"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _verdict(v: str) -> str:
    cls = {"n/a": "na"}.get(v, v)
    return f'<span class="{cls}">{escape(v)}</span>'


def checks_table(checks: Sequence[Check]) -> str:
    head = (
        "<tr><th class=l>quantity</th><th>paper</th><th>ours: mean ± 95% CI</th>"
        "<th>ratio</th><th>verdict</th><th class=l>source</th></tr>"
    )
    rows = []
    for c in checks:
        paper_cell, ours = _cell(c)
        ratio = "" if c.ratio is None else f"{c.ratio:.3g}"
        why = f" <span class=note>({escape(c.not_applicable)})</span>" if c.not_applicable else ""
        rows.append(
            f"<tr><td class=l>{escape(c.quantity)} <span class=note>{escape(c.unit)}</span></td>"
            f"<td>{paper_cell}</td><td>{ours}</td><td>{ratio}</td>"
            f"<td>{_verdict(c.verdict)}{why}</td><td class=l note>{escape(c.source)}</td></tr>"
        )
    return f"<table>{head}{''.join(rows)}</table>"


def _img(path: Path | None, base: Path, caption: str) -> str:
    if path is None:
        return ""
    rel = Path(__import__("os").path.relpath(path, base))
    return (
        f'<figure><a href="{escape(rel.as_posix())}"><img src="{escape(rel.as_posix())}" '
        f'alt="{escape(caption)}"></a><figcaption>{escape(caption)}</figcaption></figure>'
    )


def write_page(
    html: Path,
    figures: Sequence[FigureResult],
    drawn: dict[str, list[tuple[Path, str]]],
    explanations: dict[str, str],
    context: dict[str, str],
    facts: dict[str, Any],
) -> Path:
    """The one page: a summary of every figure's verdict, then each figure with its images,
    its checks, the setting (latency model, seeds) and the reasons for the differences."""
    base = html.parent
    summary = "".join(
        f"<tr><td class=l><a href='#fig-{escape(f.figure)}'>{escape(f.figure)}</a></td>"
        f"<td class=l>{escape(f.title)}</td><td>{len(f.checks)}</td>"
        f"<td>{_verdict(figure_verdict(f.checks))}</td></tr>"
        for f in figures
    )
    parts = [
        "<!doctype html><html><head><meta charset=utf-8>",
        f"<title>Rangecast reproduction: {escape(facts['evaluation'])}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>Rangecast: the {escape(facts['evaluation_text'])}, reproduced</h1>",
        f"<p><code>{escape(facts['command'])}</code>: {facts['runs']} runs "
        f"({escape(facts['size_text'])}), {escape(facts['executor'])}; wall "
        f"{escape(facts['wall_text'])}. Recomputed figures (Spark, from the run logs, against "
        f"each run's summary): <b>{escape(facts['recomputed_text'])}</b>.</p>",
        f"<p class=note>Tolerances (analysis/reproduce/compare.py, docs/reproduce.md): a ratio "
        f"ours / paper is <i>within</i> when between 1/{1 + REL_TOL:g} and {1 + REL_TOL:g} "
        f"({EXACT_TOL:.0%} for LBDD's derived mean out-degree of 2), a relative change within "
        f"±{CHANGE_TOL:.0%} (absolute) of the paper's; <i>better</i> beyond it on the good "
        "side (lower latency or bytes, a larger saving, a higher speed-up); latencies are "
        "compared in units of each side's mean RTT. Intervals are 95% Student t over the "
        "seeds (each seed an independent run). Machine-readable: "
        "<a href='reproduction.json'>reproduction.json</a>. Every run's own figures and "
        f"tables: <a href='{escape(facts['runs_page'])}'>the per-run report</a>.</p>",
        "<table><tr><th class=l>figure</th><th class=l>what</th><th>checks</th>"
        f"<th>verdict</th></tr>{summary}</table>",
    ]
    for f in figures:
        parts.append(
            f"<h2 id='fig-{escape(f.figure)}'>Fig {escape(f.figure)}: {escape(f.title)}"
            f" &mdash; {_verdict(figure_verdict(f.checks))}</h2>"
        )
        parts.append(f"<p class=note>{escape(context.get(f.figure, ''))}</p>")
        parts.append("".join(_img(p, base, cap) for p, cap in drawn.get(f.figure, [])))
        parts.append(checks_table(f.checks))
        why = explanations.get(f.figure)
        if why:
            parts.append(f"<p class=why><b>Why ours differs.</b> {escape(why)}</p>")
    parts.append("</body></html>")
    html.write_text("\n".join(parts), encoding="utf-8")
    return html
