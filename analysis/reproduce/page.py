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
from pathlib import Path
from typing import Any

from rangecast.analysis.report.templating import render
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
from rangecast.analysis.reproduce.plans import FULL, QUICK
from rangecast.sim.comparable import thesis_comparison

TEMPLATES = Path(__file__).resolve().parent / "templates"
#: The plan's sizes by name (``facts["size"]``).
SIZES = {s.name: s for s in (FULL, QUICK)}


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


def _unit(c: Check) -> str:
    return c.unit if c.unit and c.unit not in ("fraction", "relative") else ""


def paper_cell(c: Check) -> dict[str, Any]:
    """The paper's value (or range, or words), its value in mean RTTs for a latency, and the
    sentence it comes from (in full under a figure, its place in the summary)."""
    if c.paper_range is not None:
        value: str | None = c.paper_text or f"{c.paper_range[0]:g}..{c.paper_range[1]:g}"
        unit = ""
    elif c.paper is None:
        value, unit = c.paper_text or None, ""
    else:
        value, unit = fmt_value(c.paper, c.unit), _unit(c)
    return {
        "value": value,
        "unit": unit,
        "rtt": f"{c.normalised[0]:.2f}" if c.normalised is not None else "",
        "source": c.source,
        "ref": _ref(c.source),
    }


def interval_flag(c: Check) -> str:
    """A flag where the interval says little: one seed (none), or a half width larger than the
    mean (two or three seeds give such intervals: t = 12.7 with two)."""
    s = c.ours
    if s is None:
        return ""
    n = len(s.values)
    if math.isnan(s.half):
        return f"{n} seed: no interval"
    if s.half > abs(s.mean):
        return f"interval wider than the mean ({n} seeds)"
    return ""


def ours_cell(c: Check) -> dict[str, Any] | None:
    if c.ours is None:
        return None
    n = len(c.ours.values)
    rtt = c.extra.get("ours_rtt") if c.normalised is not None else None
    rtt_text = ""
    if rtt:
        half = f" ± {rtt['ci95']:.2f}" if rtt.get("ci95") is not None else ""
        rtt_text = f"{rtt['mean']:.2f}{half}"
    return {
        "text": fmt_stat(c.ours, c.unit),
        "unit": _unit(c),
        "seeds": f"{n} seed{'s' if n != 1 else ''}",
        "rtt": rtt_text,
        "flag": interval_flag(c),
    }


def _ratio(c: Check) -> str:
    """The comparison's ratio, or for a change its distance from the paper's in points."""
    if c.verdict == "n/a":
        return ""
    if c.kind == "change" and c.compared is not None:
        paper, ours = c.compared
        return f"{(ours - paper) * 100:+.1f} points"
    return "" if c.ratio is None else f"{c.ratio:.3g}"


def check_row(c: Check, above: Check | None) -> dict[str, Any]:
    """One check as the summary and the figure's table show it."""
    why = c.not_applicable
    if why and above is not None and above.verdict == "n/a" and above.not_applicable == why:
        why = "as above"
    return {
        "quantity": c.quantity,
        "paper": paper_cell(c),
        "ours": ours_cell(c),
        "verdict": c.verdict,
        "undecided": c.undecided,
        "cause": c.cause.text if c.cause is not None else "",
        "measured_by": list(c.cause.measured_by) if c.cause is not None else [],
        "why": why or "",
        "ratio": _ratio(c),
        "in_rtt": c.normalised is not None,
        "judged_by": _kind_text(c),
    }


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


def figure_caption(
    f: FigureResult, drawing_notes: str, context: dict[str, str], facts: dict[str, Any]
) -> str:
    """The full caption (text; the template escapes it): the builder's caption (setup, seeds,
    what differs), else one from the context and the size; the seeds if neither names them;
    the drawing's notes."""
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
    return f"{lead}{text} {drawing_notes}".strip()


def banner(facts: dict[str, Any]) -> dict[str, str] | None:
    """For a base run that is not the thesis' setting (``sim.comparable``, the rule the run's
    summary and the report apply), say plainly that its values are not comparable with the
    papers', how it differs, and what the papers' setting is (plans.FULL)."""
    name = str(facts.get("size") or str(facts.get("size_text", "")).split(":")[0])
    size = SIZES.get(name)
    differences: tuple[str, ...] = ("a size this page does not know",)
    if size is not None:
        # The plan's base run: the thesis' settings at the size's network and event counts.
        verdict = thesis_comparison({"nodes": size.nodes, "events": size.events})
        if verdict.applies:
            return None
        differences = verdict.differences
    full = (
        f"thesis {FULL.nodes:,} nodes x {FULL.events:,} events, network sizes "
        f"{', '.join(f'{n:,}' for n in FULL.scale_nodes)}; LBDD n = "
        f"{', '.join(map(str, FULL.tree_subscribers))} and {FULL.transfer_bytes / 2**30:g} GiB; "
        f"seeds {', '.join(map(str, FULL.seeds))}"
    )
    note = str(facts.get("size_note") or "")
    why = "Its base run: " + "; ".join(differences) + "."
    if note:
        why = f"{note}{'' if note.endswith('.') else '.'} {why}"
    return {"size": name, "why": why, "full": full}


def _images(
    f: FigureResult,
    drawn: dict[str, list[tuple[Path, str]]],
    base: Path,
    context: dict[str, str],
    facts: dict[str, Any],
) -> tuple[list[dict[str, str]], str]:
    """A figure's images (src, caption, class) and, when it has no plot of its own, the
    caption to show as a paragraph."""
    images = drawn.get(f.figure, [])
    out = []
    for i, (path, caption) in enumerate(images):
        main = i == 0 and path.name.startswith("ci-")
        out.append(
            {
                "src": Path(os.path.relpath(path, base)).as_posix(),
                "caption": figure_caption(f, caption, context, facts) if main else caption,
                "cls": "main" if main else "run",
            }
        )
    alone = not images or not images[0][0].name.startswith("ci-")
    return out, figure_caption(f, "", context, facts) if alone else ""


def write_page(
    html: Path,
    figures: Sequence[FigureResult],
    drawn: dict[str, list[tuple[Path, str]]],
    explanations: dict[str, str],
    context: dict[str, str],
    facts: dict[str, Any],
) -> Path:
    """The one page (``templates/reproduction.html.j2``): what ran, the summary table of every
    check, our parameters, then each figure with its plot, full caption, the report's drawing,
    its checks and why it differs."""
    base = html.parent
    counts = {v: 0 for v in _VERDICT_CLASS}
    for f in figures:
        counts[figure_verdict(f.checks)] = counts.get(figure_verdict(f.checks), 0) + 1
    shown = []
    for f in figures:
        images, caption = _images(f, drawn, base, context, facts)
        shown.append(
            {
                "figure": f.figure,
                "title": f.title,
                "verdict": figure_verdict(f.checks),
                "checks": [
                    check_row(c, f.checks[i - 1] if i else None) for i, c in enumerate(f.checks)
                ],
                "images": images,
                "caption": caption,
                "why": explanations.get(f.figure, ""),
            }
        )
    text = render(
        TEMPLATES,
        "reproduction.html.j2",
        facts=facts,
        banner=banner(facts),
        tally=[(v, n) for v, n in counts.items() if n],
        verdict_class=_VERDICT_CLASS,
        tolerance={
            "rel": f"1/{1 + REL_TOL:g}..{1 + REL_TOL:g}",
            "exact": f"{EXACT_TOL:.0%}",
            "change": f"{CHANGE_TOL * 100:.0f}",
        },
        figures=shown,
        parameters=facts.get("our_parameters") or [],
    )
    html.write_text(text, encoding="utf-8")
    return html
