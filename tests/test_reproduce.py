"""``rangecast reproduce``: the plans pair the runs as the report needs them, the comparison's
statistics and verdicts, bad output places refused in one line, and a whole (tiny) reproduction
that produces every figure with every recomputed value agreeing with the runs' summaries."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from typing import Any

import pytest

from rangecast.analysis.reproduce.compare import REL_TOL, Check, Stat, stat_of
from rangecast.analysis.reproduce.evaluate import LBDD_FIGURES, THESIS_FIGURES
from rangecast.analysis.reproduce.plans import FULL, QUICK, SIZES, reproduction_plan
from rangecast.cli.main import main


@pytest.mark.parametrize("size", list(SIZES.values()), ids=list(SIZES))
def test_plans_pair_the_base_run(size: Any) -> None:
    plan, members = reproduction_plan("all", size)
    assert len({s.run_id for s in plan.runs}) == len(plan.runs)
    assert [s.index for s in plan.runs] == list(range(len(plan.runs)))
    by_part = {p: [plan.runs[i] for i in idx] for p, idx in members.items()}
    base = {s.seed: s.settings for s in by_part["thesis-base"]}
    assert sorted(base) == list(size.seeds)
    # Figs 4.5-4.8 pair runs that differ in the one parameter and nothing else.
    for part, field, value in (("thesis-probe", "probe", "multicast"), ("thesis-lb", "lb", True)):
        assert sorted(s.seed for s in by_part[part]) == list(size.seeds)
        for spec in by_part[part]:
            assert spec.settings == {**base[spec.seed], field: value}
    # The scalability series: every (size, model) once, the base run among them.
    points = {
        (s.params.nodes, s.params.latency) for p in by_part if "scale" in p for s in by_part[p]
    }
    points.add((size.nodes, "synthetic"))
    assert points == {(n, m) for n in size.scale_nodes for m in size.latencies}
    assert {s.params.data_bytes for s in by_part["lbdd-8gb"]} == {size.transfer_bytes}


def test_full_is_the_papers_setup() -> None:
    assert (FULL.nodes, FULL.events) == (1000, 10_000)
    assert FULL.tree_subscribers == (100, 200, 300, 400, 500)
    assert FULL.transfer_bytes == 8 * 1024**3
    assert len(FULL.seeds) >= 3 and len(QUICK.seeds) >= 2
    thesis, _ = reproduction_plan("thesis", QUICK)
    assert thesis.scenarios == ("thesis",)
    lbdd, _ = reproduction_plan("lbdd", QUICK)
    assert lbdd.scenarios == ("lbdd",)


def test_stat_is_a_student_t_interval() -> None:
    s = Stat.of([1.0, 3.0], [1, 2])
    # mean 2, sample sd sqrt(2), n = 2: half width t(0.975, 1) * sqrt(2) / sqrt(2) = 12.706
    assert s.mean == 2.0 and s.half == pytest.approx(12.706)
    assert math.isnan(Stat.of([5.0], [1]).half)
    assert stat_of([(2, 4.0), (1, None), (3, 6.0)]) == Stat.of([4.0, 6.0], [2, 3])
    assert stat_of([(1, None)]) is None


@pytest.mark.parametrize(
    ("kind", "paper", "ours", "verdict"),
    [
        ("lower", 100.0, 100.0 * (1 + REL_TOL), "within"),
        ("lower", 100.0, 100.0 * (1 + REL_TOL) * 1.01, "outside"),
        ("lower", 100.0, 50.0, "better"),
        ("higher", 2.0, 5.0, "better"),
        ("higher", 2.0, 1.0, "outside"),
        ("match", 2.0, 2.1, "within"),
        ("match", 2.0, 3.0, "outside"),
        ("change", -0.3, -0.2, "within"),
        ("change", -0.3, -0.6, "better"),
        ("change", -0.3, 0.0, "outside"),
    ],
)
def test_verdicts(kind: str, paper: float, ours: float, verdict: str) -> None:
    check = Check("x", "q", kind, Stat.of([ours], [1]), paper=paper)
    assert check.verdict == verdict
    assert check.as_dict()["within_tolerance_or_better"] == (verdict != "outside")


def test_ranges_latencies_and_not_applicable() -> None:
    inside = Check("x", "q", "range", Stat.of([6.0], [1]), paper_range=(5.0, 9.0))
    assert inside.verdict == "within"
    below = Check("x", "q", "range", Stat.of([3.0], [1]), paper_range=(5.0, 9.0))
    assert below.verdict == "outside"
    below.extra["lower_better"] = True
    assert below.verdict == "better"
    na = Check("x", "q", "range", Stat.of([3.0], [1]), paper_range=(5, 9), not_applicable="n")
    assert na.verdict == "n/a"
    # Latencies compare in mean RTTs: 331 ms over King's 180 against 270 ms over 147 ms.
    lat = Check(
        "x", "q", "lower", Stat.of([270.0], [1]), paper=331.0, normalised=(331 / 180, 270 / 147)
    )
    assert lat.ratio == pytest.approx((270 / 147) / (331 / 180)) and lat.verdict == "within"


def test_bad_out_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a_file = tmp_path / "f"
    a_file.write_text("x")
    assert main(["reproduce", "lbdd", "--quick", "--out", str(a_file)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(a_file) in err
    full = tmp_path / "d"
    full.mkdir()
    (full / "x").write_text("x")
    assert main(["reproduce", "thesis", "--quick", "--out", str(full)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--force" in err
    assert main(["reproduce", "all", "--master", "local[1]", "--out", str(tmp_path / "n")]) == 2
    assert "--master needs --spark" in capsys.readouterr().err


def _spark_ready() -> str | None:
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed (pip install -e '.[spark]')"
    from rangecast.analysis.report.session import ensure_java

    try:
        ensure_java()
    except Exception as exc:
        return f"no Java for Spark: {exc}"
    return None


def _check_reproduction(out: Path, figures: tuple[str, ...]) -> None:
    doc = json.loads((out / "reproduction.json").read_text())
    assert doc["problems"] == [] and doc["failed"] == 0
    # Every figure was produced, with its images on disk and on the page.
    assert [f["figure"] for f in doc["figures"]] == list(figures)
    html = (out / "report.html").read_text()
    for f in doc["figures"]:
        assert f["images"], f["figure"]
        for image in f["images"]:
            assert (out / image).is_file() and image in html
        assert f"id='fig-{f['figure']}'" in html and "Why ours differs" in html
        for c in f["checks"]:
            assert c["verdict"] in ("within", "better", "outside", "n/a")
    # Every recomputed value agrees with the run summaries (the report's check) ...
    assert doc["recomputed_mismatches"] == 0 and doc["recomputed_runs"] == doc["runs"]
    # ... and the page's means are the means of the runs' own summaries (sweep.json).
    rows = json.loads((out / "sweep.json").read_text())["rows"]
    if "4.3" in figures:
        base = [r for r in rows if "_thesis-base_" in r["run"]]
        mean = sum(r["delivery_latency_mean_ms"] for r in base) / len(base)
        fig = next(f for f in doc["figures"] if f["figure"] == "4.3")
        assert fig["checks"][0]["ours"]["mean"] == pytest.approx(mean, rel=1e-9)
        assert fig["checks"][0]["ours"]["n"] == len(base) >= 2


def test_quick_reproduction_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``rangecast reproduce all --quick``: every figure produced, every recomputed figure equal
    to its run's summary (what CI runs; the full size is the papers')."""
    reason = _spark_ready()
    if reason is not None:
        pytest.skip(reason)
    out = tmp_path / "q"
    assert main(["reproduce", "all", "--quick", "--spark", "--quiet", "--out", str(out)]) == 0
    assert "page:" in capsys.readouterr().out
    _check_reproduction(out, THESIS_FIGURES + LBDD_FIGURES)
