"""The ``rangecast`` command line."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from dht.errors import RangecastError


def _route(args: argparse.Namespace) -> int:
    from sim.route_experiment import RouteParams, run_route

    params = RouteParams(
        nodes=args.nodes,
        lookups=args.lookups,
        seed=args.seed,
        bootstrap=args.bootstrap,
        fail=args.fail,
        latency=args.latency,
        repair_s=args.repair_s,
        lookup_rate_per_s=args.lookup_rate,
        loss=args.loss,
    )
    progress = (
        None if args.quiet else (lambda m: print(f"[route] {m}", file=sys.stderr, flush=True))
    )
    result = run_route(params, progress=progress)
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        _print_route_summary(result)
    return 0


def _stderr_progress(label: str) -> Callable[[str], None]:
    def say(message: str) -> None:
        print(f"[{label}] {message}", file=sys.stderr, flush=True)

    return say


def _print_route_summary(r: dict[str, Any]) -> None:
    lm = r["latency_model"]
    lines = [
        f"Pastry routing: {r['nodes']:,} nodes ({r['bootstrap']} bootstrap), "
        f"{r['lookups']:,} lookups, seed {r['seed']}",
        f"  latency model      {lm['name']} (mean RTT {lm['mean_rtt_ms']:.1f} ms)",
    ]
    if r["failed_nodes"]:
        lines.append(f"  crashed nodes      {r['failed_nodes']:,} (live {r['live_nodes']:,})")
    if "join" in r:
        j = r["join"]
        lines.append(
            f"  joins              {j['completed']:,}/{j['joins']:,} completed, "
            f"{j['leafset_mismatches']} leaf sets differ from the oracle"
        )
    lines += [
        f"  correct root       {r['correct_root_fraction']:.4%} "
        f"({r['delivered']:,} delivered, {r['duplicate_deliveries']} duplicates)",
        f"  hops               mean {r['mean_hops']:.3f}  p99 {r['p99_hops']:g}  "
        f"max {r['max_hops']}  (log16 N = {r['log16_n']:.2f})",
        f"  latency            mean {r['mean_latency_ms']:.1f} ms",
        f"  simulated messages {r['sim_messages']:,} ({r['sim_bytes']:,} bytes)",
        f"  wall               {r['wall_s']:.1f} s ({r['sim_messages_per_s']:,.0f} messages/s)",
    ]
    print("\n".join(lines))


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rangecast")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rangecast",
        description="Content-based publish/subscribe over a Pastry-style DHT: simulator and tools.",
    )
    parser.add_argument("--version", action="version", version=f"rangecast {_version()}")
    top = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sim = top.add_parser("sim", help="run a simulated experiment")
    sims = sim.add_subparsers(dest="experiment", required=True, metavar="EXPERIMENT")

    route = sims.add_parser(
        "route",
        help="route random lookups through a simulated Pastry overlay, checked by an oracle",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    route.add_argument("--nodes", type=int, default=1000, help="overlay size N")
    route.add_argument("--lookups", type=int, default=10000, help="number of lookups L")
    route.add_argument("--seed", type=int, default=1, help="seed of every random stream")
    route.add_argument(
        "--bootstrap",
        choices=("oracle", "join"),
        default="oracle",
        help="build routing state directly, or run the join protocol node by node",
    )
    route.add_argument(
        "--fail", type=float, default=0.0, help="fraction of nodes to crash before the lookups"
    )
    route.add_argument(
        "--repair-s",
        type=float,
        default=60.0,
        help="simulated seconds of failure detection and repair after crashing",
    )
    route.add_argument(
        "--latency", default="synthetic", help="'synthetic' or the path of a square RTT matrix (ms)"
    )
    route.add_argument(
        "--lookup-rate",
        type=float,
        default=10000.0,
        help="lookups injected per simulated second (Poisson)",
    )
    route.add_argument("--loss", type=float, default=0.0, help="message loss probability")
    route.add_argument("--json", action="store_true", help="print one JSON object")
    route.add_argument("--quiet", action="store_true", help="no progress on stderr")
    route.set_defaults(func=_route)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except RangecastError as exc:
        print(f"rangecast: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rangecast: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
