"""Running a sweep's runs as Spark tasks: one partition per run, results collected by the driver.

Each task runs one whole simulation (seconds to many minutes) in a Python worker and returns its
outcome as plain data; the task itself never fails (``execute`` catches), so Spark neither
retries a run nor aborts the others. Runs are dispatched longest first; rows are put back in
plan order afterwards, so the table never depends on which executor ran what, or when.

Settings that matter for long simulation tasks (see ``TASK_CONF``): no speculative copies (a
duplicate of a 10-minute run is pure waste and would write the same run directory twice), a
fresh Python worker per task (``spark.python.worker.reuse=false``: a finished simulation's
memory goes back to the OS instead of staying in a reused worker), and no limit on a worker's
memory (``spark.executor.pyspark.memory`` unset). Spark has no task timeout; heartbeats come from
the executor's JVM threads, not from the busy Python worker, so a long task is never declared lost.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from rangecast.analysis.sweep.plan import RunSpec
from rangecast.analysis.sweep.runs import (
    HEARTBEAT_S,
    Progress,
    dispatch_order,
    execute,
    failed,
    recover,
)
from rangecast.dht.errors import LocalProtocolError
from rangecast.sim.runlog import code_fingerprint

#: Spark settings for simulation tasks (on top of the session's own).
TASK_CONF = {
    "spark.speculation": "false",
    "spark.python.worker.reuse": "false",
    # Local mode never retries anyway; on a cluster, a run that raised is reported, not rerun.
    "spark.task.maxFailures": "1",
}
JOB_GROUP = "rangecast-sweep"


def active_session() -> Any:
    """The SparkSession already running in this process, if any."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        return None
    return SparkSession.getActiveSession()


def spark_session(master: str) -> Any:
    """The report's SparkSession (``analysis.report.session``: Java, quiet logs, no UI, loopback),
    started with the task settings when it does not exist yet.

    Those settings must be in place before the JVM and SparkContext start. The report's factory
    gets them as ``conf=`` when it takes that parameter; otherwise they go to spark-submit
    through ``PYSPARK_SUBMIT_ARGS`` (what ``pyspark --conf`` does), which the JVM the factory
    launches reads as its defaults.
    """
    from rangecast.analysis.report.session import spark_session as report_session

    try:
        from pyspark import SparkContext
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise LocalProtocolError("--spark needs pyspark: pip install -e '.[spark]'") from exc
    if SparkSession.getActiveSession() is None:
        if "conf" in inspect.signature(report_session).parameters:
            return report_session(master, conf=TASK_CONF)
        if SparkContext._gateway is None:  # no JVM yet: its launch will read these
            confs = " ".join(f"--conf {k}={v}" for k, v in TASK_CONF.items())
            before = os.environ.get("PYSPARK_SUBMIT_ARGS")
            os.environ["PYSPARK_SUBMIT_ARGS"] = f"{confs} {before or 'pyspark-shell'}"
            try:
                return report_session(master)
            finally:
                if before is None:
                    del os.environ["PYSPARK_SUBMIT_ARGS"]
                else:
                    os.environ["PYSPARK_SUBMIT_ARGS"] = before
    return report_session(master)


def run_spark(
    spark: Any, specs: Sequence[RunSpec], out: Path, progress: Progress
) -> dict[int, dict[str, Any]]:
    """Run every spec as one Spark task; outcomes by run index."""
    sc = spark.sparkContext
    ordered = dispatch_order(specs)
    # An absolute path: the tasks' working directory is not the driver's.
    task = functools.partial(
        _task, out=str(out.resolve()), code=code_fingerprint(), announce=not progress.quiet
    )
    rdd = sc.parallelize(ordered, numSlices=len(ordered)).map(task)
    done: dict[str, Any] = {}

    def collect() -> None:
        try:
            # Job groups are per thread (PySpark pins Python threads to JVM threads): set it in
            # the thread that submits the job, so the status tracker can find the job.
            sc.setJobGroup(JOB_GROUP, f"rangecast sweep: {len(ordered)} runs")
            done["outcomes"] = rdd.collect()
        except BaseException as exc:  # handed to the main thread below
            done["error"] = exc

    # collect() blocks until every task is done; the main thread polls Spark's status meanwhile.
    worker = threading.Thread(target=collect, name="sweep-collect", daemon=True)
    worker.start()
    started = time.time()
    tracker = sc.statusTracker()
    seen = (-1, -1)
    last_beat = time.monotonic()
    try:
        while worker.is_alive():
            worker.join(timeout=5.0)
            active, completed = _task_counts(tracker)
            now = time.monotonic()
            if (active, completed) != seen or now - last_beat >= HEARTBEAT_S:
                seen, last_beat = (active, completed), now
                progress.status(active, completed, len(ordered))
    except BaseException:
        # Ctrl-C: stop the tasks (their Python workers) before the session goes.
        sc.cancelAllJobs()
        raise
    if "error" in done:
        # The job itself failed (a worker that could not start, a lost executor): keep every run
        # that finished before it from its run log, and report the rest as failed.
        lines = str(done["error"]).strip().splitlines()
        why = f"the Spark job failed: {' '.join(lines[:2])[:400]}"
        outcomes = {s.index: recover(s, out, started, why) for s in specs}
    else:
        outcomes = {o["index"]: o for o in done["outcomes"]}
    # The tasks announced their own runs; the driver repeats only the failures, with parameters.
    by_index = {s.index: s for s in specs}
    for index in sorted(outcomes):
        if outcomes[index]["status"] != "ok":
            progress.finished(by_index[index], outcomes[index])
        else:
            progress.done += 1
    return outcomes


def _task(spec: RunSpec, out: str, code: str, announce: bool) -> dict[str, Any]:
    """One run in a Spark worker, if the worker runs the driver's simulation code: a worker
    started from another environment (``PYSPARK_PYTHON``, an executor elsewhere) would unpickle
    the run's parameters into other classes and run something else, so it fails plainly."""
    mine = code_fingerprint()
    if mine != code:
        return failed(
            spec,
            f"the Spark worker runs other simulation code (fingerprint {mine}) than the driver "
            f"({code}): start the workers with the driver's Python environment (PYSPARK_PYTHON)",
        )
    return execute(spec, out, announce=announce)


def _task_counts(tracker: Any) -> tuple[int, int]:
    """(running, completed) tasks of the sweep's job, as far as Spark's status tracker knows."""
    active = completed = 0
    for job_id in tracker.getJobIdsForGroup(JOB_GROUP):
        job = tracker.getJobInfo(job_id)
        if job is None:
            continue
        for stage_id in job.stageIds:
            stage = tracker.getStageInfo(stage_id)
            if stage is not None:
                active += stage.numActiveTasks
                completed += stage.numCompletedTasks
    return active, completed


#: Seconds between two lines about the report's Spark jobs (a line only when one finished).
REPORT_LINE_S = 30.0
#: Seconds between two polls of Spark's status tracker while the report runs.
REPORT_POLL_S = 2.0


class JobWatch:
    """What the report's Spark jobs have done, from Spark's status tracker: the report
    (analysis.report) recomputes its figures as a few dozen Spark jobs and says nothing
    between its first and last lines (6 minutes over a large sweep). ``poll`` says, at most
    every ``every_s`` seconds and only when a job finished since (or ``heartbeat_s`` passed),
    how many of them are done and what runs now (the stage's call site, e.g. ``collect at
    spark_job.py:346``, and its tasks).

    The report's jobs are those without a job group (the sweep's runs have theirs) that were
    not there when the watch began. ``tracker`` and ``clock`` are injected: tests pass fakes.
    """

    def __init__(
        self,
        tracker: Any,
        say: Callable[[str], None],
        *,
        every_s: float = REPORT_LINE_S,
        heartbeat_s: float = HEARTBEAT_S,
        clock: Callable[[], float] = time.monotonic,
        fresh: bool = False,
    ) -> None:
        """``fresh``: the context is the report's own, every job in it is the report's."""
        self.tracker = tracker
        self.say = say
        self.every_s = every_s
        self.heartbeat_s = heartbeat_s
        self.clock = clock
        self.before: set[int] = set() if fresh else set(self._job_ids())
        self.done = 0
        self.last = clock()

    def _job_ids(self) -> list[int]:
        return list(self.tracker.getJobIdsForGroup(None) or [])

    def poll(self) -> None:
        done = 0
        now_running = ""
        for job_id in sorted(set(self._job_ids()) - self.before):
            job = self.tracker.getJobInfo(job_id)
            if job is None:
                continue
            if job.status == "SUCCEEDED":
                done += 1
            elif job.status == "RUNNING":
                for stage_id in job.stageIds:
                    stage = self.tracker.getStageInfo(stage_id)
                    if stage is not None and stage.numActiveTasks:
                        name = re.sub(r"\S*/", "", stage.name)  # the call site's file name
                        now_running = (
                            f"; running {name} ({stage.numCompletedTasks}/{stage.numTasks} tasks)"
                        )
        now = self.clock()
        since = now - self.last
        if (done > self.done and since >= self.every_s) or since >= self.heartbeat_s:
            self.done, self.last = done, now
            self.say(f"report: {done} Spark job{'s' if done != 1 else ''} done{now_running}")


@contextlib.contextmanager
def watch_report(say: Callable[[str], None], session: Any = None) -> Iterator[None]:
    """Run the body (a ``build_report``) with a ``JobWatch`` polling in a thread. Without a
    ``session`` the report starts its own: the watch waits for that session's context."""

    stop = threading.Event()
    # The jobs there before the report are not its own: counted out now, in this thread.
    first = JobWatch(session.sparkContext.statusTracker(), say) if session is not None else None

    def own_context() -> Any:
        try:
            from pyspark import SparkContext
        except ImportError:
            return None
        return SparkContext._active_spark_context

    def loop() -> None:
        watch = first
        while not stop.wait(REPORT_POLL_S):
            try:
                if watch is None:
                    sc = own_context()
                    if sc is not None:
                        watch = JobWatch(sc.statusTracker(), say, fresh=True)
                else:
                    watch.poll()
            except Exception:
                # The session stopping under the watch (the report's own, at its end) is not
                # the report's failure: the watch just ends.
                return

    thread = threading.Thread(target=loop, name="report-watch", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10.0)
