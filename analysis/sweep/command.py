"""``rangecast sim sweep PLAN``: run a plan's runs (processes or Spark), then one table and report.

The table is written before the report is built, and failed runs stay in it as rows with their
error: a run or report that fails loses nothing that finished. The exit status is 0 only when
every run finished, every oracle check was clean and the report (if asked for) was built.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rangecast.analysis.sweep.table as table
from rangecast.analysis.sweep.plan import Plan, load_plan, shipped_plans
from rangecast.analysis.sweep.runs import Progress, run_dir, run_local
from rangecast.dht.errors import LocalProtocolError
from rangecast.sim.outputs import ensure_writable_dir

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

    @property
    def ok(self) -> bool:
        return self.failed == 0 and self.mismatched == 0 and self.report_problem is None


def prepare_out(out: Path, force: bool) -> None:
    """Create the sweep directory; refuse one holding anything unless ``force``."""
    if out.exists() and not out.is_dir():
        raise LocalProtocolError(f"--out {out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise LocalProtocolError(
            f"--out {out}: directory is not empty (an earlier sweep?); use --force to replace "
            "the files of the runs this plan makes"
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
) -> SweepResult:
    """Run ``plan`` into ``out``: run logs in ``out/runs/``, the table, and (Spark) the report."""
    if jobs < 1:
        raise LocalProtocolError("--jobs must be at least 1")
    prepare_out(out, force)
    progress = Progress(len(plan.runs), quiet)
    where = f"Spark ({master})" if spark else f"{jobs} local process{'es' if jobs > 1 else ''}"
    progress.say(f"plan {plan.name} ({plan.source}): {len(plan.runs)} runs on {where}, into {out}")
    wall0 = time.perf_counter()
    session = owned_session = None
    report_problem: str | None = None
    try:
        if spark:
            from rangecast.analysis.sweep.spark import active_session, run_spark, spark_session

            # A session that was already running (a notebook's, a test's) is used, not stopped.
            owned = active_session() is None
            session = spark_session(master)
            owned_session = session if owned else None
            outcomes = run_spark(session, plan.runs, out, progress)
        else:
            outcomes = run_local(plan.runs, out, jobs, progress)
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
        if spark and report:
            ok_dirs = [run_dir(out, plan.runs[r["index"]]) for r in rows if r["status"] == "ok"]
            report_problem = _build_report(ok_dirs, session, master, out, progress)
            if report_problem is None:
                facts["report"] = "report.html"
            else:
                facts["report_problem"] = report_problem
            facts["wall_s"] = time.perf_counter() - wall0
            table.write(out, plan, rows, facts)
    finally:
        if owned_session is not None:
            owned_session.stop()
    mismatched = sum(
        1
        for r in rows
        if r["status"] == "ok" and (r["missed"] or r["duplicates"] or r["false_positives"])
    )
    progress.say(
        f"done: {len(rows) - len(failures)}/{len(rows)} runs finished, {len(failures)} failed, "
        f"{mismatched} with oracle mismatches"
    )
    return SweepResult(
        out, rows, table.document(plan, rows, facts), len(failures), mismatched, report_problem
    )


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
    progress.say(f"building the report over {len(run_dirs)} runs")
    try:
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


def _sweep_cmd(args: argparse.Namespace) -> int:
    if args.master and not args.spark:
        raise LocalProtocolError("--master needs --spark")
    plan = load_plan(args.plan)
    out = Path(args.out) if args.out else Path("out") / "sweeps" / plan.name
    result = run_sweep(
        plan,
        out,
        spark=args.spark,
        master=args.master or DEFAULT_MASTER,
        jobs=args.jobs,
        report=not args.no_report,
        quiet=args.quiet,
        force=args.force,
    )
    if args.json:
        print(json.dumps(result.document, sort_keys=True))
    else:
        print(table.render(plan, result.rows))
        for f in result.document["failures"]:
            print(f"FAILED {f['run']} ({f['label']}): {f['error']}")
        if result.report_problem is not None:
            print(f"no report: {result.report_problem}")
        elif args.spark and not args.no_report:
            print(f"report: {out / 'report.html'}")
        print(f"table: {out / 'sweep.parquet'} and {out / 'sweep.json'}")
    if result.report_problem is not None and not args.quiet:
        print(f"rangecast: report not built: {result.report_problem}", file=sys.stderr)
    return 0 if result.ok else 1


def add_sweep_parser(sims: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``sim sweep``."""
    p = sims.add_parser(
        "sweep",
        help="run a plan of scenarios x parameters x seeds (processes or Spark), one table",
        description="Run every (parameter combination, seed) of a TOML plan as an independent "
        "simulator run, then collect one table (DIR/sweep.parquet, DIR/sweep.json) and, with "
        "--spark, one report (DIR/report.html). See docs/sweeps.md.",
    )
    p.add_argument(
        "plan",
        metavar="PLAN",
        help=f"a plan file, or the name of a shipped plan ({', '.join(shipped_plans())})",
    )
    p.add_argument(
        "--spark", action="store_true", help="run each run as a Spark task, then build the report"
    )
    p.add_argument(
        "--master", metavar="URL", help=f"Spark master for --spark (default {DEFAULT_MASTER})"
    )
    p.add_argument(
        "--out", metavar="DIR", help="where run logs, table and report go (default out/sweeps/NAME)"
    )
    p.add_argument(
        "--force", action="store_true", help="write into a non-empty DIR (replacing its runs)"
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="runs at a time in local processes, without --spark (default 1)",
    )
    p.add_argument("--no-report", action="store_true", help="with --spark, skip the report")
    p.add_argument("--json", action="store_true", help="print one JSON object (sweep.json)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=_sweep_cmd)
