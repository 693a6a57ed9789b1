"""A sweep: run a plan's runs (processes or Spark), then one table and report.

The table is written before the report is built, and failed runs stay in it as rows with their
error: a run or report that fails loses nothing that finished. The exit status is 0 only when
every run finished, every oracle check was clean and the report (if asked for) was built.
The command line (``rangecast sim sweep``) is cli.sweep.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rangecast.analysis.sweep.table as table
from rangecast.analysis.sweep.plan import THESIS, Plan
from rangecast.analysis.sweep.runs import (
    Progress,
    earlier_dir,
    renumbered_dirs,
    reusable,
    run_dir,
    run_local,
)
from rangecast.dht.errors import LocalProtocolError
from rangecast.sim.broker_experiment import SYSTEMS
from rangecast.sim.outputs import ensure_writable_dir
from rangecast.sim.runlog import code_fingerprint

DEFAULT_MASTER = "local[2]"


@dataclass
class SweepResult:
    out: Path
    rows: list[dict[str, Any]]
    document: dict[str, Any]
    #: Runs that raised or died.
    failed: int
    #: Runs whose deliveries disagree with the oracle (missed, duplicated or false).
    mismatched: int
    #: The report's error, or why it was not built; None when built or not asked for.
    report_problem: str | None
    #: Why the report was skipped or left runs out (not an error): plans of other scenarios.
    report_note: str | None = None

    @property
    def ok(self) -> bool:
        return self.failed == 0 and self.mismatched == 0 and self.report_problem is None


#: Scenarios whose run logs the report reads: the thesis' and the broker systems'.
REPORTED = (THESIS, *SYSTEMS)


def prepare_out(out: Path, force: bool, resume: bool = False) -> None:
    """Create the sweep directory; refuse one holding anything unless ``force`` or ``resume``."""
    if out.exists() and not out.is_dir():
        raise LocalProtocolError(f"--out {out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not (force or resume):
        raise LocalProtocolError(
            f"--out {out}: directory is not empty (an earlier sweep?); use --resume to keep its "
            "finished runs, or --force to replace the files of the runs this plan makes"
        )
    try:
        ensure_writable_dir(out / "runs")
    except OSError as exc:
        raise LocalProtocolError(
            f"--out {out}: cannot write the sweep there ({exc.strerror or exc})"
        ) from None


def run_sweep(
    plan: Plan,
    out: Path,
    *,
    spark: bool = False,
    master: str = DEFAULT_MASTER,
    jobs: int = 1,
    report: bool = True,
    quiet: bool = False,
    force: bool = False,
    resume: bool = False,
    reused: dict[int, dict[str, Any]] | None = None,
    progress: Progress | None = None,
) -> SweepResult:
    """Run ``plan`` into ``out``: run logs in ``out/runs/``, the table, and (Spark) the report.
    ``progress``: where progress goes (a caller's own, e.g. with an ETA over more than this
    sweep); by default a ``Progress`` on stderr, silent when ``quiet``. ``resume``: keep the
    runs an earlier, interrupted sweep into ``out`` finished with the same code and parameters
    (``runs.reusable``) and run only the others; ``reused``: those runs, when the caller has
    already looked them up (``finished_runs``), so the logs are not read twice."""
    if jobs < 1:
        raise LocalProtocolError("--jobs must be at least 1")
    prepare_out(out, force, resume)
    if not resume:
        reused = {}
    elif reused is None:
        reused = finished_runs(plan, out, adopt=True)
    todo = [spec for spec in plan.runs if spec.index not in reused]
    progress = progress or Progress(len(todo), quiet)
    where = f"Spark ({master})" if spark else f"{jobs} local process{'es' if jobs > 1 else ''}"
    progress.say(f"plan {plan.name} ({plan.source}): {len(plan.runs)} runs on {where}, into {out}")
    if resume:
        progress.say(
            f"resuming: {len(reused)} of {len(plan.runs)} runs already finished in {out} with this "
            f"code and these parameters; {len(todo)} to run"
        )
    wall0 = time.perf_counter()
    session = owned_session = None
    report_problem: str | None = None
    report_note: str | None = None
    try:
        if spark:
            from rangecast.analysis.sweep.spark import active_session, run_spark, spark_session

            # A session that was already running (a notebook's, a test's) is used, not stopped.
            owned = active_session() is None
            session = spark_session(master)
            owned_session = session if owned else None
            outcomes = run_spark(session, todo, out, progress) if todo else {}
        else:
            outcomes = run_local(todo, out, jobs, progress)
        outcomes.update(reused)
        rows = table.build_rows(plan, outcomes)
        failures = [
            {
                "run": o["run_id"],
                "label": plan.runs[i].label,
                "error": o.get("error"),
                "traceback": o.get("traceback", ""),
            }
            for i, o in sorted(outcomes.items())
            if o.get("status") != "ok"
        ]
        facts: dict[str, Any] = {
            "executor": "spark" if spark else "processes",
            "master": master if spark else None,
            "jobs": None if spark else jobs,
            "runs": len(rows),
            "failed": len(failures),
            "failures": failures,
            "wall_s": time.perf_counter() - wall0,
            "report": None,
        }
        # The table first: whatever happens to the report, the runs' figures are on disk.
        table.write(out, plan, rows, facts)
        progress.say(f"table written: {out / 'sweep.parquet'}, {out / 'sweep.json'}")
        # The report reads thesis and broker-system run logs (the systems comparison); the
        # other scenarios' runs are left out, said once.
        others = sorted({s for s in plan.scenarios if s not in REPORTED})
        reported = [s for s in plan.scenarios if s in REPORTED]
        if spark and report and others:
            report_note = (
                f"no report for {', '.join(others)} runs (the report reads thesis and broker "
                "runs only)"
                if not reported
                else f"the report covers the {', '.join(reported)} runs only, not "
                f"{', '.join(others)}"
            )
            facts["report_note"] = report_note
            progress.say(report_note)
        if spark and report and reported:
            ok_dirs = [
                run_dir(out, plan.runs[r["index"]])
                for r in rows
                if r["status"] == "ok" and plan.runs[r["index"]].scenario in REPORTED
            ]
            report_problem = _build_report(ok_dirs, session, master, out, progress)
            if report_problem is None:
                facts["report"] = "report.html"
            else:
                facts["report_problem"] = report_problem
            facts["wall_s"] = time.perf_counter() - wall0
            table.write(out, plan, rows, facts)
        elif report_note is not None:
            table.write(out, plan, rows, facts)
    finally:
        if owned_session is not None:
            owned_session.stop()
    mismatched = sum(
        1
        for r in rows
        # (.get: a scenario without an oracle has none of these columns)
        if r["status"] == "ok"
        and (r.get("missed") or r.get("duplicates") or r.get("false_positives"))
    )
    progress.say(
        f"done: {len(rows) - len(failures)}/{len(rows)} runs finished, {len(failures)} failed, "
        f"{mismatched} with oracle mismatches"
    )
    return SweepResult(
        out,
        rows,
        table.document(plan, rows, facts),
        len(failures),
        mismatched,
        report_problem,
        report_note,
    )


def finished_runs(plan: Plan, out: Path, *, adopt: bool = False) -> dict[int, dict[str, Any]]:
    """The runs of ``plan`` that an earlier sweep into ``out`` finished with this code and the
    same parameters, as outcomes by run index (``runs.reusable``).

    A finished log is found under its own name or under an earlier index (``runs.earlier_dir``:
    a plan that gained a part numbers the runs after it differently). ``adopt``: rename such a
    log to the run's name now (a resumed sweep; a dry run only counts it), replacing whatever
    an unfinished attempt left there."""
    code = code_fingerprint()
    found = renumbered_dirs(out)
    reused: dict[int, dict[str, Any]] = {}
    for spec in plan.runs:
        where = earlier_dir(spec, out, found)
        outcome = reusable(spec, out, code, where)
        if outcome is None:
            continue
        own = run_dir(out, spec)
        if adopt and where != own:
            if own.exists():
                shutil.rmtree(own)
            where.rename(own)
        reused[spec.index] = outcome
    return reused


def _build_report(
    run_dirs: list[Path], session: Any, master: str, out: Path, progress: Progress
) -> str | None:
    """One report over the finished runs (analysis.report): the problem as text, None if built."""
    if not run_dirs:
        return "no run finished, so there is nothing to report"
    try:
        from rangecast.analysis.report.build import build_report
    except ImportError as exc:
        return f"analysis.report is not available ({exc})"
    from rangecast.analysis.sweep.spark import watch_report

    progress.say(f"building the report over {len(run_dirs)} runs")
    try:
        with watch_report(progress.say, session):
            built = build_report(
                run_dirs,
                master=master,
                html=out / "report.html",
                out_dir=out,
                spark=session,
                progress=progress.say,
            )
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    progress.say(f"report written: {out / 'report.html'}")
    # The report recomputes every figure from the logs; a disagreement with a run's own summary
    # is a bug in one of the two, not a matter of taste.
    mismatches = int(built.get("mismatches", 0) or 0)
    if mismatches:
        return f"{mismatches} figures recomputed from the logs disagree with the runs' summaries"
    return None
