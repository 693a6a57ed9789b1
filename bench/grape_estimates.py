"""Why GRAPE's delay priority, as printed, rarely moves a publisher on the ``popgrape63`` set-up
(docs/baselines.md, "POP and GRAPE vs no relocation").

Usage::

    .venv/bin/python bench/grape_estimates.py                 # X = 1, seeds 1-3
    .venv/bin/python bench/grape_estimates.py --sub-brokers 4 --seeds 1 2

Runs ``rangecast sim run grape --priority delay`` with the plan's settings (service times on,
no ``--link-delay``) in this process and, at every selection the publishers' brokers made, sets
Algorithm 1's estimated mean delay from the current broker against that from the best other
candidate. The difference is split into the publisher's ping (its one-way delay to the
candidate: the part a move pays) and the rest (the hops' queueing, matching and sending delays
the trace answers carry: the part a move can save). A publisher moves only when some candidate's
estimate is below the current broker's.
"""

from __future__ import annotations

import argparse
import statistics
import sys

from rangecast.brokers.grape import Grape
from rangecast.brokers.grape_strategy import GrapeStrategy
from rangecast.sim.broker_experiment import BY_SYSTEM, BrokerParams

#: analysis/plans/popgrape63.toml's settings.
PLAN = dict(
    nodes=63, tree="kary", arity=2, latency="planetlab", workload="clustered", publishers=5,
    subs_per_node=8.0, events=20000, warmup=0.5, service_ms=1.0, match_us=20.0, send_ms=1.0,
)  # fmt: skip


def measure(sub_brokers: int, seed: int) -> None:
    scenario = BY_SYSTEM["grape"]()
    params = scenario.params_type(**PLAN, priority="delay", sub_brokers=sub_brokers, seed=seed)
    assert isinstance(params, BrokerParams)
    result = scenario.run(params)
    gaps: list[float] = []
    pings: list[float] = []
    moved = 0
    for broker in scenario.bnet.brokers.values():
        strategy = broker.strategy
        if not isinstance(strategy, GrapeStrategy):
            continue
        for s in strategy.selections:
            current, others = s.candidates[0], s.candidates[1:]
            if not others:
                continue
            grape = Grape(s.infos)
            est = {c: grape.avg_delay(c, s.pings[c]) for c in s.candidates}
            best = min(others, key=lambda c: est[c])
            gaps.append((est[best] - est[current]) * 1e3)
            pings.append((s.pings[best] - s.pings[current]) * 1e3)
            moved += s.target != current
    print(
        f"X = {sub_brokers}, seed {seed}: {len(gaps)} selections, {moved} moves "
        f"({result.migrations} migrations); mean delay {result.delivery_latency_ms['mean']:.1f} ms"
    )
    if gaps:
        rest = [g - p for g, p in zip(gaps, pings, strict=True)]
        print(
            f"  best other candidate minus current, estimated mean delay: median "
            f"{statistics.median(gaps):+.1f} ms (lowest {min(gaps):+.1f}); of it the ping "
            f"{statistics.median(pings):+.1f} ms, the hops' delays "
            f"{statistics.median(rest):+.2f} ms"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sub-brokers", type=int, default=1)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    args = ap.parse_args()
    for seed in args.seeds:
        measure(args.sub_brokers, seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
