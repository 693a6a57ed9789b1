"""The multicast-based baseline of Kyra's evaluation (Riabov et al., brokers/kmeans.py): Fig. 3's
toy exactly, Forgy's K-means, exact delivery on random layouts, the static membership, and the
simulator's ``sim run kmeans``."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from broker_harness import BrokerNet, oracle
from hypothesis import given, settings
from hypothesis import strategies as st

from rangecast.brokers import kmeans
from rangecast.brokers.broker import Broker
from rangecast.brokers.filters import Box, matches, overlaps
from rangecast.brokers.messages import Publish
from rangecast.dht.errors import LocalProtocolError
from rangecast.pubsub.schema import Attribute, Schema
from rangecast.pubsub.subscription import Range
from rangecast.sim.broker_experiment import BY_SYSTEM, BrokerParams

# ------------------------------------------------------------------------------ Fig. 3's toy
SERVERS = "ABCDEFGH"
ID = {c: i for i, c in enumerate(SERVERS)}
TOY = Schema("toy", (Attribute("v", "int", 0, 9),))
#: Fig. 3's subscriptions (as Fig. 4's): A{1,5} is two point subscriptions of A.
TOY_SUBS = {"A": (1, 5), "B": (7, 8), "C": (1, 2), "D": (0, 6), "E": (3, 5), "F": (5, 7),
            "G": (4, 6), "H": (2, 9)}  # fmt: skip
#: Fig. 3's three groups of events (a cell per value: 10 bins of the 10 values).
TOY_GROUPS = [[5, 8], [0, 1, 4, 6], [2, 3, 7, 9]]
#: Servers on a line (RTT = distance): C is A's nearest member of g2, B the far end of g2's tree.
POS = {"A": 0, "C": 1, "D": 2, "E": 3, "G": 4, "F": 5, "H": 6, "B": 8}


def point(x: float, schema: Schema = TOY) -> Box:
    return Box.from_ranges(schema, {0: Range(x, x)})


def toy_rtt(a: int, b: int) -> float:
    return float(abs(POS[SERVERS[a]] - POS[SERVERS[b]]))


def strat(b: Broker) -> kmeans.KMeansStrategy:
    assert isinstance(b.strategy, kmeans.KMeansStrategy)
    return b.strategy


def toy() -> tuple[BrokerNet, kmeans.KMeansLayout, dict[int, str]]:
    grid = kmeans.Grid(TOY, 10)
    subs = [(ID[o], point(x)) for o, xs in TOY_SUBS.items() for x in xs]
    lay = kmeans.build(range(8), grid, TOY_GROUPS, kmeans.membership(grid, subs), toy_rtt)
    net = BrokerNet(lay.graph, lay.overlays, TOY, lay.configs(), lay.strategy)
    names: dict[int, str] = {}
    for v, box in subs:
        sid = net.act(v, lambda b, now, box=box: strat(b).subscribe(b, box, now))
        names[sid] = f"{SERVERS[v]}{int(box.dims[0][0])}"
    return net, lay, names


def publish(net: BrokerNet, server: str, x: float) -> int:
    return net.act(ID[server], lambda b, now: strat(b).publish(b, (x,), now))


def test_fig3_groups_and_event_9_reaches_all_of_g2() -> None:
    net, lay, names = toy()
    assert lay.grid.bins == [10] and [lay.grid.cell_of((x,)) for x in range(10)] == list(range(10))
    assert [[SERVERS[v] for v in ms] for ms in lay.members] == [
        list("ABEF"), list("ACDG"), list("BCEFH")]  # fmt: skip
    assert net.brokers[ID["A"]].stats.pub_out == 0
    eid = publish(net, "A", 9)
    hops = [(SERVERS[s.src], SERVERS[s.dst], s.msg.overlay) for s in net.publications(eid)]  # type: ignore[attr-defined]
    # the unicast to A's nearest member of g2, then g2's whole tree, unfiltered
    assert hops[0] == ("A", "C", kmeans.ACCESS)
    assert {d for _, d, _ in hops} == set("BCEFH") and len(hops) == 5
    assert all(ov == 3 for _, _, ov in hops[1:])
    received = {SERVERS[v] for v, b in net.brokers.items() if b.stats.pub_in}
    assert received == set("BCEFH")
    assert [(SERVERS[v], [names[s] for s in ev.sids]) for v, ev in net.delivered] == [("H", ["H9"])]
    # B is neither interested nor on the way: a leaf of g2's tree, a false-positive reception
    b = net.brokers[ID["B"]].stats
    assert (b.pub_in, b.deliveries, b.false_positives) == (1, 0, 1)


def test_fig3_every_event_reaches_exactly_its_subscribers() -> None:
    net, lay, names = toy()
    for src in SERVERS:
        for x in range(10):
            net.delivered.clear()
            eid = publish(net, src, x)
            got = sorted(names[s] for _, ev in net.delivered for s in ev.sids)
            assert got == sorted(f"{o}{x}" for o, xs in TOY_SUBS.items() if x in xs)
            # every member of the event's group receives it once, nobody else
            dst = Counter(s.dst for s in net.publications(eid))
            g = lay.group_of[x]
            assert set(dst) | {ID[src]} >= set(lay.members[g])
            assert set(dst) <= set(lay.members[g]) and max(dst.values()) == 1
    assert all(b.stats.dropped == 0 for b in net.brokers.values())


def test_static_membership_refuses_a_subscription_outside_it() -> None:
    net, _, _ = toy()
    a = net.brokers[ID["A"]]
    with pytest.raises(LocalProtocolError, match="static"):
        strat(a).subscribe(a, point(9), 0.0)  # cell 9 is g2's; A is not on g2
    with pytest.raises(LocalProtocolError, match="static"):
        strat(a).subscribe(a, Box.whole(TOY), 0.0)
    strat(a).subscribe(a, point(4), 0.0)  # cell 4 is g1's, and A is on g1: fine
    # a cell no subscription overlaps is in no group: nobody may subscribe to it either
    grid = kmeans.Grid(TOY, 10)
    lay = kmeans.build(range(8), grid, [[1]], {1: {0}}, toy_rtt)
    s = lay.strategy(0)
    b = Broker(0, TOY, {i: ov.neighbours(0) for i, ov in enumerate(lay.overlays)}, lay.configs(), s)
    with pytest.raises(LocalProtocolError, match="group None"):
        s.subscribe(b, point(2), 0.0)
    assert s.publish(b, (2,), 0.0) and not b.take_messages()  # sent nowhere


def test_build_needs_every_cell_with_members_in_one_group() -> None:
    grid = kmeans.Grid(TOY, 10)
    with pytest.raises(LocalProtocolError, match="in no group"):
        kmeans.build(range(3), grid, [[1]], {1: {0}, 2: {1}}, toy_rtt)
    with pytest.raises(LocalProtocolError, match="groups 0 and 1"):
        kmeans.build(range(3), grid, [[1], [1]], {1: {0}}, toy_rtt)


# --------------------------------------------------------------------------------- the grid
XY = Schema("xy", (Attribute("x", "float", 0, 100), Attribute("n", "int", 0, 6)))


def test_grid_cells_and_overlaps_agree() -> None:
    grid = kmeans.Grid(XY, 4)
    assert grid.bins == [4, 4] and grid.size == 16  # int 0..6: 7 values in 4 bins
    assert [grid.cell_of((25.0 * i, 0)) for i in range(5)] == [0, 4, 8, 12, 12]
    assert [grid.cell_of((None, n)) for n in range(7)] == [0, 1, 1, 2, 2, 3, 3]
    assert kmeans.Grid(XY, 20).bins == [20, 7]  # an int attribute: at most a bin per value
    rng = random.Random(5)
    for _ in range(200):
        box = random_box(rng, XY)
        want = [c for c in range(grid.size) if overlaps(box, grid.box(c))]
        assert grid.cells_of(box) == want
        e = random_event(rng, XY)
        if None not in e:  # the cells tile the domain: the event is in its cell only
            assert [c for c in range(grid.size) if matches(grid.box(c), e)] == [grid.cell_of(e)]
    with pytest.raises(LocalProtocolError, match="fewer bins"):
        kmeans.Grid(Schema("w", tuple(Attribute(f"a{i}", "float", 0, 1) for i in range(8))), 4)


# ---------------------------------------------------------------------------------- K-means
def test_forgy_kmeans_is_deterministic_and_partitions_the_cells() -> None:
    rng = random.Random(11)
    members = {c: frozenset(rng.sample(range(30), rng.randrange(1, 8))) for c in range(64)}
    members[64] = frozenset()  # no members: in no group
    weights = {c: rng.randrange(0, 20) for c in range(64)}
    for k in (1, 3, 8, 100):
        a = kmeans.forgy_kmeans(members, weights, k, random.Random(3))
        assert a == kmeans.forgy_kmeans(members, weights, k, random.Random(3))
        flat = [c for g in a for c in g]
        assert sorted(flat) == list(range(64)) and len(a) <= min(k, 64)
        assert all(g == sorted(g) and g for g in a)
    assert kmeans.forgy_kmeans(members, weights, 1, random.Random(0)) == [list(range(64))]
    assert kmeans.forgy_kmeans({}, {}, 4, random.Random(0)) == []
    # identical membership vectors always end up together (three disjoint blocks of cells)
    blocks = {c: frozenset(range(10 * (c % 3), 10 * (c % 3) + 10)) for c in range(30)}
    for s in range(20):
        found = kmeans.forgy_kmeans(blocks, {c: c % 5 for c in range(30)}, 3, random.Random(s))
        assert all(len({c % 3 for c in g}) * 10 == len(g) for g in found)
        assert sorted(c for g in found for c in g) == list(range(30))
    with pytest.raises(LocalProtocolError):
        kmeans.forgy_kmeans(members, weights, 0, random.Random(0))


# ------------------------------------------------------------------------- random layouts
def random_box(rng: random.Random, schema: Schema) -> Box:
    ranges = {}
    for i, a in enumerate(schema.attributes):
        if rng.random() < 0.3:
            continue  # free
        lo = rng.uniform(a.min, a.max)
        hi = min(a.max, lo + rng.uniform(0, (a.max - a.min) / 2))
        if a.type == "int":
            ranges[i] = Range(float(round(lo)), float(round(hi)))
        else:
            wide = hi - lo > 0.2  # room for open ends
            ranges[i] = Range(lo, hi, wide and rng.random() < 0.2, wide and rng.random() < 0.2)
    return Box.from_ranges(schema, ranges)


def random_event(rng: random.Random, schema: Schema) -> tuple[float | None, ...]:
    out: list[float | None] = []
    for a in schema.attributes:
        if rng.random() < 0.1:
            out.append(None)
        elif a.type == "int":
            out.append(float(rng.randint(int(a.min), int(a.max))))
        else:
            out.append(rng.choice((a.min, a.max, rng.uniform(a.min, a.max))))
    return tuple(out)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 2**32 - 1), st.integers(1, 10), st.integers(1, 5), st.integers(1, 4),
    st.booleans(),
)  # fmt: skip
def test_random_layouts_deliver_exactly_once(
    seed: int, n: int, groups: int, cells: int, two: bool
) -> None:
    """Random subscriptions, events (some missing attributes) and G: every event reaches the
    subscriptions that match it, each once, whoever publishes it, and nothing else."""
    rng = random.Random(seed)
    schema = XY if two else Schema("x", XY.attributes[:1])
    pos = [(rng.uniform(0, 100), rng.uniform(0, 100)) for _ in range(n)]

    def dist(a: int, b: int) -> float:
        return ((pos[a][0] - pos[b][0]) ** 2 + (pos[a][1] - pos[b][1]) ** 2) ** 0.5

    subs = [(rng.randrange(n), random_box(rng, schema)) for _ in range(rng.randrange(15))]
    events = [random_event(rng, schema) for _ in range(15)]
    lay = kmeans.kmeans_layout(schema, range(n), subs, events, dist, groups, cells, rng)
    assert len(lay.groups) <= groups
    net = BrokerNet(lay.graph, lay.overlays, schema, lay.configs(), lay.strategy)
    live = {}
    for o, box in subs:
        live[net.act(o, lambda b, now, box=box: strat(b).subscribe(b, box, now))] = (o, box)
    for e in events:
        eid = net.act(rng.randrange(n), lambda b, now, e=e: strat(b).publish(b, e, now))
        assert net.deliveries_of(eid) == oracle(live, e)
        hops = [s.dst for s in net.publications(eid) if isinstance(s.msg, Publish)]
        assert len(set(hops)) == len(hops)
    assert all(b.stats.dropped == 0 for b in net.brokers.values())


# ------------------------------------------------------------------------------ simulator
def test_sim_run_kmeans_is_exact_and_floods_uninterested_servers() -> None:
    scenario = BY_SYSTEM["kmeans"]
    params = scenario.params_type(nodes=40, subs_per_node=2.5, events=100, groups=4, cells=3)
    assert isinstance(params, BrokerParams)
    r = scenario().run(params)
    v = r.verdict
    assert v.expected_deliveries > 0 and (v.missed, v.duplicates, v.false_positives) == (0, 0, 0)
    assert r.false_positive_receptions > 0 and r.setup_messages == 0
    assert r.layout["groups"] <= 4 and r.layout["cells"] <= 3**4
    with pytest.raises(LocalProtocolError, match="groups 0: must be at least 1"):
        scenario.params_type(groups=0).check()  # type: ignore[attr-defined]
