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

import rangecast.analysis.report.paper as paper
from rangecast.analysis.reproduce.causes import CAUSE_EXPLAINERS, attach_causes, explain
from rangecast.analysis.reproduce.command import seeds_per_point
from rangecast.analysis.reproduce.compare import (
    REL_TOL,
    VERDICTS,
    Cause,
    Check,
    Stat,
    figure_verdict,
    stat_of,
)
from rangecast.analysis.reproduce.evaluate import (
    LBDD_FIGURES,
    THESIS_FIGURES,
    FigureResult,
    RunRecord,
    pair_figures,
    scaling_figures,
    share_of_mean,
)
from rangecast.analysis.reproduce.notes import describe
from rangecast.analysis.reproduce.plans import (
    CAUSE_PARTS,
    FULL,
    QUICK,
    SIZES,
    CausePart,
    only_parts,
    register_cause_part,
    reproduction_plan,
    variant,
)
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
    assert len(FULL.seeds) >= 5 and len(FULL.scale_seeds) >= 5 and len(QUICK.seeds) >= 2
    assert FULL.scale_nodes == (1000, 1740, 3000, 4000, 5000)
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
        ("lower", 100.0, 100.0 * (1 + REL_TOL), "reproduced"),
        ("lower", 100.0, 100.0 * (1 + REL_TOL) * 1.01, "differs"),
        # Better than the paper beyond the tolerance is not a pass: two-sided.
        ("lower", 100.0, 50.0, "differs"),
        ("higher", 2.0, 5.0, "differs"),
        ("higher", 2.0, 1.0, "differs"),
        ("higher", 2.0, 2.4, "reproduced"),
        ("match", 2.0, 2.1, "reproduced"),
        ("match", 2.0, 3.0, "differs"),
        ("change", -0.3, -0.2, "reproduced"),
        ("change", -0.3, -0.6, "differs"),
        ("change", -0.3, 0.0, "differs"),
        ("info", 100.0, 5.0, "n/a"),
    ],
)
def test_verdicts_are_two_sided(kind: str, paper: float, ours: float, verdict: str) -> None:
    check = Check("x", "q", kind, Stat.of([ours, ours], [1, 2]), paper=paper)
    assert check.verdict == verdict
    d = check.as_dict()
    assert d["verdict"] == verdict and d["reproduced"] == (verdict == "reproduced")
    assert "within_tolerance_or_better" not in d
    # A measured cause turns "differs" into "differs, explained", nothing else.
    check.cause = Cause("ours is measured", ("thesis-x",))
    assert check.verdict == ("differs, explained" if verdict == "differs" else verdict)
    assert check.as_dict()["cause"] == {"text": "ours is measured", "measured_by": ["thesis-x"]}


def test_figure_verdict_and_undecided() -> None:
    ok = Check("x", "a", "lower", Stat.of([100.0, 101.0, 99.0], [1, 2, 3]), paper=100.0)
    bad = Check("x", "b", "lower", Stat.of([300.0, 301.0], [1, 2]), paper=100.0)
    info = Check("x", "c", "info", Stat.of([3.0], [1]), paper=100.0)
    assert figure_verdict([ok, info]) == "reproduced"
    assert figure_verdict([ok, bad]) == "differs"
    bad.cause = Cause("t", ("p",))
    assert figure_verdict([ok, bad]) == "differs, explained"
    assert figure_verdict([info]) == "n/a" and set(VERDICTS) >= {figure_verdict([ok])}
    assert not ok.undecided and not info.undecided
    # An interval across a tolerance bound (125 here) cannot decide; nor can one seed.
    wide = Check("x", "d", "lower", Stat.of([100.0, 150.0], [1, 2]), paper=100.0)
    assert wide.undecided and "too wide to decide" in wide.undecided_note
    assert Check("x", "e", "lower", Stat.of([100.0], [1]), paper=100.0).undecided


def test_shares_relative_to_the_mean() -> None:
    # mean 10: 1.397x the mean is 13.97; four of five values at or below it.
    assert share_of_mean([5.0, 8.0, 10.0, 13.0, 14.0], 1.397) == pytest.approx(0.8)
    assert share_of_mean([1.0, 1.0, 1.0, 9.0], 2.0, above=True) == pytest.approx(0.25)
    assert share_of_mean([], 1.0) is None
    # Fig 4.2's factors are the thesis' thresholds over its mean.
    f42 = [s for s in paper.SHARES if s.figure == "4.2"]
    assert [round(s.factor, 3) for s in f42] == [1.397, 4.19]


def test_ranges_latencies_and_not_applicable() -> None:
    inside = Check("x", "q", "range", Stat.of([6.0], [1]), paper_range=(5.0, 9.0))
    assert inside.verdict == "reproduced"
    below = Check("x", "q", "range", Stat.of([3.0], [1]), paper_range=(5.0, 9.0))
    assert below.verdict == "differs"
    na = Check("x", "q", "range", Stat.of([3.0], [1]), paper_range=(5, 9), not_applicable="n")
    assert na.verdict == "n/a"
    # Latencies compare in mean RTTs: 331 ms over Table 4.5's 175 against 270 ms over 147 ms.
    lat = Check(
        "x", "q", "lower", Stat.of([270.0], [1]), paper=331.0, normalised=(331 / 175, 270 / 147)
    )
    assert lat.ratio == pytest.approx((270 / 147) / (331 / 175)) and lat.verdict == "reproduced"
    assert paper.THESIS_RUN_RTT_MS == 175.0


def test_dry_run_full_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``reproduce thesis --dry-run``: 5,000-node runs for Figs 4.9/4.10 under both models, at
    least five seeds per point, an estimated time; nothing written."""
    out = tmp_path / "never"
    assert main(["reproduce", "thesis", "--dry-run", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert not out.exists() and list(tmp_path.iterdir()) == []
    rows = [line.split() for line in text.splitlines() if line.startswith("r0")]
    at5000 = {(r[1], r[5]) for r in rows if r[3] == "5,000"}
    assert at5000 == {("thesis-scale-synthetic", "synthetic"), ("thesis-scale-planetlab",
                                                                "planetlab")}  # fmt: skip
    assert {r[3] for r in rows} >= {"1,000", "1,740", "3,000", "4,000", "5,000"}
    assert "estimated wall time:" in text
    plan, _ = reproduction_plan("all", FULL)
    assert min(seeds_per_point(plan.runs).values()) >= 5
    assert main(["reproduce", "all", "--quick", "--dry-run"]) == 0
    assert "quick: tiny networks" in capsys.readouterr().out


def test_parts_keep_their_run_names(capsys: pytest.CaptureFixture[str]) -> None:
    """``--parts``: the chosen parts' runs, under the names the whole plan gives them (so a
    later ``--resume`` of the whole plan finds them), indexed as a sweep wants."""
    plan, members = reproduction_plan("all", QUICK)
    cut, kept = only_parts(plan, members, ["thesis-lb", "lbdd-trees"])
    assert list(kept) == ["thesis-lb", "lbdd-trees"]
    assert [r.index for r in cut.runs] == list(range(len(cut.runs)))
    whole = {plan.runs[i].run_id for p in ("thesis-lb", "lbdd-trees") for i in members[p]}
    assert {r.run_id for r in cut.runs} == whole
    assert all(cut.runs[i].run_id.split("_")[1] == p for p, idx in kept.items() for i in idx)
    with pytest.raises(ValueError, match="nope"):
        only_parts(plan, members, ["nope"])
    assert main(["reproduce", "thesis", "--dry-run", "--parts", "thesis-base,nope"]) == 2
    assert "--parts nope: not a part" in capsys.readouterr().err


def test_dry_run_with_resume_counts_what_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import dataclasses

    import rangecast.analysis.reproduce.command as command

    plan, _ = reproduction_plan("thesis", QUICK)
    done = plan.runs[0]
    (tmp_path / "runs" / done.run_id).mkdir(parents=True)
    doc = {"code": "c0ffee", "params": dataclasses.asdict(done.params), "summary": {}}
    (tmp_path / "runs" / done.run_id / "run.json").write_text(json.dumps(doc, default=str))
    monkeypatch.setattr(command, "finished_runs", lambda plan, out: {
        s.index: {} for s in plan.runs if (out / "runs" / s.run_id / "run.json").exists()
    })  # fmt: skip
    args = ["reproduce", "thesis", "--quick", "--dry-run", "--resume", "--out", str(tmp_path)]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert f"finished already in {tmp_path}: 1 of {len(plan.runs)} runs" in text
    assert [line.split()[6] for line in text.splitlines() if line.startswith(done.run_id)] == [
        "finished"
    ]


def test_cause_parts_join_the_plan() -> None:
    part = CausePart(
        "thesis-test-cause", ("4.7",), "test", variant("thesis-test-cause", {"lb": True})
    )
    register_cause_part(part)
    try:
        plan, members = reproduction_plan("thesis", QUICK)
        assert len(members["thesis-test-cause"]) == len(QUICK.seeds)
        assert all(plan.runs[i].settings["lb"] is True for i in members["thesis-test-cause"])
        with pytest.raises(ValueError):
            register_cause_part(CausePart("thesis_bad", (), "", part.build))
    finally:
        CAUSE_PARTS.pop("thesis-test-cause")


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


def _within(c: dict[str, Any]) -> bool:
    """A check's tolerance, recomputed from its JSON alone (independent of compare.py)."""
    ours = c["normalised_by_rtt"]["ours"] if c["normalised_by_rtt"] else c["ours"]["mean"]
    paper_v = c["normalised_by_rtt"]["paper"] if c["normalised_by_rtt"] else c["paper"]
    tol = c["tolerance"]
    if c["kind"] == "range":
        lo, hi = c["paper_range"]
        return bool(lo <= ours <= hi)
    if c["kind"] == "trend":
        return True  # the direction, computed by the builder
    if c["kind"] == "change":
        return bool(abs(ours - paper_v) <= tol["absolute"])
    r = ours / paper_v
    return bool(1 / (1 + tol["relative"]) <= r <= 1 + tol["relative"])


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
        assert f"id='fig-{f['figure']}'" in html
        assert f["verdict"] in VERDICTS and f["caption"]
        for c in f["checks"]:
            assert c["verdict"] in VERDICTS
            # Nothing outside its tolerance passes.
            if c["verdict"] == "reproduced":
                assert _within(c), c
            if c["kind"] == "info":
                assert c["verdict"] == "n/a"
            # Every "differs, explained" names parts that ran in this reproduction.
            if c["verdict"] == "differs, explained":
                assert c["cause"]["measured_by"]
                assert set(c["cause"]["measured_by"]) <= set(doc["parts"]), c
            assert "within_tolerance_or_better" not in c
    assert doc["size"] == "quick" and "only show" in doc["size_note"]
    assert doc["our_parameters"] and all(p["paper_says"] for p in doc["our_parameters"])
    # Every recomputed value agrees with the run summaries (the report's check) ...
    assert doc["recomputed_mismatches"] == 0 and doc["recomputed_runs"] == doc["runs"]
    # ... and the page's means are the means of the runs' own summaries (sweep.json).
    rows = json.loads((out / "sweep.json").read_text())["rows"]
    if "4.3" in figures:
        base = [r for r in rows if "_thesis-base_" in r["run"]]
        mean = sum(r["delivery_latency_mean_ms"] for r in base) / len(base)
        fig = next(f for f in doc["figures"] if f["figure"] == "4.3")
        first = fig["checks"][0]
        assert first["quantity"].startswith("delivery latency, mean")
        assert first["ours"]["mean"] == pytest.approx(mean, rel=1e-9)
        assert first["ours"]["n"] == len(base) >= 2


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


def _rec(part: str, nodes: int, seed: int, latency_ms: float, rtt: float) -> RunRecord:
    values = {
        "delivery_latency_ms": {"mean": latency_ms, "max": 10 * latency_ms},
        "publish_bytes_per_event_per_node": {"mean": 100.0, "max": 500.0 + nodes / 10},
    }
    return RunRecord(
        f"d{part}{nodes}{seed}", part, seed, {"nodes": nodes}, values, "synthetic", rtt
    )


def test_fig49_growth_is_1000_to_5000_in_rtts() -> None:
    runs = [_rec("thesis-base", 1000, s, 300.0 + s, 150.0) for s in (1, 2, 3)]
    runs += [_rec("thesis-scale-synthetic", 5000, s, 390.0 + s, 150.0) for s in (1, 2, 3)]
    f9, _ = scaling_figures(runs)
    growth = next(c for c in f9.checks if c.quantity.startswith("mean latency growth"))
    # The thesis: (430 / 176) / (330 / 175), Table 4.5's RTTs per size.
    assert growth.paper == pytest.approx((430 / 176) / (330 / 175))
    assert growth.ours is not None and growth.ours.mean == pytest.approx(1.3, abs=0.01)
    assert growth.verdict == "reproduced"
    # Without the 5,000-node point the check is n/a and names the missing size.
    f9, _ = scaling_figures([*runs[:3], _rec("thesis-scale-synthetic", 1740, 1, 320, 150)])
    growth = next(c for c in f9.checks if c.quantity.startswith("mean latency growth"))
    assert growth.verdict == "n/a" and "5,000-node" in growth.not_applicable


def test_causes_name_parts_that_ran() -> None:
    runs = [_rec("thesis-base", 1000, s, 300.0, 150.0) for s in (1, 2)]
    fig = FigureResult(
        "9.9", "t", [Check("9.9", "q", "lower", Stat.of([3.0, 3.1], [1, 2]), paper=1.0)]
    )

    def explainer(f: FigureResult, by_part: Any) -> None:
        n = len(by_part["thesis-base"])
        explain(f.checks[0], f"{n} base runs measure it", "thesis-base")

    CAUSE_EXPLAINERS["9.9"] = [explainer]
    try:
        attach_causes([fig], runs)
        assert fig.checks[0].verdict == "differs, explained"
        assert fig.checks[0].cause == Cause("2 base runs measure it", ("thesis-base",))
        # A cause naming a part that did not run is dropped: plainly "differs".
        CAUSE_EXPLAINERS["9.9"] = [lambda f, _: explain(f.checks[0], "x", "thesis-nope")]
        fig.checks[0].cause = None
        attach_causes([fig], runs)
        assert fig.checks[0].verdict == "differs"
    finally:
        CAUSE_EXPLAINERS.pop("9.9")


def test_why_text_is_generated_from_the_numbers() -> None:
    high = Check("x", "q", "lower", Stat.of([36.7, 36.7], [1, 2]), "B", paper=14.33)
    assert "ours 36.7 B is 2.56x the paper's 14.3 B" in describe(high)
    low = Check("x", "q", "higher", Stat.of([1.0, 1.0], [1, 2]), "x", paper=2.0)
    assert "ours 1x is 2.00x lower than the paper's 2x" in describe(low)
    saving = Check("x", "s", "change", Stat.of([-0.2, -0.2], [1, 2]), "relative", paper=-0.5)
    assert "ours -20.0% against the paper's -50.0%, 30.0 points apart" in describe(saving)


def _probe_rec(part: str, seed: int, level: int, probe: str, ratio: float) -> RunRecord:
    values = {"probe_bytes_per_event_per_node": {"mean": 10.0, "max": 10.0 * ratio}}
    params = {"nodes": 1000, "overlay": {"min_level": level, "probe": probe}}
    return RunRecord(f"d{part}{level}{probe}{seed}", part, seed, params, values, "synthetic", 150)


def test_fig46_busiest_over_mean_is_explained_by_the_min_level_runs() -> None:
    from rangecast.analysis.reproduce.plans import PROBE_LEVELS_PART

    ratios = {("unicast", 3): 23.0, ("unicast", 5): 11.5, ("unicast", 7): 8.5}
    ratios |= {("multicast", 3): 19.0, ("multicast", 5): 15.0, ("multicast", 7): 13.0}
    runs = [_probe_rec("thesis-base", s, 3, "unicast", ratios["unicast", 3]) for s in (1, 2)]
    runs += [_probe_rec("thesis-probe", s, 3, "multicast", ratios["multicast", 3]) for s in (1, 2)]
    runs += [
        _probe_rec(PROBE_LEVELS_PART, s, lv, pr, ratios[pr, lv])
        for pr in ("unicast", "multicast")
        for lv in (5, 7)
        for s in (1, 2)
    ]
    fig = FigureResult(
        "4.6",
        "t",
        [
            Check(
                "4.6", f"busiest node / mean ({pr})", "lower", Stat.of([r, r], [1, 2]), "x", paper=p
            )
            for pr, r, p in (("unicast", 23.0, 8.24), ("multicast", 19.0, 8.95))
        ],
    )
    attach_causes([fig], runs)
    uni, multi = fig.checks
    assert uni.verdict == "differs, explained"
    assert uni.cause is not None and uni.cause.measured_by == ("thesis-base", PROBE_LEVELS_PART)
    assert "23.0, 11.5, 8.5 times the mean" in uni.cause.text
    # 13.0 at level 7 is still 1.45x the thesis' 8.95, which no level reaches: no cause.
    assert multi.verdict == "differs" and multi.cause is None
    assert "none comes within" in multi.extra["measured"]


def _ends_rec(part: str, seed: int, sent_top: float, received_top: float) -> RunRecord:
    """A 100-node run whose busiest node sends ``sent_top`` and receives ``received_top``
    probe bytes per event, every other node 1 each way."""
    sent, got = [1.0] * 99 + [sent_top], [1.0] * 99 + [received_top]
    values = {
        name: {"mean": sum(v) / len(v), "max": max(v)}
        for name, v in (
            ("probe_bytes_per_event_per_node", sent),
            ("probe_bytes_received_per_event_per_node", got),
        )
    }
    node_values = {
        "probe_bytes_per_event_per_node": sent,
        "probe_bytes_received_per_event_per_node": got,
    }
    return RunRecord(f"d{part}{seed}", part, seed, {"nodes": 100}, values, "synthetic", 150.0,
                     node_values)  # fmt: skip


def test_received_bytes_explain_a_busiest_node_only_within_tolerance() -> None:
    """The thesis does not say which end of a message a node's bandwidth counts: charging the
    receiver explains a differing check when that brings ours within the tolerance, and only
    then; the count is kept beside the verdict either way."""
    base = [_ends_rec("thesis-base", s, 20.0 + s / 10, 9.0 + s / 10) for s in (1, 2, 3)]
    multi = [_ends_rec("thesis-probe", s, 18.0 + s / 10, 3.0 + s / 10) for s in (1, 2, 3)]
    figures = pair_figures(base, multi, "probe")
    attach_causes(figures, [*base, *multi])
    f46 = next(f for f in figures if f.figure == "4.6")
    uni = next(c for c in f46.checks if c.quantity == "busiest node / mean (unicast)")
    mc = next(c for c in f46.checks if c.quantity == "busiest node / mean (multicast)")
    assert uni.ours is not None and uni.ours.mean == pytest.approx(20.2 / 1.192, rel=1e-3)
    assert uni.received is not None and uni.received.mean == pytest.approx(9.2 / 1.082, rel=1e-3)
    assert uni.verdict == "differs, explained"
    assert uni.cause is not None and uni.cause.measured_by == ("thesis-base", "thesis-probe")
    assert f"{uni.received.mean:.2f}" in uni.cause.text and "8.24x" in uni.cause.text
    # Received, the multicast busiest node is 2.9x the mean: no closer to the thesis' 8.95x.
    assert mc.verdict == "differs" and mc.cause is None
    assert mc.as_dict()["ours_received_bytes"]["mean"] == pytest.approx(3.2 / 1.022, rel=1e-3)
