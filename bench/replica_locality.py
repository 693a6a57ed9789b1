"""Tree nodes an attacker's /24 holds every copy of, with replica sets the k closest peers
(today's simulator default) and spread across address groups (``dht.locality``, what the
runtime does with /24s and /48s); then what its peers take with them when they all crash.

The run is ``sim/prefix_attack.py``: ``--nodes`` replicating peers (3 copies of a leaf, 9 of
an internal node), ``--fraction`` of them in one /24 with ids placed at will, busiest tree nodes
first, with two placements:

- ``replica-set``: the k ids closest to each target key (enough to hold every copy today);
- ``neighbourhood``: the whole neighbourhood the spread chooses from (Pastry: the leaf set and
  the root, 17 ids a key), which the spread cannot see past (the limit, docs/runtime.md).

The subscribers' refresh is off, so the losses are replication's alone (with it, a lost piece
comes back at the next refresh, while the attacker drops the probes). Usage::

    .venv/bin/python bench/replica_locality.py                  # 200 peers, 5 seeds, ~1 min
    .venv/bin/python bench/replica_locality.py --dht kademlia

Prints one JSON object: per placement and setting, the seeds' captured tree nodes (of all),
captured pieces, and after the crash the subscriptions lost and deliveries missed.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from rangecast.pubsub.base import OverlayConfig
from rangecast.sim.prefix_attack import STRATEGIES, run_prefix_attack


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--fraction", type=float, default=0.2)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--events", type=int, default=100)
    ap.add_argument("--dht", default="pastry")
    args = ap.parse_args()
    overlay = OverlayConfig(refresh_s=math.inf)
    out: dict[str, Any] = {"nodes": args.nodes, "attacker_fraction": args.fraction, "dht": args.dht}
    for strategy in STRATEGIES:
        for spread in (False, True):
            runs = [
                run_prefix_attack(
                    nodes=args.nodes,
                    attacker_fraction=args.fraction,
                    dht=args.dht,
                    strategy=strategy,
                    spread=spread,
                    events=args.events,
                    seed=seed,
                    repair_s=120.0,
                    overlay=overlay,
                )
                for seed in range(1, args.seeds + 1)
            ]
            captured = sum(r["captured"] for r in runs)
            total = sum(r["tree_nodes"] for r in runs)
            out[f"{strategy} spread={'on' if spread else 'off'}"] = {
                "captured_tree_nodes": captured,
                "tree_nodes": total,
                "captured_fraction": round(captured / total, 4) if total else 0.0,
                "captured_pieces": sum(r["captured_pieces"] for r in runs),
                "pieces": sum(r["pieces"] for r in runs),
                "subscriptions_lost": sum(r["subscriptions_lost"] for r in runs),
                "subscriptions": sum(r["subscriptions"] for r in runs),
                "missed": sum(r["missed"] for r in runs),
                "expected_deliveries": sum(r["expected_deliveries"] for r in runs),
                "duplicates": sum(r["duplicates"] for r in runs),
                "false_positives": sum(r["false_positives"] for r in runs),
            }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
