"""Simulator throughput and memory for ``sim route`` at scale (oracle bootstrap).

Each size runs in its own process so that peak memory (max RSS) belongs to that size alone.
Usage::

    .venv/bin/python bench/sim_throughput.py                  # 10,000 and 100,000 nodes
    .venv/bin/python bench/sim_throughput.py --nodes 10000 --lookups 100000

Prints one table and writes ``bench/results/sim_throughput.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _child(nodes: int, lookups: int, seed: int, latency: str) -> None:
    from rangecast.sim.route_experiment import RouteParams, run_route

    r = run_route(RouteParams(nodes=nodes, lookups=lookups, seed=seed, latency=latency))
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    r.pop("latency_model", None)
    r.pop("messages_by_type", None)
    r["max_rss_mib"] = rss_mib
    r["latency"] = latency
    print(json.dumps(r))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="*", default=[10_000, 100_000])
    ap.add_argument("--lookups", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--latency", default="synthetic")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args.nodes[0], args.lookups, args.seed, args.latency)
        return 0
    rows = []
    for n in args.nodes:
        print(f"running {n:,} nodes, {args.lookups:,} lookups ...", file=sys.stderr, flush=True)
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                "--nodes",
                str(n),
                "--lookups",
                str(args.lookups),
                "--seed",
                str(args.seed),
                "--latency",
                args.latency,
            ],
            check=True,
            capture_output=True,
            text=True,
            env={**os.environ},
        )
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(
        f"{'nodes':>8} {'lookups':>8} {'correct':>8} {'hops':>6} {'sim msgs':>10} "
        f"{'wall s':>7} {'boot s':>7} {'msgs/s':>9} {'lookup msgs/s':>13} {'max RSS MiB':>11}"
    )
    for r in rows:
        ph = r["wall_phases_s"]
        lk_rate = r["lookup_phase"]["messages"] / ph["lookups"] if ph["lookups"] else 0.0
        print(
            f"{r['nodes']:>8,} {r['lookups']:>8,} {r['correct_root_fraction']:>8.4f} "
            f"{r['mean_hops']:>6.3f} {r['sim_messages']:>10,} {r['wall_s']:>7.1f} "
            f"{ph['bootstrap']:>7.1f} {r['sim_messages_per_s']:>9,.0f} {lk_rate:>13,.0f} "
            f"{r['max_rss_mib']:>11,.0f}"
        )
    dest = HERE / "results"
    dest.mkdir(exist_ok=True)
    (dest / "sim_throughput.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
