"""The reference papers' worked examples, exactly, and the invariants of their algorithms:
Kyra's toy system (seed 003, Figs. 2 and 4), OctopiA's CIVs (seed 002, Fig. 8) and IDR table,
POP's walk to the weighted 1-median (seed 004, Fig. 1) and GRAPE's selection."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence

from broker_harness import BrokerNet, oracle
from hypothesis import given
from hypothesis import strategies as st

from rangecast.brokers import grape, kyra, octopia, pop
from rangecast.brokers.broker import Broker, LinkQueues, siena
from rangecast.brokers.filters import Box, covers, matches, overlaps
from rangecast.brokers.graphs import BrokerGraph, hac_cliques
from rangecast.brokers.messages import Control
from rangecast.brokers.tables import LOCAL
from rangecast.pubsub.schema import Attribute, Schema
from rangecast.pubsub.subscription import Range

# ------------------------------------------------------------------------------------- Kyra
SERVERS = "ABCDEFGH"
ID = {c: i for i, c in enumerate(SERVERS)}
TOY = Schema("toy", (Attribute("v", "int", 0, 9),))
#: Fig. 4's point subscriptions: A{1,5} is two subscriptions of A, to the events 1 and 5
TOY_SUBS = {"A": (1, 5), "B": (7, 8), "C": (1, 2), "D": (0, 6), "E": (3, 5), "F": (5, 7),
            "G": (4, 6), "H": (2, 9)}  # fmt: skip
CLIQUES = [[0, 1, 2], [3, 4], [5, 6, 7]]  # {A,B,C}, {D,E}, {F,G,H}
ZONES = {"A": (0, 3), "F": (0, 3), "B": (4, 6), "G": (4, 6), "C": (7, 9), "H": (7, 9),
         "D": (0, 4), "E": (5, 9)}  # fmt: skip


def iv(lo: float, hi: float, schema: Schema = TOY) -> Box:
    return Box.from_ranges(schema, {0: Range(lo, hi)})


def toy_latency(a: int, b: int) -> float:
    """A latency matrix built so that HAC finds Fig. 4's cliques and Prim's MST its trees:
    1 inside a clique, 10 between neighbouring cliques, 20 between the outer ones, and the few
    pairs below set so each tree's edges are its cheapest spanning set."""
    if a == b:
        return 0.0
    special = {"BE": 9, "BG": 15, "EG": 16, "DG": 17, "CH": 12, "EH": 13}
    key = "".join(sorted(SERVERS[a] + SERVERS[b]))
    if key in special:
        return special[key]
    ca, cb = (next(i for i, c in enumerate(CLIQUES) if x in c) for x in (a, b))
    return 1.0 if ca == cb else 10.0 * abs(ca - cb)


def toy_kyra(
    covering: bool = False, extra: Sequence[tuple[str, Box]] = ()
) -> tuple[BrokerNet, dict[int, str]]:
    zones = {ID[s]: iv(lo, hi) for s, (lo, hi) in ZONES.items()}
    layout = kyra.build(CLIQUES, zones, [iv(0, 3), iv(4, 6), iv(7, 9)], toy_latency, covering)
    net = BrokerNet(layout.graph, layout.overlays, TOY, layout.configs(), layout.strategy)
    names: dict[int, str] = {}
    subs = [(o, iv(v, v)) for o, vs in TOY_SUBS.items() for v in vs]
    for o, box in [*subs, *extra]:
        sid = net.act(ID[o], lambda b, now, box=box: strat(b).subscribe(b, box, now))
        names[sid] = f"{o}{int(box.dims[0][0])}" if box.dims[0][0] == box.dims[0][1] else o
    return net, names


def strat(b: Broker) -> kyra.KyraStrategy:
    assert isinstance(b.strategy, kyra.KyraStrategy)
    return b.strategy


def publish(net: BrokerNet, server: str, x: float) -> int:
    return net.act(ID[server], lambda b, now: strat(b).publish(b, (x,), now))


def points(boxes: Iterable[Box]) -> set[int]:
    bs = list(boxes)
    return {x for x in range(10) if any(matches(b, (x,)) for b in bs)}


def test_kyra_hac_finds_the_toy_cliques() -> None:
    nodes = range(8)
    assert hac_cliques(nodes, toy_latency, 5, 8) == CLIQUES
    # the limits: size caps the cliques; no pair fits -> the loop returns (printed one spins)
    assert all(len(c) <= 2 for c in hac_cliques(nodes, toy_latency, 5, 2))
    assert hac_cliques(nodes, toy_latency, 5, 1) == [[v] for v in nodes]
    assert hac_cliques(nodes, toy_latency, 0.5, 8) == [[v] for v in nodes]
    # complete linkage: at 10 the {D,E}+{A,B,C} merge is allowed, {F,G,H} is 20 from A
    assert hac_cliques(nodes, toy_latency, 10, 8) == [[0, 1, 2, 3, 4], [5, 6, 7]]
    matrix = [[toy_latency(a, b) for b in nodes] for a in nodes]
    assert hac_cliques(nodes, matrix, 5, 8) == CLIQUES


def test_kyra_toy_structures_reproduce_fig4() -> None:
    net, names = toy_kyra()
    layout_members = [[SERVERS[v] for v in ov.members] for ov in net.overlays[1:]]
    assert layout_members == [list("ADF"), list("BDEG"), list("CEH")]
    tree_edges = [{SERVERS[a] + SERVERS[b] for a, b in ov.edges} for ov in net.overlays[1:]]
    assert tree_edges == [{"AD", "DF"}, {"BE", "BG", "DE"}, {"CE", "CH"}]
    assert {SERVERS[a] + SERVERS[b] for a, b in net.overlays[0].edges} == {
        "AB", "AC", "BC", "DE", "FG", "FH", "GH"}  # fmt: skip
    proxy = {s: points(box for _, box in strat(net.brokers[ID[s]]).proxy.values())
             for s in SERVERS}  # fmt: skip
    # Fig. 4 lists B with no proxy subscription: a slip, A's {1,5} overlaps B's zone 4-6 at 5
    assert proxy == {"A": {1, 2}, "B": {5}, "C": {7, 8}, "D": {0, 3}, "E": {5, 6}, "F": {2},
                     "G": {4, 5, 6}, "H": {7, 9}}  # fmt: skip
    assert [
        (names[sid], SERVERS[o]) for sid, (o, _) in strat(net.brokers[ID["B"]]).proxy.items()
    ] == [("A5", "A")]
    # Fig. 4's per-tree tables: at u on tree t, what is held on neighbour v's side
    tables: dict[tuple[str, int, str], set[int]] = {}
    for u, b in net.brokers.items():
        for t in range(3):
            for e in b.tables(1 + t).prt.values():
                if e.lasthop != LOCAL:
                    key = (SERVERS[u], t, SERVERS[e.lasthop])
                    tables[key] = tables.get(key, set()) | points([e.box])
    assert tables == {
        ("A", 0, "D"): {0, 2, 3}, ("D", 0, "A"): {1, 2}, ("D", 0, "F"): {2},
        ("F", 0, "D"): {0, 1, 2, 3},
        ("B", 1, "E"): {5, 6}, ("B", 1, "G"): {4, 5, 6}, ("D", 1, "E"): {4, 5, 6},
        ("E", 1, "B"): {4, 5, 6}, ("G", 1, "B"): {5, 6},
        ("C", 2, "H"): {7, 9}, ("E", 2, "C"): {7, 8, 9}, ("H", 2, "C"): {7, 8},
    }  # fmt: skip


def fig2_tree() -> BrokerNet:
    g = BrokerGraph(range(8))
    for a, b in ("AC", "BC", "CD", "CE", "EF", "FG", "GH"):
        g.add_edge(ID[a], ID[b], "tree")
    net = BrokerNet(g, [g.overlay("tree", "tree")], TOY, siena())
    for o, vs in TOY_SUBS.items():
        for v in vs:
            net.subscribe(ID[o], iv(v, v))
    return net


def test_kyra_event_9_from_a_two_messages_fig2_five() -> None:
    net, names = toy_kyra()
    eid = publish(net, "A", 9)
    hops = [(SERVERS[s.src], SERVERS[s.dst], s.msg.overlay) for s in net.publications(eid)]  # type: ignore[attr-defined]
    assert hops == [("A", "C", kyra.CLIQUE), ("C", "H", 3)]  # the clique hop, then tree t2
    assert [(SERVERS[v], [names[s] for s in ev.sids]) for v, ev in net.delivered] == [("H", ["H9"])]
    # Fig. 2: the filter-based tree over the same servers, every server holding its own
    tree = fig2_tree()
    eid = tree.publish(ID["A"], (9,))
    hops2 = [(SERVERS[s.src], SERVERS[s.dst]) for s in tree.publications(eid)]
    assert hops2 == [("A", "C"), ("C", "E"), ("E", "F"), ("F", "G"), ("G", "H")]


def test_kyra_toy_every_event_reaches_exactly_its_subscribers() -> None:
    for covering in (False, True):
        net, names = toy_kyra(covering)
        for src in SERVERS:
            for x in range(10):
                net.delivered.clear()
                eid = publish(net, src, x)
                got = sorted(names[s] for _, ev in net.delivered for s in ev.sids)
                assert got == sorted(f"{o}{x}" for o, vs in TOY_SUBS.items() if x in vs)
                # each origin gets the event once: from the proxy, or it is the proxy itself
                to_origin = [s.dst for s in net.publications(eid) if s.msg.hdr]  # type: ignore[attr-defined]
                assert len(to_origin) == len(set(to_origin))
        assert all(b.stats.dropped == 0 for b in net.brokers.values())


def test_kyra_covering_keeps_the_routes_with_fewer_entries() -> None:
    wide = [("G", iv(4, 6))]  # covers G4 and G6
    full, _ = toy_kyra(False, wide)
    cov, _ = toy_kyra(True, wide)
    assert sum(b.prt_size() for b in cov.brokers.values()) < sum(
        b.prt_size() for b in full.brokers.values()
    )
    for src in SERVERS:
        for x in range(10):
            a, b = publish(full, src, x), publish(cov, src, x)
            hops_a = [(s.src, s.dst) for s in full.publications(a)]
            assert hops_a == [(s.src, s.dst) for s in cov.publications(b)]
            assert full.deliveries_of(a).keys() == {k for k in cov.deliveries_of(b)}


def test_kyra_unsubscribe_withdraws_the_proxies() -> None:
    net, names = toy_kyra()
    h9 = next(s for s, n in names.items() if n == "H9")
    net.act(ID["H"], lambda b, now: strat(b).unsubscribe(b, h9, now))
    eid = publish(net, "A", 9)
    assert [(SERVERS[s.src], SERVERS[s.dst]) for s in net.publications(eid)] == [("A", "C")]
    assert not net.delivered


XY = Schema("xy", (Attribute("x", "float", 0, 100), Attribute("y", "float", 0, 100)))


@given(st.integers(0, 2**32 - 1), st.integers(1, 14), st.integers(1, 2))
def test_kyra_random_networks_deliver_exactly_once(seed: int, n: int, dims: int) -> None:
    """HAC on random coordinates, k-d zones, MST trees, all on broker cores: every event
    reaches exactly the subscriptions that match it, each once, whoever publishes it."""
    rng = random.Random(seed)
    schema = XY if dims == 2 else Schema("x", XY.attributes[:1])
    xy = [(rng.uniform(0, 100), rng.uniform(0, 100)) for _ in range(n)]

    def dist(a: int, b: int) -> float:
        (ax, ay), (bx, by) = xy[a], xy[b]
        return ((ax - bx) ** 2 + (ay - by) ** 2) ** 0.5

    cliques = hac_cliques(range(n), dist, rng.uniform(10, 80), rng.randrange(1, 6))
    sample = [tuple(rng.uniform(0, 100) for _ in range(dims)) for _ in range(60)]
    subs: list[tuple[int, Box]] = []
    for _ in range(rng.randrange(25)):
        ranges = {}
        for d in range(dims):
            lo = rng.uniform(0, 95)
            ranges[d] = Range(lo, lo + rng.uniform(0, 40))
        subs.append((rng.randrange(n), Box.from_ranges(schema, ranges)))
    t = max(len(c) for c in cliques) + rng.randrange(-1, 2)  # T = max k_i, also one off
    cuts = kyra.kd_tree(schema, max(1, t), sample, beta=0.0)
    tz = cuts.leaves()
    aligned = rng.random() < 0.5  # the clique's zones along the trees' cuts, or its own
    zone: dict[int, Box] = {}
    for c in cliques:
        mine = [box for o, box in subs if o in c]
        if aligned:
            zs = kyra.aligned_partition(schema, cuts, len(c), sample, mine)
        else:
            zs = kyra.kd_partition(schema, len(c), sample, mine)
        zone.update(zip(c, zs, strict=True))
    layout = kyra.build(cliques, zone, tz, dist, covering=rng.random() < 0.5)
    net = BrokerNet(layout.graph, layout.overlays, schema, layout.configs(), layout.strategy)
    live = {}
    for o, box in subs:
        live[net.act(o, lambda b, now, box=box: strat(b).subscribe(b, box, now))] = (o, box)
    for e in sample[:20]:
        eid = net.act(rng.randrange(n), lambda b, now, e=e: strat(b).publish(b, e, now))
        assert net.deliveries_of(eid) == oracle(live, e)
        hops = [(s.src, s.dst, s.msg.overlay) for s in net.publications(eid)]  # type: ignore[attr-defined]
        assert len(set(hops)) == len(hops)


@given(st.integers(0, 2**32 - 1), st.integers(1, 9), st.integers(1, 2))
def test_kyra_kd_partition_tiles_the_domain(seed: int, k: int, dims: int) -> None:
    rng = random.Random(seed)
    schema = XY if dims == 2 else Schema("x", XY.attributes[:1])
    events = [tuple(rng.uniform(0, 100) for _ in range(dims)) for _ in range(rng.randrange(40))]
    subs = []
    for _ in range(rng.randrange(10)):
        ranges = {}
        for d in range(dims):
            lo = rng.uniform(0, 90)
            ranges[d] = Range(lo, lo + rng.uniform(0, 10))
        subs.append(Box.from_ranges(schema, ranges))
    zones = kyra.kd_partition(schema, k, events, subs, 1.0, rng.choice((0.0, 1.0)))
    assert len(zones) == k
    probes = [*events, *(tuple(rng.uniform(0, 100) for _ in range(dims)) for _ in range(50))]
    for p in probes:
        assert sum(matches(z, p) for z in zones) == 1


@given(st.integers(0, 2**32 - 1), st.integers(1, 9), st.integers(1, 12), st.integers(1, 2))
def test_kyra_aligned_partition_follows_the_tree_zones(
    seed: int, t: int, k: int, dims: int
) -> None:
    """A clique's aligned zones tile the domain, and each is a union of whole tree zones or
    lies inside one: with k <= T every tree zone has exactly one server of the clique (a tree has
    one member per clique, a server joins about T/k trees); beyond, each has one or more."""
    rng = random.Random(seed)
    schema = XY if dims == 2 else Schema("x", XY.attributes[:1])
    events = [tuple(rng.uniform(0, 100) for _ in range(dims)) for _ in range(rng.randrange(60))]
    subs = []
    for _ in range(rng.randrange(10)):
        lo = [rng.uniform(0, 90) for _ in range(dims)]
        subs.append(Box.from_ranges(schema, {d: Range(x, x + 10) for d, x in enumerate(lo)}))
    cuts = kyra.kd_tree(schema, t, events, beta=0.0)
    tz = cuts.leaves()
    assert tz == kyra.kd_partition(schema, t, events, beta=0.0)
    zones = kyra.aligned_partition(schema, cuts, k, events, subs)
    assert len(zones) == k
    probes = [*events, *(tuple(rng.uniform(0, 100) for _ in range(dims)) for _ in range(50))]
    for p in probes:
        assert sum(matches(z, p) for z in zones) == 1
    for z in zones:
        meets = [y for y in tz if overlaps(z, y)]
        assert len(meets) == 1 or all(covers(z, y) for y in meets)
    for y in tz:
        if k <= t:
            assert sum(covers(z, y) for z in zones) == 1
        else:
            assert sum(covers(y, z) for z in zones) >= 1


def test_kyra_aligned_partition_divides_servers_by_load() -> None:
    """Two tree zones, three servers: the clique's load sits on the left, so two servers share
    the left tree zone (cut there by the clique's load) and one takes the right."""
    one = Schema("x", (Attribute("x", "float", 0, 99),))
    cuts = kyra.kd_tree(one, 2, [(float(x),) for x in range(100)], beta=0.0)
    left = [(float(x),) for x in range(40)] + [(60.0,)]
    zones = kyra.aligned_partition(one, cuts, 3, left, beta=0.0)
    assert [z.dims[0][:2] for z in zones] == [(0.0, 19.0), (19.0, 49.0), (49.0, 99.0)]
    # one server: the whole domain, every tree
    assert kyra.aligned_partition(one, cuts, 1) == [cuts.box]


def test_kyra_kd_partition_balances_the_load() -> None:
    one = Schema("x", (Attribute("x", "float", 0, 99),))
    events = [(float(x),) for x in range(100)]
    zones = kyra.kd_partition(one, 4, events, beta=0.0)
    assert [sum(matches(z, e) for e in events) for z in zones] == [25, 25, 25, 25]
    # k = 3 splits 2:1, so the first cut leaves two thirds of the load on the left
    zones = kyra.kd_partition(one, 3, events, beta=0.0)
    assert sorted(sum(matches(z, e) for e in events) for z in zones) == [33, 33, 34]
    # 2-D: the spread attribute is cut, the constant one is not
    two = Schema("xy", (Attribute("x", "float", 0, 9), Attribute("y", "float", 0, 9)))
    events2 = [(float(x), 5.0) for x in range(10)]
    zones = kyra.kd_partition(two, 2, events2, beta=0.0)
    assert [z.dims[1][:2] for z in zones] == [(0.0, 9.0), (0.0, 9.0)]
    # int attributes: the upper zone starts at the next integer, no value is shared
    zones = kyra.kd_partition(TOY, 3, [(float(v),) for v in range(10)], beta=0.0)
    assert [points([z]) for z in zones] == [{0, 1, 2}, {3, 4, 5, 6}, {7, 8, 9}]


# ---------------------------------------------------------------------------------- OctopiA
#: Fig. 8's topology is only in the image; the smallest one consistent with its text: G_a a path
#: of regions a-e (0-4), m = 3, B(x, c) = 5c + x. S1 at B(c,0), S2 at B(d,0), S3 at B(c,1), S4 at
#: B(c,2); P1 at B(a,2), P2 at B(a,1), P3 at B(e,1), with 1-D ad boxes so that P1 -> {S4},
#: P2 -> {S1,S4}, P3 -> all.
LINE = Schema("line", (Attribute("v", "float", 0, 100),))
PATH = [(0, 1), (1, 2), (2, 3), (3, 4)]


def B(x: str, c: int) -> int:
    return 5 * c + "abcde".index(x)


FIG8_SUBS = [(B("c", 0), "S1", (10, 30)), (B("d", 0), "S2", (20, 30)),
             (B("c", 1), "S3", (20, 30)), (B("c", 2), "S4", (0, 30))]  # fmt: skip
FIG8_ADS = [(B("a", 2), "P1", (0, 9)), (B("a", 1), "P2", (10, 19)), (B("e", 1), "P3", (20, 29))]


def octo(b: Broker) -> octopia.OctopiaStrategy:
    assert isinstance(b.strategy, octopia.OctopiaStrategy)
    return b.strategy


def octopia_net(
    layout: octopia.OctopiaLayout, schema: Schema = LINE, queues: LinkQueues | None = None
) -> BrokerNet:
    return BrokerNet(
        layout.graph,
        layout.overlays,
        schema,
        layout.configs(),
        lambda v: layout.strategy(v, queues is not None, queues),
    )


def fig8(subs_first: bool) -> tuple[BrokerNet, dict[str, int], dict[str, int]]:
    net = octopia_net(octopia.build(PATH, 3, [[5 * c + x for x in range(5)] for c in range(3)]))
    ads: dict[str, int] = {}
    subs: dict[str, int] = {}

    def sub_all() -> None:
        for b, s, (lo, hi) in FIG8_SUBS:
            subs[s] = net.act(
                b, lambda br, now, lo=lo, hi=hi: octo(br).subscribe(br, iv(lo, hi, LINE), now)
            )

    def ad_all() -> None:
        for b, p, (lo, hi) in FIG8_ADS:
            ads[p] = net.act(
                b, lambda br, now, lo=lo, hi=hi: octo(br).advertise(br, iv(lo, hi, LINE), now)
            )

    for step in (sub_all, ad_all) if subs_first else (ad_all, sub_all):
        step()
    return net, ads, subs


def sent_kinds(net: BrokerNet) -> Counter[str]:
    return Counter(
        f"Control:{s.msg.op}" if isinstance(s.msg, Control) else type(s.msg).__name__
        for s in net.log
    )


def test_octopia_fig8_civs() -> None:
    for subs_first in (True, False):
        net, ads, _ = fig8(subs_first)
        host = {p: b for b, p, _ in FIG8_ADS}
        civs = [octopia.civ_str(octo(net.brokers[host[p]]).civ(net.brokers[host[p]], ads[p]), 3)
                for p in ("P1", "P2", "P3")]  # fmt: skip
        assert civs == ["100", "101", "111"]
        kinds = sent_kinds(net)
        # each advertisement goes to its m-1 region peers only; one CIB_SET per STC and ad,
        # although S1 and S2 both make cluster 0 a target of P3
        assert kinds["Advertise"] == 3 * 2
        assert kinds[f"Control:{octopia.OP_CIB_SET}"] == 0 + 2 + 2
        assert kinds["Subscribe"] == 4 * 4  # flooded in its own cluster: 5 brokers, 4 aLinks
        # SRT: the host and its m-1 region peers hold each ad, nobody else
        assert sum(b.srt_size() for b in net.brokers.values()) == 3 * 3


def test_octopia_fig8_static_routes() -> None:
    net, ads, subs = fig8(True)
    name = {sid: s for s, sid in subs.items()}

    def pub(p: str, x: float) -> tuple[list[tuple[int, int, list[int]]], list[str]]:
        host = next(b for b, q, _ in FIG8_ADS if q == p)
        net.delivered.clear()
        eid = net.act(host, lambda br, now: octo(br).publish(br, ads[p], (x,), now))
        hops = [(s.src, s.dst, list(s.msg.hdr)) for s in net.publications(eid)]  # type: ignore[attr-defined]
        return hops, sorted(name[sid] for _, ev in net.delivered for sid in ev.sids)

    hops, got = pub("P1", 5)
    # P1 has no STC: its own bit 2 sends nothing, the notification stays on aLinks
    assert hops == [(B("a", 2), B("b", 2), []), (B("b", 2), B("c", 2), [])]
    assert got == ["S4"]
    hops, got = pub("P2", 15)
    assert hops[:2] == [(B("a", 1), B("a", 0), []), (B("a", 1), B("a", 2), [])]  # iLinks only
    assert got == ["S1", "S4"]
    hops, got = pub("P3", 25)
    # three copies at the host: the aLink toward S3 and one iLink each to clusters 0 and 2;
    # one copy only to B(e,0) although S1 and S2 are both there
    assert hops[:3] == [(B("e", 1), B("d", 1), []), (B("e", 1), B("e", 0), []),
                        (B("e", 1), B("e", 2), [])]  # fmt: skip
    assert len(hops) == 8
    assert got == ["S1", "S2", "S3", "S4"]
    assert all(b.stats.dropped == 0 for b in net.brokers.values())


A1, A2 = 100, 101
ILINKS = {1: 201, 2: 202, 3: 203}


def run_idr(
    busy: set[int],
    q: dict[int, int],
    alinks: list[int] | None = None,
) -> list[tuple[int, str]]:
    a = [A1, A2] if alinks is None else alinks
    copies = octopia.idr(a, ILINKS, busy.__contains__, lambda link: q.get(link, 0))
    return [(c.link, octopia.civ_str(c.civ, 4)) for c in copies]


def test_octopia_idr_table_rows() -> None:
    plain = "0000"
    # O = {}: A + I
    assert run_idr(set(), {}) == [
        (A1, plain),
        (A2, plain),
        *((ILINKS[c], plain) for c in (1, 2, 3)),
    ]
    # O != I: A + (I - O), clusters(O) on the free iLink with the shortest queue
    got = run_idr({ILINKS[1], ILINKS[3]}, {ILINKS[2]: 5})
    assert got == [(A1, plain), (A2, plain), (ILINKS[2], "1010")]
    got = run_idr({ILINKS[2]}, {ILINKS[1]: 7, ILINKS[3]: 3})
    assert got == [(A1, plain), (A2, plain), (ILINKS[1], plain), (ILINKS[3], "0100")]
    # O = I and a free aLink: A only, clusters(I) on the free aLink with the shortest queue
    got = run_idr({ILINKS[1], ILINKS[2], ILINKS[3], A1}, {A2: 4})
    assert got == [(A1, plain), (A2, "1110")]
    got = run_idr({ILINKS[1], ILINKS[2], ILINKS[3]}, {A1: 9, A2: 4})
    assert got == [(A1, plain), (A2, "1110")]
    # otherwise: A, and one CIV-N on the least loaded iLink carrying the other clusters
    got = run_idr(
        {ILINKS[1], ILINKS[2], ILINKS[3], A1, A2}, {ILINKS[1]: 30, ILINKS[2]: 12, ILINKS[3]: 20}
    )
    assert got == [(A1, plain), (A2, plain), (ILINKS[2], "1010")]
    got = run_idr(
        {ILINKS[1], ILINKS[2], ILINKS[3]}, {ILINKS[1]: 30, ILINKS[2]: 40, ILINKS[3]: 20}, alinks=[]
    )
    assert got == [(ILINKS[3], "0110")]
    # no target iLink: the aLinks only, whatever is congested
    assert octopia.idr([A1], {}, lambda _: True, lambda _: 0) == [octopia.Copy(A1)]


def test_octopia_link_status_table() -> None:
    lst = octopia.LinkStatusTable()  # delta 10, window 50 ms
    link = 201
    assert not lst.congested(link) and lst.ce(link) == 1.0
    lst.observe(link, 0.00, n_in=30, n_out=10, q=25)
    assert not lst.congested(link)  # the window has not closed yet
    lst.observe(link, 0.05, q=5)
    assert lst.ce(link) == 3.0 and lst.queue(link) == 25 and lst.congested(link)
    lst.observe(link, 0.07, n_in=10, n_out=20)
    lst.observe(link, 0.10)
    assert lst.ce(link) == 0.5 and not lst.congested(link)  # draining: CE < 1
    lst.observe(link, 0.11, n_in=20, n_out=20, q=11)
    lst.observe(link, 0.15)
    assert lst.ce(link) == 1.0 and lst.congested(link)  # CE = 1 and q = 11 > 10
    lst.observe(link, 0.31)
    assert lst.ce(link) == 1.0 and lst.queue(link) == 11  # idle windows since
    lst.observe(link, 0.32, n_in=12, q=12)
    lst.observe(link, 0.36)
    assert lst.ce(link) == float("inf") and lst.congested(link)


class Queues:
    """A driver's output queues as a test feeds them: each (broker, link) either backed up
    (q 20, 10 in and 5 out per sample: CE 2) or draining (q from the table, CE 1/2)."""

    def __init__(self, busy: set[tuple[int, int]], q: dict[tuple[int, int], int]) -> None:
        self.busy = busy
        self.q = q
        self.samples = 0

    def sample(self, broker: int, dst: int, now: float) -> tuple[int, int, int]:
        self.samples += 1
        if (broker, dst) in self.busy:
            return 20 + self.q[(broker, dst)], 10, 5
        return self.q[(broker, dst)] % 10, 5, 10


@given(st.integers(0, 2**32 - 1))
def test_octopia_idr_delivers_like_snr(seed: int) -> None:
    """Whatever the congestion the driver's queues report, IDR (on broker cores, sampling the
    queues at ``now``) reaches exactly SNR's subscribers, each once."""
    rng = random.Random(seed)
    n = rng.randrange(1, 7)
    edges = [(rng.randrange(x), x) for x in range(1, n)]
    m = rng.randrange(1, 5)
    groups = [[c * n + x for x in range(n)] for c in range(m)]
    layout = octopia.build(edges, m, groups)
    brokers = [v for g in groups for v in g]
    busy = {(a, b) for a in brokers for b in brokers if rng.random() < 0.4}
    queues = Queues(busy, {(a, b): rng.randrange(50) for a in brokers for b in brokers})
    snr, dyn = octopia_net(layout), octopia_net(layout, queues=queues)
    live = {}
    host = rng.choice(brokers)
    ads = [net.act(host, lambda b, now: octo(b).advertise(b, Box.whole(LINE), now))
           for net in (snr, dyn)]  # fmt: skip
    for _ in range(rng.randrange(1, 12)):
        lo = rng.uniform(0, 90)
        box, v = iv(lo, lo + rng.uniform(0, 30), LINE), rng.choice(brokers)
        sids = [net.act(v, lambda b, now, box=box: octo(b).subscribe(b, box, now))
                for net in (snr, dyn)]  # fmt: skip
        assert sids[0] == sids[1]
        live[sids[0]] = (v, box)
    for i in range(6):
        e = (rng.uniform(0, 100),)
        dyn.now = snr.now = 0.05 * i  # a new window each time: the last one's counts decide
        got = []
        for net, ad in zip((snr, dyn), ads, strict=True):
            eid = net.act(host, lambda b, now, ad=ad, e=e: octo(b).publish(b, ad, e, now))
            got.append(net.deliveries_of(eid))
        assert got[0] == got[1] == oracle(live, e)
    if m > 1 and any(octo(b).civ(b, ads[1]) & ~(1 << octo(b).c) for b in [dyn.brokers[host]]):
        assert queues.samples > 0


def test_octopia_idr_on_cores_sends_a_civ_n() -> None:
    """Fig. 8's P3 with both of its host's target iLinks congested and its aLink free: one
    copy on the aLink carrying CIV 101, and the aLink's far end sends the iLink copies."""
    layout = octopia.build(PATH, 3, [[5 * c + x for x in range(5)] for c in range(3)])
    h = B("e", 1)
    queues = Queues({(h, B("e", 0)), (h, B("e", 2))}, Counter())
    net = octopia_net(layout, queues=queues)
    for b, _, (lo, hi) in FIG8_SUBS:
        net.act(b, lambda br, now, lo=lo, hi=hi: octo(br).subscribe(br, iv(lo, hi, LINE), now))
    ad = net.act(h, lambda br, now: octo(br).advertise(br, iv(20, 29, LINE), now))
    net.act(h, lambda br, now: octo(br).publish(br, ad, (25,), now))  # samples the window
    net.now = 0.05
    net.delivered.clear()
    eid = net.act(h, lambda br, now: octo(br).publish(br, ad, (25,), now))
    hops = [(s.src, s.dst, list(s.msg.hdr)) for s in net.publications(eid)]  # type: ignore[attr-defined]
    assert hops[0] == (h, B("d", 1), [0b101])
    assert (B("d", 1), B("d", 0), []) in hops and (B("d", 1), B("d", 2), []) in hops
    assert len(net.delivered) == 4


# -------------------------------------------------------------------------------------- POP
#: Fig. 1 is an image; the smallest tree consistent with the text: B1's rows B2 6, B4 3, B5 15
#: and local 1; B7 and B8 downstream of B6, which is downstream of B5 (B3 sits past B2).
FIG1 = {"B1": ["B2", "B4", "B5"], "B2": ["B1", "B3"], "B3": ["B2"], "B4": ["B1"],
        "B5": ["B1", "B6"], "B6": ["B5", "B7", "B8"], "B7": ["B6"], "B8": ["B6"]}  # fmt: skip
FIG1_DELIVERIES = {"B1": 1, "B2": 4, "B3": 2, "B4": 3, "B5": 0, "B6": 5, "B7": 5, "B8": 5}


def test_pop_fig1_walk() -> None:
    tables: dict[Hashable, pop.PPTable] = {}
    trms = pop.trace_once(FIG1, "B1", FIG1_DELIVERIES, tables)
    assert trms == 7  # one per broker reached but the source (B5 only forwards: it answers too)
    assert tables["B1"].rows == {"B1": 1, "B2": 6, "B4": 3, "B5": 15}
    sent, end = pop.walk("B1", tables)
    # B1: 15 > 6 + 3 + 1 -> B5 with up 10; B5: B6's row beats it -> B6; B6 stays
    assert [(f.to, f.up) for f in sent] == [("B5", 10), ("B6", 10)]
    assert end == pop.Answer(("B6", "B5", "B1"))
    # the text's slip: B6 sees 10 (< 12.5) upstream, not 15, else it would not be the median
    assert sent[-1].up < 12.5


def test_pop_pptable_running_average() -> None:
    t = pop.PPTable("b")
    t.record({"b": 2, "n1": 8})  # the first trace sets the rows
    assert t.rows == {"b": 2, "n1": 8}
    t.record({"b": 6, "n2": 4})  # n1 got nothing this time: it counts 0; n2 was 0 before
    assert t.rows == {"b": 0.25 * 6 + 0.75 * 2, "n1": 0.75 * 8, "n2": 0.25 * 4}
    assert t.local == 3.0
    t.clear()
    assert t.rows == {} and t.traces == 0


def test_pop_trace_probability_and_reply() -> None:
    assert [pop.p_trace(t, 50) for t in (0, 25, 50, 60)] == [1.0, 0.5, 0.0, 0.0]
    rng = random.Random(7)
    tagged = 0
    for _ in range(10_000):  # one window of a fast publisher: at most N tags
        tagged += pop.should_trace(rng, tagged)
    assert tagged == pop.N_TRACE
    r = pop.TraceReply(2, {"x", "y"})
    r.on_trm("x", 3)
    assert not r.ready
    r.on_trm("y", 4)
    assert r.ready and r.total == 9


def random_tree(rng: random.Random, n: int) -> dict[Hashable, list[Hashable]]:
    adj: dict[Hashable, list[Hashable]] = {i: [] for i in range(n)}
    for v in range(1, n):
        u = rng.randrange(v)
        adj[u].append(v)
        adj[v].append(u)
    return adj


def hops_from(adj: Mapping[Hashable, Sequence[Hashable]], src: Hashable) -> dict[Hashable, int]:
    dist = {src: 0}
    frontier = [src]
    while frontier:
        nxt = []
        for u in frontier:
            for v in adj[u]:
                if v not in dist:
                    dist[v] = dist[u] + 1
                    nxt.append(v)
        frontier = nxt
    return dist


@given(st.integers(0, 2**32 - 1), st.integers(1, 25))
def test_pop_walk_ends_at_a_weighted_1_median(seed: int, n: int) -> None:
    rng = random.Random(seed)
    adj = random_tree(rng, n)
    deliveries = {b: rng.choice((0, 0, 1, 2, 5, 20)) for b in adj}
    source = rng.randrange(n)
    tables: dict[Hashable, pop.PPTable] = {}
    pop.trace_once(adj, source, deliveries, tables)
    sent, end = pop.walk(source, tables)
    target = end.path[0] if isinstance(end, pop.Answer) else source

    def cost(c: Hashable) -> int:
        d = hops_from(adj, c)
        return sum(deliveries[b] * d[b] for b in adj)

    assert cost(target) == min(cost(c) for c in adj)
    # a simple path from the source along tree edges: the walk never turns back
    path = [source, *(f.to for f in sent)]
    assert len(set(path)) == len(path)
    assert all(b in adj[a] for a, b in itertools.pairwise(path))
    if isinstance(end, pop.Answer):
        assert end.path == tuple(reversed(path))
    else:
        assert end == pop.Abort() and not sent


# ------------------------------------------------------------------------------------ GRAPE
#: A - B - C and B - D; 4 publications in the session: C delivers the first two to 2 local
#: subscribers each, D all four to 1 each. Every hop costs qm = 0.5 + 0.25 + 0.25 = 1.
def small_grape() -> grape.Grape:
    nbrs = {"A": ("B",), "B": ("A", "C", "D"), "C": ("B",), "D": ("B",)}
    bits = {"A": 0, "B": 0, "C": 0b0011, "D": 0b1111}
    deliv = {"A": 0, "B": 0, "C": 4, "D": 4}
    return grape.Grape({
        b: grape.TraceInfo(nbrs[b], bits[b], deliv[b], 0.5, 0.25,
                           {n: 0.25 for n in (*nbrs[b], grape.CLIENT)})
        for b in nbrs
    })  # fmt: skip


PINGS = {"A": 10.0, "B": 5.0, "C": 30.0, "D": 60.0}


def test_grape_hand_computed_example() -> None:
    g = small_grape()
    # rooted at A: A 4 + B 4 + C 2 + D 4; at B: 4 + A 0 + C 2 + D 4; at C: C 4 + B 4 + D 4;
    # at D: D 4 + B 2 (A|B|C) + C 2
    assert [g.msg_rate(c) for c in "ABCD"] == [14, 10, 12, 8]
    # at A: cum 10, B 11, C and D 12, each delivery + 1 -> 13; at B: 5 + 1 + 1 = 7;
    # at C: 4 x 31 + 4 x 33 over 8 = 32; at D: 4 x 61 + 4 x 63 over 8 = 62
    assert [g.avg_delay(c, PINGS[c]) for c in "ABCD"] == [13.0, 7.0, 32.0, 62.0]
    # with RTT/2 = 10 per tree hop: at B, each delivery one hop further -> 17
    assert g.avg_delay("B", 5.0, lambda a, b: 10.0) == 17.0
    cands = list("ABCD")
    assert g.select(cands, PINGS, "load", 100) == "D"  # the minimum rate, delay 62
    assert g.select(cands, PINGS, "delay", 100) == "B"  # the minimum delay
    # load1: rates normalised A 100, B 33, C 67, D 0; A goes, B has the lowest delay of the
    # rest: the same as delay100, as the paper says
    assert g.select(cands, PINGS, "load", 1) == "B"
    # delay1 drops only D (delay 100 after normalising); B has the lowest rate of the rest
    assert g.select(cands, PINGS, "delay", 1) == "B"
    # load50 keeps D (0) and B (33): the lower delay wins
    assert g.select(cands, PINGS, "load", 50) == "B"
    assert g.select(cands, PINGS, "load", 75) == "D"


def test_grape_session_log() -> None:
    log = grape.SessionLog(212)
    log.deliver(212, 3)
    log.deliver(214, 1)
    log.deliver(215, 0)  # received, nothing delivered here: no bit
    assert log.bits == 0b101 and log.deliveries == 4


@given(st.integers(0, 2**32 - 1), st.integers(1, 20), st.integers(1, 12))
def test_grape_priorities_at_100_pick_the_argmins(seed: int, n: int, g_bits: int) -> None:
    rng = random.Random(seed)
    adj = random_tree(rng, n)
    infos = {}
    for b in adj:
        bits = rng.getrandbits(g_bits) if rng.random() < 0.5 else 0
        out = {x: rng.choice((0.0, 0.5, 2.0)) for x in (*adj[b], grape.CLIENT)}
        deliv = bits.bit_count() * rng.randrange(1, 4)
        in_q, match = rng.choice((0.0, 1.0)), rng.choice((0.25, 1.0))
        infos[b] = grape.TraceInfo(tuple(adj[b]), bits, deliv, in_q, match, out)
    g = grape.Grape(infos)
    cands = [b for b in adj if rng.random() < 0.7] or [0]
    pings = {c: rng.uniform(0, 50) for c in cands}
    rates = {c: g.msg_rate(c) for c in cands}
    delays = {c: g.avg_delay(c, pings[c]) for c in cands}
    assert rates[g.select(cands, pings, "load", 100)] == min(rates.values())
    assert delays[g.select(cands, pings, "delay", 100)] == min(delays.values())
    # msgRate by brute force: per publication, the brokers on the paths from c to its holders
    for c in cands:
        parent = {c: None}
        order = [c]
        for u in order:
            for v in adj[u]:
                if v not in parent:
                    parent[v] = u
                    order.append(v)
        brute = 0
        for k in range(g_bits):
            on: set[Hashable] = set()
            for b in adj:
                x: Hashable | None = b
                if infos[b].bits >> k & 1:
                    while x is not None and x not in on:
                        on.add(x)
                        x = parent[x]
            brute += len(on)
        assert rates[c] == brute
