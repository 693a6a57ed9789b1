"""Broker graphs: brokers joined by labelled edges whose latency is half the RTT, the builders the
baselines need, and named overlays (edge subsets with their own routing state).

Theory of operation
-------------------
Brokers are the simulator's nodes (ints). A ``BrokerGraph`` keeps, per undirected edge, its
one-way latency (RTT/2, from the RTT the latency models give in ms) and a set of labels:
``tree``, ``aLink``, ``iLink``, ``clique``, ``tree:t`` ... An ``Overlay`` is a named subset of the
edges, usually every edge with one label (``graph.overlay("c0", "cluster:0")``); routing state is
kept per (broker, overlay), and a broker may be in several overlays (Kyra's zone trees, OctopiA's
cluster trees beside its iLinks).

The RTT comes in as a callable ``rtt(a, b) -> ms`` (``LatencyModel.rtt_ms``) or a square list of
lists indexed by broker; ``rtt_function`` turns either into the callable.

Builders (all deterministic: ties go to the lower broker id, randomness only from the
``random.Random`` passed in):

- ``latency_mst``: Prim's minimum spanning tree on the complete RTT graph over the given brokers
  (the filter-based tree, and Kyra's per-zone trees over their members).
- ``kary_tree``: a balanced k-ary tree (positions in breadth-first order, parent of position p is
  ``(p - 1) // k``), brokers placed at random, or latency-aware: the root is the broker with the
  least total RTT to the others (the medoid), and every inner position, in breadth-first order,
  takes as children its k nearest still unplaced brokers.
- ``scot``: OctopiA's SCOT, the Cartesian product of a tree shape with K_m: broker B(x, c) is
  ``groups[c][x]``; a copy of the tree per cluster c (``aLink`` and ``cluster:c``), and the m
  brokers of each region x fully meshed (``iLink`` and ``region:x``).
- ``hac_cliques``: Kyra's server cliques, hierarchical agglomerative clustering with complete
  linkage (the distance of two cliques is their largest pairwise RTT). Its printed loop never
  ends when no pair can merge, so the stop rule is fixed as BASELINES.md says: repeatedly merge
  the closest pair whose distance is at most ``max_distance`` and whose sizes sum to at most
  ``max_size``; stop when there is none. ``clique_graph`` meshes each clique (``clique``).
- ``BrokerGraph.add_edge`` for any general graph.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from rangecast.dht.errors import LocalProtocolError

__all__ = [
    "BrokerGraph",
    "Edge",
    "Overlay",
    "RttLike",
    "clique_graph",
    "full_mesh",
    "hac_cliques",
    "kary_tree",
    "latency_mst",
    "rtt_function",
    "scot",
]

Rtt = Callable[[int, int], float]
#: An RTT in ms between two brokers: a callable, or a square matrix indexed by broker.
RttLike = Rtt | Sequence[Sequence[float]]


def rtt_function(rtt: RttLike | None) -> Rtt:
    """``rtt`` as a callable; ``None`` is a graph without latency (every edge 0 ms)."""
    if rtt is None:
        return lambda a, b: 0.0
    if callable(rtt):
        return rtt
    rows = rtt
    n = len(rows)
    for r in rows:
        if len(r) != n:
            raise LocalProtocolError(f"an RTT matrix must be square; a row has {len(r)} of {n}")
    return lambda a, b: float(rows[a][b])


def _key(a: int, b: int) -> tuple[int, int]:
    return (a, b) if a < b else (b, a)


@dataclass(slots=True)
class Edge:
    """An undirected link: one-way latency in ms (RTT/2) and its labels."""

    latency_ms: float
    labels: set[str]


class BrokerGraph:
    """Brokers and labelled, latency-weighted undirected edges."""

    __slots__ = ("_adj", "edges", "nodes", "rtt")

    def __init__(self, nodes: Iterable[int] = (), rtt: RttLike | None = None) -> None:
        self.rtt: Rtt = rtt_function(rtt)
        self.nodes: list[int] = []
        self._adj: dict[int, dict[int, Edge]] = {}
        self.edges: dict[tuple[int, int], Edge] = {}
        for v in nodes:
            self.add_node(v)

    def add_node(self, v: int) -> None:
        if v not in self._adj:
            self._adj[v] = {}
            self.nodes.append(v)

    def add_edge(self, a: int, b: int, *labels: str) -> Edge:
        """Join ``a`` and ``b`` (adding them if new) or add ``labels`` to their edge."""
        if a == b:
            raise LocalProtocolError(f"no self-loop: broker {a}")
        self.add_node(a)
        self.add_node(b)
        k = _key(a, b)
        e = self.edges.get(k)
        if e is None:
            e = Edge(self.rtt(a, b) / 2.0, set(labels))
            self.edges[k] = e
            self._adj[a][b] = e
            self._adj[b][a] = e
        else:
            e.labels.update(labels)
        return e

    def has_edge(self, a: int, b: int) -> bool:
        return _key(a, b) in self.edges

    def edge(self, a: int, b: int) -> Edge:
        return self.edges[_key(a, b)]

    def latency(self, a: int, b: int) -> float:
        """One-way latency of the edge a-b in ms."""
        return self.edges[_key(a, b)].latency_ms

    def neighbours(self, v: int, label: str | None = None) -> list[int]:
        adj = self._adj[v]
        return sorted(u for u, e in adj.items() if label is None or label in e.labels)

    def degree(self, v: int, label: str | None = None) -> int:
        return len(self.neighbours(v, label))

    def edges_with(self, label: str | None = None) -> list[tuple[int, int]]:
        return sorted(k for k, e in self.edges.items() if label is None or label in e.labels)

    def overlay(self, name: str, label: str | None = None) -> Overlay:
        """The overlay of every edge carrying ``label`` (every edge when None)."""
        return Overlay(name, self.edges_with(label))

    def is_connected(self, label: str | None = None) -> bool:
        return self.overlay("_", label).is_connected(self.nodes)


class Overlay:
    """A named edge subset: whom each broker talks to on it."""

    __slots__ = ("_adj", "edges", "name")

    def __init__(self, name: str, edges: Iterable[tuple[int, int]]) -> None:
        self.name = name
        self.edges: frozenset[tuple[int, int]] = frozenset(_key(a, b) for a, b in edges)
        adj: dict[int, list[int]] = {}
        for a, b in sorted(self.edges):
            adj.setdefault(a, []).append(b)
            adj.setdefault(b, []).append(a)
        self._adj = {v: tuple(sorted(ns)) for v, ns in adj.items()}

    @property
    def members(self) -> list[int]:
        return sorted(self._adj)

    def neighbours(self, v: int) -> tuple[int, ...]:
        return self._adj.get(v, ())

    def is_connected(self, nodes: Iterable[int] | None = None) -> bool:
        """Whether the overlay joins ``nodes`` (default: its own members) into one component."""
        want = set(self._adj if nodes is None else nodes)
        if len(want) <= 1:
            return True
        start = next(iter(want))
        seen = {start}
        stack = [start]
        while stack:
            for u in self._adj.get(stack.pop(), ()):
                if u not in seen:
                    seen.add(u)
                    stack.append(u)
        return want <= seen

    def is_tree(self) -> bool:
        return len(self.edges) == len(self._adj) - 1 and self.is_connected()


# ----------------------------------------------------------------------------------------------
# Builders
# ----------------------------------------------------------------------------------------------


def latency_mst(
    nodes: Sequence[int],
    rtt: RttLike,
    label: str = "tree",
    graph: BrokerGraph | None = None,
) -> BrokerGraph:
    """Prim's minimum spanning tree on RTT over ``nodes`` (O(n^2), no heap: the graph is
    complete). Edges are added to ``graph`` (a new one by default) with ``label``."""
    g = graph if graph is not None else BrokerGraph(rtt=rtt)
    f = rtt_function(rtt)
    order = list(dict.fromkeys(nodes))
    for v in order:
        g.add_node(v)
    if len(order) < 2:
        return g
    best = {v: (f(order[0], v), order[0]) for v in order[1:]}
    while best:
        # Ties to the lowest broker id, so equal RTTs give one tree.
        v = min(best, key=lambda u: (best[u][0], u))
        _, parent = best.pop(v)
        g.add_edge(parent, v, label)
        for u, (d, _) in best.items():
            du = f(v, u)
            if du < d:
                best[u] = (du, v)
    return g


def kary_tree(
    nodes: Sequence[int],
    k: int,
    rng: random.Random | None = None,
    rtt: RttLike | None = None,
    *,
    latency_aware: bool = False,
    label: str = "tree",
) -> BrokerGraph:
    """A balanced k-ary tree over ``nodes`` (see the module docs for the placements). Random
    placement shuffles with ``rng``; latency-aware placement needs ``rtt``; with neither, the
    brokers take the positions in the order given."""
    if k < 1:
        raise LocalProtocolError(f"k must be >= 1, got {k}")
    order = list(dict.fromkeys(nodes))
    g = BrokerGraph(rtt=rtt)
    if latency_aware:
        if rtt is None:
            raise LocalProtocolError("latency-aware placement needs an RTT")
        f = rtt_function(rtt)
        order = _nearest_fill(order, k, f)
    elif rng is not None:
        rng.shuffle(order)
    for v in order:
        g.add_node(v)
    for p in range(1, len(order)):
        g.add_edge(order[(p - 1) // k], order[p], label)
    return g


def _nearest_fill(nodes: list[int], k: int, f: Rtt) -> list[int]:
    """Breadth-first positions: the medoid at the root, each parent's k nearest unplaced
    brokers as its children."""
    if not nodes:
        return []
    root = min(nodes, key=lambda v: (sum(f(v, u) for u in nodes), v))
    placed = [root]
    left = [v for v in nodes if v != root]
    p = 0
    while left:
        parent = placed[p]
        left.sort(key=lambda u: (f(parent, u), u))
        placed.extend(left[:k])
        del left[:k]
        p += 1
    return placed


def scot(
    tree_edges: Sequence[tuple[int, int]],
    m: int,
    groups: Sequence[Sequence[int]],
    rtt: RttLike | None = None,
) -> BrokerGraph:
    """OctopiA's SCOT: ``tree_edges`` is the shape G_a over positions 0..n-1; broker B(x, c) is
    ``groups[c][x]``. Edges of cluster c carry ``aLink`` and ``cluster:c``; the m brokers of
    region x are meshed by ``iLink`` and ``region:x`` edges."""
    if m < 1 or len(groups) != m:
        raise LocalProtocolError(f"SCOT needs m >= 1 groups, got m={m} and {len(groups)} groups")
    n = len(tree_edges) + 1
    shape = Overlay("shape", tree_edges)
    # A single region (no edge) is a tree too: the SCOT is then one K_m.
    if tree_edges and (shape.members != list(range(n)) or not shape.is_tree()):
        raise LocalProtocolError(f"tree_edges must form a tree over positions 0..{n - 1}")
    for c, grp in enumerate(groups):
        if len(grp) != n:
            raise LocalProtocolError(f"group {c} has {len(grp)} brokers, the tree has {n}")
    flat = [v for grp in groups for v in grp]
    if len(set(flat)) != len(flat):
        raise LocalProtocolError("a broker is in two SCOT positions")
    g = BrokerGraph(flat, rtt)
    for c, grp in enumerate(groups):
        for x, y in tree_edges:
            g.add_edge(grp[x], grp[y], "aLink", f"cluster:{c}")
    for x in range(n):
        for c in range(m):
            for d in range(c + 1, m):
                g.add_edge(groups[c][x], groups[d][x], "iLink", f"region:{x}")
    return g


def hac_cliques(
    nodes: Sequence[int], rtt: RttLike, max_distance: float, max_size: int
) -> list[list[int]]:
    """Kyra's server cliques (complete-linkage HAC, stop rule in the module docs): each clique's
    largest pairwise RTT is at most ``max_distance`` and it has at most ``max_size`` brokers.
    Cliques are returned sorted, each by broker id, the list by its first broker."""
    if max_size < 1:
        raise LocalProtocolError(f"max_size must be >= 1, got {max_size}")
    f = rtt_function(rtt)
    order = list(dict.fromkeys(nodes))
    members: dict[int, list[int]] = {i: [v] for i, v in enumerate(order)}
    dist: dict[tuple[int, int], float] = {}
    heap: list[tuple[float, int, int]] = []
    for i in range(len(order)):
        for j in range(i + 1, len(order)):
            d = f(order[i], order[j])
            dist[(i, j)] = d
            if d <= max_distance:
                heap.append((d, i, j))
    heapq.heapify(heap)
    nxt = len(order)
    while heap:
        d, i, j = heapq.heappop(heap)
        if i not in members or j not in members:
            continue  # a clique that has merged since: its pairs were re-pushed under a new id
        if len(members[i]) + len(members[j]) > max_size:
            continue  # sizes only grow, so this pair can never merge
        merged = members.pop(i) + members.pop(j)
        c = nxt
        nxt += 1
        for o in members:
            # Complete linkage: the new clique's distance to o is the larger of its parts'.
            do = max(dist.pop(_key(i, o)), dist.pop(_key(j, o)))
            dist[(o, c)] = do
            if do <= max_distance:
                heapq.heappush(heap, (do, o, c))
        members[c] = merged
    return sorted(sorted(ms) for ms in members.values())


def full_mesh(nodes: Sequence[int], graph: BrokerGraph, label: str = "clique") -> None:
    """Join every pair of ``nodes`` in ``graph`` with ``label``."""
    for i, a in enumerate(nodes):
        for b in nodes[i + 1 :]:
            graph.add_edge(a, b, label)


def clique_graph(cliques: Sequence[Sequence[int]], rtt: RttLike | None = None) -> BrokerGraph:
    """Each clique a full mesh (``clique`` and ``clique:i``); no edge between cliques."""
    g = BrokerGraph((v for c in cliques for v in c), rtt)
    for i, c in enumerate(cliques):
        full_mesh(list(c), g, "clique")
        full_mesh(list(c), g, f"clique:{i}")
    return g
