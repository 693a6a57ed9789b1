"""The reproduction's page (analysis.reproduce.page, .plots) from figures built in memory, no
runs and no Spark: every figure drawn with ours and the paper's values on one plot, the
paper's values as markers never joined, nothing clipped, no overlapping or scientific tick
labels, full captions with the seeds, and one summary table listing every check with its
verdict and cause."""

from __future__ import annotations

import re
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from markupsafe import escape  # (as the page escapes: Jinja2's autoescaping)

from rangecast.analysis.reproduce import page, plots
from rangecast.analysis.reproduce.compare import Cause, Check, Stat
from rangecast.analysis.reproduce.evaluate import FigureResult

LONG = (
    "Fig 4.9, Event delivery latency against network size. Runs: thesis-base, "
    "thesis-scale-synthetic, thesis-scale-planetlab (events 10000, nodes 1000..5000, "
    "subs_per_node 5.0). Latency model: planetlab (mean RTT 152 ms), synthetic (mean RTT 147 ms); "
    "the thesis: King, mean RTT 175 ms at 1,000 nodes (Table 4.5, per size for Fig 4.9). "
    "Seeds: 1, 2, 3 (3 independent runs per point). 2 of 4 values judged. Error bars: 95% "
    "Student t over the seeds. What differs from the thesis: our latency models are not King's, "
    "so latencies are judged in units of each side's mean RTT; END-OF-CAPTION"
)


def _stat(*values: float, seeds: tuple[int, ...] | None = None) -> Stat:
    return Stat.of(list(values), list(seeds or range(1, len(values) + 1)))


def _figures() -> list[FigureResult]:
    latency = FigureResult("4.1", "Subscription installation latency")
    latency.caption = "Fig 4.1, Subscription installation latency. Seeds: 1, 2, 3."
    latency.checks = [
        Check(
            "4.1",
            "install latency, mean, in mean RTTs",
            "lower",
            _stat(290.0, 300.0, 310.0),
            "ms",
            paper=331.0,
            source="4.1.1: 'The average latency is 331ms'",
            normalised=(331 / 175, 300 / 147),
            extra={"ours_rtt": {"mean": 300 / 147, "ci95": 0.1}},
        ),
        Check(
            "4.1",
            "install latency, p90, in mean RTTs",
            "lower",
            _stat(400.0, 480.0, 560.0),
            "ms",
            paper=1000.0,
            source="4.3.1: 'about 90% of installations take less than 1s'",
            normalised=(1000 / 175, 480 / 147),
        ),
    ]
    probes = FigureResult("4.7", "Probe bandwidth without and with load balancing")
    probes.checks = [
        Check(
            "4.7",
            "mean: change (LB off -> LB on)",
            "change",
            _stat(-0.21, -0.23, -0.24),
            "relative",
            paper=-0.5,
            source="4.3.2: 'reduces ... by 50%'",
            cause=Cause("our cut-off c = 0.1 saves 22%; c = 0.5 saves 47%", ("thesis-lb-c0.5",)),
        ),
        Check(
            "4.7",
            "busiest node / mean",
            "lower",
            _stat(3.0, 9.0),
            "x",
            paper=2.0,
            source="4.3.2: 'the maximum ...'",
            received=_stat(1.9, 2.1),
        ),
        Check(
            "4.7",
            "share of nodes below 60 B/sub",
            "higher",
            _stat(0.2, 1.4),
            "fraction",
            paper=0.98,
            source="4.3.1: 'nearly 98% nodes'",
        ),
        Check(
            "4.7",
            "probe bandwidth per event per node, mean (LB off)",
            "info",
            _stat(250.0, 260.0),
            "B",
            paper=2120.0,
            source="4.3.2: '2.12k'",
            not_applicable="absolute bytes across two encodings: shown, never a verdict",
        ),
        Check(
            "4.7",
            "top-20 mean: change with load balancing",
            "trend",
            _stat(-0.1, -0.2),
            "relative",
            paper_text="'reduced significantly'",
            source="4.3.2",
            holds=True,
            threshold=0.0,
        ),
    ]
    scaling = FigureResult("4.9", "Event delivery latency against network size")
    scaling.caption = LONG
    scaling.x_label, scaling.y_label = "network size (nodes)", "delivery latency (ms)"
    pts = [(1000.0, 200.0), (1740.0, 210.0), (5000.0, 230.0)]
    scaling.series = {
        # Two curves that coincide: they must stay tellable apart.
        "synthetic: mean": [(x, _stat(y - 5, y, y + 5)) for x, y in pts],
        "planetlab: mean": [(x, _stat(y - 4, y + 0.5, y + 5)) for x, y in pts],
        "synthetic: max": [(x, _stat(3 * y, 3.5 * y, 4 * y)) for x, y in pts],
        "planetlab: max": [(x, _stat(y, 8 * y, 15 * y)) for x, y in pts],  # a wide interval
    }
    scaling.paper_series = {
        "thesis (King): mean": [(1000.0, 330.0), (5000.0, 430.0)],
        "thesis (King): maximum, 1.6-1.8 s": [
            (n, v) for n in (1000.0, 5000.0) for v in (1.6e3, 1.8e3)
        ],
    }
    scaling.checks = [
        Check(
            "4.9",
            "max latency at 5,000 nodes, in mean RTTs (synthetic)",
            "range",
            _stat(4.0, 4.5, 5.0),
            "RTT",
            paper_range=(9.1, 10.2),
            paper_text="1.6-1.8 s",
            source="4.3.3: 'the maximum latency oscillates between 1.6s to 1.8s'",
        ),
        Check(
            "4.9",
            "mean latency growth, 1,000 -> 5,000 nodes (synthetic)",
            "lower",
            _stat(1.1, 1.2, 1.3),
            "x",
            paper=1.3,
            source="4.3.3: '330ms ... 430ms'",
        ),
        Check(
            "4.9",
            "tree depth, n = 8",
            "range",
            _stat(3.0, 4.0),
            "levels",
            paper_range=(5, 9),
            source="LBDD",
            not_applicable="the paper states it for n = 100..500",
        ),
    ]
    # Our sizes far below the paper's: a log axis, whose tick labels must stay plain and apart.
    small = FigureResult("4.10", "Publication bandwidth per node against network size")
    small.caption = "Fig 4.10. Seeds: 1, 2."
    small.x_label, small.y_label = "network size (nodes)", "bytes per event per node"
    small.series = {
        f"{m}: {s}": [(n, _stat(k * n / 10, k * n / 9)) for n in (30.0, 50.0)]
        for m in ("synthetic", "planetlab")
        for s, k in (("mean", 1.0), ("max", 3.0))
    }
    small.paper_series = {"thesis: mean at 1,000 nodes": [(1000.0, 1320.0)]}
    nocaption = FigureResult("LBDD-8GB", "8 GB to 11 subscribers")
    nocaption.checks = [
        Check(
            "LBDD-8GB",
            "LBDD time",
            "lower",
            _stat(2900.0, 3100.0, seeds=(4, 7)),
            "s",
            paper=3020.0,
            source="LBDD paper: '3,020 s'",
        ),
        Check("LBDD-8GB", "one-seed value", "lower", _stat(5.0), "x", paper=2.59, source="x"),
    ]
    return [latency, probes, scaling, small, nocaption]


FACTS: dict[str, Any] = {
    "evaluation": "all",
    "evaluation_text": "thesis' and LBDD paper's evaluations",
    "command": "rangecast reproduce all --quick --out /tmp/x",
    "runs": 4,
    "size_text": "quick: thesis 30 nodes x 60 events, seeds 1, 2",
    "executor": "2 local processes",
    "wall_text": "1 s",
    "recomputed_text": "all agree",
    "runs_page": "figures/runs.html",
    "size": "quick",
    "size_note": "quick: its values only show that the chain works",
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, list[FigureResult]]:
    out = tmp_path_factory.mktemp("page")
    figures = _figures()
    drawn = page.draw(out, figures, {})
    context = {"LBDD-8GB": "Latency model: none. Seeds: 4, 7 (2 independent runs per point)."}
    html = page.write_page(out / "report.html", figures, drawn, {}, context, FACTS)
    return out, html.read_text(), figures


def _summary_rows(html: str) -> list[str]:
    table = html.split("<table class=summary>", 1)[1].split("</table>", 1)[0]
    return re.findall(r"<tr>(.*?)</tr>", table, flags=re.S)[1:]  # (the first: the header)


def test_every_figure_is_drawn_with_a_full_caption_naming_the_seeds(
    built: tuple[Path, str, list[FigureResult]],
) -> None:
    out, html, figures = built
    captions = re.findall(r"<figcaption>(.*?)</figcaption>", html, flags=re.S)
    assert len(captions) == len(figures)
    for f, caption in zip(figures, captions, strict=True):
        assert (out / "figures" / f"ci-fig{f.figure.replace('.', '_').lower()}.png").is_file()
        assert "seed" in caption.lower(), f.figure
        if f.caption:  # the builder's caption, whole
            assert escape(f.caption) in caption
    # Never truncated: the long caption ends as written, and the fallback names the seeds.
    assert "END-OF-CAPTION" in html and len(LONG) > 400
    assert "Seeds: 4, 7" in captions[-1]
    # The drawing's notes are in the caption too: what the markers are, which curves coincide.
    assert "never joined" in captions[0]
    assert escape("'synthetic: mean' and 'planetlab: mean' coincide") in captions[2]
    assert "coincide" not in captions[0]


def test_paper_values_are_markers_never_joined() -> None:
    for fig in _figures():
        f, drawn = plots.build(fig)
        assert f is not None and drawn.panels
        paper_artists = 0
        for ax in f.axes:
            for line in ax.get_lines():
                label = str(line.get_label())
                if line.get_gid() == "paper" or label.startswith("paper"):
                    paper_artists += 1
                    assert line.get_linestyle() == "None", (fig.figure, label)
                    assert line.get_marker() not in (None, "None", "")
            for coll in ax.collections:
                if coll.get_gid() == "paper-range":  # a stated range: one bar per x, vertical
                    for seg in coll.get_segments():
                        xs = {round(float(x), 9) for x, _ in seg}
                        ys = {round(float(y), 9) for _, y in seg}
                        assert len(xs) == 1 or len(ys) == 1
        assert paper_artists or any(
            c.get_gid() == "paper-range" for a in f.axes for c in a.collections
        )
        plots._plots().plt.close(f)


def test_nothing_is_clipped_and_tick_labels_are_plain_and_apart() -> None:
    logs = 0
    for fig in _figures():
        f, drawn = plots.build(fig)
        logs += sum(bool(p["x_log"]) for p in drawn.panels)
        f.canvas.draw()
        renderer = f.canvas.get_renderer()  # type: ignore[attr-defined]
        page = f.get_window_extent(renderer)
        for legend in f.legends:  # the legend below the panels: inside the image, whole
            box = legend.get_window_extent(renderer)
            assert page.x0 <= box.x0 and box.x1 <= page.x1, fig.figure
        for ax in f.axes:
            lo_x, hi_x = sorted(ax.get_xlim())
            lo_y, hi_y = sorted(ax.get_ylim())
            for line in ax.get_lines():  # every point, ours and the paper's, inside the axes
                for x, y in line.get_xydata():
                    assert lo_x <= x <= hi_x and lo_y <= y <= hi_y, fig.figure
            for coll in ax.collections:  # every interval's ends inside too
                for seg in getattr(coll, "get_segments", list)():
                    for x, y in seg:
                        assert lo_x <= x <= hi_x and lo_y <= y <= hi_y, fig.figure
            for axis in (ax.xaxis, ax.yaxis):
                labels = [t for t in axis.get_ticklabels() if t.get_visible() and t.get_text()]
                texts = [t.get_text() for t in labels]
                assert not any(re.search(r"\$|\d[eE][+-]?\d|\\times", t) for t in texts), texts
                boxes = sorted(
                    (t.get_window_extent(renderer) for t in labels),
                    key=lambda b: b.x0 if axis is ax.xaxis else b.y0,
                )
                for a, b in pairwise(boxes):
                    assert not a.overlaps(b), (fig.figure, texts)
        plots._plots().plt.close(f)
    assert logs  # (the log axis' ticks were among those checked)


def test_summary_lists_every_check_with_verdict_and_cause(
    built: tuple[Path, str, list[FigureResult]],
) -> None:
    _, html, figures = built
    rows = _summary_rows(html)
    checks = [c for f in figures for c in f.checks]
    assert len(rows) == len(checks)
    for row, c in zip(rows, checks, strict=True):
        assert escape(c.quantity) in row
        assert f">{escape(c.verdict)}</span>" in row
        if c.cause is not None:
            assert escape(c.cause.text) in row
            assert all(f"<code>{p}</code>" in row for p in c.cause.measured_by)
        elif c.verdict == "differs":
            assert "no measured cause" in row
        if c.undecided:
            assert "interval too wide to decide" in row
        if c.ours is not None:
            assert f"{len(c.ours.values)} seed" in row
        if c.source:  # the quoted sentence, as the cell's tooltip
            assert f'title="{escape(c.source)}"' in row
    by_q = {c.quantity: row for c, row in zip(checks, rows, strict=True)}
    # 2-3 seeds whose interval is wider than the mean: shown, and flagged.
    assert "interval wider than the mean (2 seeds)" in by_q["share of nodes below 60 B/sub"]
    assert "no interval" in by_q["one-seed value"]
    assert "differs, explained" in by_q["mean: change (LB off -> LB on)"]


def test_quick_banner_only_for_a_size_that_is_not_the_papers(tmp_path: Path) -> None:
    figures = _figures()[:1]
    quick = page.write_page(tmp_path / "q.html", figures, {}, {}, {}, FACTS).read_text()
    assert "not the papers' setting" in quick and "1,000 nodes x 10,000 events" in quick
    full = {**FACTS, "size": "full", "size_text": "full: thesis 1,000 nodes"}
    text = page.write_page(tmp_path / "f.html", figures, {}, {}, {}, full).read_text()
    assert "not the papers' setting" not in text


def test_why_paragraph_is_only_the_generated_text(tmp_path: Path) -> None:
    figures = _figures()[:2]
    why = {"4.7": "mean: change: ours -22.7% against the paper's -50.0%, 27.3 points apart."}
    html = page.write_page(tmp_path / "w.html", figures, {}, why, {}, FACTS).read_text()
    paragraphs = re.findall(r"<p class=why>(.*?)</p>", html, flags=re.S)
    assert paragraphs == [f"<b>Why ours differs.</b> {escape(why['4.7'])}"]


def test_the_received_count_is_drawn_beside_ours_not_as_it() -> None:
    """A per-node check's count at the receiving end is a second marker in its row, with its
    interval, and a legend entry of its own."""
    fig = _figures()[1]
    f, _ = plots.build(fig)
    marks = [
        line
        for ax in f.axes
        for line in ax.get_lines()
        if line.get_gid() == "ours-received" or line.get_label().startswith("ours, each node")
    ]
    assert marks, "no marker for the received count"
    xs = {round(float(x), 9) for line in marks for x in line.get_xdata()}
    assert 2.0 in xs  # the mean of 1.9 and 2.1
    legend = [t.get_text() for ax in f.axes if ax.get_legend() for t in ax.get_legend().texts]
    legend += [str(h) for ax in f.axes for h in ax.get_legend_handles_labels()[1]]
    assert any("bytes it receives" in t for t in legend)
    plots._plots().plt.close(f)
