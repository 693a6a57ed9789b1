"""``rangecast sim sweep PLAN``: the command line of analysis.sweep (docs/sweeps.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import rangecast.analysis.sweep.table as table
from rangecast.analysis.sweep.command import DEFAULT_MASTER, run_sweep
from rangecast.analysis.sweep.plan import load_plan, shipped_plans
from rangecast.cli.options import add_output_options
from rangecast.cli.output import emit
from rangecast.dht.errors import LocalProtocolError


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
        resume=args.resume,
    )

    def summary() -> str:
        lines = [table.render(plan, result.rows)]
        for f in result.document["failures"]:
            lines.append(f"FAILED {f['run']} ({f['label']}): {f['error']}")
        if result.report_note is not None:
            lines.append(f"note: {result.report_note}")
        if result.report_problem is not None:
            lines.append(f"no report: {result.report_problem}")
        elif args.spark and not args.no_report and result.document.get("report"):
            lines.append(f"report: {out / 'report.html'}")
        lines.append(f"table: {out / 'sweep.parquet'} and {out / 'sweep.json'}")
        return "\n".join(lines)

    emit(args, result.document, summary)
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
        "--resume",
        action="store_true",
        help="continue an interrupted sweep in DIR: keep the runs it finished with the same "
        "simulation code and parameters, run the rest",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="runs at a time in local processes, without --spark (default 1)",
    )
    p.add_argument("--no-report", action="store_true", help="with --spark, skip the report")
    add_output_options(p, json_help="print one JSON object (sweep.json)")
    p.set_defaults(func=_sweep_cmd)
