"""End to end on real sockets: a 16-peer swarm in one process, subscriptions installed through
several peers' client APIs, events published through others, every delivery compared with a
brute-force oracle."""

from __future__ import annotations

import random
from collections import Counter

import pytest
import trio

from rangecast.pubsub.schema import THESIS_SCHEMA
from rangecast.runtime.client import ClientSubscription, connect
from rangecast.runtime.inprocess import start_local_swarm
from rangecast.runtime.peer import PeerConfig
from rangecast.sim.workload import thesis_workload


@pytest.mark.parametrize("dht", ["pastry", "kademlia"])
def test_sixteen_peers_deliver_exactly_what_the_oracle_expects(dht: str) -> None:
    rng = random.Random(6)
    workload = thesis_workload(random.Random(60))
    subs = [workload.subscription(rng) for _ in range(200)]
    events = [workload.event(rng) for _ in range(500)]
    names = [a.name for a in THESIS_SCHEMA.attributes]
    got: dict[int, Counter[int]] = {}
    published: list[int] = []

    async def collect(k: int, sub: ClientSubscription) -> None:
        async for d in sub:
            got[k][d.eid] += 1

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            peers = await start_local_swarm(
                nursery, 16, seed=6, config=PeerConfig(dht=dht, id_difficulty=0)
            )
            ports = [p.address.port for p in peers]  # type: ignore[union-attr]
            async with (
                connect("127.0.0.1", ports[1]) as a,
                connect("127.0.0.1", ports[6]) as b,
                connect("127.0.0.1", ports[11]) as c,
                connect("127.0.0.1", ports[15]) as pub1,
                connect("127.0.0.1", ports[8]) as pub2,
                trio.open_nursery() as readers,
            ):
                clients = [a, b, c]
                for k, s in enumerate(subs):
                    got[k] = Counter()
                    handle = await clients[k % 3].subscribe(s.describe(THESIS_SCHEMA))
                    readers.start_soon(collect, k, handle)
                expected_total = 0
                for j, values in enumerate(events):
                    via = pub1 if j % 2 else pub2
                    published.append(await via.publish(dict(zip(names, values, strict=True))))
                    expected_total += sum(
                        1 for s in subs if s.matches(values, THESIS_SCHEMA.partial)
                    )
                # Wait for the deliveries (a guard against a hang, not a timing assertion),
                # then a quiet second in which a duplicate would show up.
                with trio.move_on_after(120):
                    while sum(sum(c.values()) for c in got.values()) < expected_total:
                        await trio.sleep(0.05)
                await trio.sleep(1.0)
                readers.cancel_scope.cancel()
            for p in peers:
                p.stop()

    trio.run(main)
    assert len(set(published)) == len(events)
    missed = duplicates = false = 0
    for k, s in enumerate(subs):
        want = {eid for eid, v in zip(published, events, strict=True) if s.matches(v, "strict")}
        have = got[k]
        missed += len(want - set(have))
        false += len(set(have) - want)
        duplicates += sum(n - 1 for n in have.values() if n > 1)
    assert (missed, duplicates, false) == (0, 0, 0)
    assert sum(len(c) for c in got.values()) > 1000  # the workload really matches


def test_a_crashed_peer_is_detected_by_keepalives_and_the_rest_still_deliver() -> None:
    from dataclasses import replace

    from rangecast.runtime.inprocess import leaf_sets_converged
    from rangecast.runtime.peer import RUNTIME_PASTRY, PeerConfig

    fast = PeerConfig(
        pastry=replace(RUNTIME_PASTRY, keepalive_s=0.5, fail_after_s=1.5), id_difficulty=0
    )
    names = [a.name for a in THESIS_SCHEMA.attributes]

    async def main() -> tuple[bool, list[int], int]:
        async with trio.open_nursery() as nursery:
            peers = await start_local_swarm(nursery, 6, seed=9, config=fast)
            victim = peers[4]
            victim.crash()  # no Leave: only the keep-alives can tell
            await victim.stopped.wait()
            with trio.move_on_after(60):  # guard against a hang
                while not leaf_sets_converged(peers):
                    await trio.sleep(0.1)
            converged = leaf_sets_converged(peers)
            failed = [p.dht.stats.peers_failed for p in peers if p is not victim]
            got = 0
            async with (
                connect("127.0.0.1", peers[1].address.port) as a,  # type: ignore[union-attr]
                connect("127.0.0.1", peers[2].address.port) as b,  # type: ignore[union-attr]
            ):
                sub = await a.subscribe("Attr1 >= 0")
                await b.publish(dict(zip(names, (1.0, 2.0, 3.0, 4.0), strict=True)))
                with trio.move_on_after(30):
                    async for _ in sub:
                        got += 1
                        break
            for p in peers:
                if p is not victim:
                    p.stop()
            return converged, failed, got

    converged, failed, got = trio.run(main)
    assert converged
    assert sum(failed) >= 1  # its neighbours declared it failed
    assert got == 1


@pytest.mark.parametrize("dht", ["pastry", "kademlia"])
def test_four_of_sixteen_peers_crashing_lose_no_subscription_of_the_living(dht: str) -> None:
    """Real peers, replicated tree nodes (k = 3): four peers die without a word; once the
    keep-alives have noticed and replicas have taken over, events published afterwards reach
    every live matching subscriber exactly once."""
    from dataclasses import replace

    from rangecast.pubsub.node import OverlayConfig
    from rangecast.runtime.inprocess import leaf_sets_converged
    from rangecast.runtime.peer import RUNTIME_KADEMLIA, RUNTIME_PASTRY, PeerConfig

    # Everything on a short fuse, so the test needs seconds, not minutes: failure detection,
    # subscriber refresh (which restores pieces whose replicas had not arrived yet when their
    # primary died) and the wait before a leaf lost whole is recreated.
    # A small leaf capacity spreads the tree over the swarm, so the victims do host some of it.
    fast = PeerConfig(
        capacity=4,
        dht=dht,
        pastry=replace(RUNTIME_PASTRY, keepalive_s=0.5, fail_after_s=1.5),
        kademlia=replace(RUNTIME_KADEMLIA, keepalive_s=0.5, fail_after_s=1.5),
        overlay=OverlayConfig(refresh_s=2.0, park_timeout_s=2.0),
        id_difficulty=0,  # no id puzzle: the keys of 16 peers would take seconds to grind
    )
    rng = random.Random(16)
    workload = thesis_workload(random.Random(160))
    subs = [workload.subscription(rng) for _ in range(120)]
    events = [workload.event(rng) for _ in range(150)]
    names = [a.name for a in THESIS_SCHEMA.attributes]
    got: dict[int, Counter[int]] = {k: Counter() for k in range(len(subs))}
    published: list[int] = []
    report: dict[str, int] = {}

    async def collect(k: int, sub: ClientSubscription) -> None:
        async for d in sub:
            got[k][d.eid] += 1

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            peers = await start_local_swarm(nursery, 16, seed=16, config=fast)
            victims = [peers[i] for i in (2, 5, 9, 13)]
            living = [p for p in peers if p not in victims]
            ports = [p.address.port for p in living]  # type: ignore[union-attr]
            async with trio.open_nursery() as readers:
                clients = []
                async with (
                    connect("127.0.0.1", ports[0]) as a,
                    connect("127.0.0.1", ports[4]) as b,
                    connect("127.0.0.1", ports[8]) as c,
                    connect("127.0.0.1", ports[11]) as pub,
                ):
                    clients = [a, b, c]
                    for k, s in enumerate(subs):
                        h = await clients[k % 3].subscribe(s.describe(THESIS_SCHEMA))
                        readers.start_soon(collect, k, h)
                    await trio.sleep(1.0)  # replicas receive their copies
                    for v in victims:
                        v.crash()
                        await v.stopped.wait()
                    with trio.move_on_after(60):  # guard against a hang
                        while not leaf_sets_converged(peers):
                            await trio.sleep(0.1)
                    # Reconcile rounds (promotions, re-replication) and refresh rounds.
                    await trio.sleep(8.0)
                    expected = 0
                    for values in events:
                        published.append(await pub.publish(dict(zip(names, values, strict=True))))
                        expected += sum(1 for s in subs if s.matches(values, "strict"))
                    with trio.move_on_after(60):
                        while sum(sum(x.values()) for x in got.values()) < expected:
                            await trio.sleep(0.05)
                    await trio.sleep(1.0)
                    readers.cancel_scope.cancel()
            report["promoted"] = sum(p.core.overlay.stats.promoted for p in living)  # type: ignore[union-attr]
            for p in living:
                p.stop()

    trio.run(main)
    missed = dups = false = 0
    for k, s in enumerate(subs):
        want = {e for e, v in zip(published, events, strict=True) if s.matches(v, "strict")}
        missed += len(want - set(got[k]))
        false += len(set(got[k]) - want)
        dups += sum(n - 1 for n in got[k].values() if n > 1)
    assert (missed, dups, false) == (0, 0, 0)
    assert report["promoted"] > 0
