"""The report's systems comparison: Spark recomputes a tiny ``sim compare --out`` (the thesis
and two broker systems) from the logs, equal to every run's summary and to compare.json, and
draws the comparison page."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from rangecast.analysis.report.build import render
from rangecast.analysis.report.session import spark_session
from rangecast.analysis.report.spark_job import load_runs
from rangecast.analysis.report.systems_job import COLUMNS, LOAD, groups, recompute
from rangecast.sim.compare import COMPARE_FILE, compare

pytest.importorskip("pyspark")
pytest.importorskip("matplotlib")

SYSTEMS = ("thesis", "siena", "octopia")


@pytest.fixture(scope="module")
def spark() -> Iterator[object]:
    session = spark_session("local[2]")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cmp") / "c"
    assert compare(SYSTEMS, nodes=40, events=60, seed=1, out_dir=out).succeeded()
    return out


def test_recomputed_comparison_equals_the_runs(
    spark: object, compared: Path, tmp_path: Path
) -> None:
    runs = load_runs([compared])  # a compare directory stands for its systems' logs
    assert [r.kind for r in runs] == list(SYSTEMS)
    assert [[r.kind for r in g] for g in groups(runs)] == [list(SYSTEMS)]
    figs = recompute(spark, runs)  # type: ignore[arg-type]
    table = json.loads((compared / COMPARE_FILE).read_text())["rows"]
    for f, row in zip(figs, table, strict=True):
        assert f.mismatches == [], f.mismatches
        rec = f.recomputed
        for col in COLUMNS:
            want = row[col]
            assert rec["comparison"][col] == (None if want is None else pytest.approx(want)), col
        assert rec["comparison"]["traffic_ms_per_event"] > 0  # from the messages' delay_ms
        assert rec["comparison"]["inactive"] == row["inactive"]
        brokers = f.run.summary.get("brokers", 40)  # (every thesis node counts)
        assert len(f.node_values[LOAD]) == brokers
        if f.run.kind != "thesis":
            s = f.run.summary
            for key in ("setup_messages", "ad_messages", "missed", "events", "brokers"):
                assert rec[key] == s[key], key
            for key in ("messages_per_event", "publications_per_event", "load_gini"):
                assert rec[key] == pytest.approx(s[key], rel=1e-12), key
            assert rec["delivery_latency_ms"] == pytest.approx(s["delivery_latency_ms"])
    report, html = render(figs, tmp_path / "png", tmp_path / "report.html", {"version": "x"})
    assert len(report.systems) == 1 and len(report.systems[0].rows) == 3
    shown = [g for g in report.figures if g.figure == "systems"]
    assert len(shown) == 2 and all(g.path.is_file() for g in shown)
    cdf = shown[0].data[0]["lines"]
    assert [ln["label"] for ln in cdf] == list(SYSTEMS)
    assert html is not None and "Systems compared" in html.read_text()
    # OctopiA on the thesis workload: every CIV names every cluster, and the page says so.
    assert "octopia *" in report.systems[0].rows[2][0]
    assert "its mechanism did not act" in report.systems[0].note


def test_identical_series_are_drawn_once_and_said() -> None:
    from rangecast.analysis.report.systems import identical

    merged, said = identical([("siena", [1, 2]), ("padres", [1, 2]), ("kyra", [1, 3])])
    assert merged == [("siena = padres (identical)", [1, 2]), ("kyra", [1, 3])]
    assert said == " Identical, so drawn as one line: siena and padres."
    assert identical([("a", [1])]) == ([("a", [1])], "")


def test_a_workload_over_seeds_gets_a_table_of_means_and_intervals(
    spark: object, compared: Path, tmp_path: Path
) -> None:
    again = tmp_path / "seed2"
    assert compare(SYSTEMS, nodes=40, events=60, seed=2, out_dir=again).succeeded()
    runs = load_runs([compared, again])
    figs = recompute(spark, runs)  # type: ignore[arg-type]
    report, _ = render(figs, tmp_path / "png", tmp_path / "report.html", {"version": "x"})
    titles = [t.title for t in report.systems]
    assert len(titles) == 3 and titles[2].startswith("Systems compared over seeds 1, 2:")
    spread = report.systems[2]
    assert [r[0].split(" (n=")[0] for r in spread.rows] == list(SYSTEMS)
    siena = spread.data[1]
    assert siena["seeds"] == 2 and len(siena["messages_per_event"]) == 2
    assert " ± " in spread.rows[1][1]  # msgs/event: mean ± half width


def test_the_runs_table_shows_no_setting_a_run_does_not_have(compared: Path) -> None:
    """Issue 30 item 3: the runs table listed every parameter that differed across kinds on
    every row (a broker's tree arity on the thesis row, the overlay's on each broker's),
    pushing the columns that matter off screen; only differences within a kind are shown."""
    from rangecast.analysis.report.build import run_columns
    from rangecast.analysis.report.spark_job import RunFigures

    rows = run_columns([RunFigures(r) for r in load_runs([compared])])
    # One run of each kind: the kind tells them apart, nothing else needs saying.
    assert rows and all(row["other settings"] == "" for row in rows)
    assert len({row["kind"] for row in rows}) == len(rows)
