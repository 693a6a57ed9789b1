"""A network partition that outlasts failure detection, then heals: with and without asking
the peers declared failed again (``dht.healing``), on Pastry and Kademlia.

Per seed: ``--nodes`` simulated peers (fast failure detection: keep-alives every 0.5 s, failed
after 1.5 s), 2 subscriptions each from the thesis workload, 3 copies of each tree node; then
every message between the even- and odd-numbered peers is lost for ``--split-s`` (ids are
random, so both halves span the ring); then ``--after-s`` with the network whole again, and
``--events`` events published from peers on both sides, checked against the brute-force oracle.
Usage::

    .venv/bin/python bench/partition.py             # 48 peers, 5 seeds, ~1 min

Prints one JSON object: per DHT and setting (``heal_s``), summed over the seeds, the live
peers whose neighbours differ from the oracle's after the heal, the deliveries expected,
missed, duplicated and false, and the heal pings sent.
"""

from __future__ import annotations

import argparse
import json
import math
import random
from collections import Counter
from typing import Any

from rangecast.dht.kademlia import KademliaConfig
from rangecast.dht.node import PastryConfig
from rangecast.pubsub.base import OverlayConfig
from rangecast.pubsub.schema import THESIS_SCHEMA
from rangecast.pubsub.subscription import Subscription
from rangecast.sim.streams import stream
from rangecast.sim.workload import THESIS_WORKLOAD, Workload
from rangecast.testkit.simnet import Key, SimOverlay, brute_force

FAST = {"keepalive_s": 0.5, "fail_after_s": 1.5, "dead_ttl_s": 5.0, "join_timeout_s": 2.0}


def dht_config(dht: str, heal_s: float) -> Any:
    if dht == "pastry":
        return PastryConfig(leaf_set_size=8, heal_s=heal_s, **FAST)
    return KademliaConfig(k=8, siblings=4, heal_s=heal_s, **FAST)


def one(dht: str, heal_s: float, seed: int, args: argparse.Namespace) -> Counter[str]:
    n = args.nodes
    net = SimOverlay(
        n, seed, THESIS_SCHEMA, dht=dht_config(dht, heal_s), config=OverlayConfig(replicas=3)
    )
    workload = Workload(THESIS_SCHEMA, THESIS_WORKLOAD, stream(seed, "layout"))
    rng = random.Random(seed)
    subs: dict[Key, Subscription] = {}
    for i in range(n):
        for _ in range(2):
            sub = workload.subscription(rng)
            subs[net.subscribe(i, sub)] = sub
    net.run_for(10.0)
    side = set(range(0, n, 2))
    net.sim.drop = lambda src, dst, msg: (src in side) != (dst in side)
    net.run_for(args.split_s)
    net.sim.drop = None
    net.run_for(args.after_s)
    out: Counter[str] = Counter(unconverged=len(net.net.leafset_mismatches()))
    eids = {}
    for k in range(args.events):
        values = workload.event(rng)
        eids[net.publish(k % n, values)] = brute_force(subs, values, THESIS_SCHEMA.partial)
        net.run_for(0.1)
    net.run_for(30.0)
    for eid, want in eids.items():
        got = Counter({(i, sid): c for (i, sid, e), c in net.received.items() if e == eid})
        out["expected"] += len(want)
        out["missed"] += sum(1 for key in want if got[key] == 0)
        out["duplicates"] += sum(c - 1 for key, c in got.items() if key in want and c > 1)
        out["false"] += sum(c for key, c in got.items() if key not in want)
    out["heal_pings"] = sum(p.dht.stats.heal_pings for p in net.peers)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=48)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--split-s", type=float, default=20.0)
    ap.add_argument("--after-s", type=float, default=120.0)
    ap.add_argument("--events", type=int, default=100)
    ap.add_argument("--heal-s", type=float, default=2.0)
    args = ap.parse_args()
    report: dict[str, dict[str, int]] = {}
    for dht in ("pastry", "kademlia"):
        for heal_s in (math.inf, args.heal_s):
            total: Counter[str] = Counter()
            for seed in range(1, args.seeds + 1):
                total += one(dht, heal_s, seed, args)
            name = f"{dht} heal_s={'off' if heal_s == math.inf else heal_s}"
            report[name] = {k: total[k] for k in sorted(total)}
    print(json.dumps({"nodes": args.nodes, "seeds": args.seeds, **report}, indent=1))


if __name__ == "__main__":
    main()
