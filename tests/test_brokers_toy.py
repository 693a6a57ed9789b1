"""Kyra's toy system (seed 003, Figs. 1 and 2) on the filter-based tree: the exact worked example.

Servers A-H, events are the integers 0-9, and each server subscribes to the values in its braces
("A {1,5}": the values 1 and 5; the routing tables of Fig. 2 only add up under that reading, e.g.
C's row for E is {2-7,9}, which would be {2-9} if H{2,9} were the interval 2..9). The tree is the
one every routing-table row of Fig. 2 implies: A-C, B-C, C-D, C-E, E-F, F-G, G-H."""

from __future__ import annotations

import pytest
from broker_harness import BrokerNet

from rangecast.brokers.broker import siena
from rangecast.brokers.filters import Box, matches
from rangecast.brokers.graphs import BrokerGraph
from rangecast.brokers.messages import Publish, Subscribe
from rangecast.brokers.tables import LOCAL
from rangecast.pubsub.schema import Attribute, Schema
from rangecast.pubsub.subscription import Range

SCHEMA = Schema("toy", (Attribute("v", "int", 0, 9),))
NAMES = "ABCDEFGH"
ID = {c: i for i, c in enumerate(NAMES)}
SUBS = {
    "A": (1, 5),
    "B": (7, 8),
    "C": (1, 2),
    "D": (0, 6),
    "E": (3, 5),
    "F": (5, 7),
    "G": (4, 6),
    "H": (2, 9),
}
TREE = ("AC", "BC", "CD", "CE", "EF", "FG", "GH")
#: Fig. 2's routing tables: server -> neighbour -> the values subscribed in that direction.
FIG2 = {
    "A": {"C": "0-9"},
    "B": {"C": "0-7,9"},
    "C": {"A": "1,5", "B": "7,8", "D": "0,6", "E": "2-7,9"},
    "D": {"C": "1-9"},
    "E": {"C": "0-2,5-8", "F": "2,4-7,9"},
    "F": {"E": "0-3,5-8", "G": "2,4,6,9"},
    "G": {"F": "0-3,5-8", "H": "2,9"},
    "H": {"G": "0-8"},
}


def _values(text: str) -> set[int]:
    out: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def point(v: int) -> Box:
    return Box.from_ranges(SCHEMA, {0: Range(v, v)})


@pytest.fixture(params=[False, True], ids=["plain", "covering"])
def net(request: pytest.FixtureRequest) -> BrokerNet:
    g = BrokerGraph(range(8))
    for a, b in TREE:
        g.add_edge(ID[a], ID[b], "tree")
    n = BrokerNet(g, [g.overlay("tree", "tree")], SCHEMA, siena(covering=request.param))
    for server, values in SUBS.items():
        for v in values:
            n.subscribe(ID[server], point(v))
    return n


def test_the_routing_tables_are_figure_2(net: BrokerNet) -> None:
    for server, row in FIG2.items():
        prt = net.brokers[ID[server]].tables(0).prt
        got: dict[str, set[int]] = {}
        for e in prt.values():
            if e.lasthop != LOCAL:
                hits = {v for v in range(10) if matches(e.box, (v,))}
                got.setdefault(NAMES[e.lasthop], set()).update(hits)
        assert got == {n: _values(t) for n, t in row.items()}, server


def test_event_9_from_a_takes_five_messages_to_h(net: BrokerNet) -> None:
    before = len(net.log)
    eid = net.publish(ID["A"], (9,))
    hops = [(NAMES[s.src], NAMES[s.dst]) for s in net.publications(eid)]
    assert hops == [("A", "C"), ("C", "E"), ("E", "F"), ("F", "G"), ("G", "H")]
    assert len(net.log) - before == 5  # publication messages only: no control traffic
    # Matched on the way at C, E, F and G (each scanned its table and forwarded); H delivers.
    relays = [NAMES[v] for v, b in net.brokers.items() if b.stats.pure_forwards]
    assert relays == ["C", "E", "F", "G"]
    assert [(NAMES[v], ev.eid) for v, ev in net.delivered] == [("H", eid)]
    assert sum(b.stats.false_positives for b in net.brokers.values()) == 0


def test_every_event_reaches_exactly_its_subscribers(net: BrokerNet) -> None:
    for origin in NAMES:
        for v in range(10):
            net.delivered.clear()
            net.publish(ID[origin], (v,))
            got = sorted(NAMES[b] for b, _ in net.delivered)
            assert got == sorted(s for s, vs in SUBS.items() if v in vs)


def test_subscription_setup_cost() -> None:
    # Without covering every subscription crosses all 7 tree edges once: 16 x 7 messages.
    g = BrokerGraph(range(8))
    for a, b in TREE:
        g.add_edge(ID[a], ID[b], "tree")
    n = BrokerNet(g, [g.overlay("tree", "tree")], SCHEMA, siena())
    for server, values in SUBS.items():
        for v in values:
            n.subscribe(ID[server], point(v))
    assert sum(isinstance(s.msg, Subscribe) for s in n.log) == 16 * 7
    assert all(b.prt_size() == 16 for b in n.brokers.values())
    assert not any(isinstance(s.msg, Publish) for s in n.log)
