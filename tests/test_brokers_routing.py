"""Routing on the broker substrate against a brute-force oracle: SIENA and PADRES on trees, with
and without covering, under random subscriptions, unsubscriptions and publications; PADRES with
tree IDs on cyclic graphs. Every publication must reach exactly the live subscriptions it matches,
each exactly once, and covering must change the control traffic, never a delivery."""

from __future__ import annotations

import random
from collections import Counter

import msgspec
import pytest
from broker_harness import BrokerNet, oracle, random_rtt
from hypothesis import given, settings
from hypothesis import strategies as st

from rangecast.brokers.broker import PADRES_TID, Broker, RoutingConfig, Strategy, padres, siena
from rangecast.brokers.filters import Box, matches
from rangecast.brokers.graphs import BrokerGraph, kary_tree, latency_mst, scot
from rangecast.brokers.messages import Advertise, Control, Publish, Subscribe, Unsubscribe
from rangecast.dht.errors import LocalProtocolError
from rangecast.dht.wire import Message
from rangecast.pubsub.schema import Attribute, Schema
from rangecast.pubsub.subscription import Range

SCHEMA = Schema("g", (Attribute("x", "int", 0, 7), Attribute("y", "int", 0, 7)))
EXAMPLES = settings().max_examples


def _box(rng: random.Random, wide: bool = False) -> Box:
    ranges = {}
    for i in range(2):
        if rng.random() < (0.5 if wide else 0.2):
            continue  # free attribute
        lo = rng.randint(0, 7)
        hi = rng.randint(lo, 7)
        ranges[i] = Range(lo, hi)
    if not ranges:
        return Box.whole(SCHEMA)
    return Box.from_ranges(SCHEMA, ranges)


def _point(rng: random.Random, box: Box) -> tuple[float | None, ...]:
    return tuple(
        None if box.is_free(i) and rng.random() < 0.1 else float(rng.randint(int(lo), int(hi)))
        for i, (lo, hi, _, _) in enumerate(box.dims)
    )


def _run(graph: BrokerGraph, config: RoutingConfig, seed: int, steps: int) -> list[Counter]:
    """A random workload; asserts every publication against the oracle and returns what each
    one delivered (so two configurations can be compared)."""
    rng = random.Random(seed)
    net = BrokerNet(graph, [graph.overlay("o")], SCHEMA, config)
    nodes = graph.nodes
    ads: dict[int, tuple[int, Box]] = {}
    if config.advertisements:
        for v in rng.sample(nodes, max(1, len(nodes) // 2)):
            box = _box(rng, wide=True)
            ads[net.advertise(v, box)] = (v, box)
    live: dict[int, tuple[int, Box]] = {}
    results: list[Counter] = []
    for _ in range(steps):
        r = rng.random()
        if r < 0.45:
            v = rng.choice(nodes)
            box = _box(rng)
            live[net.subscribe(v, box)] = (v, box)
        elif r < 0.6 and live:
            sid = rng.choice(sorted(live))
            net.unsubscribe(live.pop(sid)[0], sid)
        elif r < 0.65 and config.advertisements:
            # A late advertisement must pull the subscriptions already installed.
            v = rng.choice(nodes)
            box = _box(rng, wide=True)
            ads[net.advertise(v, box)] = (v, box)
        else:
            if ads:
                ad = rng.choice(sorted(ads))
                v, abox = ads[ad]
                values = _point(rng, abox)
            else:
                ad, v = None, rng.choice(nodes)
                values = _point(rng, Box.whole(SCHEMA))
            eid = net.publish(v, values, ad=ad)
            got = net.deliveries_of(eid)
            assert got == oracle(live, values), (values, seed)
            results.append(got)
    # Quiescent tables: no dropped message, and every broker holds only live subscriptions.
    assert all(b.stats.dropped == 0 for b in net.brokers.values())
    for b in net.brokers.values():
        assert set(b.tables(0).prt) <= set(live)
    return results


def _tree(seed: int, n: int) -> BrokerGraph:
    rng = random.Random(seed)
    if rng.random() < 0.5:
        return kary_tree(range(n), rng.randint(1, 4), rng)
    pts = [(rng.random(), rng.random()) for _ in range(n)]
    return latency_mst(
        range(n), lambda a, b: 100 * abs(pts[a][0] - pts[b][0]) + 100 * abs(pts[a][1] - pts[b][1])
    )


@settings(max_examples=EXAMPLES)
@given(st.integers(0, 2**32), st.integers(1, 12), st.booleans())
def test_covering_never_changes_a_delivery(seed: int, n: int, with_ads: bool) -> None:
    g = _tree(seed, n)
    plain = padres() if with_ads else siena()
    covering = padres(covering=True) if with_ads else siena(covering=True)
    assert _run(g, plain, seed, 40) == _run(g, covering, seed, 40)


def test_covering_saves_subscription_messages() -> None:
    g = kary_tree(range(15), 2)
    counts = []
    for cfg in (siena(), siena(covering=True)):
        net = BrokerNet(g, [g.overlay("o")], SCHEMA, cfg)
        wide = Box.from_ranges(SCHEMA, {0: Range(0, 7)})
        net.subscribe(0, wide)
        for y in range(8):
            net.subscribe(0, Box.from_ranges(SCHEMA, {0: Range(1, 2), 1: Range(y, y)}))
        counts.append(sum(isinstance(s.msg, Subscribe) for s in net.log))
    # Covered by the wide one already sent on the origin's own links, the narrow ones never leave.
    assert counts == [9 * 14, 14]


def test_unsubscribing_a_coverer_reforwards_what_it_covered() -> None:
    g = kary_tree(range(7), 2)  # 0 with children 1, 2; 1 with 3, 4; 2 with 5, 6
    net = BrokerNet(g, [g.overlay("o")], SCHEMA, siena(covering=True))
    wide = net.subscribe(3, Box.from_ranges(SCHEMA, {0: Range(0, 5)}))
    narrow = net.subscribe(3, Box.from_ranges(SCHEMA, {0: Range(2, 3)}))
    assert all(narrow not in net.brokers[v].tables(0).prt for v in (0, 2, 5))
    net.log.clear()
    net.unsubscribe(3, wide)
    kinds = [(type(s.msg).__name__, s.src, s.dst) for s in net.log if s.src == 3]
    # The covered one goes first, then the coverer is withdrawn: no gap for publications.
    assert kinds == [("Subscribe", 3, 1), ("Unsubscribe", 3, 1)]
    eid = net.publish(6, (2.0, 5.0))
    assert net.deliveries_of(eid) == Counter({(3, narrow): 1})
    assert all(set(b.tables(0).prt) <= {narrow} for b in net.brokers.values())


def test_padres_sends_subscriptions_only_toward_ads() -> None:
    g = kary_tree(range(7), 2)
    net = BrokerNet(g, [g.overlay("o")], SCHEMA, padres())
    ad = net.advertise(5, Box.from_ranges(SCHEMA, {0: Range(0, 3)}))
    net.subscribe(4, Box.from_ranges(SCHEMA, {0: Range(5, 7)}))  # overlaps no ad: stays home
    assert not any(isinstance(s.msg, Subscribe) for s in net.log)
    sid = net.subscribe(4, Box.from_ranges(SCHEMA, {0: Range(2, 6)}))
    path = [(s.src, s.dst) for s in net.log if isinstance(s.msg, Subscribe)]
    assert path == [(4, 1), (1, 0), (0, 2), (2, 5)]
    eid = net.publish(5, (3.0, 0.0), ad=ad)
    assert net.deliveries_of(eid) == Counter({(4, sid): 1})
    with pytest.raises(LocalProtocolError):
        net.brokers[5].publish((6.0, 0.0), 0.0, ad=ad)  # outside its advertisement


def test_a_late_advertisement_pulls_subscriptions() -> None:
    g = kary_tree(range(7), 2)
    net = BrokerNet(g, [g.overlay("o")], SCHEMA, padres(covering=True))
    sid = net.subscribe(3, Box.from_ranges(SCHEMA, {1: Range(1, 1)}))
    ad = net.advertise(6, Box.whole(SCHEMA))
    eid = net.publish(6, (0.0, 1.0), ad=ad)
    assert net.deliveries_of(eid) == Counter({(3, sid): 1})
    assert [(s.src, s.dst) for s in net.publications(eid)] == [(6, 2), (2, 0), (0, 1), (1, 3)]


def _cyclic(seed: int, n: int) -> BrokerGraph:
    rng = random.Random(seed)
    g = kary_tree(range(n), rng.randint(1, 3), rng)
    # Random latencies, so that the first copy of an ad (which defines its tree) varies.
    h = BrokerGraph(range(n), random_rtt(rng, n, 1, 200))
    for a, b in g.edges:
        h.add_edge(a, b, "o")
    for _ in range(n):
        a, b = rng.sample(range(n), 2) if n > 1 else (0, 0)
        if a != b:
            h.add_edge(a, b, "o")
    return h


@settings(max_examples=EXAMPLES)
@given(st.integers(0, 2**32), st.integers(2, 12))
def test_padres_tree_ids_deliver_exactly_once_on_cyclic_graphs(seed: int, n: int) -> None:
    g = _cyclic(seed, n)
    _run(g, PADRES_TID, seed, 40)


def test_padres_tree_ids_on_scot_count_duplicate_ads() -> None:
    shape = [(0, 1), (1, 2), (1, 3)]
    groups = [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    rng = random.Random(5)
    rtt = [[0.0 if a == b else rng.uniform(5, 50) for b in range(12)] for a in range(12)]
    for a in range(12):
        for b in range(a):
            rtt[a][b] = rtt[b][a]
    g = scot(shape, 3, groups, rtt)
    net = BrokerNet(g, [g.overlay("all")], SCHEMA, PADRES_TID)
    ad = net.advertise(0, Box.whole(SCHEMA))
    advs = sum(isinstance(s.msg, Advertise) for s in net.log)
    dups = sum(b.stats.adv_duplicates for b in net.brokers.values())
    # Each broker forwards the ad once on every link but the one it came by: 2|E| - (n - 1).
    assert advs == 2 * len(g.edges) - 11 and dups == advs - 11
    sids = {v: net.subscribe(v, Box.from_ranges(SCHEMA, {0: Range(v % 8, 7)})) for v in range(12)}
    for x in range(8):
        eid = net.publish(0, (float(x), 0.0), ad=ad)
        assert net.deliveries_of(eid) == Counter({(v, sids[v]): 1 for v in range(12) if v % 8 <= x})
        # Each publication crosses only its tree: at most n - 1 messages.
        assert len(net.publications(eid)) <= 11


def test_false_positive_receptions_are_counted() -> None:
    # A publication in flight toward a subscription that is withdrawn meanwhile.
    g = kary_tree(range(3), 2)  # 0 - 1, 0 - 2
    net = BrokerNet(g, [g.overlay("o")], SCHEMA, siena())
    sid = net.subscribe(2, Box.from_ranges(SCHEMA, {0: Range(1, 1)}))
    net.brokers[1].publish((1.0, 0.0), net.now)
    net.flush(1)
    net.unsubscribe(2, sid)  # the withdrawal overtakes nothing: the publication is in flight
    net.run()
    assert [net.brokers[v].stats.false_positives for v in range(3)] == [0, 0, 1]
    assert not net.delivered


def test_bad_input_is_dropped_and_counted() -> None:
    b = Broker(0, SCHEMA, {0: [1]}, siena())
    b.receive(Publish(0, 1, [1.0, 2.0]), 7, 0.0)  # not a neighbour
    b.receive(Publish(3, 1, [1.0, 2.0]), 1, 0.0)  # not on that overlay
    b.receive(Publish(0, 1, [1.0]), 1, 0.0)  # wrong arity
    b.receive(Unsubscribe(0, 99), 1, 0.0)  # unknown: ignored
    b.receive(Control(0, 5), 1, 0.0)  # no strategy handles op 5
    assert b.stats.dropped == 4 and b.take_messages() == []


def test_matching_counts_entries_scanned() -> None:
    g = kary_tree(range(3), 2)
    net = BrokerNet(g, [g.overlay("o")], SCHEMA, siena())
    for v in range(3):
        net.subscribe(v, Box.from_ranges(SCHEMA, {0: Range(v, v)}))
    net.publish(0, (2.0, 0.0))
    # 0 scans its 3 entries and forwards to 2 only (the lasthop of the one match), which scans 3.
    assert [net.brokers[v].stats.matchings for v in range(3)] == [3, 0, 3]
    assert [matches(e.box, (2.0, 0.0)) for e in net.brokers[2].tables(0).prt.values()] == [
        False,
        False,
        True,
    ]


class _Tagger(Strategy):
    """A system's hooks in miniature: stamp a header on publications, answer a control op, turn
    local deliveries into a control message to broker 0 (as Kyra's proxies do to the origin)."""

    def __init__(self) -> None:
        self.controls: list[tuple[int, int]] = []

    def before_send(self, broker: Broker, dst: int, msg: Message, now: float) -> Message | None:
        if isinstance(msg, Publish):
            return msgspec.structs.replace(msg, hdr=[*msg.hdr, broker.id])
        return msg

    def on_deliver(
        self, broker: Broker, msg: Publish, sids: tuple[int, ...], src: int, now: float
    ) -> bool:
        if broker.id == 0:
            return False
        broker.send(broker.neighbours(0)[0], Control(0, 7, msg.eid, list(msg.hdr)), now)
        return True

    def on_control(self, broker: Broker, msg: Control, src: int, now: float) -> None:
        self.controls.append((src, msg.op))
        broker.set_timer(now + 5.0, "late", msg.ref)

    def on_timer(self, broker: Broker, kind: str, arg: object, now: float) -> None:
        self.controls.append((-1, now))


def test_strategy_hooks() -> None:
    g = kary_tree(range(3), 1)  # a path 0 - 1 - 2
    tags = {v: _Tagger() for v in range(3)}
    net = BrokerNet(g, [g.overlay("o")], SCHEMA, siena(), strategy=tags.__getitem__)
    net.subscribe(2, Box.whole(SCHEMA))
    net.publish(0, (1.0, 1.0))
    pubs = net.publications()
    assert [list(p.msg.hdr) for p in pubs] == [[0], [0, 1]]  # type: ignore[attr-defined]
    assert not net.delivered  # the strategy took the delivery over
    assert tags[1].controls == [(2, 7)]
    b1 = net.brokers[1]
    assert b1.get_timer() == 5.0 and b1.stats.control_out.get("Control:7") is None
    assert net.brokers[2].stats.control_out["Control:7"] == 1
    b1.handle_timer(5.0)
    assert tags[1].controls[-1] == (-1, 5.0) and b1.get_timer() is None
