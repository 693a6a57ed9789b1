"""The report's figures and pages, drawn in memory (no Spark): average and maximum on one y
axis, one network size said on the figure, log axes labelled as log, legend text never
repeated, plain tick labels; pages from autoescaped Jinja2 templates shipped as package data."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("matplotlib")

from rangecast.analysis.report import plots
from rangecast.analysis.report.html_page import write_html
from rangecast.analysis.report.model import Figure, Report, Row, Table

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """The matplotlib figures ``plots`` draws, kept open for the test to read."""
    figs: list[Any] = []
    read = plots.figure_data

    def keep(fig: Any) -> list[dict[str, Any]]:
        fig.canvas.draw()
        figs.append(
            {
                "axes": list(fig.axes),
                "legend": [t.get_text() for lg in fig.legends for t in lg.get_texts()],
                "texts": [t.get_text() for ax in fig.axes for t in ax.texts],
            }
        )
        return read(fig)

    monkeypatch.setattr(plots, "figure_data", keep)
    yield figs


def _scaling(tmp_path: Path, avg: list[plots.Line], peak: list[plots.Line]) -> plots.Drawn:
    return plots.scaling(
        tmp_path / "s.png",
        "Fig 4.10: bandwidth - test",
        "bytes per event per node",
        avg,
        peak,
        paper_avg=[plots.Line("thesis: average at 1,000 nodes", [(1000, 1320.0)])],
    )


def test_average_and_maximum_share_one_axis(tmp_path: Path, drawn: list[Any]) -> None:
    avg = [plots.Line("synthetic latencies", [(30, 280.0), (50, 200.0)])]
    peak = [plots.Line("synthetic latencies", [(30, 700.0), (50, 770.0)])]
    data = _scaling(tmp_path, avg, peak).data
    assert len(data) == 1  # one axes: no second scale for the maxima
    (ax,) = data
    assert ax["ylabel"] == "bytes per event per node"
    # The thesis' 1,320 B average sits above our 770 B maximum, as the numbers say.
    top = {ln["label"]: max(y for y in ln["y"] if y is not None) for ln in ax["lines"]}
    assert top["thesis: average at 1,000 nodes"] > top["_synthetic latencies: maximum"]
    # Sizes 30..1,000 are far apart: a log axis, and its label says so.
    assert ax["xscale"] == "log" and "log scale" in ax["xlabel"]
    (fig,) = drawn
    legend = fig["legend"]
    assert len(legend) == len(set(legend))
    # The setting is named once, the statistics once each: no "X: average", "X: maximum".
    assert legend.count("synthetic latencies") == 1
    assert not any(t.endswith((": average", ": maximum")) for t in legend)
    assert fig["texts"] == []  # several sizes: no "one size" note


def test_one_network_size_is_said_and_drawn_as_points(tmp_path: Path, drawn: list[Any]) -> None:
    avg = [
        plots.Line("unicast probes", [(200, 250.0)]),
        plots.Line("multicast probes", [(200, 180.0)]),
    ]
    peak = [
        plots.Line("unicast probes", [(200, 700.0)]),
        plots.Line("multicast probes", [(200, 600.0)]),
    ]
    (ax,) = _scaling(tmp_path, avg, peak).data
    (fig,) = drawn
    assert any("one network size only (200 nodes)" in t for t in fig["texts"])
    for line in fig["axes"][0].get_lines():
        if str(line.get_label()).startswith("_"):  # ours: a single point each, no line
            assert line.get_linestyle() == "None"
    assert ax["xlabel"].startswith("network size")


def test_distribution_legend_names_each_series_once(tmp_path: Path, drawn: list[Any]) -> None:
    plots.distribution(
        tmp_path / "d.png",
        "Fig 4.4: bandwidth - test",
        "bytes per event",
        [plots.Dist.of_values("ours (5 nodes)", [10.0, 20.0, 20.0, 40.0, 900.0])],
        counted="nodes",
        unit=" B",
        curves=[plots.Curve("thesis, stated points", [(1600.0, 70.0), (3000.0, 90.0)])],
        vlines=[plots.VLine(1320.0, "thesis mean 1320 B")],
        log_panel=True,
    )
    (fig,) = drawn
    legend = fig["legend"]
    assert len(legend) == len(set(legend)), legend
    assert legend.count("ours (5 nodes)") == 1
    assert not any("cumulative" in t for t in legend)
    # Every log axis says so in its label.
    for ax in fig["axes"]:
        if ax.get_xscale() == "log":
            assert "log scale" in ax.get_xlabel()


def test_rank_tick_labels_are_plain(tmp_path: Path, drawn: list[Any]) -> None:
    plots.rank(
        tmp_path / "r.png",
        "Per-node load - test",
        "messages",
        [("a", [120_000.0 + i for i in range(50)]), ("b", [100_000.0 + i for i in range(50)])],
    )
    (fig,) = drawn
    for ax in fig["axes"]:
        texts = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
        assert texts and not any(re.search(r"\d[eE][+-]?\d|\\times", t) for t in texts), texts
        assert ax.yaxis.get_offset_text().get_text() == ""


def test_reproduce_log_axes_are_labelled_and_ratios_plain() -> None:
    from rangecast.analysis.reproduce import plots as rplots
    from rangecast.analysis.reproduce.compare import Check, Stat
    from rangecast.analysis.reproduce.evaluate import FigureResult

    fig = FigureResult("4.9", "latency against size", x_label="network size (nodes)")
    fig.series = {
        "synthetic: mean": [
            (30, Stat.of([1.0001, 1.0002], [1, 2])),
            (5000, Stat.of([1.0003, 1.0004], [1, 2])),
        ]
    }
    fig.checks = [
        Check("4.9", "ratio 30 -> 5,000", "higher", Stat.of([1.00011, 1.00012], [1, 2]), "x",
              paper=1.0001),
    ]  # fmt: skip
    f, drawn = rplots.build(fig)
    assert f is not None
    f.canvas.draw()
    for panel, ax in zip(drawn.panels, f.axes, strict=True):
        label = panel.get("x_label") or ""
        if panel["x_log"]:
            assert "log scale" in ax.get_xlabel(), label
        for axis in (ax.xaxis, ax.yaxis):
            texts = [t.get_text() for t in axis.get_ticklabels() if t.get_text()]
            assert not any(re.search(r"\d[eE][+-]?\d|\\times", t) for t in texts), texts
            assert axis.get_offset_text().get_text() == ""
    rplots._plots().plt.close(f)


def test_report_page_is_an_autoescaped_template(tmp_path: Path) -> None:
    png = tmp_path / "f.png"
    png.write_bytes(b"")
    report = Report(
        [],
        tables=[
            Table(
                "Figures <4.1>",
                [Row("4.1", "mean <b>", 331.0, 300.0, "ms", source="'quoted' & said")],
                "a note",
                "Not the thesis' setting (sim.comparable).",
            )
        ],
        figures=[Figure("4.1", "t", png, [], "caption with <script>")],
    )
    html = write_html(
        report, tmp_path / "r.html", {"version": "3.5", "master": "local", "java": "17"}
    )
    text = html.read_text()
    assert "<script>" not in text and "&lt;script&gt;" in text
    assert "mean &lt;b&gt;" in text and "Figures &lt;4.1&gt;" in text
    assert "Not the thesis&#39; setting (sim.comparable)." in text
    assert "src='f.png'" in text
    assert "0.906" in text  # the ratio, from the numbers


def test_templates_ship_as_package_data() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    data = config["tool"]["setuptools"]["package-data"]
    assert "jinja2>=3.1" in config["project"]["dependencies"]
    for package, folder in (
        ("rangecast.analysis.report", "analysis/report"),
        ("rangecast.analysis.reproduce", "analysis/reproduce"),
    ):
        templates = sorted((ROOT / folder / "templates").glob("*.html.j2"))
        assert templates, folder
        for t in templates:
            assert any(t.match(f"{folder}/{glob}") for glob in data[package]), t
