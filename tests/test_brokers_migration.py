"""POP and the shared migration protocol on broker cores (seed 004, Phase 3): publisher migration
at random times never loses or duplicates a publication; POP's tracing, RRM walk and migration
end to end on Fig. 1's tree."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable

from broker_harness import BrokerNet, Publishers, oracle, random_rtt
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rangecast.brokers import pop
from rangecast.brokers.broker import padres
from rangecast.brokers.clients import ClientRegistry
from rangecast.brokers.filters import Box
from rangecast.brokers.graphs import BrokerGraph, kary_tree
from rangecast.brokers.messages import Control
from rangecast.brokers.migration import OP_MCM, OP_MUM, Relocation, tree_path
from rangecast.pubsub.schema import Attribute, Schema
from rangecast.pubsub.subscription import Range

SCHEMA = Schema("g", (Attribute("x", "int", 0, 7), Attribute("y", "int", 0, 7)))
EXAMPLES = settings().max_examples


def _box(rng: random.Random) -> Box:
    ranges = {}
    for i in range(2):
        if rng.random() < 0.3:
            continue
        lo = rng.randint(0, 7)
        ranges[i] = Range(lo, rng.randint(lo, 7))
    return Box.from_ranges(SCHEMA, ranges) if ranges else Box.whole(SCHEMA)


def _tree(rng: random.Random, n: int) -> BrokerGraph:
    shape = kary_tree(range(n), rng.randint(1, 3), rng)
    g = BrokerGraph(range(n), random_rtt(rng, n, 1, 40))
    for a, b in shape.edges:
        g.add_edge(a, b, "tree")
    return g


def migrate_at_random(
    seed: int,
    n: int,
    strategy: Callable[[random.Random], Callable[[int], Relocation]],
    publishers: int = 1,
) -> tuple[BrokerNet, Publishers, int]:
    """Subscriptions everywhere (random, often overlapping windows, several inside each ad
    box), ``publishers`` publishers (clients 1, 2, ...; their ad boxes may overlap) publishing
    30 times each, in turn, at random times, while they are moved, more than once, to random
    brokers at random times, their migrations overlapping one another's and their publications
    in flight (``strategy(rng)`` gives each broker its ``Relocation``; a system may move a
    publisher on its own too): every publication reaches exactly the matching subscriptions,
    once each (the oracle), nothing is left buffered, and each ad is local at exactly its
    publisher's broker. Returns the net, the publishers and the number of moves forced."""
    rng = random.Random(seed)
    g = _tree(rng, n)
    cfg = padres(covering=rng.random() < 0.5)
    net = BrokerNet(g, [g.overlay("t", "tree")], SCHEMA, cfg, strategy(rng))
    boxes = {
        c: _box(rng) if rng.random() < 0.5 else Box.whole(SCHEMA) for c in range(1, 1 + publishers)
    }
    live = {}
    for _ in range(rng.randrange(1, 12)):
        v, box = rng.randrange(n), _box(rng)
        live[net.subscribe(v, box)] = (v, box)
    for adbox in boxes.values():  # windows inside the ad box: they cover one another, or not
        for _ in range(rng.randrange(0, 4)):
            v, box = rng.randrange(n), _inside(rng, adbox)
            live[net.subscribe(v, box)] = (v, box)
    pubs = Publishers(net)
    for c, adbox in boxes.items():
        pubs.attach(c, rng.randrange(n), adbox)
    adj = {v: list(g.neighbours(v)) for v in g.nodes}
    t = 0.0
    moves = 0
    for _ in range(30):
        for c, adbox in boxes.items():
            t += rng.choice((0.0, 0.0, rng.uniform(0, 30)))
            net.run(until=t)
            if rng.random() < 0.15 and not pubs.registry.is_paused(c):
                src = pubs.registry.broker_of(c)
                s = net.brokers[src].strategy
                assert isinstance(s, Relocation)
                ad = pubs.ads[c]
                if ad not in s.migrating:
                    target = rng.choice([v for v in g.nodes if v != src])
                    path = tree_path(adj, target, src)
                    go = s.start_migration
                    net.act(src, lambda b, now, go=go, ad=ad, p=path: go(b, ad, p, now), False)
                    moves += 1
            lo_hi = [(lo, hi) for lo, hi, _, _ in adbox.dims]
            values = tuple(float(rng.randint(int(lo), int(hi))) for lo, hi in lo_hi)
            pubs.publish(c, values, settle=False)
    net.run()
    assert len(pubs.published) == 30 * publishers  # every publication made it out
    for eid, values in pubs.published:
        assert net.deliveries_of(eid) == oracle(live, values), (eid, values)
    assert all(b.stats.dropped == 0 for b in net.brokers.values())
    for c in boxes:
        assert not pubs.registry.is_paused(c)
        # The ad is local at exactly one broker: the publisher's.
        hosts = [v for v, b in net.brokers.items() if b.tables(0).srt[pubs.ads[c]].lasthop == -1]
        assert hosts == [pubs.registry.broker_of(c)]
    return net, pubs, moves


def _inside(rng: random.Random, box: Box) -> Box:
    """A random box inside ``box`` (integer ends)."""
    ranges = {}
    for i, (lo, hi, _, _) in enumerate(box.dims):
        if rng.random() < 0.5:
            a = rng.randint(int(lo), int(hi))
            ranges[i] = Range(a, rng.randint(a, int(hi)))
    return Box.from_ranges(SCHEMA, ranges) if ranges else box


@settings(max_examples=EXAMPLES)
@given(st.integers(0, 2**32 - 1), st.integers(2, 10))
def test_migration_at_random_times_never_loses_or_duplicates(seed: int, n: int) -> None:
    """The shared protocol alone (``migrate_at_random``): only the forced moves happen."""
    _, pubs, moves = migrate_at_random(seed, n, lambda rng: lambda v: Relocation())
    assert pubs.registry.migrations(1) <= moves


@settings(max_examples=EXAMPLES)
@given(st.integers(0, 2**32 - 1), st.integers(2, 10), st.integers(2, 3))
@example(56, 10, 2)  # lost a publication before the fix (a route pruned under another's MCM)
@example(9, 9, 3)  # a subscription forwarded twice (the receiver's guess of what was dropped)
def test_concurrent_migrations_never_lose_or_duplicate(seed: int, n: int, k: int) -> None:
    """Several publishers moving at once over shared paths (``migrate_at_random``)."""
    _, pubs, moves = migrate_at_random(seed, n, lambda rng: lambda v: Relocation(), k)
    assert sum(pubs.registry.migrations(c) for c in range(1, k + 1)) <= moves


def test_a_migration_keeps_the_routes_of_another_under_way() -> None:
    """The clustered GRAPE run's loss (3 events at the hot broker), at its smallest: on the
    line 0 - 1 - 2, B moves 2 -> 0; A publishes at 2 right behind B's MCM, then moves 2 -> 0
    too. A's MUM (0 -> 1, fast) passes 1 before B's MCM (2 -> 1, slow) does, so when B's MCM
    cleans up at 1, A's ad already points at 0: A's subscription from 0 looks unneeded. But A's
    publication, sent by 2 before A's pause, is right behind that MCM and needs it (A is still
    moving at 1: counted at its old side, the entry stays)."""
    g = BrokerGraph(range(3), [[0, 2, 22], [2, 0, 20], [22, 20, 0]])
    g.add_edge(0, 1, "tree")
    g.add_edge(1, 2, "tree")
    net = BrokerNet(g, [g.overlay("t", "tree")], SCHEMA, padres(), lambda v: Relocation())
    a_box = Box.from_ranges(SCHEMA, {0: Range(0, 3)})
    b_box = Box.from_ranges(SCHEMA, {0: Range(4, 7)})
    live = {net.subscribe(0, box): (0, box) for box in (a_box, b_box)}
    pubs = Publishers(net)
    pubs.attach(1, 2, a_box)
    pubs.attach(2, 2, b_box)

    def move(client: int) -> None:
        ad, s = pubs.ads[client], net.brokers[2].strategy
        assert isinstance(s, Relocation)
        net.act(2, lambda b, now: s.start_migration(b, ad, [0, 1, 2], now), False)

    l01, l12 = g.latency(0, 1), g.latency(1, 2)
    t0 = net.now
    move(2)
    net.run(until=t0 + l01 + l12)  # B's MUM reached 2, its MCM is on 2 -> 1
    assert any(s.msg.op == OP_MCM for s in net.log if isinstance(s.msg, Control))
    pubs.publish(1, (1.0, 0.0), settle=False)  # behind B's MCM
    move(1)  # A's MUM reaches 1 (l01) before B's MCM does (l12)
    net.run()
    assert [pubs.registry.broker_of(c) for c in (1, 2)] == [0, 0]
    assert len(pubs.published) == 1
    for eid, values in pubs.published:
        assert net.deliveries_of(eid) == oracle(live, values), (eid, values)
    # Once both migrations are over, the path keeps nothing for subscribers at 0.
    assert not net.brokers[1].tables(0).prt and not net.brokers[2].tables(0).prt


def test_migration_moves_the_route_and_cleans_the_path() -> None:
    g = kary_tree(range(7), 2)  # 0: 1, 2; 1: 3, 4; 2: 5, 6
    net = BrokerNet(g, [g.overlay("t")], SCHEMA, padres(), lambda v: Relocation())
    sid = net.subscribe(6, Box.from_ranges(SCHEMA, {0: Range(2, 3)}))
    pubs = Publishers(net)
    ad = pubs.attach(7, 3, Box.whole(SCHEMA))
    assert set(net.brokers[1].tables(0).prt) == {sid}  # the subscription climbed to 3
    net.log.clear()
    net.act(3, lambda b, now: b.strategy.start_migration(b, ad, [5, 2, 0, 1, 3], now))  # type: ignore[attr-defined]
    ctl = [(s.msg.op, s.src, s.dst) for s in net.log if isinstance(s.msg, Control)]
    assert ctl == [(OP_MUM, 5, 2), (OP_MUM, 2, 0), (OP_MUM, 0, 1), (OP_MUM, 1, 3),
                   (OP_MCM, 3, 1), (OP_MCM, 1, 0), (OP_MCM, 0, 2), (OP_MCM, 2, 5)]  # fmt: skip
    assert pubs.registry.broker_of(7) == 5
    # The path toward the old source no longer holds the subscription; 5 does.
    assert all(sid not in net.brokers[v].tables(0).prt for v in (0, 1, 3))
    assert sid in net.brokers[5].tables(0).prt
    pubs.publish(7, (2.0, 0.0))
    eid = pubs.published[-1][0]
    assert [(s.src, s.dst) for s in net.publications(eid)] == [(5, 2), (2, 6)]
    assert net.deliveries_of(eid) == Counter({(6, sid): 1})


def test_client_registry_buffers_while_paused() -> None:
    reg: ClientRegistry[int] = ClientRegistry()
    reg.attach(1, 10, home=3)
    assert reg.publish(1, 100) == 10 and reg.home_of(1) == 3
    reg.pause(1)
    assert reg.publish(1, 101) is None and reg.publish(1, 102) is None
    assert reg.resume(1, 11) == [101, 102]
    assert reg.broker_of(1) == 11 and reg.migrations(1) == 1 and reg.publish(1, 103) == 11


# -------------------------------------------------------------------- POP end to end, Fig. 1
FIG1 = ["B1-B2", "B1-B4", "B1-B5", "B2-B3", "B5-B6", "B6-B7", "B6-B8"]
FIG1_DELIVERIES = {"B1": 1, "B2": 4, "B3": 2, "B4": 3, "B5": 0, "B6": 5, "B7": 5, "B8": 5}


def test_pop_traces_walks_and_moves_the_publisher_to_b6() -> None:
    ids = {f"B{i}": i - 1 for i in range(1, 9)}
    g = BrokerGraph(range(8))
    for e in FIG1:
        a, b = e.split("-")
        g.add_edge(ids[a], ids[b], "tree")
    net = BrokerNet(
        g, [g.overlay("t", "tree")], SCHEMA, padres(),
        lambda v: pop.PopStrategy(random.Random(v), threshold=4),
    )  # fmt: skip
    live = {}
    for name, k in FIG1_DELIVERIES.items():
        for _ in range(k):  # k subscribers at the broker, each receiving every publication
            live[net.subscribe(ids[name], Box.whole(SCHEMA))] = (ids[name], Box.whole(SCHEMA))
    pubs = Publishers(net)
    pubs.attach(1, ids["B1"], Box.whole(SCHEMA))
    src = net.brokers[ids["B1"]].strategy
    assert isinstance(src, pop.PopStrategy)
    for i in range(12):
        net.now = float(i)
        pubs.publish(1, (1.0, 1.0))
    assert pubs.registry.broker_of(1) == ids["B6"]  # the weighted 1-median
    kinds = Counter(s.msg.op for s in net.log if isinstance(s.msg, Control))
    assert kinds[pop.OP_RRM] == 2 and kinds[pop.OP_RAM] == 2  # B1 -> B5 -> B6, back B6 -> B5 -> B1
    assert kinds[OP_MUM] == 2 and kinds[OP_MCM] == 2
    assert kinds[pop.OP_TRM] >= 4 * 7  # every traced publication: one TRM per reached broker
    for eid, values in pubs.published:
        assert net.deliveries_of(eid) == oracle(live, values)
    # After the move the publications start at B6: B6 -> B5 -> B1 -> (B2, B4)... 7 messages,
    # as from B1 (a tree spanning all 8); the walk's gain is in hops per delivery.
    eid = pubs.published[-1][0]
    assert net.publications(eid)[0].src == ids["B6"]
