"""Sweeps (``rangecast sim sweep``): plans are checked strictly, runs give one table whatever
executes them, a failing run is reported and the others kept."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import math
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rangecast.analysis.sweep import PlanError, load_plan, parse_plan, run_sweep
from rangecast.analysis.sweep.plan import shipped_plans
from rangecast.analysis.sweep.runs import recover
from rangecast.analysis.sweep.table import WALL_COLUMNS
from rangecast.cli.main import main
from rangecast.sim.latency import latency_model

#: sim/data/README.md: the shipped matrix's checksum, as published with its provenance.
PLANETLAB_SHA256 = "dd7fd6bb6917c55590e547d7c00a41f93175d4bda68ef0c81c8f372086165afc"


def _plan_file(tmp_path: Path, text: str, name: str = "plan.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _without_wall(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k not in WALL_COLUMNS} for r in rows]


# ---------------------------------------------------------------------------------------- plans


def test_shipped_plans() -> None:
    assert {"scalability", "smoke"} <= set(shipped_plans())
    plan = load_plan("scalability")
    assert plan.name == "scalability"
    assert [(r.params.nodes, r.params.latency) for r in plan.runs] == [
        (n, lat) for n in (1000, 1740, 3000, 4000, 5000) for lat in ("synthetic", "planetlab")
    ]
    assert all(r.params.events == 10_000 and r.seed == 1 for r in plan.runs)
    assert load_plan("smoke.toml").name == "smoke"


def test_smoke_plan_runs() -> None:
    plan = load_plan("smoke")
    assert [r.run_id for r in plan.runs] == [
        "r000_nodes-60_latency-synthetic_seed-1",
        "r001_nodes-60_latency-planetlab_seed-1",
        "r002_nodes-120_latency-synthetic_seed-1",
        "r003_nodes-120_latency-planetlab_seed-1",
    ]
    assert plan.runs[1].label == "nodes=60 latency=planetlab seed=1"
    assert plan.runs[1].settings == {"events": 200, "nodes": 60, "latency": "planetlab"}


def test_plan_by_path_and_defaults(tmp_path: Path) -> None:
    path = _plan_file(tmp_path, "[base]\nnodes = 30\nprobe = 'multicast'\nlb = true\n", "mine.toml")
    plan = load_plan(str(path))
    assert plan.name == "mine" and plan.scenario == "thesis" and plan.seeds == (1,)
    (run,) = plan.runs
    assert run.params.nodes == 30 and run.params.lb and run.params.overlay.probe == "multicast"
    assert run.params.events == 10_000  # ThesisParams' default


def test_relative_paths_are_relative_to_the_plan(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "tiny.txt").write_text("0 10 20\n10 0 30\n20 30 0\n")
    path = _plan_file(tmp_path, "[grid]\nlatency = ['synthetic', 'data/tiny.txt']\n")
    plan = load_plan(str(path))
    assert plan.runs[1].params.latency == str(tmp_path / "data" / "tiny.txt")
    assert plan.runs[1].settings["latency"] == "data/tiny.txt"  # the table shows the plan's text
    assert plan.runs[1].run_id == "r001_latency-tiny_seed-1"


def test_planetlab_is_shipped() -> None:
    model = latency_model("planetlab", 1)
    assert model.name == "matrix:planetlab490_rtt_ms_slice1.txt"
    assert model.hosts == 490
    assert abs(model.mean_rtt_ms() - 146.84) < 0.01
    shipped = Path(__file__).resolve().parents[1] / "sim" / "data" / model.name.split(":")[1]
    assert hashlib.sha256(shipped.read_bytes()).hexdigest() == PLANETLAB_SHA256


BAD_PLANS = [
    ("nmae = 'x'\n", "unknown key 'nmae'"),
    ("[base]\nnodez = 5\n", "[base] nodez: unknown parameter"),
    ("[base]\nnodes = 'many'\n", "[base] nodes: expected an integer, got 'many'"),
    ("[base]\nnodes = true\n", "[base] nodes: expected an integer"),
    ("[base]\nlb = 1\n", "[base] lb: expected true or false"),
    ("[base]\ncapacity = [1, 2, 3]\n", "[base] capacity: expected a list of 2 integers"),
    ("[base]\nseed = 3\n", "[base] seed: seeds are set by the top-level 'seeds'"),
    ("[grid]\n", "[grid] is empty"),
    ("[grid]\nnodes = []\n", "[grid] nodes: the list of values is empty"),
    ("[grid]\nnodes = 100\n", "[grid] nodes: expected a list of values"),
    ("[grid]\nnodes = [100, 100]\n", "[grid] nodes: a value is listed twice"),
    ("[grid]\nnodes = [100, 'x']\n", "[grid] nodes[1]: expected an integer"),
    ("[base]\nnodes = 5\n[grid]\nnodes = [6]\n", "'nodes' is in both [base] and [grid]"),
    ("seeds = []\n", "'seeds' must be a non-empty list of integers"),
    ("seeds = [1, 1]\n", "'seeds' lists a seed twice"),
    ("seeds = 1\n", "'seeds' must be a non-empty list"),
    ("scenario = 'chaos'\n", "'scenario' 'chaos' is not known"),
    ("name = 'a b'\n", "'name' must be letters"),
    ("base = 3\n", "'base' must be a table"),
    ("[grid]\nlatency = ['nowhere.txt']\n", "[grid] latency[0]: 'nowhere.txt' is not a file"),
    ("[base]\nevents_from = 'no.csv'\n", "[base] events_from: 'no.csv' is not a file"),
    ("[grid]\nnodes = [10, 0]\n", "run r001_nodes-0_seed-1 (nodes=0, seed=1): --nodes must be"),
    (
        "[base]\nprobe = 'carrier-pigeon'\n",
        "probe carrier-pigeon: must be 'unicast' or 'multicast'",
    ),
    ("[base\n", "not valid TOML"),
    ("scenarios = ['siena', 'chaos']\n", "'scenarios' 'chaos' is not known"),
    ("scenarios = ['siena', 'siena']\n", "'scenarios' lists a scenario twice"),
    ("scenarios = []\n", "'scenarios' must be a non-empty list of names"),
    ("scenario = 'siena'\nscenarios = ['kyra']\n", "'scenario' or 'scenarios', not both"),
    # Keys come from the named scenario's dataclass: the thesis' overlay keys are not a broker's.
    (
        "scenario = 'siena'\n[base]\nprobe = 'multicast'\n",
        "[base] probe: unknown parameter of scenario 'siena'",
    ),
    (
        "scenarios = ['siena', 'thesis']\n[grid]\narity = [2]\n",
        "[grid] arity: unknown parameter of scenario 'thesis'",
    ),
    (
        "scenario = 'kyra'\n[base]\nmax_size = 'big'\n",
        "[base] max_size (scenario 'kyra'): expected an integer",
    ),
    (
        "scenario = 'siena'\n[base]\nnodes = 1\n",
        "siena run r000_seed-1 (nodes=1, seed=1): nodes 1: must be at least 2",
    ),
]


@pytest.mark.parametrize(("text", "message"), BAD_PLANS)
def test_invalid_plans_name_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    path = _plan_file(tmp_path, text)
    with pytest.raises(PlanError) as err:
        load_plan(str(path))
    assert str(err.value).startswith(f"{path}: ")
    assert message in str(err.value)


def test_plans_of_other_scenarios(tmp_path: Path) -> None:
    from rangecast.sim.broker_experiment import KyraParams, SienaParams

    path = _plan_file(
        tmp_path,
        "scenarios = ['siena', 'kyra']\nseeds = [1, 2]\n[base]\nevents = 5\n"
        "[grid]\nnodes = [10, 20]\n",
    )
    plan = load_plan(str(path))
    assert plan.scenarios == ("siena", "kyra") and plan.scenario == "siena,kyra"
    assert not plan.thesis_only and plan.describe()["scenarios"] == ["siena", "kyra"]
    # The scenario varies slowest, then the grid, then the seed.
    assert [(r.scenario, r.params.nodes, r.seed) for r in plan.runs] == [
        (s, n, seed) for s in ("siena", "kyra") for n in (10, 20) for seed in (1, 2)
    ]
    assert isinstance(plan.runs[0].params, SienaParams)
    assert isinstance(plan.runs[-1].params, KyraParams) and plan.runs[-1].params.events == 5
    assert plan.runs[5].run_id == "r005_scenario-kyra_nodes-10_seed-2"
    assert plan.runs[5].label == "scenario=kyra nodes=10 seed=2"
    assert plan.param_columns() == ["scenario", "seed", "nodes", "latency", "events"]
    # Cost: nodes x events whatever the scenario; nodes alone (or 1) without those fields.
    assert plan.runs[2].cost() == 20 * 5
    lbdd = parse_plan("scenario = 'lbdd'\n[base]\nsubscribers = 5\n", "l.toml")
    assert lbdd.runs[0].cost() == 1.0
    route = parse_plan("scenario = 'route'\n[base]\nnodes = 50\n", "r.toml")
    assert route.runs[0].cost() == 50.0
    assert route.param_columns() == ["scenario", "seed", "nodes", "latency"]


def test_baselines_plan() -> None:
    plan = load_plan("baselines")
    systems = ("thesis", "siena", "padres", "octopia", "kyra", "kmeans", "pop", "grape")
    assert plan.scenarios == systems and plan.seeds == (1, 2)
    assert [r.scenario for r in plan.runs] == [s for s in systems for _ in (1, 2)]
    assert all(r.params.nodes == 200 and r.params.events == 500 for r in plan.runs)


def test_invalid_plan_key_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _plan_file(tmp_path, "scenario = 'siena'\n[grid]\nlb = [true]\n")
    assert main(["sim", "sweep", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "[grid] lb: unknown parameter of scenario 'siena'" in err


def test_unknown_plan_lists_shipped(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match=r"not a shipped plan .*scalability"):
        load_plan(str(tmp_path / "absent.toml"))


@given(
    grid=st.dictionaries(
        st.sampled_from(["nodes", "events", "p", "probe"]),
        st.integers(1, 3),
        min_size=1,
        max_size=3,
    ),
    seeds=st.lists(st.integers(0, 10**6), min_size=1, max_size=3, unique=True),
)
def test_expansion_order(grid: dict[str, int], seeds: list[int]) -> None:
    values = {
        "nodes": [10, 20, 30],
        "events": [0, 5, 7],
        "p": [0.1, 0.5, 0.9],
        "probe": ["unicast", "multicast", "unicast"],
    }
    chosen = {k: values[k][: min(n, 2 if k == "probe" else 3)] for k, n in grid.items()}
    lines = [f"seeds = {seeds}", "[grid]"] + [f"{k} = {json.dumps(vs)}" for k, vs in chosen.items()]
    plan = parse_plan("\n".join(lines) + "\n", "gen.toml")
    expected = [1]
    for vs in chosen.values():
        expected[0] *= len(vs)
    assert len(plan.runs) == expected[0] * len(seeds)
    assert len({r.run_id for r in plan.runs}) == len(plan.runs)
    assert [r.index for r in plan.runs] == list(range(len(plan.runs)))
    # The last grid key varies fastest, seeds innermost.
    keys = list(chosen)
    order = [(*(r.settings[k] for k in keys), r.seed) for r in plan.runs]
    rank = [tuple(chosen[k].index(v) for k, v in zip(keys, o, strict=False)) for o in order]
    assert rank == sorted(rank)
    assert [r.seed for r in plan.runs[: len(seeds)]] == seeds


# ----------------------------------------------------------------------------------------- runs


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> Any:
    out = tmp_path_factory.mktemp("sweep") / "smoke"
    return run_sweep(load_plan("smoke"), out, jobs=2, quiet=True)


def test_smoke_table(smoke: Any) -> None:
    assert smoke.ok
    rows = smoke.rows
    assert [(r["nodes"], r["latency"]) for r in rows] == [
        (60, "synthetic"),
        (60, "planetlab"),
        (120, "synthetic"),
        (120, "planetlab"),
    ]
    for r in rows:
        assert r["status"] == "ok" and r["error"] is None
        assert r["missed"] == r["duplicates"] == r["false_positives"] == 0
        assert r["events"] == 200 and r["subscriptions"] == 5 * r["nodes"]
        assert r["expected_deliveries"] > 0
        assert 0 < r["delivery_latency_mean_ms"] <= r["delivery_latency_max_ms"]
        assert 0 < r["publish_bytes_mean"] <= r["publish_bytes_max"]
        assert 0 < r["probe_bytes_mean"] <= r["probe_bytes_max"]
        assert r["install_latency_mean_ms"] > 0 and r["wall_s"] > 0
        run = json.loads((smoke.out / r["run_dir"] / "run.json").read_text())
        assert run["summary"]["delivery_latency_ms"]["max"] == r["delivery_latency_max_ms"]
    assert rows[0]["latency_model"] == "synthetic"
    assert rows[1]["latency_model"] == "matrix:planetlab490_rtt_ms_slice1.txt"
    assert math.isclose(rows[1]["mean_rtt_ms"], 146.84, abs_tol=0.01)


def test_smoke_files_agree(smoke: Any) -> None:
    doc = json.loads((smoke.out / "sweep.json").read_text())
    assert doc["format"] == "rangecast-sweep" and doc["failed"] == 0
    assert doc["plan"]["name"] == "smoke" and doc["executor"] == "processes"
    assert doc["rows"] == smoke.rows
    assert pq.read_table(smoke.out / "sweep.parquet").to_pylist() == smoke.rows


def test_same_plan_same_table(smoke: Any, tmp_path: Path) -> None:
    # One process at a time this time: a different schedule, the same table.
    again = run_sweep(load_plan("smoke"), tmp_path / "again", jobs=1, quiet=True)
    assert _without_wall(again.rows) == _without_wall(smoke.rows)


def _stamp_logs(out: Path, code: str) -> None:
    """Mark every run log in ``out`` as made by simulation code ``code``."""
    for path in (out / "runs").glob("*/run.json"):
        doc = json.loads(path.read_text())
        doc["code"] = code
        path.write_text(json.dumps(doc))


def test_resume_keeps_finished_runs_and_runs_the_rest(
    smoke: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    import rangecast.analysis.sweep.command as command

    out = tmp_path / "resumed"
    shutil.copytree(smoke.out, out)
    _stamp_logs(out, "c0ffee")
    monkeypatch.setattr(command, "code_fingerprint", lambda: "c0ffee")
    # An interrupted sweep: one run never wrote its run.json (written last), one was made with
    # other parameters.
    (out / smoke.rows[1]["run_dir"] / "run.json").unlink()
    other = out / smoke.rows[2]["run_dir"] / "run.json"
    doc = json.loads(other.read_text())
    doc["params"]["events"] = 199
    other.write_text(json.dumps(doc))
    with pytest.raises(Exception, match="--resume"):
        run_sweep(load_plan("smoke"), out, jobs=1, quiet=True)  # not empty: refused
    reused = command.finished_runs(load_plan("smoke"), out)
    assert sorted(reused) == [0, 3]
    again = run_sweep(load_plan("smoke"), out, jobs=1, quiet=True, resume=True)
    assert again.ok
    assert _without_wall(again.rows) == _without_wall(smoke.rows)


def test_resume_trusts_only_the_same_code_and_a_complete_log(smoke: Any, tmp_path: Path) -> None:
    import shutil

    from rangecast.analysis.sweep.runs import reusable

    out = tmp_path / "logs"
    shutil.copytree(smoke.out, out)
    _stamp_logs(out, "c0ffee")
    spec = load_plan("smoke").runs[0]
    assert reusable(spec, out, "c0ffee") is not None
    assert reusable(spec, out, "beef") is None  # other simulation code
    other = dataclasses.replace(load_plan("smoke").runs[1], run_id=spec.run_id)
    assert reusable(other, out, "c0ffee") is None  # a log of other parameters
    path = out / smoke.rows[0]["run_dir"] / "run.json"
    path.write_text(path.read_text()[:100])  # damaged
    assert reusable(spec, out, "c0ffee") is None


def test_resume_finds_a_run_an_earlier_plan_numbered_differently(
    smoke: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plan that gained a part numbers the runs after it differently: the logs are found by
    what the run is (its name without the index), counted by a dry run, renamed on resume."""
    import shutil

    import rangecast.analysis.sweep.command as command

    out = tmp_path / "renumbered"
    shutil.copytree(smoke.out, out)
    _stamp_logs(out, "c0ffee")
    monkeypatch.setattr(command, "code_fingerprint", lambda: "c0ffee")
    plan = load_plan("smoke")
    spec = plan.runs[1]
    own = out / "runs" / spec.run_id
    earlier = out / "runs" / ("r917_" + spec.run_id.split("_", 1)[1])
    own.rename(earlier)
    (own / "partial").mkdir(parents=True)  # what an interrupted attempt under the new name left
    assert sorted(command.finished_runs(plan, out)) == [0, 1, 2, 3]
    assert earlier.is_dir() and not (own / "run.json").exists()  # counting moves nothing
    assert sorted(command.finished_runs(plan, out, adopt=True)) == [0, 1, 2, 3]
    assert (own / "run.json").is_file() and not earlier.exists()
    assert not (own / "partial").exists()


def test_failing_run_is_reported_and_others_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A file that exists (so the plan passes) but is no RTT matrix: the run fails when it loads.
    (tmp_path / "broken.txt").write_text("0 1\n2\n")
    plan = _plan_file(
        tmp_path,
        "name = 'mixed'\n[base]\nnodes = 20\nevents = 20\n"
        "[grid]\nlatency = ['synthetic', 'broken.txt']\n",
    )
    out = tmp_path / "out"
    code = main(["sim", "sweep", str(plan), "--out", str(out), "--jobs", "2", "--quiet"])
    assert code == 1
    printed = capsys.readouterr().out
    assert "FAILED r001_latency-broken_seed-1 (latency=broken.txt seed=1): LatencyModelError" in (
        printed
    )
    rows = pq.read_table(out / "sweep.parquet").to_pylist()
    assert [r["status"] for r in rows] == ["ok", "failed"]
    assert rows[0]["missed"] == 0 and rows[0]["delivery_latency_mean_ms"] > 0
    assert "LatencyModelError" in rows[1]["error"] and rows[1]["missed"] is None
    doc = json.loads((out / "sweep.json").read_text())
    assert doc["failed"] == 1 and "Traceback" in doc["failures"][0]["traceback"]


def test_cli_json_and_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = _plan_file(tmp_path, "name = 'one'\n[base]\nnodes = 16\nevents = 10\n")
    out = tmp_path / "out"
    assert main(["sim", "sweep", str(plan), "--out", str(out), "--json", "--quiet"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["runs"] == 1 and doc["rows"][0]["status"] == "ok"
    # A DIR holding a sweep is refused unless --force.
    assert main(["sim", "sweep", str(plan), "--out", str(out), "--quiet"]) == 2
    assert "not empty" in capsys.readouterr().err
    assert main(["sim", "sweep", str(plan), "--out", str(out), "--quiet", "--force"]) == 0
    capsys.readouterr()
    assert main(["sim", "sweep", "no-such-plan", "--out", str(out)]) == 2
    assert "not a shipped plan" in capsys.readouterr().err
    assert main(["sim", "sweep", str(plan), "--master", "local[1]"]) == 2
    assert "--master needs --spark" in capsys.readouterr().err


def test_plan_of_two_broker_systems_runs(tmp_path: Path) -> None:
    path = _plan_file(
        tmp_path,
        "name = 'two'\nscenarios = ['siena', 'octopia']\n[base]\nnodes = 20\nevents = 20\n"
        "[grid]\ncovering = [true, false]\n",
    )
    result = run_sweep(load_plan(str(path)), tmp_path / "out", jobs=2, quiet=True)
    assert result.ok and result.document["executor"] == "processes"
    rows = result.rows
    assert [(r["scenario"], r["covering"]) for r in rows] == [
        (s, c) for s in ("siena", "octopia") for c in (True, False)
    ]
    # Every row has every column (the union), in the same order.
    assert len({tuple(r) for r in rows}) == 1
    for r in rows:
        assert r["status"] == "ok" and r["system"] == r["scenario"]
        assert r["missed"] == r["duplicates"] == r["false_positives"] == 0
        assert r["expected_deliveries"] > 0 and r["events"] == 20 and r["nodes"] == 20
        assert 0 < r["delivery_latency_mean_ms"] <= r["delivery_latency_max_ms"]
        assert r["messages_per_event"] > 0 and r["table_entries_max"] >= r["table_entries_mean"]
        run = json.loads((result.out / r["run_dir"] / "run.json").read_text())
        assert run["summary"]["hops_per_delivery"] == r["hops_per_delivery"]
    # Thesis-only columns no broker run reports are left out.
    assert "probe_bytes_mean" not in rows[0] and "publish_bytes_mean" not in rows[0]
    assert pq.read_table(result.out / "sweep.parquet").to_pylist() == rows
    again = run_sweep(load_plan(str(path)), tmp_path / "again", jobs=1, quiet=True)
    assert _without_wall(again.rows) == _without_wall(rows)


def test_recover_reads_finished_logs(smoke: Any) -> None:
    plan = load_plan("smoke")
    got = recover(plan.runs[0], smoke.out, since=0.0, error="lost")
    assert got["status"] == "ok" and got["summary"]["nodes"] == 60
    assert recover(plan.runs[0], smoke.out, since=math.inf, error="lost")["status"] == "failed"


# ---------------------------------------------------------------------------------------- spark


def _spark_ready() -> str | None:
    """Why the Spark path cannot be tested here, or None."""
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed (pip install -e '.[spark]')"
    try:
        from rangecast.analysis.report.session import ensure_java
    except ImportError:
        return "analysis.report.session (the Spark session factory) is not available"
    try:
        ensure_java()
    except Exception as exc:
        return f"no Java for Spark: {exc}"
    return None


def test_spark_sweep_gives_the_same_table(smoke: Any, tmp_path: Path) -> None:
    reason = _spark_ready()
    if reason is not None:
        pytest.skip(reason)
    result = run_sweep(load_plan("smoke"), tmp_path / "spark", spark=True, report=False, quiet=True)
    assert result.ok and result.document["executor"] == "spark"
    assert _without_wall(result.rows) == _without_wall(smoke.rows)
    for r in result.rows:
        assert (tmp_path / "spark" / r["run_dir"] / "run.json").is_file()


@pytest.mark.slow
def test_spark_sweep_of_brokers_reports_them(tmp_path: Path) -> None:
    reason = _spark_ready()
    if reason is not None:
        pytest.skip(reason)
    plan = parse_plan("scenario = 'siena'\n[base]\nnodes = 20\nevents = 10\n", "b.toml")
    result = run_sweep(plan, tmp_path / "b", spark=True, quiet=True)
    assert result.ok and result.report_problem is None and result.report_note is None
    assert result.rows[0]["missed"] == 0 and (tmp_path / "b" / "report.html").exists()
    assert result.document["report"] == "report.html"


@pytest.mark.slow
def test_spark_sweep_builds_one_report(tmp_path: Path) -> None:
    reason = _spark_ready()
    if reason is not None:
        pytest.skip(reason)
    out = tmp_path / "report"
    result = run_sweep(load_plan("smoke"), out, spark=True, quiet=True)
    assert result.ok, result.report_problem
    assert (out / "report.html").is_file()
    assert json.loads((out / "sweep.json").read_text())["report"] == "report.html"


def test_a_spark_worker_with_other_simulation_code_fails_the_run_plainly(tmp_path: Path) -> None:
    from rangecast.analysis.sweep.spark import _task

    spec = load_plan("smoke").runs[0]
    outcome = _task(spec, str(tmp_path), code="0" * 20, announce=False)
    assert outcome["status"] == "failed" and outcome["index"] == spec.index
    assert "other simulation code" in outcome["error"] and "PYSPARK_PYTHON" in outcome["error"]
    assert not (tmp_path / "runs").exists()  # nothing ran
