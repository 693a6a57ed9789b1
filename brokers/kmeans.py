"""The multicast-based baseline of Kyra's evaluation (Cao & Singh, INFOCOM 2004, its ref. [25]:
Riabov et al.): the event space cut into grid cells, the cells clustered into G multicast groups
by Forgy's K-means, one latency MST per group, and every event multicast unfiltered on its
group's tree.

Theory of operation
-------------------
The paper's description: "First, the event space is partitioned into a limited number of
multicast groups. For each group, a multicast tree is built that spans all servers with
subscription for any event in that group. When an event is published, it is mapped into a group
and multicast on the corresponding tree to all group members." Our reading, layer by layer:

**Cells** (``Grid``). Each attribute is cut into ``cells`` equal-width bins over its domain (an
int attribute into at most one bin per value, on integral ends), and a cell is one bin per
attribute: ``cells ** d`` cells for d attributes. A cell's **membership** is the set of servers
holding a subscription that overlaps it (box against cell, ``filters.overlaps``' exact
semantics), and its **weight** the number of events of a sample that fall in it.

**Groups** (``forgy_kmeans``). The cells with a non-empty membership are clustered into G
groups: Forgy's initialisation takes G distinct cells drawn from a ``random.Random`` (the
caller's, never the global one) as the initial centroids; a cell joins the centroid nearest in
squared Euclidean distance between 0/1 membership vectors (ties: the lower group); a centroid is
its cells' weighted mean membership (unweighted when its cells weigh nothing; kept when no cell
joins it); rounds repeat until no cell moves or ``max_rounds``. A cell no subscription overlaps
is in no group: an event there goes nowhere.

**Trees** (``build``). Group g's members are the union of its cells' memberships; its tree is a
latency MST over them (``graphs.latency_mst``, label ``group:g``, overlay 1 + g). Overlay 0,
``ACCESS``, carries the unicast from a publishing server to the group member nearest to it (by
RTT, ties to the lower id), one edge per (non-member, group), and holds each server's own
clients' subscriptions as local PRT entries.

=====================  =====================================================================
input at server v      action
=====================  =====================================================================
client subscribes s    PRT(ACCESS)[s] = local, no message; every cell s overlaps must be in a
                       group v belongs to, else ``LocalProtocolError`` (the layout is static)
client publishes e     cell(e) -> group g (none: nothing is sent); v a member of g: v floods
                       g's tree; otherwise one Publish on ACCESS to g's member nearest to v
Publish on ACCESS      the entry member floods g's tree as the event's source
Publish on tree g      flood: deliver v's local matches, forward to every tree neighbour but
                       the sender, unfiltered
=====================  =====================================================================

No delivery is missed and none is duplicated: every server holding a subscription an event
matches holds one that overlaps the event's cell, so it is a member of the cell's group, and a
flood on a tree reaches each member exactly once. A member whose clients match nothing still
receives the event (the paper's extraneous traffic: "event 9 is forwarded to server B"); it is a
false positive where the flood ends, a pure forward where it goes on.

Events missing an attribute are placed as if the attribute had its lowest value (bin 0), the
reading of ``kyra._placed``: a subscription leaving the attribute free overlaps every bin of it,
so its server is a member of the group, and one constraining it rejects the event at matching
(the strict rule). Subscriptions are static, like Kyra's layout: sample, build, then measure.
"""

from __future__ import annotations

import random
from bisect import bisect_right
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import product

import numpy as np

from rangecast.brokers.broker import Broker, RoutingConfig, Strategy, siena
from rangecast.brokers.filters import Box, Dim, overlaps
from rangecast.brokers.graphs import BrokerGraph, Overlay, RttLike, latency_mst, rtt_function
from rangecast.brokers.messages import Publish
from rangecast.brokers.tables import LOCAL, SubEntry
from rangecast.dht.errors import LocalProtocolError, RemoteProtocolError
from rangecast.dht.wire import Message
from rangecast.pubsub.schema import Schema

__all__ = [
    "ACCESS",
    "MAX_CELLS",
    "Grid",
    "KMeansLayout",
    "KMeansStrategy",
    "build",
    "cell_weights",
    "forgy_kmeans",
    "kmeans_layout",
    "membership",
]

#: Overlay index of the publisher -> entry-member unicasts (and the local client entries);
#: group g's tree is overlay 1 + g.
ACCESS = 0
#: The largest grid (cells in all): K-means holds a cells x servers matrix.
MAX_CELLS = 1 << 14


# -------------------------------------------------------------------------------------- cells
class Grid:
    """The event space cut into equal-width bins per attribute; a cell is one bin per
    attribute, numbered in mixed radix with attribute 0 the most significant digit."""

    __slots__ = ("_inner", "_radix", "bins", "dims", "schema", "size")

    def __init__(self, schema: Schema, cells: int) -> None:
        if cells < 1:
            raise LocalProtocolError(f"need at least one bin per attribute, got {cells}")
        self.schema = schema
        #: Per attribute, each bin's interval (a ``filters.Dim``).
        self.dims: list[list[Dim]] = []
        #: Per attribute, the lower ends of bins 1.. (``bisect_right`` finds a value's bin).
        self._inner: list[list[float]] = []
        for a in schema.attributes:
            if a.type == "int":
                # Integral ends, so that a bin is a set of whole values and never empty.
                n = int(a.max - a.min) + 1
                k = min(cells, n)
                starts = [a.min + (n * j) // k for j in range(k + 1)]
                dims = [(starts[j], starts[j + 1] - 1, False, False) for j in range(k)]
                self._inner.append(starts[1:k])
            else:
                edges = [a.min + (a.max - a.min) * j / cells for j in range(cells)] + [a.max]
                # [e_j, e_j+1) except the last, closed at the domain's top.
                dims = [(edges[j], edges[j + 1], False, j < cells - 1) for j in range(cells)]
                self._inner.append(edges[1:cells])
            self.dims.append(dims)
        self.bins = [len(d) for d in self.dims]
        self.size = 1
        self._radix: list[int] = []
        for b in reversed(self.bins):
            self._radix.append(self.size)
            self.size *= b
        self._radix.reverse()
        if self.size > MAX_CELLS:
            raise LocalProtocolError(
                f"{' x '.join(map(str, self.bins))} = {self.size:,} cells: more than "
                f"{MAX_CELLS:,}; use fewer bins per attribute"
            )

    def cell_of(self, values: Sequence[float | None]) -> int:
        """The cell holding the event; a missing attribute counts as its lowest value (bin 0:
        module docs). Values beyond the domain fall in the outer bins."""
        c = 0
        for inner, r, v in zip(self._inner, self._radix, values, strict=True):
            if v is not None:
                c += bisect_right(inner, v) * r
        return c

    def cells_of(self, box: Box) -> list[int]:
        """The cells ``box`` overlaps, ascending. A box overlaps a cell iff each of its
        intervals meets the cell's bin (``overlaps`` per attribute); a free attribute spans the
        domain and meets every bin."""
        per: list[list[int]] = []
        for i, d in enumerate(box.dims):
            one = Box((d,))
            per.append([j for j, b in enumerate(self.dims[i]) if overlaps(one, Box((b,)))])
        return sorted(
            sum(j * r for j, r in zip(js, self._radix, strict=True)) for js in product(*per)
        )

    def bins_of(self, cell: int) -> tuple[int, ...]:
        return tuple(cell // r % b for r, b in zip(self._radix, self.bins, strict=True))

    def box(self, cell: int) -> Box:
        """The cell as a box (every attribute constrained)."""
        return Box(tuple(self.dims[i][j] for i, j in enumerate(self.bins_of(cell))))


def membership(grid: Grid, subs: Iterable[tuple[int, Box]]) -> dict[int, frozenset[int]]:
    """Cell -> the servers holding a subscription (server, box) that overlaps it; only cells
    with members."""
    out: dict[int, set[int]] = {}
    for v, box in subs:
        for c in grid.cells_of(box):
            out.setdefault(c, set()).add(v)
    return {c: frozenset(out[c]) for c in sorted(out)}


def cell_weights(grid: Grid, events: Iterable[Sequence[float | None]]) -> dict[int, int]:
    """Cell -> events of the sample in it."""
    out: dict[int, int] = {}
    for e in events:
        c = grid.cell_of(e)
        out[c] = out.get(c, 0) + 1
    return out


# ------------------------------------------------------------------------------------ K-means
def forgy_kmeans(
    members: Mapping[int, Collection[int]],
    weights: Mapping[int, float],
    k: int,
    rng: random.Random,
    max_rounds: int = 100,
) -> list[list[int]]:
    """The cells of ``members`` (cell -> servers, non-empty) clustered into at most ``k``
    groups (module docs); returns the non-empty groups, each its cells ascending, in group
    order. Deterministic for the state of ``rng``."""
    if k < 1:
        raise LocalProtocolError(f"need at least one group, got {k}")
    cells = sorted(c for c, ms in members.items() if ms)
    if not cells:
        return []
    servers = sorted({v for c in cells for v in members[c]})
    col = {v: i for i, v in enumerate(servers)}
    x = np.zeros((len(cells), len(servers)))
    for r, c in enumerate(cells):
        x[r, [col[v] for v in members[c]]] = 1.0
    w = np.array([float(weights.get(c, 0)) for c in cells])
    k = min(k, len(cells))
    # Forgy: k distinct cells at random are the initial centroids.
    cent = x[sorted(rng.sample(range(len(cells)), k))].copy()
    norms = x.sum(axis=1)  # |x|^2 of a 0/1 vector
    assign: np.ndarray | None = None
    for _ in range(max_rounds):
        d = norms[:, None] - 2.0 * (x @ cent.T) + (cent * cent).sum(axis=1)[None, :]
        new = np.argmin(d, axis=1)  # the first minimum: ties to the lower group
        if assign is not None and np.array_equal(new, assign):
            break
        assign = new
        for j in range(k):
            mask = assign == j
            if not mask.any():
                continue  # an empty group keeps its centroid
            tw = w[mask].sum()
            cent[j] = (w[mask] @ x[mask]) / tw if tw > 0 else x[mask].mean(axis=0)
    assert assign is not None
    groups = [[cells[r] for r in np.flatnonzero(assign == j)] for j in range(k)]
    return [g for g in groups if g]


# ------------------------------------------------------------------------------------ layout
@dataclass(slots=True)
class KMeansLayout:
    """One multicast-group network (static: sample, build, then measure)."""

    graph: BrokerGraph
    #: ACCESS, then one tree per group.
    overlays: list[Overlay]
    grid: Grid
    #: Per group, its cells.
    groups: list[list[int]]
    #: Per group, its member servers, ascending.
    members: list[list[int]]
    #: Cell -> group (cells of no group are absent).
    group_of: dict[int, int]
    #: (server, group) -> the group's member nearest to the server (non-members only).
    entry: dict[tuple[int, int], int]
    member_sets: list[frozenset[int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.member_sets = [frozenset(ms) for ms in self.members]

    def configs(self) -> dict[int, RoutingConfig]:
        """Plain configs: the strategy routes every publication itself and nothing else is
        ever sent (subscriptions stay local)."""
        return {i: siena() for i in range(len(self.overlays))}

    def strategy(self, v: int) -> KMeansStrategy:
        return KMeansStrategy(self, v)

    def group(self, values: Sequence[float | None]) -> int | None:
        """The group of the event's cell (None: no subscription overlaps the cell)."""
        return self.group_of.get(self.grid.cell_of(values))


def build(
    servers: Sequence[int],
    grid: Grid,
    groups: Sequence[Sequence[int]],
    members: Mapping[int, Collection[int]],
    rtt: RttLike,
) -> KMeansLayout:
    """The layout of the given groups of cells: each group's members (the union of its cells'
    ``members``, cell -> servers), their latency MST, and the ACCESS edges from every other
    server to the group's member nearest to it. Every cell with members must be in exactly
    one group (else a delivery could be missed)."""
    group_of: dict[int, int] = {}
    for g, cs in enumerate(groups):
        for c in cs:
            if c in group_of:
                raise LocalProtocolError(f"cell {c} is in groups {group_of[c]} and {g}")
            group_of[c] = g
    lost = [c for c, ms in members.items() if ms and c not in group_of]
    if lost:
        raise LocalProtocolError(f"cells with members in no group: {sorted(lost)[:10]}")
    f = rtt_function(rtt)

    def nearest(v: int, ms: list[int]) -> int:
        return min(ms, key=lambda m: (f(v, m), m))

    g_members = [sorted({v for c in cs for v in members.get(c, ())}) for cs in groups]
    graph = BrokerGraph(servers, rtt)
    for g, ms in enumerate(g_members):
        latency_mst(ms, rtt, f"group:{g}", graph)
    entry: dict[tuple[int, int], int] = {}
    for g, ms in enumerate(g_members):
        if not ms:
            continue
        inside = set(ms)
        for v in servers:
            if v not in inside:
                e = entry[(v, g)] = nearest(v, ms)
                graph.add_edge(v, e, "access")
    overlays = [graph.overlay("access", "access")]
    overlays += [graph.overlay(f"group:{g}", f"group:{g}") for g in range(len(groups))]
    return KMeansLayout(
        graph, overlays, grid, [list(cs) for cs in groups], g_members, group_of, entry
    )


def kmeans_layout(
    schema: Schema,
    servers: Sequence[int],
    subs: Iterable[tuple[int, Box]],
    sample: Iterable[Sequence[float | None]],
    rtt: RttLike,
    groups: int,
    cells: int,
    rng: random.Random,
) -> KMeansLayout:
    """The whole pipeline: the grid, the known subscriptions' (server, box) memberships, the
    sample's weights, Forgy's K-means into ``groups`` groups, ``build``."""
    grid = Grid(schema, cells)
    mem = membership(grid, subs)
    found = forgy_kmeans(mem, cell_weights(grid, sample), groups, rng)
    return build(servers, grid, found, mem, rtt)


# ---------------------------------------------------------------------------------- strategy
class KMeansStrategy(Strategy):
    """One server's part (module docs). Client calls: ``subscribe``, ``unsubscribe``,
    ``publish``, each with the server's broker core."""

    __slots__ = ("_layout", "mine")

    def __init__(self, layout: KMeansLayout, v: int) -> None:
        self._layout = layout
        #: The groups this server is a member of.
        self.mine = frozenset(g for g, ms in enumerate(layout.member_sets) if v in ms)

    # -- client calls ----------------------------------------------------------------------

    def subscribe(self, broker: Broker, box: Box, now: float) -> int:
        if len(box) != len(broker.schema):
            raise LocalProtocolError(f"a box of {len(box)} attributes for {broker.schema.name!r}")
        lay = self._layout
        for c in lay.grid.cells_of(box):
            g = lay.group_of.get(c)
            if g is None or g not in self.mine:
                raise LocalProtocolError(
                    f"{box} overlaps cell {c} (group {g}), which does not reach server "
                    f"{broker.id}: the multicast groups are static, built from the known "
                    "subscriptions"
                )
        sid = broker.new_id()
        # Only a local entry: the server matches its own clients on every flood it receives.
        broker.tables(ACCESS).prt[sid] = SubEntry(box, LOCAL, broker.id)
        return sid

    def unsubscribe(self, broker: Broker, sid: int, now: float) -> None:
        e = broker.tables(ACCESS).prt.pop(sid, None)
        if e is None:
            raise LocalProtocolError(f"no local subscription {sid}")

    def publish(self, broker: Broker, values: Sequence[float | None], now: float) -> int:
        if len(values) != len(broker.schema):
            raise LocalProtocolError(f"event of {len(values)} values for {broker.schema.name!r}")
        eid = broker.new_id()
        g = self._layout.group(values)
        if g is None:
            return eid  # no subscription overlaps the cell: no server wants the event
        if g in self.mine:
            self._flood(broker, Publish(1 + g, eid, list(values)), LOCAL, LOCAL, now)
        else:
            e = self._layout.entry[(broker.id, g)]
            broker.send(e, Publish(ACCESS, eid, list(values)), now)  # to the nearest member
        return eid

    # -- hooks ------------------------------------------------------------------------------

    def on_receive(self, broker: Broker, msg: Message, src: int, now: float) -> bool:
        if type(msg) is not Publish:
            raise RemoteProtocolError(f"the multicast groups exchange publications only: {msg}")
        g = self._layout.group(msg.values)
        if msg.overlay == ACCESS:
            if g is None or g not in self.mine:
                raise RemoteProtocolError(f"event {msg.values} is for no group of {broker.id}")
            # The entry member is the flood's source on the tree: every tree neighbour.
            self._flood(broker, Publish(1 + g, msg.eid, msg.values), src, LOCAL, now)
        else:
            if g != msg.overlay - 1:
                raise RemoteProtocolError(f"event {msg.values} is not for group {msg.overlay - 1}")
            self._flood(broker, msg, src, src, now)
        return False

    # -- internals ----------------------------------------------------------------------------

    def _flood(self, broker: Broker, msg: Publish, src: int, tree_src: int, now: float) -> None:
        """Deliver the local matches (``src`` counts the reception), then forward to every
        tree neighbour but ``tree_src``, unfiltered."""
        local, _ = broker.match(ACCESS, msg, LOCAL)
        targets = [n for n in broker.neighbours(msg.overlay) if n != tree_src]
        broker.deliver(ACCESS, msg, local, src, now, bool(targets))
        for n in targets:
            broker.send(n, msg, now)
