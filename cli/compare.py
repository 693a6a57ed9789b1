"""``rangecast sim compare``: the thesis' overlay and the broker systems on one workload, one
table (sim.compare runs them and builds the rows)."""

from __future__ import annotations

import argparse

from rangecast.cli.options import add_output_options, add_params, params_from_args
from rangecast.cli.output import emit, progress_for
from rangecast.sim.compare import ALL_SYSTEMS, COMPARE_WORKLOADS, compare
from rangecast.sim.event_source import CsvSource
from rangecast.sim.options import positive_float
from rangecast.sim.scenario import LATENCY_HELP


def _run(args: argparse.Namespace) -> int:
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    result = compare(
        systems,
        nodes=args.nodes,
        subs_per_node=args.subs_per_node,
        events=args.events,
        seed=args.seed,
        latency=args.latency,
        csv=params_from_args(CsvSource, args),
        progress=lambda system: progress_for(args, system),
        out_dir=args.out,
        force=args.force,
        workload=args.workload,
        publishers=args.publishers,
    )
    emit(args, result.json(), result.table)
    return 0 if result.succeeded() else 1


def add_compare_parser(top: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``sim compare`` under the ``sim`` command (cli.sim builds ``sim`` itself)."""
    sim = top.choices["sim"]
    sims = next(a for a in sim._actions if isinstance(a, argparse._SubParsersAction))
    p = sims.add_parser(
        "compare",
        help="run the thesis overlay and the broker systems on one workload; one table",
        description="Every system on one workload of the same seed and sizes, checked by the "
        "same oracle; exit status 1 if any system misses, duplicates or falsely delivers an "
        "event (docs/baselines.md, 'Comparison').",
    )
    p.add_argument(
        "--systems",
        default=",".join(ALL_SYSTEMS),
        help=f"comma-separated, in table order, of {','.join(ALL_SYSTEMS)}",
    )
    p.add_argument("--nodes", type=int, default=500, help="nodes (every one a broker)")
    p.add_argument(
        "--subs-per-node", type=positive_float, default=5.0, help="subscriptions per node"
    )
    p.add_argument("--events", type=int, default=1000, help="events to publish")
    p.add_argument("--seed", type=int, default=1, help="seed of every random stream")
    p.add_argument("--latency", default="synthetic", help=LATENCY_HELP)
    p.add_argument(
        "--workload",
        choices=COMPARE_WORKLOADS,
        default="thesis",
        help="thesis: a random publisher per event, full-domain advertisements; clustered: "
        "POP/GRAPE's (long-lived publishers, one advertisement box each, 5%% of the "
        "subscribers high-rated at one broker), where every system's own mechanism can act",
    )
    p.add_argument(
        "--publishers",
        type=int,
        default=0,
        help="clustered: publishers (0: events / (2 x the POP/GRAPE threshold), so each "
        "publishes enough for relocation to act)",
    )
    add_params(p, CsvSource)  # --events-from, --missing, --columns
    p.add_argument(
        "--out",
        metavar="DIR",
        help="write each system's run log to DIR/<system>/ and the table to DIR/compare.json; "
        "'rangecast report DIR' draws the comparison page (docs/run-logs.md)",
    )
    p.add_argument("--force", action="store_true", help="replace an earlier comparison in --out")
    add_output_options(p, json_help="print one JSON object (the rows under 'rows')")
    p.set_defaults(func=_run)
