"""One peer that acknowledges hops and drops what it should handle or forward, among real peers
on loopback: what end-to-end acknowledgements (``dht.e2e``) recover, and what they cost.

What it measures
----------------
A local swarm of ``--peers`` real peers (``runtime.inprocess.start_local_swarm``, the id puzzle
off) is started and one honest round run (round 0); then the peer hosting the most tree nodes
(other than the four the clients use) turns into a dropper (the test fault ``drop-all``: it acks
every routed hop and drops every routed and direct message). Then ``--rounds`` rounds, each:
``--subs`` thesis-workload subscriptions through two honest peers
(concurrently, each given ``--op-timeout`` for its install acknowledgement), ``--events``
events through two other honest peers, a wait of up to ``--wait-timeout`` for the expected
deliveries, and the brute-force oracle's verdict: subscriptions never acknowledged, deliveries
missed, duplicated, false. Frames and bytes are the peers' overlay traffic during the round.

``--e2e off`` runs the same with end-to-end acknowledgements switched off (the peers before
them); ``--no-dropper`` runs it with every peer honest (the cost of the acks alone).

Usage::

    .venv/bin/python bench/runtime_dropper.py --e2e on       # 11 peers, 1 dropper, 2 rounds
    .venv/bin/python bench/runtime_dropper.py --e2e off --json

Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from contextlib import AsyncExitStack
from dataclasses import replace
from typing import Any

import trio

from rangecast.pubsub.schema import THESIS_SCHEMA
from rangecast.runtime.client import ClientSubscription, connect
from rangecast.runtime.inprocess import start_local_swarm
from rangecast.runtime.peer import DROP_ALL, RUNTIME_PASTRY, PeerConfig, PeerRuntime
from rangecast.sim.workload import thesis_workload


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _traffic(peers: list[PeerRuntime]) -> tuple[int, int]:
    return (
        sum(p.transport.frames_out for p in peers),
        sum(p.transport.bytes_out for p in peers),
    )


async def one_round(
    args: argparse.Namespace, peers: list[PeerRuntime], entry: list[int], seed: int
) -> dict[str, Any]:
    rng = random.Random(seed)
    workload = thesis_workload(random.Random(seed + 1))
    subs = [workload.subscription(rng) for _ in range(args.subs)]
    events = [workload.event(rng) for _ in range(args.events)]
    names = [a.name for a in THESIS_SCHEMA.attributes]
    ports = [a.port for i in entry if (a := peers[i].address) is not None]
    got: dict[int, Counter[int]] = {k: Counter() for k in range(len(subs))}
    acked = [False] * len(subs)
    frames0, bytes0 = _traffic(peers)
    eids: list[int] = []

    async def collect(k: int, sub: ClientSubscription) -> None:
        async for d in sub:
            got[k][d.eid] += 1

    async with AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(connect("127.0.0.1", ports[j])) for j in range(4)
        ]
        readers = await stack.enter_async_context(trio.open_nursery())

        async def subscribe(k: int) -> None:
            with trio.move_on_after(args.op_timeout):
                handle = await clients[k % 2].subscribe(subs[k].describe(THESIS_SCHEMA))
                acked[k] = True
                readers.start_soon(collect, k, handle)

        async with trio.open_nursery() as installs:
            for k in range(len(subs)):
                installs.start_soon(subscribe, k)
        progress(f"  {sum(acked)} of {len(subs)} subscriptions acknowledged")
        for j, values in enumerate(events):
            eid = await clients[2 + j % 2].publish(dict(zip(names, values, strict=True)))
            eids.append(eid)
        want = {
            k: {e for e, v in zip(eids, events, strict=True) if subs[k].matches(v, "strict")}
            for k in range(len(subs))
            if acked[k]
        }
        total = sum(len(w) for w in want.values())
        with trio.move_on_after(args.wait_timeout):
            while sum(sum(got[k].values()) for k in want) < total:
                await trio.sleep(0.05)
        await trio.sleep(1.0)
        readers.cancel_scope.cancel()
    frames1, bytes1 = _traffic(peers)
    all_want = {
        k: {e for e, v in zip(eids, events, strict=True) if subs[k].matches(v, "strict")}
        for k in range(len(subs))
    }
    n_events = len(events)
    return {
        "subscriptions": len(subs),
        "never_acknowledged": acked.count(False),
        "expected_deliveries": sum(len(w) for w in all_want.values()),
        "missed": sum(len(all_want[k] - set(got[k])) for k in all_want),
        "duplicates": sum(n - 1 for c in got.values() for n in c.values() if n > 1),
        "false_positives": sum(len(set(got[k]) - all_want[k]) for k in all_want),
        "frames_per_event": round((frames1 - frames0) / n_events, 1),
        "bytes_per_event": round((bytes1 - bytes0) / n_events, 1),
    }


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    config = PeerConfig(id_difficulty=0, pastry=replace(RUNTIME_PASTRY, e2e_acks=args.e2e == "on"))
    result: dict[str, Any] = {"peers": args.peers, "e2e": args.e2e, "dropper": not args.no_dropper}
    async with trio.open_nursery() as swarm:
        progress(f"starting {args.peers} peers")
        peers = await start_local_swarm(swarm, args.peers, seed=args.seed, config=config)
        n = args.peers
        entry = [0, n // 2, 1, n - 1]  # subscribers through the first two, publishers the others
        progress("round 0 (every peer honest)")
        rounds = [await one_round(args, peers, entry, args.seed * 100 + 99)]
        progress(f"  {rounds[0]}")
        others = [i for i in range(n) if i not in entry]
        bad = max(others, key=lambda i: len(peers[i].status()["tree_nodes"]))
        result["dropper_tree_nodes"] = len(peers[bad].status()["tree_nodes"])
        if not args.no_dropper:
            peers[bad].set_fault(DROP_ALL)
        honest = [i for i in range(n) if i != bad]
        for r in range(args.rounds):
            progress(f"round {r + 1} (one dropper)")
            t0 = trio.current_time()
            one = await one_round(args, peers, entry, args.seed * 100 + r)
            one["wall_s"] = round(trio.current_time() - t0, 1)
            progress(f"  {one}")
            rounds.append(one)
        result["rounds"] = rounds
        e2e = [peers[i].status()["dht"]["end_to_end"] for i in honest]
        result["honest_peers"] = len(honest)
        if e2e[0] is not None:
            result["demoted_by"] = sum(1 for e in e2e if e["quarantined"])
            result["losses"] = sum(e["losses"] for e in e2e)
            result["retries"] = sum(e["retries"] for e in e2e)
        result["dropped_by_dropper"] = peers[bad].fault_dropped
        for p in peers:
            p.stop()
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peers", type=int, default=11)
    ap.add_argument("--no-dropper", action="store_true", help="every peer honest")
    ap.add_argument("--e2e", choices=("on", "off"), default="on")
    ap.add_argument("--subs", type=int, default=60)
    ap.add_argument("--events", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seed", type=int, default=18)
    ap.add_argument("--op-timeout", type=float, default=60.0, help="per install ack")
    ap.add_argument("--wait-timeout", type=float, default=90.0, help="for a round's deliveries")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    result = trio.run(bench, args)
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        for k, v in result.items():
            print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
