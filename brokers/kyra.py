"""Kyra (Cao & Singh, INFOCOM 2004): server cliques, zone partitions and per-zone routing trees.

Theory of operation
-------------------
Kyra routes in two levels. Servers close in latency form **cliques** (full mesh inside); each
clique splits the content space into one **zone** per server, and a server is the **proxy** of
every subscription of its clique that overlaps its zone (clipped to the zone). Globally the space
is split into T **tree zones**; a server joins every tree whose zone overlaps its own, and each
tree is a latency MST over its members running SIENA without advertisements: every proxy floods
its clipped subscriptions ``s & zone(p) & zone(t)`` over the tree, so a server keeps, per tree
and per tree neighbour, the boxes held on that neighbour's side.

An event e published at server o travels::

    o --clique--> p = the server of clique(o) whose zone holds e      (none if o = p)
    p, then every tree member reached  --tree t(e)-->  neighbours with a matching entry
    each server reached, per origin of a matching proxy subscription  --proxy-->  origin

``p`` always belongs to t(e) (its zone holds e, so it overlaps zone(t(e))). Within a clique the
zones are disjoint, so a subscription is matched at exactly one proxy: no duplicates.

==============================  ==============================================================
step                            reading chosen where the text is silent (docs/baselines.md)
==============================  ==============================================================
HAC (Fig. 5)                    complete linkage; ties by (distance, server order); returns
                                when no pair can merge (the printed loop never ends then)
zones                           k-d bisection (``kd_partition``), ceil(k/2):floor(k/2)
clipping                        proxy set clipped to zone(p), tree entries to zone(p)&zone(t)
tree                            Prim's MST on latency over the members (``prim_mst``)
last hop                        the proxy unicasts e once per origin server (text is silent)
==============================  ==============================================================

Boxes are tuples of inclusive ``(lo, hi)`` intervals, one per attribute; events are points. A
split at ``m`` gives ``[lo, m]`` and ``[nextafter(m), hi]``, so partition zones never share a
point. Nodes are any hashables; ties follow the order of the ``servers`` sequence given.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from rangecast.dht.errors import LocalProtocolError

Node = Hashable
Interval = tuple[float, float]
Box = tuple[Interval, ...]
Point = tuple[float, ...]
Dist = Callable[[Node, Node], float]
Adjacency = dict[Node, set[Node]]
#: per tree node, per tree neighbour: the clipped boxes held on that neighbour's side
Tables = dict[Node, dict[Node, list[Box]]]


# ------------------------------------------------------------------------------- box algebra
def contains(box: Box, point: Point) -> bool:
    return all(lo <= v <= hi for (lo, hi), v in zip(box, point, strict=True))


def overlaps(a: Box, b: Box) -> bool:
    return all(alo <= bhi and blo <= ahi for (alo, ahi), (blo, bhi) in zip(a, b, strict=True))


def clip(a: Box, b: Box) -> Box | None:
    """``a & b``, or None when they do not overlap."""
    out = tuple((max(alo, blo), min(ahi, bhi)) for (alo, ahi), (blo, bhi) in zip(a, b, strict=True))
    return out if all(lo <= hi for lo, hi in out) else None


def covers(a: Box, b: Box) -> bool:
    return all(alo <= blo and bhi <= ahi for (alo, ahi), (blo, bhi) in zip(a, b, strict=True))


def distance_fn(latency: Dist | Sequence[Sequence[float]], servers: Sequence[Node]) -> Dist:
    """A callable over nodes from either a callable or a matrix indexed like ``servers``."""
    if callable(latency):
        return latency
    index = {s: i for i, s in enumerate(servers)}
    matrix = latency
    return lambda a, b: matrix[index[a]][index[b]]


# ----------------------------------------------------------------------------------- cliques
def hac_cliques(
    servers: Sequence[Node], dist: Dist, max_distance: float, max_num_servers: int
) -> list[tuple[Node, ...]]:
    """Fig. 5 with complete linkage: repeatedly merge the closest pair of cliques whose joint
    size is at most ``max_num_servers``, stop at the first distance above ``max_distance`` or
    when no pair can merge. A heap with versioned entries keeps it O(n^2 log n)."""
    if max_num_servers < 1:
        raise LocalProtocolError("max_num_servers must be >= 1")
    n = len(servers)
    members: list[list[int] | None] = [[i] for i in range(n)]
    d = [[dist(servers[i], servers[j]) for j in range(n)] for i in range(n)]
    version = [0] * n
    heap = [(d[i][j], i, j, 0, 0) for i in range(n) for j in range(i + 1, n)]
    heapq.heapify(heap)
    while heap:
        dij, i, j, vi, vj = heapq.heappop(heap)
        mi, mj = members[i], members[j]
        if mi is None or mj is None or version[i] != vi or version[j] != vj:
            continue  # stale: one side merged since
        if dij > max_distance:
            break
        if len(mi) + len(mj) > max_num_servers:
            continue  # sizes only grow: this pair can never merge
        mi.extend(mj)
        members[j] = None
        version[i] += 1
        for k in range(n):
            if k != i and members[k] is not None:
                d[i][k] = d[k][i] = max(d[i][k], d[j][k])  # complete linkage
                a, b = min(i, k), max(i, k)
                heapq.heappush(heap, (d[a][b], a, b, version[a], version[b]))
    return [tuple(servers[x] for x in sorted(m)) for m in members if m is not None]


# -------------------------------------------------------------------------------- partitions
def kd_partition(
    domain: Box,
    k: int,
    events: Sequence[Point] = (),
    subs: Sequence[Box] = (),
    alpha: float = 1.0,
    beta: float = 1.0,
) -> list[Box]:
    """Split ``domain`` into ``k`` disjoint boxes of balanced load ``alpha*events +
    beta*overlapping subscriptions``: split along the attribute whose load is most spread
    (weighted standard deviation over the zone's width), at the cut that minimises the larger of
    load(left)/k_left and load(right)/k_right (the weighted median for k_left = k_right), with
    k_left = ceil(k/2). Without load, split the relatively widest attribute in proportion."""
    if k < 1:
        raise LocalProtocolError("k must be >= 1")
    widths = [hi - lo for lo, hi in domain]
    out: list[Box] = []
    inside = [s for s in subs if overlaps(s, domain)]
    _split(domain, k, list(events), inside, alpha, beta, widths, out)
    return out


def _split(
    zone: Box,
    k: int,
    events: list[Point],
    subs: list[Box],
    alpha: float,
    beta: float,
    widths: list[float],
    out: list[Box],
) -> None:
    if k == 1:
        out.append(zone)
        return
    kl = (k + 1) // 2
    kr = k - kl
    dim, cut = _choose_cut(zone, kl, kr, events, subs, alpha, beta, widths)
    lo, hi = zone[dim]
    left = (*zone[:dim], (lo, cut), *zone[dim + 1 :])
    right = (*zone[:dim], (math.nextafter(cut, math.inf), hi), *zone[dim + 1 :])
    for part, kp in ((left, kl), (right, kr)):
        evs = [e for e in events if contains(part, e)]
        _split(part, kp, evs, [s for s in subs if overlaps(s, part)], alpha, beta, widths, out)


def _choose_cut(
    zone: Box,
    kl: int,
    kr: int,
    events: list[Point],
    subs: list[Box],
    alpha: float,
    beta: float,
    widths: list[float],
) -> tuple[int, float]:
    total = alpha * len(events) + beta * len(subs)
    spans = [hi - lo for lo, hi in zone]
    if total <= 0:
        dim = max(range(len(zone)), key=lambda d: (spans[d] / widths[d] if widths[d] else 0, -d))
        lo = zone[dim][0]
        return dim, lo + spans[dim] * kl / (kl + kr)
    spread = []
    for d, (lo, hi) in enumerate(zone):
        pos = [(e[d], alpha) for e in events] + [
            ((max(s[d][0], lo) + min(s[d][1], hi)) / 2, beta) for s in subs
        ]
        mean = sum(x * w for x, w in pos) / total
        var = sum(w * (x - mean) ** 2 for x, w in pos) / total
        spread.append(math.sqrt(var) / spans[d] if spans[d] > 0 else -1.0)
    dim = max(range(len(zone)), key=lambda d: (spread[d], -d))
    lo, hi = zone[dim]
    ev = sorted(e[dim] for e in events)
    slo = sorted(s[dim][0] for s in subs)
    shi = sorted(s[dim][1] for s in subs)
    cands = sorted({x for x in (*ev, *slo, *shi) if lo <= x < hi})
    best: tuple[float, float, float] | None = None
    for m in cands:
        left = alpha * bisect_right(ev, m) + beta * bisect_right(slo, m)
        right = alpha * (len(ev) - bisect_right(ev, m)) + beta * (len(shi) - bisect_right(shi, m))
        key = (max(left / kl, right / kr), abs(left / kl - right / kr), m)
        if best is None or key < best:
            best = key
    if best is None:  # all load sits at the zone's top: cut in proportion
        return dim, lo + (hi - lo) * kl / (kl + kr)
    return dim, best[2]


def zone_index(zones: Sequence[Box], point: Point) -> int:
    """The first zone holding ``point`` (partition zones are disjoint, so the only one)."""
    for i, z in enumerate(zones):
        if contains(z, point):
            return i
    raise LocalProtocolError(f"no zone holds {point}")


# ------------------------------------------------------------------------------------- trees
def prim_mst(members: Sequence[Node], dist: Dist) -> Adjacency:
    """Prim's MST on the complete latency graph over ``members``; ties by member order."""
    adj: Adjacency = {m: set() for m in members}
    if not members:
        return adj
    best = {m: (dist(members[0], m), 0) for m in members[1:]}
    order = {m: i for i, m in enumerate(members)}
    while best:
        v = min(best, key=lambda m: (best[m][0], best[m][1], order[m]))
        _, u = best.pop(v)
        adj[members[u]].add(v)
        adj[v].add(members[u])
        for w in best:
            dw = dist(v, w)
            if (dw, order[v]) < best[w]:
                best[w] = (dw, order[v])
    return adj


def tree_tables(
    adj: Adjacency, held: Mapping[Node, Sequence[Box]], covering: bool = False
) -> Tables:
    """SIENA on a tree after flooding: at u, for neighbour v, every box held on v's side. With
    ``covering`` a box covered by another one of the same list is dropped (the order-free end
    state of covering)."""
    side: dict[tuple[Node, Node], list[Box]] = {}

    def beyond(u: Node, v: Node) -> list[Box]:  # boxes held at v and past v, seen from u
        if (u, v) not in side:
            boxes = list(held.get(v, ()))
            for w in adj[v]:
                if w != u:
                    boxes.extend(beyond(v, w))
            side[(u, v)] = boxes
        return side[(u, v)]

    order = {u: i for i, u in enumerate(adj)}
    tables: Tables = {}
    for u in adj:
        tables[u] = {}
        for v in sorted(adj[u], key=order.__getitem__):
            boxes = beyond(u, v)
            tables[u][v] = _maximal(boxes) if covering else list(boxes)
    return tables


def _maximal(boxes: list[Box]) -> list[Box]:
    keep: list[Box] = []
    for i, b in enumerate(boxes):
        if not any(covers(c, b) and (c != b or j < i) for j, c in enumerate(boxes) if j != i):
            keep.append(b)
    return keep


def tree_route(
    adj: Adjacency, tables: Tables, entry: Node, event: Point
) -> list[tuple[Node, Node]]:
    """Filter-based routing from ``entry``: at each server, one copy to every neighbour but the
    sender with a matching entry. Returns the hops in send order (depth first)."""
    hops: list[tuple[Node, Node]] = []
    stack: list[tuple[Node, Node | None]] = [(entry, None)]
    while stack:
        u, came = stack.pop()
        nxt = [
            v
            for v, boxes in tables[u].items()
            if v != came and any(contains(b, event) for b in boxes)
        ]
        for v in nxt:
            hops.append((u, v))
        stack.extend((v, u) for v in reversed(nxt))
    return hops


# ------------------------------------------------------------------------------------- Kyra
@dataclass(frozen=True, slots=True)
class Subscription:
    sub_id: Hashable
    origin: Node
    box: Box


@dataclass(slots=True)
class Kyra:
    """The built structures of one Kyra network (static: sample, build, then measure)."""

    cliques: list[tuple[Node, ...]]
    zone: dict[Node, Box]
    tree_zones: list[Box]
    members: list[tuple[Node, ...]] = field(default_factory=list)
    tree_adj: list[Adjacency] = field(default_factory=list)
    #: proxy server -> its proxy subscriptions, boxes clipped to its zone
    proxies: dict[Node, list[Subscription]] = field(default_factory=dict)
    tables: list[Tables] = field(default_factory=list)
    clique_of: dict[Node, int] = field(default_factory=dict)


def build(
    cliques: Sequence[Sequence[Node]],
    zone: Mapping[Node, Box],
    tree_zones: Sequence[Box],
    subs: Iterable[Subscription],
    dist: Dist,
    mst: Callable[[Sequence[Node], Dist], Adjacency] = prim_mst,
    covering: bool = False,
) -> Kyra:
    """Tree membership, per-tree MSTs, proxy sets and per-tree filter tables."""
    k = Kyra([tuple(c) for c in cliques], dict(zone), list(tree_zones))
    k.clique_of = {s: i for i, c in enumerate(k.cliques) for s in c}
    servers = [s for c in k.cliques for s in c]
    k.proxies = {s: [] for s in servers}
    for sub in subs:
        for p in k.cliques[k.clique_of[sub.origin]]:
            part = clip(sub.box, k.zone[p])
            if part is not None:
                k.proxies[p].append(Subscription(sub.sub_id, sub.origin, part))
    for tz in k.tree_zones:
        members = tuple(s for s in servers if overlaps(k.zone[s], tz))
        adj = mst(members, dist)
        held: dict[Node, list[Box]] = {}
        for p in members:
            held[p] = [b for b in (clip(x.box, tz) for x in k.proxies[p]) if b is not None]
        k.members.append(members)
        k.tree_adj.append(adj)
        k.tables.append(tree_tables(adj, held, covering))
    return k


@dataclass(slots=True)
class Route:
    #: (src, dst, kind) in send order, kind in {"clique", "tree", "proxy"}
    messages: list[tuple[Node, Node, str]]
    #: ids of the subscriptions the event matched, at their proxies
    delivered: list[Hashable]


def route(k: Kyra, source: Node, event: Point) -> Route:
    """The hop sequence of ``event`` published at ``source`` (see the module docstring)."""
    clique = k.cliques[k.clique_of[source]]
    owner = next(p for p in clique if contains(k.zone[p], event))
    t = zone_index(k.tree_zones, event)
    msgs: list[tuple[Node, Node, str]] = []
    if owner != source:
        msgs.append((source, owner, "clique"))
    delivered: list[Hashable] = []

    def reach(u: Node) -> None:  # match the proxy set, one unicast per origin server
        origins: list[Node] = []
        for sub in k.proxies[u]:
            if contains(sub.box, event):
                delivered.append(sub.sub_id)
                if sub.origin != u and sub.origin not in origins:
                    origins.append(sub.origin)
        msgs.extend((u, o, "proxy") for o in origins)

    reach(owner)
    for u, v in tree_route(k.tree_adj[t], k.tables[t], owner, event):
        msgs.append((u, v, "tree"))
        reach(v)
    return Route(msgs, delivered)
