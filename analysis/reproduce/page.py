"""The reproduction's page, ``OUT/report.html``: the page a researcher puts in an appendix.

At the top, what ran (and, for ``--quick``, that its values are not the papers' setting), then
one summary table of every check (figure, quantity, the paper's value with its quoted sentence,
ours as mean ± 95% CI over n seeds, the verdict, its measured cause and the parts that measure
it), the parameters that are ours, then per figure: ours and the paper's stated values on one
plot (analysis.reproduce.plots) under a full caption, the report's own drawing of the first
seed's run, the checks in detail, and "why ours differs".

Every sentence about a result is generated: captions and explanations come from the figure
builders (``FigureResult.caption``, ``Check.cause``, analysis.reproduce.notes) and from what the
drawing holds (``plots.Drawn.notes``); this module only lays them out and never shortens them.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import Any

from rangecast.analysis.reproduce import plots
from rangecast.analysis.reproduce.compare import (
    CHANGE_TOL,
    EXACT_TOL,
    REL_TOL,
    Check,
    figure_verdict,
    fmt_stat,
)
from rangecast.analysis.reproduce.evaluate import FigureResult
from rangecast.analysis.reproduce.plans import FULL

_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1360px; color: #222;
       padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2.2em; border-bottom: 1px solid #ccc; }
h3 { font-size: 1.02em; margin: 1.4em 0 .3em; }
table { border-collapse: collapse; margin: .6em 0 1.2em; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: right; vertical-align: top; }
th { background: #f0f3f8; } td.l, th.l { text-align: left; }
td.q { text-align: left; width: 22em; }
td.fig { text-align: left; white-space: nowrap; background: #fafbfd; }
.v-reproduced { color: #1e7b34; font-weight: 600; }
.v-explained { color: #a05a00; font-weight: 600; }
.v-differs { color: #b00020; font-weight: 600; }
.v-na { color: #777; }
.quote { display: block; color: #555; font-size: 11.5px; max-width: 34em; text-align: left; }
.flag { display: inline-block; color: #8a4b00; background: #fff1d6; border-radius: 3px;
        padding: 0 4px; font-size: 11.5px; margin-top: 2px; }
.ref { text-decoration: underline dotted; cursor: help; }
.cause { text-align: left; max-width: 34em; font-size: 12.5px; }
figure { margin: .8em 0 1.2em; }
figure.main img { max-width: 100%; width: 1000px; border: 1px solid #ddd; }
figure.run img { max-width: 100%; width: 760px; border: 1px solid #ddd; }
figcaption { font-size: 12.5px; color: #333; max-width: 1000px; margin-top: .3em; }
figcaption b { color: #111; }
.why { background: #fff8e5; border-left: 4px solid #e0b000; padding: .4em .8em; max-width: 1300px; }
.quick { background: #fdecea; border: 2px solid #b00020; padding: .6em 1em; font-size: 15px; }
.note { color: #555; font-size: 12px; } code { background: #f4f4f4; padding: 0 3px; }
"""

#: CSS class of each verdict.
_VERDICT_CLASS = {
    "reproduced": "v-reproduced",
    "differs, explained": "v-explained",
    "differs": "v-differs",
    "n/a": "v-na",
}


# ------------------------------------------------------------------------------ drawing


def draw(
    out: Path, figures: Sequence[FigureResult], built: dict[str, Any]
) -> dict[str, list[tuple[Path, str]]]:
    """Per figure: ours and the paper's values on one plot (``OUT/figures/ci-*.png``, its
    caption the drawing's generated notes), then the report's own drawing of the first seed's
    run(s) with the report's full caption."""
    figs = out / "figures"
    drawn: dict[str, list[tuple[Path, str]]] = {}
    runs = {r["dir"]: r for r in built.get("runs", [])}

    def first_seed(dirs: Sequence[str]) -> int:
        return min((int(runs[d]["params"]["seed"]) for d in dirs if d in runs), default=0)

    for f in figures:
        mine: list[tuple[Path, str]] = []
        slug = f.figure.replace(".", "_").lower()
        d = plots.save(figs / f"ci-fig{slug}.png", f)
        if d.path is not None:
            mine.append((d.path, d.caption))
        candidates = [g for g in built.get("figures", []) if g["figure"] == f.figure]
        if candidates:
            best = min(candidates, key=lambda g: (first_seed(g["dirs"]), len(g["title"])))
            mine.append(
                (
                    Path(best["path"]),
                    f"The report's {best['title']} (seed {first_seed(best['dirs'])}): "
                    f"{best['caption']}",
                )
            )
        drawn[f.figure] = mine
    return drawn


# ------------------------------------------------------------------------------ cells


def _verdict(v: str) -> str:
    return f'<span class="{_VERDICT_CLASS.get(v, "v-na")}">{escape(v)}</span>'


def fmt_value(x: float, unit: str) -> str:
    if unit == "fraction":
        return f"{x:.1%}" if abs(x) < 0.1 else f"{x:.0%}"
    if unit == "relative":
        return f"{x:+.0%}"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _ref(source: str) -> str:
    """Where a quoted sentence is, for the summary: the source up to its first quote."""
    head = source.split("'", 1)[0].split('"', 1)[0].strip().rstrip(":,;").strip()
    return head or "the paper"


def paper_cell(c: Check, quote: str = "full") -> str:
    """The paper's value (or range, or words), its value in mean RTTs for a latency, and the
    sentence it comes from: in full (``quote`` = "full") or as its place, the sentence in the
    tooltip ("ref", the summary's compact form)."""
    if c.paper_range is not None:
        value = escape(c.paper_text or f"{c.paper_range[0]:g}..{c.paper_range[1]:g}")
    elif c.paper is None:
        value = escape(c.paper_text) or "&mdash;"
    else:
        value = escape(fmt_value(c.paper, c.unit))
        if c.unit and c.unit not in ("fraction", "relative"):
            value += f" <span class=note>{escape(c.unit)}</span>"
    if c.normalised is not None:
        value += f"<br><span class=note>= {c.normalised[0]:.2f} mean RTTs</span>"
    if c.source and quote == "full":
        value += f"<span class=quote>{escape(c.source)}</span>"
    elif c.source and quote == "ref":
        value += f"<span class='quote ref'>{escape(_ref(c.source))}</span>"
    return f'<td title="{escape(c.source)}">{value}</td>'


def interval_flag(c: Check) -> str:
    """A flag where the interval says little: one seed (none), or a half width larger than the
    mean (two or three seeds give such intervals: t = 12.7 with two)."""
    s = c.ours
    if s is None:
        return ""
    n = len(s.values)
    if math.isnan(s.half):
        return f"<br><span class=flag>{n} seed: no interval</span>"
    if s.half > abs(s.mean):
        return f"<br><span class=flag>interval wider than the mean ({n} seeds)</span>"
    return ""


def ours_cell(c: Check) -> str:
    if c.ours is None:
        return "<td>&mdash;</td>"
    text = escape(fmt_stat(c.ours, c.unit))
    if c.unit and c.unit not in ("fraction", "relative"):
        text += f" <span class=note>{escape(c.unit)}</span>"
    n = len(c.ours.values)
    text += f"<br><span class=note>{n} seed{'s' if n != 1 else ''}</span>"
    rtt = c.extra.get("ours_rtt") if c.normalised is not None else None
    if rtt:
        half = f" ± {rtt['ci95']:.2f}" if rtt.get("ci95") is not None else ""
        text += f"<br><span class=note>= {rtt['mean']:.2f}{half} mean RTTs</span>"
    return f"<td>{text}{interval_flag(c)}</td>"


def verdict_cell(c: Check) -> str:
    text = _verdict(c.verdict)
    if c.undecided:
        text += "<br><span class=flag>interval too wide to decide</span>"
    return f"<td class=l>{text}</td>"


def cause_cell(c: Check, above: Check | None = None) -> str:
    """The measured cause and the parts of the reproduction that measure it; for a check that
    differs without one, that no run measures it; for n/a, why."""
    if c.cause is not None:
        parts = ", ".join(f"<code>{escape(p)}</code>" for p in c.cause.measured_by)
        return (
            f"<td class=cause>{escape(c.cause.text)}"
            f"<br><span class=note>measured by: {parts}</span></td>"
        )
    if c.verdict == "differs":
        return "<td class=cause>no measured cause: no run of this reproduction measures one</td>"
    if c.verdict == "n/a":
        why = c.not_applicable
        if why and above is not None and above.verdict == "n/a" and above.not_applicable == why:
            why = "as above"
        return f"<td class=cause><span class=note>{escape(why)}</span></td>"
    return "<td class=cause></td>"


def summary_table(figures: Sequence[FigureResult]) -> str:
    """Every check of every figure: figure | quantity | paper | ours | verdict | cause."""
    head = (
        "<tr><th class=l>figure</th><th class=l>quantity</th>"
        "<th>paper (where; its sentence: hover, and under each figure)</th>"
        "<th>ours: mean ± 95% CI</th><th class=l>verdict</th>"
        "<th class=l>cause (measured by)</th></tr>"
    )
    rows = []
    for f in figures:
        for i, c in enumerate(f.checks):
            fig_cell = ""
            if i == 0:
                fig_cell = (
                    f"<td class=fig rowspan={len(f.checks)}><a href='#fig-{escape(f.figure)}'>"
                    f"Fig {escape(f.figure)}</a><br>{_verdict(figure_verdict(f.checks))}</td>"
                )
            above = f.checks[i - 1] if i else None
            rows.append(
                f"<tr>{fig_cell}<td class=q>{escape(c.quantity)}</td>{paper_cell(c, 'ref')}"
                f"{ours_cell(c)}{verdict_cell(c)}{cause_cell(c, above)}</tr>"
            )
    return f"<table class=summary>{head}{''.join(rows)}</table>"


def checks_table(checks: Sequence[Check]) -> str:
    """A figure's checks in detail: the comparison's ratio and its tolerance."""
    head = (
        "<tr><th class=l>quantity</th><th>paper</th><th>ours: mean ± 95% CI</th>"
        "<th>ours / paper (a change: ours - paper)</th><th class=l>judged by</th>"
        "<th class=l>verdict</th></tr>"
    )
    rows = []
    for c in checks:
        ratio = "" if c.ratio is None or c.verdict == "n/a" else f"{c.ratio:.3g}"
        if c.kind == "change" and c.compared is not None and c.verdict != "n/a":
            # A change is judged by its distance from the paper's, in points, not a ratio.
            paper, ours = c.compared
            ratio = f"{(ours - paper) * 100:+.1f} points"
        if c.normalised is not None and ratio:
            ratio += "<br><span class=note>in mean RTTs</span>"
        rows.append(
            f"<tr><td class=l>{escape(c.quantity)}</td>{paper_cell(c)}"
            f"{ours_cell(c)}<td>{ratio}</td><td class=l>{escape(_kind_text(c))}</td>"
            f"{verdict_cell(c)}</tr>"
        )
    return f"<table>{head}{''.join(rows)}</table>"


def _kind_text(c: Check) -> str:
    """The comparison a kind makes, with its tolerance (from compare's constants)."""
    rel = f"ratio within 1/{1 + REL_TOL:g}..{1 + REL_TOL:g}"
    return {
        "lower": rel,
        "higher": rel,
        "match": f"ratio within 1/{1 + EXACT_TOL:g}..{1 + EXACT_TOL:g}",
        "change": f"within ±{CHANGE_TOL * 100:.0f} points of the paper's change",
        "range": "inside the stated range",
        "trend": "follows the stated trend",
        "info": "shown, not judged",
    }.get(c.kind, c.kind)


def _img(path: Path, base: Path, caption: str, cls: str) -> str:
    rel = Path(os.path.relpath(path, base)).as_posix()
    return (
        f'<figure class={cls}><a href="{escape(rel)}"><img src="{escape(rel)}" '
        f'alt="{escape(caption)}"></a><figcaption>{caption}</figcaption></figure>'
    )


def figure_caption(
    f: FigureResult, drawing_notes: str, context: dict[str, str], facts: dict[str, Any]
) -> str:
    """The full caption (HTML-escaped): the builder's caption (setup, seeds, what differs), else
    one from the context and the size; the seeds if neither names them; the drawing's notes."""
    text = f.caption.strip()
    if not text:
        text = " ".join(
            t
            for t in (
                f"Fig {f.figure}, {f.title}.",
                context.get(f.figure, ""),
                f"Size: {facts.get('size_text', '')}.",
            )
            if t
        )
    if "seed" not in text.lower():
        seeds = sorted({s for c in f.checks if c.ours for s in c.ours.seeds})
        text += f" Seeds: {', '.join(map(str, seeds)) or 'none'}."
    lead = "" if text.startswith(f"Fig {f.figure}") else f"Fig {f.figure}. "
    return f"{escape(lead)}{escape(text)} {escape(drawing_notes)}".strip()


def _quick_banner(facts: dict[str, Any]) -> str:
    """For a size other than the full one, say plainly that its values are not the papers'
    setting, and what the papers' setting is (plans.FULL)."""
    size = str(facts.get("size") or str(facts.get("size_text", "")).split(":")[0])
    if size == FULL.name:
        return ""
    full = (
        f"thesis {FULL.nodes:,} nodes x {FULL.events:,} events, network sizes "
        f"{', '.join(f'{n:,}' for n in FULL.scale_nodes)}; LBDD n = "
        f"{', '.join(map(str, FULL.tree_subscribers))} and {FULL.transfer_bytes / 2**30:g} GiB; "
        f"seeds {', '.join(map(str, FULL.seeds))}"
    )
    note = str(facts.get("size_note") or "")
    return (
        f"<p class=quick><b>This is the {escape(size)} size, not the papers' setting: its "
        f"values are not comparable with the papers'.</b> {escape(note)}"
        f"{'.' if note and not note.endswith('.') else ''} Here: "
        f"{escape(facts.get('size_text', ''))}."
        f" The papers' setting (the full size, <code>rangecast reproduce all</code> without "
        f"<code>--quick</code>): {escape(full)}.</p>"
    )


def _our_parameters(facts: dict[str, Any]) -> str:
    params = facts.get("our_parameters") or []
    if not params:
        return ""
    rows = "".join(
        f"<tr><td class=l>{escape(p.get('name', ''))}</td><td class=l>{escape(p.get('value', ''))}"
        f"</td><td class=l><code>{escape(p.get('defined_in', ''))}</code></td>"
        f"<td class=l>{escape(p.get('paper_says', ''))}</td></tr>"
        for p in params
    )
    return (
        "<h3>Parameters that are ours (the papers leave them open)</h3>"
        "<table><tr><th class=l>parameter</th><th class=l>our value</th><th class=l>defined in"
        f"</th><th class=l>what the paper says</th></tr>{rows}</table>"
    )


def write_page(
    html: Path,
    figures: Sequence[FigureResult],
    drawn: dict[str, list[tuple[Path, str]]],
    explanations: dict[str, str],
    context: dict[str, str],
    facts: dict[str, Any],
) -> Path:
    """The one page: what ran, the summary table of every check, our parameters, then each
    figure with its plot, full caption, the report's drawing, its checks and why it differs."""
    base = html.parent
    counts = {v: 0 for v in _VERDICT_CLASS}
    for f in figures:
        counts[figure_verdict(f.checks)] = counts.get(figure_verdict(f.checks), 0) + 1
    tally = ", ".join(f"{_verdict(v)}: {n}" for v, n in counts.items() if n)
    parts = [
        "<!doctype html><html><head><meta charset=utf-8>",
        f"<title>Rangecast reproduction: {escape(facts['evaluation'])}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>Rangecast: the {escape(facts['evaluation_text'])}, reproduced</h1>",
        _quick_banner(facts),
        f"<p><code>{escape(facts['command'])}</code>: {facts['runs']} runs "
        f"({escape(facts['size_text'])}), {escape(facts['executor'])}; wall "
        f"{escape(facts['wall_text'])}. Recomputed figures (Spark, from the run logs, against "
        f"each run's summary): <b>{escape(facts['recomputed_text'])}</b>.</p>",
        f"<p>Figures by verdict: {tally}.</p>",
        f"<p class=note>Verdicts (analysis/reproduce/compare.py, docs/reproduce.md), two-sided: "
        "<i>reproduced</i> when the ratio ours / paper lies within "
        f"1/{1 + REL_TOL:g}..{1 + REL_TOL:g}"
        f" ({EXACT_TOL:.0%} for LBDD's derived mean out-degree of 2), a relative change within "
        f"±{CHANGE_TOL * 100:.0f} points of the paper's, a value inside a stated range, or a "
        "stated trend followed; beyond it on either side: <i>differs, explained</i> when a run "
        "of this reproduction measures the cause (named), else <i>differs</i>; <i>n/a</i> "
        "where the check does not apply or only shows a value (absolute bytes across two "
        "encodings). Latencies are compared in units of each side's mean RTT. Intervals are "
        "95% Student t over the seeds (each seed an independent run). Machine-readable: "
        "<a href='reproduction.json'>reproduction.json</a>. Every run's own figures and "
        f"tables: <a href='{escape(facts['runs_page'])}'>the per-run report</a>.</p>",
        "<h2 id=summary>Summary: every check</h2>",
        summary_table(figures),
        _our_parameters(facts),
    ]
    for f in figures:
        parts.append(
            f"<h2 id='fig-{escape(f.figure)}'>Fig {escape(f.figure)}: {escape(f.title)}"
            f" &mdash; {_verdict(figure_verdict(f.checks))}</h2>"
        )
        images = drawn.get(f.figure, [])
        for i, (path, caption) in enumerate(images):
            if i == 0 and path.name.startswith("ci-"):
                parts.append(_img(path, base, figure_caption(f, caption, context, facts), "main"))
            else:
                parts.append(_img(path, base, escape(caption), "run"))
        if not images or not images[0][0].name.startswith("ci-"):
            parts.append(f"<p>{figure_caption(f, '', context, facts)}</p>")
        parts.append(checks_table(f.checks))
        why = explanations.get(f.figure)
        if why:
            parts.append(f"<p class=why><b>Why ours differs.</b> {escape(why)}</p>")
    parts.append("</body></html>")
    html.write_text("\n".join(parts), encoding="utf-8")
    return html
