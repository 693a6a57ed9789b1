"""Broker graph builders (brokers/graphs.py): each gives a connected graph of its intended shape,
with latency RTT/2 on every edge."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rangecast.brokers.graphs import (
    BrokerGraph,
    Overlay,
    clique_graph,
    hac_cliques,
    kary_tree,
    latency_mst,
    scot,
)
from rangecast.dht.errors import LocalProtocolError


def _rtt(n: int, seed: int) -> list[list[float]]:
    rng = random.Random(seed)
    pts = [(rng.uniform(0, 100), rng.uniform(0, 100)) for _ in range(n)]
    return [[((ax - bx) ** 2 + (ay - by) ** 2) ** 0.5 for bx, by in pts] for ax, ay in pts]


@given(st.integers(1, 40), st.integers(0, 10**6))
def test_latency_mst_is_a_minimum_spanning_tree(n: int, seed: int) -> None:
    rtt = _rtt(n, seed)
    g = latency_mst(range(n), rtt)
    ov = g.overlay("t", "tree")
    assert len(g.edges) == n - 1 and g.is_connected("tree")
    assert n == 1 or ov.is_tree()
    for (a, b), e in g.edges.items():
        assert e.latency_ms == rtt[a][b] / 2
    # Brute force on small graphs: no spanning tree is lighter.
    if n <= 6:
        best = min(
            sum(rtt[a][b] for a, b in es)
            for es in itertools.combinations(itertools.combinations(range(n), 2), n - 1)
            if _spans(n, es)
        )
        assert sum(rtt[a][b] for a, b in g.edges) == pytest.approx(best)


def _spans(n: int, edges: tuple[tuple[int, int], ...]) -> bool:
    g = BrokerGraph(range(n))
    for a, b in edges:
        g.add_edge(a, b, "x")
    return g.is_connected("x")


@given(st.integers(1, 80), st.integers(1, 5), st.integers(0, 10**6), st.booleans())
def test_kary_tree_is_balanced(n: int, k: int, seed: int, aware: bool) -> None:
    rtt = _rtt(n, seed)
    g = kary_tree(range(n), k, random.Random(seed), rtt, latency_aware=aware)
    assert len(g.edges) == n - 1 and g.is_connected("tree")
    assert sorted(g.nodes) == list(range(n))
    # Breadth-first positions: position p has min(k, n-1-p*k) children, so the degree sequence
    # is the balanced k-ary tree's, and no broker is deeper than the balanced height.
    expect = [max(0, min(k, n - 1 - p * k)) + (p > 0) for p in range(n)]
    assert sorted(g.degree(v) for v in g.nodes) == sorted(expect)
    height = 0
    while sum(k**i for i in range(height + 1)) < n:
        height += 1
    ov = g.overlay("t", "tree")
    assert max(_eccentricity(ov, v) for v in g.nodes) <= 2 * height


def _eccentricity(ov: Overlay, v: int) -> int:
    dist = {v: 0}
    frontier = [v]
    while frontier:
        nxt = []
        for u in frontier:
            for w in ov.neighbours(u):
                if w not in dist:
                    dist[w] = dist[u] + 1
                    nxt.append(w)
        frontier = nxt
    return max(dist.values())


def test_kary_tree_latency_aware_places_the_medoid_at_the_root() -> None:
    rtt = _rtt(15, 3)
    g = kary_tree(range(15), 2, rtt=rtt, latency_aware=True)
    medoid = min(range(15), key=lambda v: (sum(rtt[v]), v))
    # A full binary tree of 15: only the root has degree 2; its children are its nearest two.
    assert [v for v in g.nodes if g.degree(v) == 2] == [medoid]
    nearest = sorted((v for v in range(15) if v != medoid), key=lambda v: (rtt[medoid][v], v))
    assert g.neighbours(medoid) == sorted(nearest[:2])


#: A 14-node tree shape with 4 inner nodes and 10 leaves (OctopiA's G_a; its exact shape is only
#: in a figure): a path of 4 inner nodes, 10 leaves hung 3/2/2/3.
OCTOPIA_TREE = [(0, 1), (1, 2), (2, 3)] + [
    (x, leaf)
    for x, leaves in ((0, (4, 5, 6)), (1, (7, 8)), (2, (9, 10)), (3, (11, 12, 13)))
    for leaf in leaves
]


def test_scot_has_octopias_70_brokers_65_alinks_140_ilinks() -> None:
    rng = random.Random(1)
    brokers = list(range(70))
    rng.shuffle(brokers)
    groups = [brokers[c * 14 : (c + 1) * 14] for c in range(5)]
    g = scot(OCTOPIA_TREE, 5, groups, _rtt(70, 1))
    assert len(g.nodes) == 70
    assert len(g.edges_with("aLink")) == 65 and len(g.edges_with("iLink")) == 140
    assert g.is_connected() and not g.overlay("all").is_tree()
    for c in range(5):
        ov = g.overlay(f"c{c}", f"cluster:{c}")
        assert ov.is_tree() and ov.members == sorted(groups[c])
    for x in range(14):
        region = g.overlay(f"r{x}", f"region:{x}")
        assert len(region.edges) == 10 and region.members == sorted(grp[x] for grp in groups)
    # Primary neighbours (tree) plus m-1 secondary ones (the region).
    for c, grp in enumerate(groups):
        for x, v in enumerate(grp):
            tree_deg = sum(x in e for e in OCTOPIA_TREE)
            assert g.degree(v, "aLink") == tree_deg and g.degree(v, "iLink") == 4, (c, x)


def test_scot_refuses_a_non_tree() -> None:
    with pytest.raises(LocalProtocolError):
        scot([(0, 1), (1, 0)], 2, [[0, 1, 2], [3, 4, 5]])


@given(
    st.integers(1, 40),
    st.integers(0, 10**6),
    st.floats(0, 150),
    st.integers(1, 8),
)
def test_hac_cliques_respect_both_limits(n: int, seed: int, max_d: float, max_size: int) -> None:
    rtt = _rtt(n, seed)
    cliques = hac_cliques(range(n), rtt, max_d, max_size)
    assert sorted(v for c in cliques for v in c) == list(range(n))
    for c in cliques:
        assert len(c) <= max_size
        assert all(rtt[a][b] <= max_d for a, b in itertools.combinations(c, 2))
    # The stop rule: no two cliques could still merge.
    for c1, c2 in itertools.combinations(cliques, 2):
        link = max(rtt[a][b] for a in c1 for b in c2)
        assert link > max_d or len(c1) + len(c2) > max_size
    g = clique_graph(cliques, rtt)
    for i, c in enumerate(cliques):
        ov = g.overlay(f"k{i}", f"clique:{i}")
        assert len(ov.edges) == len(c) * (len(c) - 1) // 2
        assert ov.is_connected(c)
    assert len(g.edges_with("clique")) == sum(len(c) * (len(c) - 1) // 2 for c in cliques)


def test_hac_on_kyras_three_clusters() -> None:
    # Three well separated groups of latency come out as three cliques.
    pos = {0: 0, 1: 1, 2: 2, 3: 50, 4: 51, 5: 100, 6: 101, 7: 102}
    rtt = [[abs(pos[a] - pos[b]) for b in range(8)] for a in range(8)]
    assert hac_cliques(range(8), rtt, 10, 3) == [[0, 1, 2], [3, 4], [5, 6, 7]]
    assert hac_cliques(range(8), rtt, 10, 2) == [[0, 1], [2], [3, 4], [5, 6], [7]]


def test_rtt_as_a_callable_and_a_general_graph() -> None:
    g = BrokerGraph(range(4), lambda a, b: 10.0 * abs(a - b))
    g.add_edge(0, 1, "x")
    g.add_edge(1, 2, "x")
    g.add_edge(2, 3, "x")
    g.add_edge(3, 0, "x", "y")
    assert g.latency(0, 3) == 15.0 and g.edge(3, 0).labels == {"x", "y"}
    assert g.is_connected("x") and not g.overlay("o", "x").is_tree()
    assert g.overlay("y", "y").members == [0, 3]
