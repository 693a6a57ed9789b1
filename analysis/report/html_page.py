"""The report as one HTML page: tables side by side with the papers, and the figures.

The page is a single file with its style inline; the PNGs stay next to it (in the report's
output directory) and are referred to by relative path, so the page and its directory can be
copied anywhere together.
"""

from __future__ import annotations

import math
import os
from datetime import UTC, datetime
from html import escape
from pathlib import Path
from typing import Any

import rangecast.analysis.report.paper as paper
from rangecast.analysis.report.model import Report, Row
from rangecast.analysis.report.spark_job import flatten

_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1300px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: .6em 0 1.2em; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: right; vertical-align: top; }
th { background: #f0f3f8; } td.l, th.l { text-align: left; }
tr.bad td { background: #fde2e2; } .ok { color: #1e7b34; font-weight: 600; }
.bad { color: #b00020; font-weight: 600; } .note { color: #555; font-size: 12px; }
figure { display: inline-block; margin: .5em 1em 1em 0; vertical-align: top; }
figure img { max-width: 880px; border: 1px solid #ddd; }
figcaption { font-size: 12px; color: #444; max-width: 880px; }
code { background: #f4f4f4; padding: 0 3px; }
.wide { overflow-x: auto; } table.runs { font-size: 12px; }
table.runs th, table.runs td { padding: 3px 5px; }
table.runs td { white-space: nowrap; } table.runs td.wrap { white-space: normal; }
"""


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


def _row(r: Row) -> str:
    paper_cell = (
        r.paper_text if r.paper is None else ("~" if r.approx else "") + _num(r.paper, r.unit)
    )
    if r.paper is not None and r.paper_text:
        paper_cell = f"{_num(r.paper, r.unit)} ({r.paper_text})"
    unit = "" if r.unit in ("relative", "fraction") else r.unit
    return (
        "<tr>"
        f"<td class=l>{escape(r.figure)}</td>"
        f"<td class=l title='{escape(r.source, quote=True)}'>{escape(r.quantity)}</td>"
        f"<td>{escape(paper_cell)}</td><td>{escape(_num(r.ours, r.unit))}</td>"
        f"<td class=l>{escape(unit)}</td><td>{_ratio(r.ratio)}</td>"
        f"<td>{_num(r.paper_rtt)}</td><td>{_num(r.ours_rtt)}</td><td>{_ratio(r.ratio_rtt)}</td>"
        f"<td class=l>{escape(r.latency_model)}</td>"
        "</tr>"
    )


#: Runs-table columns whose text may wrap; the others are short and stay on one line.
_WRAP = ("substrate", "other settings")


def _runs_table(report: Report, columns: list[dict[str, str]]) -> str:
    names = list(columns[0]) if columns else []
    rows = []
    for f, cells in zip(report.runs, columns, strict=True):
        run = f.run
        shared = sum(1 for _ in _leaf_count(f.recomputed, run.summary))
        if f.mismatches:
            verdict = f"<span class=bad>{len(f.mismatches)} of {shared} figures differ</span>"
        elif shared:
            verdict = f"<span class=ok>all {shared} agree</span>"
        else:
            verdict = "nothing to compare (the summary has no per-message figures)"
        tds = [f"<td class=l><code>{escape(cells['run log'])}</code></td>"]
        tds += [
            f"<td class='l{' wrap' if n in _WRAP else ''}'>{escape(cells[n])}</td>"
            for n in names[1:]
        ]
        rows.append(
            f"<tr class={'bad' if f.mismatches else ''}>{''.join(tds)}"
            f"<td class='l wrap'>{verdict}</td></tr>"
        )
    mism = []
    for f in report.runs:
        for m in f.mismatches:
            mism.append(
                f"<tr class=bad><td class=l>{escape(str(f.run.dir))}</td>"
                f"<td class=l>{escape(str(m.get('figure')))}</td>"
                f"<td>{escape(str(m.get('recomputed')))}</td>"
                f"<td>{escape(str(m.get('summary')))}</td></tr>"
            )
    head = "".join(f"<th class=l>{escape(n)}</th>" for n in names)
    out = (
        f"<div class=wide><table class=runs><tr>{head}"
        "<th class=l>recomputed vs the run's summary</th></tr>" + "".join(rows) + "</table></div>"
    )
    if mism:
        out += (
            "<h3 class=bad>Mismatches</h3><table><tr><th>run</th><th>figure</th>"
            "<th>recomputed</th><th>summary</th></tr>" + "".join(mism) + "</table>"
        )
    return out


def _leaf_count(recomputed: dict[str, Any], summary: dict[str, Any]) -> list[str]:
    shared = []
    for key in recomputed:
        if key in summary:
            theirs = flatten(summary[key], key)
            shared += [p for p in flatten(recomputed[key], key) if p in theirs]
    return shared


def write_html(
    report: Report, path: Path, spark: dict[str, Any], columns: list[dict[str, str]]
) -> Path:
    """Write the page to ``path``; return it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    base = path.parent.resolve()
    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        "<title>Rangecast report</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>Rangecast: run logs against the thesis</h1>",
        f"<p class=note>Generated {datetime.now(UTC):%Y-%m-%d %H:%M} UTC by "
        f"<code>rangecast report</code> with Spark {escape(str(spark.get('version')))} "
        f"(master <code>{escape(str(spark.get('master')))}</code>, Java "
        f"{escape(str(spark.get('java')))}). Every figure below is recomputed from the logs' "
        "rows with Spark DataFrames (nearest-rank percentiles), and checked against the "
        "summary each run printed.</p>",
        "<h2>Runs</h2>",
        _runs_table(report, columns),
        "<h2>Against the papers</h2>",
        "<p class=note>Thesis: W. Li, UBC 2008, Chapter 4 (FreePastry simulator, King latency "
        f"data, mean RTT {min(paper.THESIS_RTT_BY_SIZE_MS.values()):g}-"
        f"{max(paper.THESIS_RTT_BY_SIZE_MS.values()):g} ms by network size, Table 4.5 "
        f"({paper.THESIS_RUN_RTT_MS:g} ms at {paper.THESIS_NODES:,} nodes); message sizes are "
        "Java object "
        "serialisation, ours are our wire encoding, so byte ratios measure encoding as much as "
        "protocol). 'ratio' is ours / paper. Latencies are also given in units of the mean RTT "
        "(thesis: King's; ours: the model's), which removes the difference between the "
        "networks. Values marked ~ are the thesis' 'about N% below X'. Hover a quantity for "
        "the sentence it comes from.</p>",
    ]
    head = (
        "<tr><th class=l>fig</th><th class=l>quantity</th><th>paper</th><th>ours</th>"
        "<th class=l>unit</th><th>ratio</th><th>paper / RTT</th><th>ours / RTT</th>"
        "<th>ratio / RTT</th><th class=l>our latency model</th></tr>"
    )
    for table in report.tables:
        parts.append(f"<h3>{escape(table.title)}</h3>")
        parts.append("<table>" + head + "".join(_row(r) for r in table.rows) + "</table>")
        if table.note:
            parts.append(f"<p class=note>{escape(table.note)}</p>")
    if report.systems:
        parts.append("<h2>Systems compared</h2>")
    for st in report.systems:
        head = "".join(f"<th class=l>{escape(c)}</th>" for c in st.columns[:1]) + "".join(
            f"<th>{escape(c)}</th>" for c in st.columns[1:]
        )
        body = "".join(
            f"<tr><td class=l>{escape(r[0])}</td>"
            + "".join(f"<td>{escape(c)}</td>" for c in r[1:])
            + "</tr>"
            for r in st.rows
        )
        parts.append(f"<h3>{escape(st.title)}</h3>")
        parts.append(f"<div class=wide><table><tr>{head}</tr>{body}</table></div>")
        parts.append(f"<p class=note>{escape(st.note)}</p>")
    parts.append("<h2>Figures</h2>")
    for fig in report.figures:
        src = os.path.relpath(fig.path.resolve(), base)
        caption = fig.caption or fig.title
        parts.append(
            f"<figure><img src='{escape(Path(src).as_posix(), quote=True)}' "
            f"alt='{escape(fig.title, quote=True)}'><figcaption>{escape(caption)}"
            "</figcaption></figure>"
        )
    if not report.figures:
        parts.append("<p>No thesis run nor systems comparison among the logs: nothing to plot.</p>")
    parts.append("</body></html>")
    path.write_text("\n".join(parts))
    return path
