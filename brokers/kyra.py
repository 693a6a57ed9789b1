"""Kyra (Cao & Singh, INFOCOM 2004) as a configuration of broker cores: server cliques, zone
partitions and per-zone SIENA trees, with a ``KyraStrategy`` doing subscription movement and the
two unicast hops.

Theory of operation
-------------------
Kyra routes in two levels. Servers close in latency form **cliques** (``graphs.hac_cliques``,
each a full mesh: overlay 0, label ``clique``); each clique splits the content space into one
**zone** per server, and a server is the **proxy** of every subscription of its clique that
overlaps its zone. Globally the space is split into T **tree zones**; a server joins every tree
whose zone overlaps its own, and tree t is a latency MST over its members (``graphs.latency_mst``,
label ``tree:t``, overlay 1 + t) running SIENA (flooded subscriptions, optional covering). A
proxy installs ``s & zone(p) & zone(t)`` on each tree t it is on, as a local subscription of
that tree, so the tree's PRTs are exactly Kyra's per-neighbour tables.

=====================  =====================================================================
input at server v      action (the strategy's; routing on the trees is the broker core's)
=====================  =====================================================================
client subscribes s    PRT(clique overlay)[s] = local (the origin's delivery entry); MOVE(s)
                       to every clique peer p whose zone overlaps s (itself: no message)
MOVE(s) from o         proxy: per tree t of v, ``subscribe(s & zone(v) & zone(t))`` on t,
                       remembering tree sub -> origin o
client publishes e     the clique server p whose zone holds e gets it (Publish on the clique
                       overlay, none if p = v); p routes e on tree t(e) as its source
tree match at v        ``on_deliver``: one Publish (header TO_ORIGIN) per origin server of
                       the matched tree subscriptions (none on the wire for v itself)
TO_ORIGIN publication  the origin matches its clique-overlay PRT: its clients' deliveries
=====================  =====================================================================

``p`` always belongs to t(e) (its zone holds e, so it overlaps zone(t(e))). Within a clique the
zones are disjoint, so each subscription of the clique is matched at exactly one proxy, and an
origin gets each event at most once: no duplicates, and the origin's own matching decides which
of its clients get it.

Zones (``kd_partition``) are boxes (``brokers.filters.Box``) that constrain every attribute and
partition the domain: Kyra routes complete events (an event missing an attribute is in no zone;
``LocalProtocolError`` at ``publish``). A clique's zones may be cut by its own load alone (the
toy's 1-D zones), but in several dimensions such cuts fall across the tree zones' cuts and a
server's zone meets most of the T tree zones (thesis workload, 200 servers: 3.6 trees per
server, 22 servers on all 8, 7.2 tree pieces per subscription). ``aligned_partition`` cuts a
clique's zones along the trees' k-d tree (``kd_tree``): with k <= T servers each zone is a union
of whole tree zones, so a server joins about T/k trees, a tree has one member per clique and a
subscription becomes one piece per tree zone it meets, which is what the paper's "each server
only participates in a small number of routing networks" needs. The simulator uses it.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rangecast.brokers.broker import Broker, RoutingConfig, Strategy, siena
from rangecast.brokers.filters import Box, intersect, matches, overlaps, split
from rangecast.brokers.graphs import BrokerGraph, Overlay, RttLike, clique_graph, latency_mst
from rangecast.brokers.messages import Control, Publish, box_from_wire, box_to_wire
from rangecast.brokers.tables import LOCAL, SubEntry
from rangecast.dht.errors import LocalProtocolError, RemoteProtocolError
from rangecast.dht.wire import Message
from rangecast.pubsub.schema import Schema
from rangecast.pubsub.subscription import Range

__all__ = [
    "CLIQUE",
    "KdNode",
    "KyraLayout",
    "KyraStrategy",
    "aligned_partition",
    "build",
    "domain_box",
    "kd_partition",
    "kd_tree",
    "zone_index",
]

#: Overlay index of the clique meshes; tree t is overlay 1 + t.
CLIQUE = 0
#: Control ops on the clique overlay.
OP_MOVE, OP_UNMOVE = 1, 2
#: Header of the proxy -> origin publication (the zone holder's relay has none).
TO_ORIGIN = 1


# -------------------------------------------------------------------------------- partitions
def domain_box(schema: Schema) -> Box:
    """The whole domain with every attribute constrained (the root zone)."""
    return Box.from_ranges(
        schema, {i: Range(a.min, a.max) for i, a in enumerate(schema.attributes)}
    )


def kd_partition(
    schema: Schema,
    k: int,
    events: Sequence[Sequence[float | None]] = (),
    subs: Sequence[Box] = (),
    alpha: float = 1.0,
    beta: float = 1.0,
) -> list[Box]:
    """Split the domain into ``k`` disjoint zones of balanced load ``alpha*events +
    beta*overlapping subscriptions``: split along the attribute whose load is most spread
    (weighted standard deviation over the zone's width), at the cut that minimises the larger of
    load(left)/k_left and load(right)/k_right (the weighted median for k_left = k_right), with
    k_left = ceil(k/2). Without load, split the relatively widest attribute in proportion."""
    return kd_tree(schema, k, events, subs, alpha, beta).leaves()


@dataclass(slots=True)
class KdNode:
    """A node of a k-d partition: its box and, unless it is one zone, its two halves."""

    box: Box
    left: KdNode | None = None
    right: KdNode | None = None

    def leaves(self) -> list[Box]:
        """The zones below, left to right."""
        if self.left is None or self.right is None:
            return [self.box]
        return self.left.leaves() + self.right.leaves()


def kd_tree(
    schema: Schema,
    k: int,
    events: Sequence[Sequence[float | None]] = (),
    subs: Sequence[Box] = (),
    alpha: float = 1.0,
    beta: float = 1.0,
    root: Box | None = None,
) -> KdNode:
    """``kd_partition``'s cuts as a tree (its leaves are the zones), of ``root`` (default: the
    whole domain)."""
    if k < 1:
        raise LocalProtocolError("k must be >= 1")
    dom = domain_box(schema)
    widths = [hi - lo for lo, hi, _, _ in dom.dims]
    ints = [a.type == "int" for a in schema.attributes]
    top = dom if root is None else root

    def node(zone: Box, kz: int, evs: list[Sequence[float | None]], ss: list[Box]) -> KdNode:
        if kz == 1:
            return KdNode(zone)
        kl = (kz + 1) // 2
        dim, cut = _choose_cut(zone, kl, kz - kl, evs, ss, alpha, beta, widths)
        left, right = split(zone, dim, cut, ints[dim])
        if left is None or right is None:
            raise LocalProtocolError(f"the domain is too narrow for {k} zones")
        return KdNode(
            zone,
            node(left, kl, [e for e in evs if matches(left, e)], _meeting(ss, left)),
            node(right, kz - kl, [e for e in evs if matches(right, e)], _meeting(ss, right)),
        )

    # The whole domain keeps every event (one missing an attribute still weighs in the load).
    evs = list(events) if root is None else [e for e in events if matches(top, e)]
    return node(top, k, evs, _meeting(subs, top))


def _meeting(subs: Sequence[Box], zone: Box) -> list[Box]:
    return [s for s in subs if overlaps(s, zone)]


def aligned_partition(
    schema: Schema,
    trees: KdNode,
    k: int,
    events: Sequence[Sequence[float | None]] = (),
    subs: Sequence[Box] = (),
    alpha: float = 1.0,
    beta: float = 1.0,
) -> list[Box]:
    """A clique's ``k`` zones along the global partition ``trees`` (the tree zones' k-d tree):
    from its root down, the servers are divided between the two halves in proportion to the
    clique's load there (without load, to the halves' tree zones), but never more servers than
    tree zones on a side while k <= T, and never fewer beyond. So for k <= T a zone is a union of
    whole tree zones and each tree zone belongs to one server of the clique (a tree has one
    member per clique; a server joins about T/k trees); for k > T each zone is a
    ``kd_partition`` piece, by the clique's load, of one tree zone. Zones cut independently of
    the trees overlap up to all T tree zones in several dimensions (module docs)."""
    if k < 1:
        raise LocalProtocolError("k must be >= 1")
    out: list[Box] = []

    def down(nd: KdNode, ks: int, evs: list[Sequence[float | None]], ss: list[Box]) -> None:
        if ks == 1:
            out.append(nd.box)
            return
        if nd.left is None or nd.right is None:
            out.extend(kd_tree(schema, ks, evs, ss, alpha, beta, nd.box).leaves())
            return
        halves = []
        for h in (nd.left, nd.right):
            he = [e for e in evs if matches(h.box, e)]
            hs = _meeting(ss, h.box)
            halves.append((h, he, hs, alpha * len(he) + beta * len(hs)))
        (lh, le, ls, ll), (rh, re_, rs, rl) = halves
        nl, nr = len(lh.leaves()), len(rh.leaves())
        share = ll / (ll + rl) if ll + rl > 0 else nl / (nl + nr)
        # Up to T servers, no two share a tree zone; beyond, every tree zone has one.
        lo, hi = (max(1, ks - nr), min(ks - 1, nl)) if ks <= nl + nr else (nl, ks - nr)
        kl = min(hi, max(lo, int(ks * share + 0.5)))
        down(lh, kl, le, ls)
        down(rh, ks - kl, re_, rs)

    down(trees, k, list(events), _meeting(subs, trees.box))
    return out


def _choose_cut(
    zone: Box,
    kl: int,
    kr: int,
    events: list[Sequence[float | None]],
    subs: list[Box],
    alpha: float,
    beta: float,
    widths: list[float],
) -> tuple[int, float]:
    total = alpha * len(events) + beta * len(subs)
    spans = [hi - lo for lo, hi, _, _ in zone.dims]
    n = len(spans)
    if total <= 0:
        dim = max(range(n), key=lambda d: (spans[d] / widths[d] if widths[d] else 0, -d))
        lo = zone.dims[dim][0]
        return dim, lo + spans[dim] * kl / (kl + kr)
    spread = []
    for d, (lo, hi, _, _) in enumerate(zone.dims):
        pos = [(float(x), alpha) for e in events if (x := e[d]) is not None]
        pos += [((max(s.dims[d][0], lo) + min(s.dims[d][1], hi)) / 2, beta) for s in subs]
        w = sum(x for _, x in pos) or 1.0
        mean = sum(x * w_ for x, w_ in pos) / w
        var = sum(w_ * (x - mean) ** 2 for x, w_ in pos) / w
        spread.append(var**0.5 / spans[d] if spans[d] > 0 else -1.0)
    dim = max(range(n), key=lambda d: (spread[d], -d))
    lo, hi, lo_open, _ = zone.dims[dim]
    ev = sorted(float(v) for e in events if (v := e[dim]) is not None)
    slo = sorted(s.dims[dim][0] for s in subs)
    shi = sorted(s.dims[dim][1] for s in subs)
    # A cut keeps a point on each side: above an open lower end, below the upper end.
    cands = sorted(
        {x for x in (*ev, *slo, *shi) if (lo < x or (not lo_open and x == lo)) and x < hi}
    )
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


def zone_index(zones: Sequence[Box], values: Sequence[float | None]) -> int:
    """The zone holding the event (partition zones are disjoint: the only one)."""
    for i, z in enumerate(zones):
        if matches(z, values):
            return i
    raise LocalProtocolError(f"no zone holds {tuple(values)}")


def _placed(schema: Schema, values: Sequence[float | None]) -> Sequence[float | None]:
    """Where an event lies in the zones: itself, or, missing attributes, at their lowest value.

    Zones partition complete events only (a cut splits an attribute's values; an event without
    the attribute is on neither side). Our reading for partial events (the paper has none): route
    one missing an attribute as if it had the attribute's lowest value. That zone's pieces of
    every subscription leaving the attribute free keep it free (``_proxy``), so they accept the
    event, and a subscription constraining it rejects it (the strict rule) wherever it lies."""
    if None not in values:
        return values
    return tuple(a.min if v is None else v for a, v in zip(schema.attributes, values, strict=True))


# ------------------------------------------------------------------------------------ layout
@dataclass(slots=True)
class KyraLayout:
    """One Kyra network (static: sample, build, then measure): the graph, its overlays (the
    clique meshes, then one tree per global zone) and the zones."""

    graph: BrokerGraph
    overlays: list[Overlay]
    cliques: list[list[int]]
    zone: dict[int, Box]
    tree_zones: list[Box]
    members: list[list[int]]
    covering: bool = False
    #: The attributes events may miss (bit i for attribute i: a CSV source's gaps): their free
    #: pieces keep accepting a missing value (``_placed``). 0 for complete events, whose pieces
    #: are the plain clips (covering between them is tighter).
    may_miss: int = 0

    def configs(self) -> dict[int, RoutingConfig]:
        """The clique overlay carries only the strategy's unicasts; the trees run SIENA."""
        cfg = {CLIQUE: siena()}
        cfg.update({1 + t: siena(self.covering) for t in range(len(self.tree_zones))})
        return cfg

    def strategy(self, v: int) -> KyraStrategy:
        return KyraStrategy(self, v)


def build(
    cliques: Sequence[Sequence[int]],
    zone: Mapping[int, Box],
    tree_zones: Sequence[Box],
    rtt: RttLike,
    covering: bool = False,
    may_miss: int = 0,
) -> KyraLayout:
    """The clique meshes and, per tree zone, the latency MST over the servers whose zone
    overlaps it (members in clique order)."""
    g = clique_graph(cliques, rtt)
    members: list[list[int]] = []
    for t, tz in enumerate(tree_zones):
        ms = [s for c in cliques for s in c if overlaps(zone[s], tz)]
        latency_mst(ms, rtt, f"tree:{t}", g)
        members.append(ms)
    overlays = [g.overlay("clique", "clique")]
    overlays += [g.overlay(f"tree:{t}", f"tree:{t}") for t in range(len(tree_zones))]
    return KyraLayout(
        g,
        overlays,
        [list(c) for c in cliques],
        dict(zone),
        list(tree_zones),
        members,
        covering,
        may_miss,
    )


# ---------------------------------------------------------------------------------- strategy
class KyraStrategy(Strategy):
    """One server's part of Kyra (module docs). Client calls: ``subscribe``, ``unsubscribe``,
    ``publish``, each with the server's broker core."""

    __slots__ = ("_layout", "origin_of", "peers", "proxied", "proxy", "trees", "zone")

    def __init__(self, layout: KyraLayout, v: int) -> None:
        self._layout = layout
        self.zone = layout.zone[v]
        clique = next(c for c in layout.cliques if v in c)
        #: The clique's servers with their zones (itself included).
        self.peers = [(p, layout.zone[p]) for p in clique]
        #: The trees this server is on.
        self.trees = [t for t, ms in enumerate(layout.members) if v in ms]
        #: Proxy set: client subscription id -> (origin, box clipped to this zone).
        self.proxy: dict[int, tuple[int, Box]] = {}
        #: Client subscription id -> its (tree overlay, tree subscription id) here.
        self.proxied: dict[int, list[tuple[int, int]]] = {}
        #: Tree subscription id -> origin server.
        self.origin_of: dict[int, int] = {}

    # -- client calls ----------------------------------------------------------------------

    def subscribe(self, broker: Broker, box: Box, now: float) -> int:
        sid = broker.new_id()
        broker.tables(CLIQUE).prt[sid] = SubEntry(box, LOCAL, broker.id)
        wire = box_to_wire(box)
        for p, z in self.peers:
            if overlaps(z, box):
                if p == broker.id:
                    self._proxy(broker, sid, p, box, now)
                else:
                    broker.send(p, Control(CLIQUE, OP_MOVE, sid, box=wire), now)
        return sid

    def unsubscribe(self, broker: Broker, sid: int, now: float) -> None:
        e = broker.tables(CLIQUE).prt.pop(sid, None)
        if e is None or e.lasthop != LOCAL:
            raise LocalProtocolError(f"no local subscription {sid}")
        for p, z in self.peers:
            if overlaps(z, e.box):
                if p == broker.id:
                    self._unproxy(broker, sid, now)
                else:
                    broker.send(p, Control(CLIQUE, OP_UNMOVE, sid), now)

    def publish(self, broker: Broker, values: Sequence[float | None], now: float) -> int:
        if len(values) != len(broker.schema):
            raise LocalProtocolError(f"event of {len(values)} values for {broker.schema.name!r}")
        eid = broker.new_id()
        msg = Publish(CLIQUE, eid, list(values))
        at = _placed(broker.schema, values)
        owner = next(p for p, z in self.peers if matches(z, at))
        if owner == broker.id:
            self._zone_route(broker, msg, now)
        else:
            broker.send(owner, msg, now)  # intra-clique unicast to the zone holder
        return eid

    # -- hooks ------------------------------------------------------------------------------

    def on_receive(self, broker: Broker, msg: Message, src: int, now: float) -> bool:
        if type(msg) is Publish and msg.overlay == CLIQUE and not msg.hdr:
            if not matches(self.zone, _placed(broker.schema, msg.values)):
                raise RemoteProtocolError(f"event {msg.values} is outside {broker.id}'s zone")
            self._zone_route(broker, msg, now)
            return False
        return True  # a TO_ORIGIN publication: the core matches the clients' entries

    def on_deliver(
        self, broker: Broker, msg: Publish, sids: tuple[int, ...], src: int, now: float
    ) -> bool:
        if msg.overlay == CLIQUE:
            return False  # the origin's own clients: real deliveries
        out = Publish(CLIQUE, msg.eid, msg.values, hdr=[TO_ORIGIN])
        for o in sorted({self.origin_of[s] for s in sids}):
            if o == broker.id:
                broker.route_pub(CLIQUE, out, LOCAL, now)
            else:
                broker.send(o, out, now)  # proxy -> origin unicast
        return True

    def on_control(self, broker: Broker, msg: Control, src: int, now: float) -> None:
        if msg.op == OP_MOVE and msg.box is not None:
            self._proxy(broker, msg.ref, src, box_from_wire(msg.box, len(broker.schema)), now)
        elif msg.op == OP_UNMOVE:
            self._unproxy(broker, msg.ref, now)
        else:
            raise RemoteProtocolError(f"Kyra has no control op {msg.op}")

    # -- internals ----------------------------------------------------------------------------

    def _zone_route(self, broker: Broker, msg: Publish, now: float) -> None:
        t = zone_index(self._layout.tree_zones, _placed(broker.schema, msg.values))
        broker.route_pub(1 + t, Publish(1 + t, msg.eid, msg.values), LOCAL, now)

    def _proxy(self, broker: Broker, sid: int, origin: int, box: Box, now: float) -> None:
        part = intersect(box, self.zone)
        if part is None or sid in self.proxy:
            return
        self.proxy[sid] = (origin, part)
        held = self.proxied[sid] = []
        for t in self.trees:
            clip = intersect(part, self._layout.tree_zones[t])
            if clip is not None:
                keep = box.free & self._layout.may_miss & ~clip.free
                if keep:
                    # The subscription's free attributes that events may miss stay free in
                    # its pieces, so that a piece accepts an event missing them (placed by
                    # ``_placed``); a complete event on this tree is inside the zone anyway.
                    clip = Box(clip.dims, clip.free | keep)
                tsid = broker.subscribe(clip, now, 1 + t)
                self.origin_of[tsid] = origin
                held.append((1 + t, tsid))

    def _unproxy(self, broker: Broker, sid: int, now: float) -> None:
        self.proxy.pop(sid, None)
        for ov, tsid in self.proxied.pop(sid, []):
            broker.unsubscribe(tsid, now, ov)
            del self.origin_of[tsid]
