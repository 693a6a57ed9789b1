"""One subscribe/publish round against live peers, checked by brute-force matching: what the
runtime tests run after an attack or a fault to show that the swarm still delivers exactly."""

from __future__ import annotations

import random
from collections import Counter

import trio

from rangecast.pubsub.schema import THESIS_SCHEMA
from rangecast.runtime.client import ClientSubscription, connect
from rangecast.sim.workload import thesis_workload


async def oracle_round(
    sub_ports: tuple[int, int],
    pub_ports: tuple[int, int],
    seed: int,
    n_subs: int,
    n_events: int,
) -> tuple[int, int, int]:
    """Subscribe through the peers at ``sub_ports`` (alternately), publish through those at
    ``pub_ports``; (missed, duplicates, false positives) against brute-force matching."""
    rng = random.Random(seed)
    workload = thesis_workload(random.Random(seed + 1))
    subs = [workload.subscription(rng) for _ in range(n_subs)]
    events = [workload.event(rng) for _ in range(n_events)]
    names = [a.name for a in THESIS_SCHEMA.attributes]
    got: dict[int, Counter[int]] = {k: Counter() for k in range(len(subs))}
    eids: list[int] = []

    async def collect(k: int, sub: ClientSubscription) -> None:
        async for d in sub:
            got[k][d.eid] += 1

    async with (
        connect("127.0.0.1", sub_ports[0]) as a,
        connect("127.0.0.1", sub_ports[1]) as b,
        connect("127.0.0.1", pub_ports[0]) as p1,
        connect("127.0.0.1", pub_ports[1]) as p2,
        trio.open_nursery() as readers,
    ):
        for k, s in enumerate(subs):
            handle = await (a if k % 2 else b).subscribe(s.describe(THESIS_SCHEMA))
            readers.start_soon(collect, k, handle)
        for j, values in enumerate(events):
            eids.append(await (p1 if j % 2 else p2).publish(dict(zip(names, values, strict=True))))
        want = {
            k: {e for e, v in zip(eids, events, strict=True) if s.matches(v, "strict")}
            for k, s in enumerate(subs)
        }
        total = sum(len(w) for w in want.values())
        with trio.move_on_after(60):  # a guard against a hang, not a timing assertion
            while sum(sum(c.values()) for c in got.values()) < total:
                await trio.sleep(0.05)
        await trio.sleep(0.5)
        readers.cancel_scope.cancel()
    missed = sum(len(want[k] - set(got[k])) for k in want)
    false = sum(len(set(got[k]) - want[k]) for k in want)
    dups = sum(n - 1 for c in got.values() for n in c.values() if n > 1)
    return missed, dups, false
