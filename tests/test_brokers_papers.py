"""The reference papers' worked examples, exactly, and the invariants of their algorithms:
Kyra's toy system (seed 003, Figs. 2 and 4), OctopiA's CIVs (seed 002, Fig. 8) and IDR table,
POP's walk to the weighted 1-median (seed 004, Fig. 1) and GRAPE's selection."""

from __future__ import annotations

import random
from collections.abc import Hashable

from hypothesis import given
from hypothesis import strategies as st

from rangecast.brokers import kyra, octopia

# ------------------------------------------------------------------------------------- Kyra
SERVERS = "ABCDEFGH"
#: Fig. 4's point subscriptions: A{1,5} is two subscriptions of A, to the events 1 and 5
TOY_SUBS = {"A": (1, 5), "B": (7, 8), "C": (1, 2), "D": (0, 6), "E": (3, 5), "F": (5, 7),
            "G": (4, 6), "H": (2, 9)}  # fmt: skip
CLIQUES = [("A", "B", "C"), ("D", "E"), ("F", "G", "H")]
ZONES = {"A": (0, 3), "F": (0, 3), "B": (4, 6), "G": (4, 6), "C": (7, 9), "H": (7, 9),
         "D": (0, 4), "E": (5, 9)}  # fmt: skip
TREE_ZONES = [((0, 3),), ((4, 6),), ((7, 9),)]


def toy_latency(a: str, b: str) -> float:
    """A latency matrix built so that HAC finds Fig. 4's cliques and Prim's MST its trees:
    1 inside a clique, 10 between neighbouring cliques, 20 between the outer ones, and the few
    pairs below set so each tree's edges are its cheapest spanning set."""
    if a == b:
        return 0.0
    special = {"BE": 9, "BG": 15, "EG": 16, "DG": 17, "CH": 12, "EH": 13}
    key = "".join(sorted(a + b))
    if key in special:
        return special[key]
    ca, cb = (next(i for i, c in enumerate(CLIQUES) if x in c) for x in (a, b))
    return 1.0 if ca == cb else 10.0 * abs(ca - cb)


def toy_subs() -> list[kyra.Subscription]:
    return [kyra.Subscription(f"{o}{v}", o, ((v, v),)) for o, vs in TOY_SUBS.items() for v in vs]


def toy_kyra() -> kyra.Kyra:
    zones = {s: ((lo, hi),) for s, (lo, hi) in ZONES.items()}
    return kyra.build(CLIQUES, zones, TREE_ZONES, toy_subs(), toy_latency)


def points(boxes: list[kyra.Box]) -> set[int]:
    return {x for x in range(10) if any(kyra.contains(b, (x,)) for b in boxes)}


def edges(adj: kyra.Adjacency) -> set[str]:
    return {"".join(sorted(str(u) + str(v))) for u in adj for v in adj[u]}


def test_kyra_hac_finds_the_toy_cliques() -> None:
    assert kyra.hac_cliques(SERVERS, toy_latency, 5, 8) == CLIQUES
    # the limits: size caps the cliques; no pair fits -> the loop returns (printed one spins)
    assert all(len(c) <= 2 for c in kyra.hac_cliques(SERVERS, toy_latency, 5, 2))
    assert kyra.hac_cliques(SERVERS, toy_latency, 5, 1) == [(s,) for s in SERVERS]
    assert kyra.hac_cliques(SERVERS, toy_latency, 0.5, 8) == [(s,) for s in SERVERS]
    # complete linkage: at 10 the {D,E}+{A,B,C} merge is allowed, {F,G,H} is 20 from A
    assert kyra.hac_cliques(SERVERS, toy_latency, 10, 8) == [tuple("ABCDE"), tuple("FGH")]
    matrix = [[toy_latency(a, b) for b in SERVERS] for a in SERVERS]
    assert kyra.hac_cliques(SERVERS, kyra.distance_fn(matrix, SERVERS), 5, 8) == CLIQUES


def test_kyra_toy_structures_reproduce_fig4() -> None:
    k = toy_kyra()
    assert k.members == [("A", "D", "F"), ("B", "D", "E", "G"), ("C", "E", "H")]
    assert [edges(a) for a in k.tree_adj] == [{"AD", "DF"}, {"BE", "BG", "DE"}, {"CE", "CH"}]
    proxy = {s: points([x.box for x in k.proxies[s]]) for s in SERVERS}
    # Fig. 4 lists B with no proxy subscription: a slip, A's {1,5} overlaps B's zone 4-6 at 5
    assert proxy == {"A": {1, 2}, "B": {5}, "C": {7, 8}, "D": {0, 3}, "E": {5, 6}, "F": {2},
                     "G": {4, 5, 6}, "H": {7, 9}}  # fmt: skip
    assert [(x.sub_id, x.origin) for x in k.proxies["B"]] == [("A5", "A")]
    tables = {(u, t, v): points(bs) for t, tab in enumerate(k.tables)
              for u, row in tab.items() for v, bs in row.items()}  # fmt: skip
    assert tables == {
        ("A", 0, "D"): {0, 2, 3}, ("D", 0, "A"): {1, 2}, ("D", 0, "F"): {2},
        ("F", 0, "D"): {0, 1, 2, 3},
        ("B", 1, "E"): {5, 6}, ("B", 1, "G"): {4, 5, 6}, ("D", 1, "E"): {4, 5, 6},
        ("E", 1, "B"): {4, 5, 6}, ("E", 1, "D"): set(), ("G", 1, "B"): {5, 6},
        ("C", 2, "E"): set(), ("C", 2, "H"): {7, 9}, ("E", 2, "C"): {7, 8, 9},
        ("H", 2, "C"): {7, 8},
    }  # fmt: skip


def test_kyra_event_9_from_a_two_messages_fig2_five() -> None:
    r = kyra.route(toy_kyra(), "A", (9,))
    assert r.messages == [("A", "C", "clique"), ("C", "H", "tree")]
    assert r.delivered == ["H9"]
    # Fig. 2: the filter-based tree over all servers, every server holding its own subscriptions
    tree: kyra.Adjacency = {s: set() for s in SERVERS}
    for u, v in ("AC", "BC", "CD", "CE", "EF", "FG", "GH"):
        tree[u].add(v)
        tree[v].add(u)
    held = {o: [((v, v),) for v in vs] for o, vs in TOY_SUBS.items()}
    hops = kyra.tree_route(tree, kyra.tree_tables(tree, held), "A", (9,))
    assert hops == [("A", "C"), ("C", "E"), ("E", "F"), ("F", "G"), ("G", "H")]


def test_kyra_toy_every_event_reaches_exactly_its_subscribers() -> None:
    k = toy_kyra()
    for src in SERVERS:
        for x in range(10):
            r = kyra.route(k, src, (x,))
            want = sorted(f"{o}{x}" for o, vs in TOY_SUBS.items() if x in vs)
            assert sorted(map(str, r.delivered)) == want
            # each origin gets the event once: from the proxy, or it is the proxy itself
            proxied = [d for _, d, kind in r.messages if kind == "proxy"]
            assert len(proxied) == len(set(proxied))


@given(st.integers(0, 2**32 - 1), st.integers(1, 9), st.integers(1, 3))
def test_kyra_kd_partition_tiles_the_domain(seed: int, k: int, dims: int) -> None:
    rng = random.Random(seed)
    domain = tuple((0.0, 100.0) for _ in range(dims))
    events = [tuple(rng.uniform(0, 100) for _ in range(dims)) for _ in range(rng.randrange(40))]
    subs = []
    for _ in range(rng.randrange(10)):
        lo = [rng.uniform(0, 90) for _ in range(dims)]
        subs.append(tuple((a, a + rng.uniform(0, 10)) for a in lo))
    zones = kyra.kd_partition(domain, k, events, subs, 1.0, rng.choice((0.0, 1.0)))
    assert len(zones) == k
    probes = [*events, *(tuple(rng.uniform(0, 100) for _ in range(dims)) for _ in range(50))]
    for p in probes:
        assert sum(kyra.contains(z, p) for z in zones) == 1


def test_kyra_kd_partition_balances_the_load() -> None:
    events = [(float(x),) for x in range(100)]
    zones = kyra.kd_partition(((0.0, 99.0),), 4, events, beta=0.0)
    assert [sum(kyra.contains(z, e) for e in events) for z in zones] == [25, 25, 25, 25]
    # k = 3 splits 2:1, so the first cut leaves two thirds of the load on the left
    zones = kyra.kd_partition(((0.0, 99.0),), 3, events, beta=0.0)
    assert sorted(sum(kyra.contains(z, e) for e in events) for z in zones) == [33, 33, 34]
    # 2-D: the spread attribute is cut, the constant one is not
    events2 = [(float(x), 5.0) for x in range(10)]
    zones = kyra.kd_partition(((0.0, 9.0), (0.0, 9.0)), 2, events2, beta=0.0)
    assert [z[1] for z in zones] == [(0.0, 9.0), (0.0, 9.0)]


# ---------------------------------------------------------------------------------- OctopiA
#: Fig. 8's topology is only in the image; the smallest one consistent with its text: G_a a path
#: of regions a-e, m = 3, S1 at B(c,0), S2 at B(d,0), S3 at B(c,1), S4 at B(c,2); P1 at B(a,2),
#: P2 at B(a,1), P3 at B(e,1), with 1-D ad boxes so that P1 -> {S4}, P2 -> {S1,S4}, P3 -> all.
PATH = {"a": {"b"}, "b": {"a", "c"}, "c": {"b", "d"}, "d": {"c", "e"}, "e": {"d"}}
FIG8_SUBS = [(("c", 0), "S1", ((10, 30),)), (("d", 0), "S2", ((20, 30),)),
             (("c", 1), "S3", ((20, 30),)), (("c", 2), "S4", ((0, 30),))]  # fmt: skip
FIG8_ADS = [(("a", 2), "P1", ((0, 9),)), (("a", 1), "P2", ((10, 19),)),
            (("e", 1), "P3", ((20, 29),))]  # fmt: skip


def fig8(subs_first: bool) -> octopia.Octopia:
    net = octopia.Octopia(PATH, 3)
    steps = [lambda b=b, s=s, x=x: net.subscribe(b, s, x) for b, s, x in FIG8_SUBS]
    ads = [lambda b=b, a=a, x=x: net.advertise(b, a, x) for b, a, x in FIG8_ADS]
    for step in (steps + ads) if subs_first else (ads + steps):
        step()
    return net


def test_octopia_fig8_civs() -> None:
    for subs_first in (True, False):
        net = fig8(subs_first)
        assert [octopia.civ_str(net.civ(p), 3) for p in ("P1", "P2", "P3")] == ["100", "101", "111"]
        # each advertisement goes to its m-1 region peers only; one CIB_SET per STC and ad,
        # although S1 and S2 both make cluster 0 a target of P3
        assert net.sent["ADV"] == 3 * 2
        assert net.sent["CIB_SET"] == 0 + 2 + 2
        assert net.sent["SUB"] == 4 * 4  # flooded in its own cluster: 5 brokers, 4 aLinks


def test_octopia_fig8_static_routes() -> None:
    net = fig8(True)
    hops, got = net.publish(("a", 2), "P1", (5,))
    # P1 has no STC: its own bit 2 sends nothing, the notification stays on aLinks
    assert hops == [(("a", 2), ("b", 2), 0), (("b", 2), ("c", 2), 0)]
    assert got == [(("c", 2), "S4")]
    hops, got = net.publish(("a", 1), "P2", (15,))
    assert hops[:2] == [(("a", 1), ("a", 0), 0), (("a", 1), ("a", 2), 0)]  # two copies, iLinks
    assert sorted(s for _, s in got) == ["S1", "S4"]
    hops, got = net.publish(("e", 1), "P3", (25,))
    # three copies at the host: the aLink toward S3 and one iLink each to clusters 0 and 2;
    # one copy only to B(e,0) although S1 and S2 are both there
    assert hops[:3] == [(("e", 1), ("d", 1), 0), (("e", 1), ("e", 0), 0), (("e", 1), ("e", 2), 0)]
    assert len(hops) == 8
    assert sorted(s for _, s in got) == ["S1", "S2", "S3", "S4"]


A1, A2 = ("x", 0), ("y", 0)
ILINKS = {1: ("p", 1), 2: ("p", 2), 3: ("p", 3)}


def run_idr(
    busy: set[octopia.Broker],
    q: dict[octopia.Broker, int],
    alinks: list[octopia.Broker] | None = None,
) -> list[tuple[octopia.Broker, str]]:
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
    link = ("p", 1)
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


@given(st.integers(0, 2**32 - 1))
def test_octopia_idr_delivers_like_snr(seed: int) -> None:
    """Whatever the congestion, IDR reaches exactly SNR's subscribers, each once."""
    rng = random.Random(seed)
    regions = list(range(rng.randrange(1, 7)))
    tree: dict[Hashable, set[Hashable]] = {r: set() for r in regions}
    for r in regions[1:]:
        p = rng.randrange(r)
        tree[r].add(p)
        tree[p].add(r)
    m = rng.randrange(1, 5)
    net = octopia.Octopia(tree, m)
    brokers = sorted(net.brokers, key=repr)
    for i in range(rng.randrange(1, 12)):
        lo = rng.uniform(0, 90)
        net.subscribe(rng.choice(brokers), f"s{i}", ((lo, lo + rng.uniform(0, 30)),))
    host = rng.choice(brokers)
    net.advertise(host, "P", ((0.0, 100.0),))
    busy = {(a, b) for a in brokers for b in brokers if rng.random() < 0.4}
    q = {(a, b): rng.randrange(50) for a in brokers for b in brokers}
    for _ in range(5):
        e = (rng.uniform(0, 100),)
        _, snr = net.publish(host, "P", e)
        _, dyn = net.publish(host, "P", e, lambda a, b: (a, b) in busy, lambda a, b: q[(a, b)])
        assert sorted(snr, key=repr) == sorted(dyn, key=repr)
        assert len(set(dyn)) == len(dyn)
        want = {s for b in net.brokers.values() for s, (box, last) in b.prt.items()
                if last is None and octopia.contains(box, e)}  # fmt: skip
        assert {s for _, s in snr} == want
