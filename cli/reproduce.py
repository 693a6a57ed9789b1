"""``rangecast reproduce thesis|lbdd|all``: the command line of analysis.reproduce."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rangecast.analysis.reproduce.plans import EVALUATIONS
from rangecast.analysis.sweep.command import DEFAULT_MASTER
from rangecast.dht.errors import LocalProtocolError


def _reproduce_cmd(args: argparse.Namespace) -> int:
    from rangecast.analysis.reproduce.command import _slots, dry_run, reproduce
    from rangecast.analysis.reproduce.plans import FULL, QUICK

    if args.master and not args.spark:
        raise LocalProtocolError("--master needs --spark")
    parts = [p for p in (args.parts or "").split(",") if p]
    if args.parts is not None and not parts:
        raise LocalProtocolError(f"--parts {args.parts!r}: name at least one part")
    if args.dry_run:
        # The plan and its estimated time only: nothing runs, nothing is written.
        slots = _slots(args.master or DEFAULT_MASTER) if args.spark else 2
        where = Path(args.out) if args.out and args.resume else None
        print(dry_run(args.evaluation, QUICK if args.quick else FULL, slots, parts, where))
        return 0
    out = Path(args.out) if args.out else Path("runs") / f"reproduce-{args.evaluation}"
    result = reproduce(
        args.evaluation,
        out,
        quick=args.quick,
        spark=args.spark,
        master=args.master or DEFAULT_MASTER,
        force=args.force,
        quiet=args.quiet,
        parts=parts,
        resume=args.resume,
    )
    verdicts = ", ".join(f"{f['figure']} {f['verdict']}" for f in result.document["figures"])
    print(f"figures: {verdicts}")
    for problem in result.problems:
        print(f"PROBLEM: {problem}")
    print(f"page: {out / 'report.html'}; summary: {out / 'reproduction.json'}")
    if result.problems and not args.quiet:
        print(f"rangecast: {len(result.problems)} problem(s), see above", file=sys.stderr)
    return 0 if result.ok else 1


def add_reproduce_parser(top: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``rangecast reproduce`` on the top-level subcommands."""
    p = top.add_parser(
        "reproduce",
        help="run the thesis' and the LBDD paper's evaluations; one page beside the papers",
        description="Run every experiment an evaluation needs as one sweep (Spark tasks with "
        "--spark, else two local processes), recompute every run's figures from its log with "
        "Spark, and write OUT/report.html (every figure of the thesis' Chapter 4 and the LBDD "
        "paper's table and figures, over several seeds with 95% intervals, beside the papers' "
        "values, with the reasons for the differences) and OUT/reproduction.json. "
        "See docs/reproduce.md.",
    )
    p.add_argument("evaluation", choices=EVALUATIONS, help="which evaluation")
    p.add_argument("--spark", action="store_true", help="run each run as a Spark task")
    p.add_argument(
        "--master", metavar="URL", help=f"Spark master for --spark (default {DEFAULT_MASTER})"
    )
    p.add_argument(
        "--out", metavar="DIR", help="where runs and the page go (default runs/reproduce-EVAL)"
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="tiny networks, two seeds: shows the chain works, not the papers' values",
    )
    p.add_argument("--force", action="store_true", help="write into a non-empty DIR")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue in a non-empty DIR: keep the runs an earlier reproduction there finished "
        "with the same simulation code and parameters, run the rest (with --dry-run: estimate "
        "what is left)",
    )
    p.add_argument(
        "--parts",
        metavar="PART[,PART...]",
        help="run only these parts of the plan (names as --dry-run lists them) and draw the "
        "figures they allow; a later --resume of the whole plan into the same DIR keeps them",
    )
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan (every run: part, scenario, nodes, seed, latency model, changed "
        "parameters) and its estimated wall time; run nothing, write nothing",
    )
    p.set_defaults(func=_reproduce_cmd)
