"""The report as one HTML page: tables side by side with the papers, and the figures.

The page is a single file with its style inline; the PNGs stay next to it (in the report's
output directory) and are referred to by relative path, so the page and its directory can be
copied anywhere together. The markup is ``templates/report.html.j2`` (Jinja2, autoescaped);
this module only turns the report's data (``analysis.report.model``, filled by
``analysis.report.build``) into the text each cell shows. It imports the model and the papers'
values, never the modules that compute them: data flows model -> figures -> page.
"""

from __future__ import annotations

import math
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import rangecast.analysis.report.paper as paper
from rangecast.analysis.report.model import Report, Row
from rangecast.analysis.report.templating import render
from rangecast.sim.comparable import THESIS_NODES

TEMPLATES = Path(__file__).resolve().parent / "templates"
#: Runs-table columns whose text may wrap; the others are short and stay on one line.
_WRAP = ("substrate", "other settings")


def _num(x: float | None, unit: str = "") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    if unit == "relative":
        return f"{x:+.1%}"
    if unit == "fraction":
        return f"{x:.1%}"
    if float(x).is_integer() and abs(x) < 1e15:
        return f"{int(x):,}"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.3g}" if abs(x) < 1 else f"{x:.2f}"


def _ratio(x: float | None) -> str:
    return "" if x is None else f"{x:.3g}"


def _row(r: Row) -> dict[str, str]:
    paper_cell = (
        r.paper_text if r.paper is None else ("~" if r.approx else "") + _num(r.paper, r.unit)
    )
    if r.paper is not None and r.paper_text:
        paper_cell = f"{_num(r.paper, r.unit)} ({r.paper_text})"
    return {
        "figure": r.figure,
        "quantity": r.quantity,
        "source": r.source,
        "paper": paper_cell,
        "ours": _num(r.ours, r.unit),
        "unit": "" if r.unit in ("relative", "fraction") else r.unit,
        "ratio": _ratio(r.ratio),
        "paper_rtt": _num(r.paper_rtt),
        "ours_rtt": _num(r.ours_rtt),
        "ratio_rtt": _ratio(r.ratio_rtt),
        "latency_model": r.latency_model,
    }


def _papers_note() -> str:
    rtts = paper.THESIS_RTT_BY_SIZE_MS.values()
    return (
        "Thesis: W. Li, UBC 2008, Chapter 4 (FreePastry simulator, King latency data, mean RTT "
        f"{min(rtts):g}-{max(rtts):g} ms by network size, Table 4.5 "
        f"({paper.THESIS_RUN_RTT_MS:g} ms at {THESIS_NODES:,} nodes); message sizes are "
        "Java object serialisation, ours are our wire encoding, so byte ratios measure encoding "
        "as much as protocol). 'ratio' is ours / paper. Latencies are also given in units of "
        "the mean RTT (thesis: King's; ours: the model's), which removes the difference "
        "between the networks. Values marked ~ are the thesis' 'about N% below X'. Hover a "
        "quantity for the sentence it comes from."
    )


def context(report: Report, path: Path, spark: dict[str, Any]) -> dict[str, Any]:
    """What the template shows, as text: nothing in it is computed from the logs here."""
    base = path.parent.resolve()
    names = list(report.run_table[0]) if report.run_table else []
    runs = [
        {
            "cells": [(n, cells[n]) for n in names],
            "mismatches": len(f.mismatches),
            "shared": shared,
        }
        for f, cells, shared in zip(report.runs, report.run_table, report.shared, strict=True)
    ]
    mismatches = [
        {
            "run": str(f.run.dir),
            "figure": str(m.get("figure")),
            "recomputed": str(m.get("recomputed")),
            "summary": str(m.get("summary")),
        }
        for f in report.runs
        for m in f.mismatches
    ]
    figures = [
        {
            "src": Path(os.path.relpath(fig.path.resolve(), base)).as_posix(),
            "title": fig.title,
            "caption": fig.caption or fig.title,
        }
        for fig in report.figures
    ]
    return {
        "generated": f"{datetime.now(UTC):%Y-%m-%d %H:%M}",
        "spark": {k: str(spark.get(k)) for k in ("version", "master", "java")},
        "run_columns": names,
        "wrap": _WRAP,
        "runs": runs,
        "mismatches": mismatches,
        "papers_note": _papers_note(),
        "tables": [
            {
                "title": t.title,
                "setting": t.setting,
                "comparable": t.comparable,
                "rows": [_row(r) for r in t.rows],
                "note": t.note,
            }
            for t in report.tables
        ],
        "systems": report.systems,
        "figures": figures,
    }


def write_html(report: Report, path: Path, spark: dict[str, Any]) -> Path:
    """Write the page to ``path``; return it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(TEMPLATES, "report.html.j2", **context(report, path, spark)))
    return path
