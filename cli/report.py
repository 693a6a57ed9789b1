"""``rangecast report DIR...``: the command line of the Spark report.

Registered by ``cli.main.build_parser`` through ``add_report_parser``; nothing here imports
pyspark or matplotlib until the command runs, so the rest of the CLI starts as fast as before.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from rangecast.analysis.report.session import DEFAULT_MASTER


def _json_default(x: Any) -> Any:
    if isinstance(x, Path):
        return str(x)
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return str(x)


def _report(args: argparse.Namespace) -> int:
    from rangecast.analysis.report.build import build_report

    out_dir = Path(args.out_dir)
    html = Path(args.html) if getattr(args, "html", None) else out_dir / "report.html"
    say = None if args.quiet else _stderr
    result = build_report(
        [Path(d) for d in args.dirs], master=args.master, html=html, out_dir=out_dir, progress=say
    )
    if args.json:
        print(json.dumps(result, sort_keys=True, default=_json_default))
    else:
        _print(result)
    return 1 if result["mismatches"] else 0


def _stderr(message: str) -> None:
    print(f"[report] {message}", file=sys.stderr, flush=True)


def _print(r: dict[str, Any]) -> None:
    lines = [f"Spark {r['spark']['version']} ({r['spark']['master']}, Java {r['spark']['java']})"]
    for run in r["runs"]:
        n = len(run["mismatches"])
        verdict = "all agree with the run's summary" if not n else f"{n} MISMATCHES"
        lines.append(f"  {run['dir']}  ({run['kind']}): recomputed figures: {verdict}")
        cmp = run.get("thesis_comparison")
        if cmp is not None and not cmp["applies"]:
            # The rule the run's own summary printed (sim.comparable), said again here.
            lines.append("      not the thesis' setting: " + "; ".join(cmp["differences"]))
        for m in run["mismatches"][:20]:
            lines.append(
                f"      {m['figure']}: recomputed {m['recomputed']!r}, summary {m['summary']!r}"
            )
    lines.append(f"  {len(r['figures'])} figure(s); page: {r['html']}")
    lines.append(f"  wall {r['wall_s']:.1f} s (Spark {r['spark']['wall_s']:.1f} s)")
    print("\n".join(lines))


def add_report_parser(top: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``rangecast report`` on the top-level subcommands."""
    p = top.add_parser(
        "report",
        help="recompute run logs' figures with Spark; the thesis' plots and an HTML comparison",
        description=(
            "Read run-log directories (written by 'rangecast sim ... --out DIR'; "
            "docs/run-logs.md), recompute every figure of each run's summary from the rows with "
            "Spark, check it against the summary (exit status 1 on any mismatch), draw the "
            "thesis' Figures 4.1-4.10 where the runs allow (pairs differing in --probe or --lb, "
            "several network sizes) and write an HTML page comparing with the papers."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("dirs", nargs="+", metavar="DIR", help="run-log directories")
    p.add_argument(
        "--master",
        default=DEFAULT_MASTER,
        help="Spark master URL: local, local[N], local[*], spark://host:port (must answer "
        "within 3 s), yarn, k8s://...; a cluster must see the DIRs",
    )
    p.add_argument(
        "--out-dir", default="rangecast-report", metavar="PATH", help="where the PNGs go"
    )
    p.add_argument(
        "--html",
        metavar="PATH",
        default=argparse.SUPPRESS,  # no "(default: None)" in --help
        help="the HTML page (default: report.html in the --out-dir)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=_report)
