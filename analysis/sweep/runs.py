"""Running a sweep's runs: one run (the unit both executors ship), and the local process pool.

``execute`` never raises: a run that fails comes back as an outcome with ``status = "failed"``,
its error and traceback, so one bad run neither kills the others nor makes Spark retry it.

The local executor starts one fresh process per run (``spawn``), at most ``jobs`` at a time: a
run's memory is given back when it ends, and a run that dies outright (killed, out of memory) is
reported as failed from its exit code while the others go on.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import multiprocessing.connection
import re
import sys
import time
import traceback
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rangecast.analysis.sweep.plan import RunSpec

#: Seconds between "still running" lines while runs go on.
HEARTBEAT_S = 60.0


def run_dir(out: Path | str, spec: RunSpec) -> Path:
    return Path(out) / "runs" / spec.run_id


#: A run directory's leading index ("r012_"): the rest of its name says what the run is.
_INDEX = re.compile(r"r\d+_")


def renumbered_dirs(out: Path | str) -> dict[str, list[Path]]:
    """The finished run directories in ``out`` (with a ``run.json``) by their name without
    the leading index, so a run an earlier plan numbered differently (a part added before it)
    is found by what it is."""
    found: dict[str, list[Path]] = {}
    try:
        entries = sorted((Path(out) / "runs").iterdir())
    except OSError:
        return found
    for d in entries:
        if (m := _INDEX.match(d.name)) is not None and (d / "run.json").is_file():
            found.setdefault(d.name[m.end() :], []).append(d)
    return found


def earlier_dir(spec: RunSpec, out: Path | str, found: dict[str, list[Path]]) -> Path:
    """Where ``spec``'s log is: its own directory, or the one directory whose name is the
    same but for the index (``renumbered_dirs``); its own when neither holds a finished log."""
    own = run_dir(out, spec)
    if (own / "run.json").exists() or (m := _INDEX.match(spec.run_id)) is None:
        return own
    same = found.get(spec.run_id[m.end() :], [])
    return same[0] if len(same) == 1 else own


def execute(spec: RunSpec, out: str, *, announce: bool = False) -> dict[str, Any]:
    """Run ``spec``, writing its run log to ``out/runs/<run_id>``; the outcome as plain data.

    ``announce``: print start and end lines to stderr (Spark tasks: in local mode the driver's
    console shows a worker's stderr, which is the only per-run progress Spark can give).
    """
    from rangecast.sim.registry import SCENARIOS

    where = run_dir(out, spec)
    if announce:
        print(f"[sweep task] started {spec.run_id} ({spec.label})", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    outcome: dict[str, Any] = {"index": spec.index, "run_id": spec.run_id}
    try:
        # force: the sweep already refused a non-empty DIR unless --force was given.
        # Through the registry, as ``rangecast sim run NAME`` does (thesis: run_thesis's call).
        summary = SCENARIOS[spec.scenario].run_json(
            spec.params, progress=None, out=where, force=True
        )
        # A JSON round trip: tuples become lists, so outcomes compare equal however they travel.
        outcome.update(status="ok", summary=json.loads(json.dumps(summary)))
    except Exception as exc:
        outcome.update(
            status="failed",
            error=f"{type(exc).__name__}: {exc}",
            traceback=traceback.format_exc(),
        )
    outcome["wall_s"] = time.perf_counter() - t0
    if announce:
        print(
            f"[sweep task] {'finished' if outcome['status'] == 'ok' else 'FAILED'} {spec.run_id} "
            f"in {outcome['wall_s']:.0f} s",
            file=sys.stderr,
            flush=True,
        )
    return outcome


def failed(spec: RunSpec, error: str) -> dict[str, Any]:
    return {
        "index": spec.index,
        "run_id": spec.run_id,
        "status": "failed",
        "error": error,
        "traceback": "",
        "wall_s": None,
    }


def recover(spec: RunSpec, out: Path | str, since: float, error: str) -> dict[str, Any]:
    """The outcome of a run whose result was lost in transit, from its run log if it finished
    after ``since`` (epoch seconds: a log from an earlier sweep does not count); else failed."""
    path = run_dir(out, spec) / "run.json"
    try:
        if path.stat().st_mtime >= since:
            summary = json.loads(path.read_text())["summary"]
            return {
                "index": spec.index,
                "run_id": spec.run_id,
                "status": "ok",
                "summary": summary,
                "wall_s": summary.get("wall_s"),
            }
    except (OSError, ValueError, KeyError):
        pass
    return failed(spec, error)


def reusable(
    spec: RunSpec, out: Path | str, code: str, where: Path | None = None
) -> dict[str, Any] | None:
    """The outcome of ``spec`` from a run log an earlier sweep left in ``out`` (in ``where``
    when given: ``earlier_dir``), or None.

    A log is reused only when it is complete (``run.json`` is written last), was made by the
    same simulation code (``code``: ``sim.runlog.code_fingerprint``, a hash of the packages a
    run executes, so a change to docs, tests or the analysis layer keeps the runs) and with the
    same parameters (every field of the run's parameters, defaults included, compared as the log
    stores them). Anything else is run again: a resumed sweep gives the table a fresh one would.
    """
    try:
        doc = json.loads(((where or run_dir(out, spec)) / "run.json").read_text())
        logged = doc["params"]
        summary = doc["summary"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if doc.get("code") != code or not isinstance(logged, dict):
        return None
    # Every parameter of the run, defaults included, as the log stores them (JSON values).
    wanted = json.loads(json.dumps(dataclasses.asdict(spec.params), default=str))
    if any(logged.get(k, _MISSING) != v for k, v in wanted.items()):
        return None
    if logged.get("scenario", spec.scenario) != spec.scenario:
        return None
    return {
        "index": spec.index,
        "run_id": spec.run_id,
        "status": "ok",
        "summary": summary,
        "wall_s": summary.get("wall_s") if isinstance(summary, dict) else None,
        "reused": True,
    }


_MISSING = object()


class Progress:
    """Sweep progress on stderr: runs started and finished, with the elapsed wall time."""

    def __init__(self, total: int, quiet: bool) -> None:
        self.total = total
        self.quiet = quiet
        self.t0 = time.monotonic()
        self.done = 0
        self.failures = 0

    def elapsed(self) -> str:
        s = int(time.monotonic() - self.t0)
        return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"

    def say(self, message: str) -> None:
        if not self.quiet:
            print(f"[sweep {self.elapsed()}] {message}", file=sys.stderr, flush=True)

    def started(self, spec: RunSpec) -> None:
        self.say(f"started  {spec.run_id}  ({spec.label})")

    def status(self, active: int, completed: int, total: int) -> None:
        """Spark's count of the sweep's tasks (run_spark polls it; it cannot say which ran)."""
        self.say(f"spark: {active} running, {completed}/{total} done")

    def finished(self, spec: RunSpec, outcome: dict[str, Any]) -> None:
        self.done += 1
        if outcome["status"] == "ok":
            wall = outcome.get("wall_s")
            took = f" in {wall:.0f} s" if wall is not None else ""
            self.say(f"finished {spec.run_id}{took}  [{self.done}/{self.total} done]")
        else:
            self.failures += 1
            self.say(
                f"FAILED   {spec.run_id}  ({spec.label}): {outcome['error']}  "
                f"[{self.done}/{self.total} done]"
            )


def dispatch_order(specs: Sequence[RunSpec]) -> list[RunSpec]:
    """Longest runs first (shorter makespan); ties by index. Results never depend on it."""
    return sorted(specs, key=lambda s: (-s.cost(), s.index))


def _child(spec: RunSpec, out: str, conn: multiprocessing.connection.Connection) -> None:
    conn.send(execute(spec, out))
    conn.close()


def run_local(
    specs: Sequence[RunSpec], out: Path, jobs: int, progress: Progress
) -> dict[int, dict[str, Any]]:
    """Run every spec in its own process, ``jobs`` at a time; outcomes by run index."""
    # spawn, not fork: a clean interpreter per run, safe whatever threads the parent has.
    ctx = multiprocessing.get_context("spawn")
    queue = deque(dispatch_order(specs))
    running: dict[multiprocessing.connection.Connection, tuple[Any, RunSpec]] = {}
    outcomes: dict[int, dict[str, Any]] = {}
    last_beat = time.monotonic()
    try:
        while queue or running:
            while queue and len(running) < jobs:
                spec = queue.popleft()
                recv, send = ctx.Pipe(duplex=False)
                proc = ctx.Process(
                    target=_child, args=(spec, str(out), send), name=f"sweep-{spec.run_id}"
                )
                proc.start()
                send.close()  # the child holds the only write end: EOF here means it died
                running[recv] = (proc, spec)
                progress.started(spec)
            ready = set(multiprocessing.connection.wait(list(running), timeout=5.0))
            for conn in [c for c in running if c in ready]:  # (``wait`` loses the key type)
                proc, spec = running.pop(conn)
                try:
                    outcome = conn.recv()
                except EOFError:
                    proc.join()
                    outcome = failed(spec, f"the run's process died with exit code {proc.exitcode}")
                conn.close()
                proc.join()
                outcomes[spec.index] = outcome
                progress.finished(spec, outcome)
            if running and time.monotonic() - last_beat >= HEARTBEAT_S:
                last_beat = time.monotonic()
                names = ", ".join(spec.run_id for _, spec in running.values())
                progress.say(
                    f"{len(running)} running ({names}); {progress.done}/{progress.total} done"
                )
    finally:
        # Interrupted (Ctrl-C) or failed here: stop the runs this function started.
        for conn, (proc, _) in running.items():
            if proc.is_alive():
                proc.terminate()
            proc.join()
            conn.close()
    return outcomes
