"""Feedback in long phases (the newcomer's first hour, item 5): the simulator's set-up phases as
progress bars, the thesis run's up-front memory estimate, the sweep report's Spark jobs, the
reproduction's ETA weighted by each step's cost, and ``swarm up``'s compact output.

No test reads the clock: every clock is injected and driven by hand, and bars are recorded,
not drawn."""

from __future__ import annotations

import io
import itertools
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rangecast.dht.errors import LocalProtocolError
from rangecast.dht.messages import DHT_TABLE
from rangecast.dht.node import PastryConfig
from rangecast.dht.wire import codec_for
from rangecast.sim.engine import Simulator
from rangecast.sim.latency import latency_model
from rangecast.sim.network import SimNetwork
from rangecast.sim.progress import Progress
from rangecast.sim.scenario import refuse_beyond_memory
from rangecast.sim.streams import stream

RANGECAST = str(Path(sys.executable).parent / "rangecast")


class Recording(Progress):
    """A ``Progress`` with bars on, that records each phase's total and every count a tick
    reads instead of drawing."""

    def __init__(self) -> None:
        super().__init__("test", stream=io.StringIO(), bars=True, notes=lambda _m: None)
        self.phases: list[tuple[str, float, list[float]]] = []

    def phase(self, desc: str, total: float, count: Callable[[], float], unit: str = "it") -> None:
        self.end()
        self._count = count
        self._bar = object()  # a phase is open (``steps`` ends only its own)
        self.phases.append((desc, total, []))

    def tick(self, _sim: Any = None) -> None:
        if self._count is not None and self.phases:
            self.phases[-1][2].append(self._count())

    def end(self) -> None:
        if self._bar is not None:
            self.tick()
        self._bar = None
        self._count = None


def _network(n: int, progress: Progress | None) -> SimNetwork:
    model = latency_model("synthetic", 3)
    sim = Simulator(model, stream(3, "network"), codec=codec_for(DHT_TABLE))
    net = SimNetwork(sim, 3, config=PastryConfig(keepalive_s=float("inf")), progress=progress)
    net.oracle_bootstrap(net.create(n))
    return net


def test_node_creation_and_bootstrap_report_monotone_counts_up_to_their_totals() -> None:
    rec = Recording()
    _network(3000, rec)
    names = [d for d, _, _ in rec.phases]
    assert names == ["creating nodes", "routing tables", "installing routing state"]
    for desc, total, counts in rec.phases:
        assert counts, desc
        assert counts == sorted(counts), desc  # monotone
        assert counts[-1] == total, desc  # and complete
        assert total >= 1
    assert rec.phases[0][1] == rec.phases[2][1] == 3000
    # Every few items, not every item: ~1,000 ticks a bar at most.
    assert len(rec.phases[0][2]) <= 1001


def test_progress_changes_nothing_in_the_network() -> None:
    plain, watched = _network(500, None), _network(500, Recording())
    assert [p.id for p in plain.peers] == [p.id for p in watched.peers]
    for a, b in zip(plain.nodes, watched.nodes, strict=True):
        assert [p.id for p in a.leaves.left] == [p.id for p in b.leaves.left]
        assert [p.id for p in a.leaves.right] == [p.id for p in b.leaves.right]


def test_steps_without_bars_is_the_iterable_itself() -> None:
    quiet = Progress("test", stream=io.StringIO(), bars=False)
    items = range(10)
    assert quiet.steps(items, "x") is items


def test_a_loop_inside_a_showing_phase_keeps_that_phase() -> None:
    rec = Recording()
    rec.phase("churn", 100, lambda: 10)
    churn = rec._bar
    items = range(1)
    assert rec.steps(items, "creating nodes") is items
    assert rec._bar is churn and [d for d, _, _ in rec.phases] == ["churn"]


def test_a_loop_left_early_ends_only_its_own_bar() -> None:
    rec = Recording()
    for k in rec.steps(range(100), "first"):
        if k == 3:
            break
    rec.phase("second", 5, lambda: 2)
    second = rec._bar
    # The abandoned generator is closed (as the collector would) after the second began.
    import gc

    gc.collect()
    assert rec._bar is second


def test_thesis_run_is_the_same_with_set_up_bars() -> None:
    from rangecast.sim.thesis_experiment import WALL_FIELDS, Thesis, ThesisParams

    params = ThesisParams(nodes=60, subs_per_node=2, events=30, seed=4)
    rec = Recording()
    with_bars = Thesis().run(params, rec).json()
    without = Thesis().run(params, None).json()
    for k in WALL_FIELDS:
        with_bars.pop(k), without.pop(k)
    assert with_bars == without
    names = [d for d, _, _ in rec.phases]
    # The set-up shows from its first step, before any event runs.
    assert names[:5] == [
        "creating nodes",
        "routing tables",
        "installing routing state",
        "drawing subscriptions",
        "installing",
    ]
    assert "checking deliveries" in names
    for desc, total, counts in rec.phases:
        assert counts == sorted(counts), desc
        assert not counts or counts[-1] <= total, desc


# ------------------------------------------------------------------- memory, up front


def test_a_size_that_cannot_fit_is_refused_naming_nodes() -> None:
    with pytest.raises(LocalProtocolError, match=r"^--nodes 1,000: needs about 2\.0 GiB"):
        refuse_beyond_memory(1000, 2 * 2**30, "a test", have=lambda: 2**30)
    refuse_beyond_memory(1000, 2**29, "a test", have=lambda: 2**30)  # fits
    refuse_beyond_memory(1000, 2**40, "a test", have=lambda: None)  # cannot tell: no refusal


def test_thesis_refuses_a_size_beyond_any_memory_at_once() -> None:
    from rangecast.sim.thesis_experiment import ThesisParams

    with pytest.raises(LocalProtocolError, match="--nodes 100,000,000: needs about"):
        ThesisParams(nodes=100_000_000).check()
    done = subprocess.run(
        [RANGECAST, "sim", "run", "thesis", "--nodes", "100000000"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert "--nodes 100,000,000" in done.stderr and "GiB available" in done.stderr


# ------------------------------------------------------------------ the reproduction's ETA


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _drive(actual: dict[int, float], est: dict[int, float], slots: int = 2) -> list[float]:
    """Run ``actual`` seconds per run on ``slots`` slots (longest estimate first), then a
    report of 100 s and a page of 40 s, on a hand-driven clock; the ETA every second."""
    from rangecast.analysis.reproduce.command import Eta

    clock = Clock()
    order = sorted(est, key=lambda i: (-est[i], i))
    eta = Eta(est, order, slots, report_s=100.0, page_s=40.0, clock=clock)
    queue = list(order)
    running: dict[int, float] = {}  # index -> finish time
    seen = []
    while queue or running:
        while queue and len(running) < slots:
            i = queue.pop(0)
            eta.started(i)
            running[i] = clock.now + actual[i]
        seen.append(eta.left_s())
        clock.now += 1.0
        for i, end in list(running.items()):
            if clock.now >= end:
                del running[i]
                eta.finished(i)
    eta.start("report")
    for _ in range(100):
        seen.append(eta.left_s())
        clock.now += 1.0
    eta.start("page")
    for _ in range(40):
        seen.append(eta.left_s())
        clock.now += 1.0
    return seen


def test_eta_counts_down_with_the_clock_when_the_estimates_are_right() -> None:
    est = {0: 300.0, 1: 200.0, 2: 100.0, 3: 100.0, 4: 50.0, 5: 20.0}
    seen = _drive(est, est)
    total = len(seen)
    # The first estimate is the real total (within a few seconds of the 1 s steps).
    assert abs(seen[0] - total) <= 5, (seen[0], total)
    # It goes down with the clock (up by at most a few seconds as a run reaches its
    # estimate), and it is never 0:00:00.
    assert all(b <= a + 3.0 for a, b in itertools.pairwise(seen))
    assert all(left >= 1.0 for left in seen)
    assert all(abs(left - (total - t)) <= 10 for t, left in enumerate(seen))


def test_eta_does_not_jump_when_a_first_run_is_slower_than_estimated() -> None:
    est = {i: 100.0 for i in range(12)}
    actual = {i: 150.0 for i in range(12)}  # every run 1.5x its estimate
    seen = _drive(actual, est)
    total = len(seen)
    # Never more than 1.6x off the truth, never a jump of more than a fifth up from one
    # second to the next (the old ETA went 0:00:36 -> 6:22 -> 2:50).
    for t, left in enumerate(seen):
        truth = total - t
        assert left <= 1.6 * truth + 60, (t, left, truth)
    for a, b in itertools.pairwise(seen):
        assert b <= 1.2 * a + 5, (a, b)


def test_eta_of_a_step_over_its_estimate_never_sits_at_zero() -> None:
    from rangecast.analysis.reproduce.command import Eta

    clock = Clock()
    eta = Eta({}, [], 2, report_s=10.0, page_s=5.0, clock=clock)
    eta.start("page")
    clock.now += 60.0  # the page took 12x its estimate
    assert eta.left_s() >= 10.0


def test_eta_progress_lines_carry_the_eta() -> None:
    from rangecast.analysis.reproduce.command import EtaProgress
    from rangecast.analysis.reproduce.plans import QUICK, reproduction_plan

    plan, _ = reproduction_plan("thesis", QUICK)
    clock = Clock()
    out = io.StringIO()
    progress = EtaProgress(plan.runs[:4], False, 2, clock=clock, stream=out)
    first = progress.eta_s()
    progress.started(plan.runs[0])
    clock.now += 5.0
    progress.say("five seconds in")
    started, line = out.getvalue().splitlines()
    assert started.startswith("[reproduce 0:00:00, ETA ") and "started  r000_" in started
    assert line.startswith("[reproduce 0:00:05, ETA ") and line.endswith("five seconds in")
    assert progress.eta_s() <= first


# -------------------------------------------------------------- the sweep report's Spark jobs


class FakeTracker:
    def __init__(self) -> None:
        self.jobs: dict[int, SimpleNamespace] = {}
        self.stages: dict[int, SimpleNamespace] = {}

    def getJobIdsForGroup(self, group: str | None = None) -> list[int]:
        return [j for j, info in self.jobs.items() if info.group == group]

    def getJobInfo(self, job_id: int) -> SimpleNamespace | None:
        return self.jobs.get(job_id)

    def getStageInfo(self, stage_id: int) -> SimpleNamespace | None:
        return self.stages.get(stage_id)

    def add(self, job_id: int, status: str, group: str | None = None) -> None:
        self.jobs[job_id] = SimpleNamespace(stageIds=[job_id], status=status, group=group)
        self.stages[job_id] = SimpleNamespace(
            name=f"collect at /work/main/analysis/report/spark_job.py:{300 + job_id}",
            numTasks=8,
            numActiveTasks=2 if status == "RUNNING" else 0,
            numCompletedTasks=3,
        )


def test_report_watch_counts_the_report_jobs_only_and_says_what_runs() -> None:
    from rangecast.analysis.sweep.spark import JobWatch

    tracker, clock = FakeTracker(), Clock()
    lines: list[str] = []
    tracker.add(0, "SUCCEEDED")  # before the report: not its own
    tracker.add(1, "SUCCEEDED", group="rangecast-sweep")  # a run, not the report
    watch = JobWatch(tracker, lines.append, every_s=15.0, heartbeat_s=60.0, clock=clock)
    tracker.add(2, "SUCCEEDED")
    tracker.add(3, "RUNNING")
    clock.now += 5.0
    watch.poll()
    assert lines == []  # a job finished, but a line at most every 15 s
    clock.now += 10.0
    watch.poll()
    assert lines == ["report: 1 Spark job done; running collect at spark_job.py:303 (3/8 tasks)"]
    clock.now += 30.0
    watch.poll()
    assert len(lines) == 1  # nothing finished since, and no heartbeat due yet
    clock.now += 30.0
    watch.poll()
    assert len(lines) == 2 and lines[1].startswith("report: 1 Spark job done")  # heartbeat
    tracker.add(3, "SUCCEEDED")
    clock.now += 15.0
    watch.poll()
    assert lines[-1] == "report: 2 Spark jobs done"


# ------------------------------------------------------------------------------ swarm up


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _sixteen_peers(shown: Any) -> None:
    """What ``up`` reports for 16 peers joining over ~20 polls."""
    shown.say("peer 0 up")
    shown.say("15 more peers started, joining through peer 0")
    for ready in (0, 1, 1, 3, 5, 5, 8, 9, 12, 14, 15, 16, 16, 16, 16):
        shown.joined(ready, 16)
        if ready == 16:
            shown.once("joined", "all 16 joined; leaf sets converging")
    shown.once("settle", "leaf sets converged; 1.9 s of hand-off window")
    shown.once("settle", "leaf sets converged; 0.4 s of hand-off window")
    shown.summary(Path("/tmp/sw"), 7400, 0)


def test_swarm_up_without_a_terminal_is_a_line_per_phase_then_one_summary() -> None:
    from rangecast.runtime.swarm import UpProgress

    out, clock = io.StringIO(), Clock()
    _sixteen_peers(UpProgress(16, stream=out, clock=clock))
    lines = out.getvalue().splitlines()
    assert len(lines) == 5, lines
    assert all(line.startswith("swarm: ") and "\r" not in line for line in lines)
    assert lines[-1] == (
        "swarm: 16 peers up in 0.0 s on 127.0.0.1:7400..7415; state, logs and swarm.json in "
        "/tmp/sw; stop with: rangecast swarm down --dir /tmp/sw"
    )


def test_swarm_up_on_a_terminal_is_one_bar() -> None:
    from rangecast.runtime.swarm import UpProgress

    out = Tty()
    _sixteen_peers(UpProgress(16, stream=out, clock=Clock()))
    text = out.getvalue()
    assert text.count("16/16") >= 1 and "peers joined" in text
    # The bar redraws in place (carriage returns); the notes are whole lines.
    notes = [x for x in text.replace("\r", "\n").splitlines() if x and "peers joined" not in x]
    assert len([x for x in notes if x.strip()]) == 5, notes


def test_swarm_up_quiet_says_nothing() -> None:
    from rangecast.runtime.swarm import UpProgress

    out = Tty()
    _sixteen_peers(UpProgress(16, True, stream=out, clock=Clock()))
    assert out.getvalue() == ""
