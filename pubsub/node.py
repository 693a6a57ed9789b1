"""The content-based overlay on one peer, as a sans-IO state machine on top of a Pastry node.

Theory of operation
-------------------
``PubSubNode`` is the DHT node's ``Application``: it receives routed payloads (``deliver``) and
point-to-point ones (``receive_direct``) through the KBR upcalls, and sends with ``route`` and
``send_direct``. Its own inputs are the API calls (``subscribe``, ``unsubscribe``, ``modify``,
``publish``) and ``handle_timer(now)``; its outputs are the DHT node's messages, ``get_timer()``
and the application events in ``take_events()``. It reads no clock and draws randomness only from
the ``random.Random`` it is given.

It plays three roles at once:

* **Host of tree nodes.** Every tree node lives on the DHT root of the SHA-1 of its identifier.
  A leaf stores subscription pieces up to the peer's capacity, then splits: it divides them by
  point between its two children (``TransferSub``, which creates each child), becomes internal
  with a LeafNodeRoutingTable naming the children, and tells its ancestors (``LeafUpdate``, passed
  up to the root). The root of each attribute tree is created on first use.
* **Subscriber.** RndLeafProbe (thesis 3.3): pick a base attribute at random; its range (or,
  under load balancing, each piece of it) is a point, widened by a small random amount so that
  identical ranges still split apart; guess a random level and route a ``ProbeSub`` to the zone
  at that level holding the point. A leaf stores it and acknowledges; an internal node forwards
  to the leaf its table names; a peer that hosts no such node (the guess was too deep) jumps up to
  the ancestor at half the depth. A probe that a table sent to a node which does not exist yet
  (its ``TransferSub`` is still on its way) is parked until the node is created.
* **Publisher.** RndRegionProbe (thesis 3.4.1): for each attribute to probe, select zones by
  breadth-first search over the target region (a zone at ``max_level`` is always selected, one
  at or below ``min_level`` with probability ``p``, others are split) and route a ``ProbePub`` to
  each. Leaves match (each event at most once per leaf), internal nodes forward to their table's
  leaves within the probe's scope, missing nodes jump up. Matched subscribers get one
  ``EventDelivery`` per leaf, naming their matching subscriptions.

Whose fault: our own misuse (an unknown schema, a subscription for another schema, an unknown sid)
raises ``LocalProtocolError`` at the call. A malformed or inconsistent message from the network
is counted in ``stats``, logged and dropped.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from dht.core import Application, DhtCore, State
from dht.errors import LocalProtocolError, RemoteProtocolError, WireError
from dht.routing import Peer
from dht.wire import Handle, Message, codec
from multicast.lbdd import build_tree
from multicast.prefix import MAX_HOPS as MULTICAST_MAX_HOPS
from multicast.prefix import split as split_keys
from pubsub.messages import (
    OP_INSERT,
    OP_REMOVE,
    DeliveryMulticast,
    Event,
    EventDelivery,
    InstallAck,
    LbddDelivery,
    LeafUpdate,
    Notify,
    Pred,
    ProbePub,
    ProbePubMulticast,
    ProbeSub,
    ProbeTarget,
    Ref,
    Relay,
    ReplicaDrop,
    ReplicaOp,
    ReplicaPut,
    StoredSub,
    TransferSub,
)
from pubsub.schema import Schema, SchemaRegistry
from pubsub.space import MAX_DEPTH, AttributeSpace, TreeId, zone_overlaps
from pubsub.subscription import Subscription
from pubsub.tree import TreeNode

log = logging.getLogger("rangecast.pubsub")


@dataclass(frozen=True, slots=True)
class OverlayConfig:
    """Knobs of the overlay. Every peer of an overlay must agree on ``load_balancing``,
    ``cutoff`` and ``widen`` (they decide where subscriptions are stored and which regions
    events search)."""

    #: RndLeafProbe guesses a level in [1, max_probe_level] (thesis: 10).
    max_probe_level: int = 10
    #: RndRegionProbe: zones at max_level are always selected; zones at depth >= min_level are
    #: selected with probability p.
    min_level: int = 3
    max_level: int = 10
    p: float = 0.7
    #: A leaf at this depth never splits (last resort for points widening cannot separate).
    max_depth: int = 48
    #: Stored points are widened by up to this fraction of the domain on each side.
    widen: float = 1e-3
    #: Cut-off line y = x + c per attribute, c as a fraction of the domain (thesis 3.5).
    load_balancing: bool = False
    cutoff: float = 0.1
    #: How long a probe waits at a node that a leaf table named but that does not exist yet.
    park_timeout_s: float = 10.0
    #: How long a leaf remembers the events it matched (probes of one event arrive within it).
    dedup_window_s: float = 120.0
    max_jumps: int = 64
    #: How probes travel: one ProbePub per target ("unicast", as the thesis' baseline) or
    #: grouped per next hop ("multicast", thesis 3.4.2).
    probe: str = "unicast"
    #: How a leaf notifies matched subscribers: one EventDelivery each ("unicast"), grouped
    #: per next hop towards their ids ("multicast"), or down an LBDD tree in which
    #: subscribers relay ("lbdd").
    delivery: str = "unicast"
    #: Under "lbdd", a leaf with fewer matched subscribers than this still sends directly (a
    #: relay only pays off when the leaf would otherwise send many copies).
    lbdd_min_subscribers: int = 4
    #: Copies of every tree node (its subscriptions and position): the primary on the node's
    #: DHT root plus replicas on the next closest peers (the replica set). 1: no replication.
    replicas: int = 3
    #: A peer that has just joined holds probes for tree nodes it does not host yet for this
    #: long: the previous root is handing them over.
    handoff_wait_s: float = 2.0
    #: How often a peer re-checks, for every tree node it hosts or replicates, who should hold
    #: it (besides at once on every leaf-set change).
    reconcile_s: float = 5.0
    #: Subscribers re-send every piece of their active subscriptions this often (soft state:
    #: a piece lost with a whole replica set comes back within one period). Only where the DHT
    #: detects failures (keep-alives on); ``math.inf`` switches it off.
    refresh_s: float = 30.0

    def __post_init__(self) -> None:
        if not 1 <= self.max_probe_level <= MAX_DEPTH:
            raise LocalProtocolError(f"max_probe_level must be in [1, {MAX_DEPTH}]")
        if not 0 <= self.min_level <= self.max_level <= MAX_DEPTH:
            raise LocalProtocolError("need 0 <= min_level <= max_level <= 60")
        if not 0.0 <= self.p <= 1.0:
            raise LocalProtocolError("p must be a probability")
        if not 1 <= self.max_depth <= MAX_DEPTH:
            raise LocalProtocolError(f"max_depth must be in [1, {MAX_DEPTH}]")
        if not 0.0 <= self.widen < 0.01:
            raise LocalProtocolError("widen must be in [0, 0.01)")
        if self.load_balancing and not 4 * self.widen < self.cutoff <= 1.0:
            raise LocalProtocolError("cutoff must be in (4 * widen, 1]")
        if self.probe not in ("unicast", "multicast"):
            raise LocalProtocolError(f"probe must be 'unicast' or 'multicast', not {self.probe!r}")
        if self.delivery not in ("unicast", "multicast", "lbdd"):
            raise LocalProtocolError(
                f"delivery must be 'unicast', 'multicast' or 'lbdd', not {self.delivery!r}"
            )
        if self.lbdd_min_subscribers < 2:
            raise LocalProtocolError("lbdd_min_subscribers must be >= 2")
        if not 1 <= self.replicas <= 9:
            raise LocalProtocolError("replicas must be in [1, 9] (the leaf set's half plus one)")
        if self.handoff_wait_s < 0 or self.reconcile_s <= 0 or self.refresh_s <= 0:
            raise LocalProtocolError("need handoff_wait_s >= 0, reconcile_s > 0, refresh_s > 0")


# ------------------------------------------------------------------------ application events


# Frozen msgspec structs rather than frozen dataclasses: one is made for every delivery, and a
# struct is built in C (a frozen dataclass sets each field through ``object.__setattr__``).


class SubscriptionInstalled(msgspec.Struct, frozen=True, gc=False):
    """Every piece of subscription ``sid`` is stored and acknowledged."""

    sid: int
    now: float


class SubscriptionRemoved(msgspec.Struct, frozen=True, gc=False):
    sid: int
    now: float


class EventDelivered(msgspec.Struct, frozen=True, gc=False):
    """``event`` arrived for our subscriptions ``sids`` (one message from one leaf)."""

    event: Event
    sids: tuple[int, ...]
    now: float


class PieceStored(msgspec.Struct, frozen=True, gc=False):
    """Observability: this peer stored a subscription piece at leaf ``tid`` (emitted by the
    host, not the subscriber; the simulator measures install latency with it)."""

    subscriber: bytes
    sid: int
    gen: int
    piece: int
    tid: TreeId
    now: float


AppEvent = SubscriptionInstalled | SubscriptionRemoved | EventDelivered | PieceStored


@dataclass(slots=True)
class OverlayStats:
    malformed: int = 0
    stored: int = 0
    splits: int = 0
    jumps: int = 0
    parked: int = 0
    park_timeouts: int = 0
    lost: int = 0
    duplicate_probes: int = 0
    #: Notifications for a (subscription, event) already notified, dropped at the subscriber.
    repeated_deliveries: int = 0
    matched: int = 0
    #: Replication: replicas promoted to primary (their primary failed), tree nodes handed
    #: over to a peer that became their root, full states and single changes sent to replicas.
    promoted: int = 0
    refreshes: int = 0
    #: Pieces whose install or removal was re-sent because no acknowledgement had come.
    retries: int = 0
    #: Leaves recreated empty because their whole replica set died (refreshes refill them).
    recreated: int = 0
    #: Notifications for a subscription this peer no longer has, dropped.
    stale_deliveries: int = 0
    handed_off: int = 0
    replica_puts: int = 0
    replica_ops: int = 0
    by_reason: dict[str, int] = field(default_factory=dict)

    def drop(self, reason: str) -> None:
        self.lost += 1
        self.by_reason[reason] = self.by_reason.get(reason, 0) + 1


class _MySub:
    """Subscriber-side record of one of our subscriptions."""

    __slots__ = ("acked", "gen", "pending", "pieces", "state", "sub")

    def __init__(self, sub: Subscription, gen: int, pieces: list[StoredSub]) -> None:
        self.sub = sub
        self.gen = gen
        self.pieces = pieces
        self.acked: set[int] = set()
        self.state = "installing"
        #: A change asked for while installing: ("remove",) or ("modify", Subscription).
        self.pending: tuple[Any, ...] | None = None


_T_PARK = 0
#: The periodic replica check's entry in the timer heap (entries never compare keys: the
#: sequence number before it is unique).
_RECONCILE: Any = object()
_REFRESH: Any = object()
_PERIODIC = (_RECONCILE, _REFRESH)
#: Copies of an internal tree node when replication is on (the leaf set's half plus one).
INTERNAL_REPLICAS = 9


class PubSubNode(Application):
    def __init__(
        self,
        dht: DhtCore,
        schemas: SchemaRegistry,
        *,
        capacity: int,
        rng: random.Random,
        config: OverlayConfig | None = None,
    ) -> None:
        if capacity < 1:
            raise LocalProtocolError(f"capacity must be >= 1, got {capacity}")
        if not isinstance(rng, random.Random):
            raise LocalProtocolError("rng must be a seeded random.Random")
        self.dht = dht
        dht.app = self
        self.schemas = schemas
        self.capacity = capacity
        self.rng = rng
        self.cfg = config or OverlayConfig()
        self.stats = OverlayStats()
        self.nodes: dict[tuple[str, TreeId], TreeNode] = {}
        self._spaces: dict[tuple[str, int], AttributeSpace] = {}
        self._schemas_seen: dict[str, Schema] = {}
        #: (sid, eid) of recent notifications, to drop repeats.
        self._got: dict[tuple[int, int], float] = {}
        self._keys: dict[tuple[str, TreeId], int] = {}
        self._subs: dict[int, _MySub] = {}
        self._next_sid = 1
        self._events: list[AppEvent] = []
        self._parked: dict[tuple[str, TreeId], list[tuple[ProbeSub | ProbePub, float]]] = {}
        self._timers: list[tuple[float, int, tuple[str, TreeId]]] = []
        #: Copies of tree nodes whose primary is another peer (replication), by (schema, tid).
        self.replicas: dict[tuple[str, TreeId], TreeNode] = {}
        #: For each tree node hosted here: the peers currently holding its replicas.
        self._replica_of: dict[tuple[str, TreeId], dict[int, Peer]] = {}
        self._ready_at = -math.inf
        self._seq = 0
        self._codec = codec()

    # -------------------------------------------------------------------------------- outputs

    def take_events(self) -> list[AppEvent]:
        out = self._events
        self._events = []
        return out

    def get_timer(self) -> float | None:
        timers = self._timers
        if not timers:
            return None
        while timers and timers[0][2] not in _PERIODIC and timers[0][2] not in self._parked:
            heapq.heappop(timers)
        return timers[0][0] if timers else None

    def handle_timer(self, now: float) -> None:
        if self.dht.state is not State.READY:
            # The peer has left (a runtime's timer may still fire while its links flush):
            # there is nothing to route through, and nobody to hand parked messages to.
            self._timers.clear()
            self._parked.clear()
            return
        timers = self._timers
        while timers and timers[0][0] <= now:
            _, _, key = heapq.heappop(timers)
            if key is _RECONCILE:
                self._reconcile(now)
                self._push_timer(now + self.cfg.reconcile_s, _RECONCILE)
                continue
            if key is _REFRESH:
                self._refresh(now)
                self._push_timer(now + self.cfg.refresh_s, _REFRESH)
                continue
            waiting = self._parked.get(key)
            if not waiting:
                continue
            due = [m for m, t in waiting if t <= now]
            rest = [(m, t) for m, t in waiting if t > now]
            if rest:
                self._parked[key] = rest
            else:
                del self._parked[key]
            for msg in due:
                self.stats.park_timeouts += 1
                if (
                    msg.via_lrt
                    and self.dht.cfg.keepalive_s != math.inf
                    and key not in self.nodes
                    and self.dht.next_hop(self._key(*key)) is None
                ):
                    # A parent's table names this leaf, we are its root, and no copy arrived:
                    # it died with its whole replica set. Recreate it empty; its subscribers'
                    # refreshes fill it again (and a late transfer would merge into it).
                    self.stats.recreated += 1
                    node = self.nodes[key] = TreeNode(key[1])
                    self._sync_replicas(key, node, now)
                    _ROUTED[type(msg)](self, msg, None, now)
                    continue
                # The node never appeared: behave as for a wrong guess and jump up.
                self._jump(msg, now)

    # ------------------------------------------------------------------------------ API calls

    def subscribe(self, sub: Subscription, now: float) -> int:
        """Install ``sub``; returns its sid. ``SubscriptionInstalled`` follows when every piece
        is stored."""
        schema = self._schema(sub.schema)
        sid = self._next_sid
        self._next_sid += 1
        self._install(sid, 0, sub, schema, now)
        return sid

    def unsubscribe(self, sid: int, now: float) -> None:
        rec = self._subs.get(sid)
        if rec is None or rec.state == "removing":
            raise LocalProtocolError(f"no active subscription {sid}")
        if rec.state == "installing":
            rec.pending = ("remove",)
            return
        self._remove(sid, rec, now)

    def modify(self, sid: int, sub: Subscription, now: float) -> None:
        """Replace subscription ``sid`` by ``sub`` (remove, then install under the same sid)."""
        rec = self._subs.get(sid)
        if rec is None or rec.state == "removing":
            raise LocalProtocolError(f"no active subscription {sid}")
        self._schema(sub.schema)
        if rec.state == "installing":
            rec.pending = ("modify", sub)
            return
        self._remove(sid, rec, now)
        rec.pending = ("modify", sub)

    def subscriptions(self) -> dict[int, Subscription]:
        return {sid: rec.sub for sid, rec in self._subs.items() if rec.state != "removing"}

    def publish(self, schema_name: str, values: Sequence[float | None], now: float) -> int:
        """Publish an event (one value per schema attribute, None where absent); returns its
        id. Use ``Schema.event`` to build ``values`` from a mapping with validation."""
        schema = self._schema(schema_name)
        if len(values) != len(schema.attributes):
            raise LocalProtocolError(
                f"event for schema {schema.name!r} needs {len(schema.attributes)} values"
            )
        eid = self.rng.getrandbits(63)
        event = Event(eid, schema.name, [None if v is None else float(v) for v in values])
        strict = schema.partial == "strict"
        targets: list[ProbeTarget] = []
        for attr, value in enumerate(event.values):
            if value is None and strict:
                continue  # strict: a predicate on an absent attribute fails; nothing to find
            space = self._space(schema.name, attr)
            cutoff = self._cutoff(space)
            for tid in self._select_zones(space, value, cutoff):
                targets.append(ProbeTarget(attr, tid.depth, tid.path))
        self._probe_out(event, targets, 0, now)
        return eid

    def _select_zones(
        self, space: AttributeSpace, value: float | None, cutoff: float | None
    ) -> list[TreeId]:
        """RndRegionProbe's local breadth-first selection of zones covering the region."""
        cfg = self.cfg
        rand = self.rng.random
        selected: list[TreeId] = []
        queue = [space.root]
        head = 0
        while head < len(queue):
            tid = queue[head]
            head += 1
            if not zone_overlaps(space.zone(tid), value, cutoff):
                continue
            if tid.depth >= cfg.max_level or (tid.depth >= cfg.min_level and rand() < cfg.p):
                selected.append(tid)
            else:
                queue.append(tid.child(0))
                queue.append(tid.child(1))
        return selected

    # ---------------------------------------------------------------------- subscriber side

    def _install(self, sid: int, gen: int, sub: Subscription, schema: Schema, now: float) -> None:
        attrs = sub.attributes()
        base = attrs[self.rng.randrange(len(attrs))]
        space = self._space(schema.name, base)
        rng_range = sub.range_of(base)
        assert rng_range is not None
        preds = [
            Pred(i, r.lo, r.hi, (1 if r.lo_open else 0) | (2 if r.hi_open else 0))
            for i, r in sub.ranges
        ]
        width = space.max - space.min
        e_max = self.cfg.widen * width
        lo, hi = rng_range.lo, rng_range.hi
        bounds = [(lo, hi)]
        if self.cfg.load_balancing:
            # Pieces must stay below the cut-off line even after widening on both sides.
            # A hair of margin absorbs floating-point rounding in y - x.
            limit = self.cfg.cutoff * width - 2.0 * e_max - 1e-9 * width
            if hi - lo > limit:
                h = self.rng.uniform(limit / 2.0, limit)
                cuts = [lo]
                k = 1
                while lo + k * h < hi:  # never a cut at or past hi: no empty last piece
                    cuts.append(lo + k * h)
                    k += 1
                cuts.append(hi)
                bounds = list(itertools.pairwise(cuts))
        pieces = []
        me = self.dht.me.handle
        for k, (p_lo, p_hi) in enumerate(bounds):
            x = max(space.min, p_lo - self.rng.uniform(0.0, e_max))
            y = min(space.max, p_hi + self.rng.uniform(0.0, e_max))
            pieces.append(StoredSub(me, sid, gen, preds, base, k, len(bounds), p_lo, p_hi, x, y))
        self._subs[sid] = _MySub(sub, gen, pieces)
        for piece in pieces:
            self._probe_sub(OP_INSERT, schema.name, space, piece, now)

    def _probe_sub(
        self, op: int, schema: str, space: AttributeSpace, piece: StoredSub, now: float
    ) -> None:
        level = self.rng.randint(1, self.cfg.max_probe_level)
        tid = space.locate(piece.x, piece.y, level)
        msg = ProbeSub(op, Ref(schema, space.index, tid.depth, tid.path), False, 0, piece)
        self._route(schema, tid, msg, now)

    def _refresh(self, now: float) -> None:
        """Soft state: probe every piece of every active subscription again. A leaf that has
        the piece only acknowledges it again (the subscriber ignores that); one that lost it
        with a whole replica set stores it anew.

        An install or a removal still waiting for acknowledgements is retried the same way,
        for the pieces not acknowledged yet: a probe lost on the way (a dropped frame, a peer
        that died with it) would otherwise leave it waiting for ever, and the pieces that did
        arrive stored for ever (a removal asked for meanwhile waits for the install)."""
        for rec in self._subs.values():
            schema = rec.sub.schema
            if rec.state == "active":
                for piece in rec.pieces:
                    self._probe_sub(OP_INSERT, schema, self._space(schema, piece.base), piece, now)
                continue
            op = OP_INSERT if rec.state == "installing" else OP_REMOVE
            for piece in rec.pieces:
                if piece.piece not in rec.acked:
                    self.stats.retries += 1
                    self._probe_sub(op, schema, self._space(schema, piece.base), piece, now)
        self.stats.refreshes += 1

    def _remove(self, sid: int, rec: _MySub, now: float) -> None:
        rec.state = "removing"
        rec.acked = set()
        schema = rec.sub.schema
        for piece in rec.pieces:
            self._probe_sub(OP_REMOVE, schema, self._space(schema, piece.base), piece, now)

    def _on_install_ack(self, msg: InstallAck, sender: Handle | None, now: float) -> None:
        rec = self._subs.get(msg.sid)
        if rec is None or rec.gen != msg.gen or msg.piece >= len(rec.pieces):
            return  # about an older generation, or not ours any more
        want = "installing" if msg.op == OP_INSERT else "removing"
        if rec.state != want:
            return
        rec.acked.add(msg.piece)
        if len(rec.acked) < len(rec.pieces):
            return
        if msg.op == OP_INSERT:
            rec.state = "active"
            self._events.append(SubscriptionInstalled(msg.sid, now))
            if rec.pending is not None:
                pending, rec.pending = rec.pending, None
                if pending[0] == "remove":
                    self._remove(msg.sid, rec, now)
                else:
                    self._remove(msg.sid, rec, now)
                    rec.pending = pending
            return
        del self._subs[msg.sid]
        if rec.pending is not None and rec.pending[0] == "modify":
            new: Subscription = rec.pending[1]
            self._install(msg.sid, (rec.gen + 1) & 0xFFFF, new, self._schema(new.schema), now)
        else:
            self._events.append(SubscriptionRemoved(msg.sid, now))

    # ---------------------------------------------------------------------------- DHT upcalls

    def deliver(self, key: int, payload: bytes, origin: Peer, hops: int, now: float) -> None:
        self._dispatch(payload, None, now)

    def receive_direct(self, payload: bytes, sender: Handle, now: float) -> None:
        self._dispatch(payload, sender, now)

    def _dispatch(self, payload: bytes, sender: Handle | None, now: float) -> None:
        try:
            msg = self._codec.decode(payload)
        except WireError as exc:
            self.stats.malformed += 1
            log.debug("dropped malformed overlay payload: %s", exc)
            return
        handler = _ROUTED.get(type(msg)) if sender is None else _DIRECT.get(type(msg))
        if handler is None:
            self.stats.malformed += 1
            return
        try:
            handler(self, msg, sender, now)
        except RemoteProtocolError as exc:
            self.stats.malformed += 1
            log.debug("dropped bad %s: %s", type(msg).__name__, exc)

    # ------------------------------------------------------------------------ tree node host

    def _on_probe_sub(self, msg: ProbeSub, sender: Handle | None, now: float) -> None:
        space, tid = self._resolve(msg.target)
        sub = msg.sub
        if sub.base != space.index:
            raise RemoteProtocolError("ProbeSub base attribute differs from its target's")
        node = self._node_for(msg, space, tid, now)
        if node is None:
            return
        if node.index is None:
            assert node.table is not None
            leaf = node.table.locate(space, sub.x, sub.y)
            if leaf is None:
                raise RemoteProtocolError(f"point ({sub.x}, {sub.y}) outside {tid}")
            ref = Ref(msg.target.schema, leaf.attr, leaf.depth, leaf.path)
            self._route(ref.schema, leaf, ProbeSub(msg.op, ref, True, msg.jumps, sub), now)
            return
        if not space.zone(tid).contains(sub.x, sub.y):
            raise RemoteProtocolError(f"point ({sub.x}, {sub.y}) outside leaf {tid}")
        owner = Peer.from_handle(self.dht.space, sub.subscriber)
        key = (msg.target.schema, tid)
        if msg.op == OP_INSERT:
            if node.index.add(sub):
                self._replicate_op(key, OP_INSERT, sub, now)
            self.stats.stored += 1
            self._events.append(
                PieceStored(sub.subscriber.id, sub.sid, sub.gen, sub.piece, tid, now)
            )
            self._send(owner, InstallAck(OP_INSERT, sub.sid, sub.gen, sub.piece, True), now)
            if len(node.index) > self.capacity and tid.depth < self.cfg.max_depth:
                self._split(msg.target.schema, space, node, now)
        else:
            found = node.index.remove(sub.subscriber.id, sub.sid, sub.gen, sub.piece)
            if found:
                self._replicate_op(key, OP_REMOVE, sub, now)
            self._send(owner, InstallAck(OP_REMOVE, sub.sid, sub.gen, sub.piece, found), now)

    def _split(self, schema: str, space: AttributeSpace, node: TreeNode, now: float) -> None:
        assert node.index is not None
        tid = node.tid
        halves: tuple[list[StoredSub], list[StoredSub]] = ([], [])
        for s in node.index:
            halves[space.child_for(tid, s.x, s.y).path & 1].append(s)
        horizon = now - self.cfg.dedup_window_s
        seen = [eid for eid, t in node.seen.items() if t >= horizon]
        node.become_internal()
        self.stats.splits += 1
        self._replicate_state((schema, tid), node, now)
        for bit in (0, 1):
            child = tid.child(bit)
            ref = Ref(schema, child.attr, child.depth, child.path)
            self._route(schema, child, TransferSub(ref, halves[bit], seen), now)
        if tid.depth > 0:
            parent = tid.parent()
            ref = Ref(schema, tid.attr, tid.depth, tid.path)
            self._route(schema, parent, LeafUpdate(ref, parent.depth), now)

    def _on_transfer(self, msg: TransferSub, sender: Handle | None, now: float) -> None:
        space, tid = self._resolve(msg.target)
        self._check_pieces(space, tid, msg.subs)
        schema = msg.target.schema
        key = (schema, tid)
        node = self.nodes.get(key)
        if node is None and key in self.replicas:
            node = self._promote(key, now)  # created before, its host has failed since
        if node is None:
            node = self.nodes[key] = TreeNode(tid, msg.subs)
            self._sync_replicas(key, node, now)
        elif node.index is not None:
            for s in msg.subs:
                if node.index.add(s):
                    self._replicate_op(key, OP_INSERT, s, now)
        else:
            # Already split again (a late transfer): pass the pieces on down.
            for s in msg.subs:
                self._on_probe_sub(ProbeSub(OP_INSERT, msg.target, True, 0, s), None, now)
        if node.index is not None:
            for eid in msg.seen:
                node.seen.setdefault(eid, now)
        self._unpark(key, now)
        if (
            node.index is not None
            and len(node.index) > self.capacity
            and tid.depth < self.cfg.max_depth
        ):
            self._split(schema, space, node, now)

    def _on_leaf_update(self, msg: LeafUpdate, sender: Handle | None, now: float) -> None:
        _, split = self._resolve(msg.split)
        depth = msg.at_depth
        if not 0 <= depth < split.depth:
            raise RemoteProtocolError("LeafUpdate for a node that is not below the receiver")
        holder = split.ancestor(depth)
        node = self.nodes.get((msg.split.schema, holder))
        if node is None or node.table is None:
            self.stats.drop("leaf update for a node not hosted here")
            return
        node.table.apply_split(split)
        if depth > 0:
            parent = holder.parent()
            self._route(msg.split.schema, parent, LeafUpdate(msg.split, parent.depth), now)

    def _check_event(self, event: Event) -> Schema:
        schema = self._schemas_seen.get(event.schema) or self._schema_remote(event.schema)
        if len(event.values) != len(schema.attributes):
            raise RemoteProtocolError("event values do not match its schema's attributes")
        for v in event.values:
            if v is not None and not math.isfinite(v):
                raise RemoteProtocolError("event value is not a finite number")
        return schema

    def _on_probe_pub(self, msg: ProbePub, sender: Handle | None, now: float) -> None:
        space, tid = self._resolve(msg.target)
        event = msg.event
        if event.schema != msg.target.schema:
            raise RemoteProtocolError("ProbePub event schema differs from its target's")
        schema = self._check_event(event)
        values = event.values
        if msg.scope_depth < tid.depth:
            raise RemoteProtocolError("probe scope above its target")
        scope = TreeId(tid.attr, msg.scope_depth, msg.scope_path)
        if not tid.is_ancestor_of(scope):
            raise RemoteProtocolError("probe scope outside its target")
        node = self._node_for(msg, space, tid, now)
        if node is None:
            return
        value = values[space.index]
        cutoff = self._cutoff(space)
        if node.index is not None:
            if not node.remember(event.eid, now, self.cfg.dedup_window_s):
                self.stats.duplicate_probes += 1
                return
            strict = schema.partial == "strict"
            matched = node.index.match(values, space.index, cutoff, strict)
            if not matched:
                return
            self.stats.matched += len(matched)
            by_owner: dict[bytes, list[StoredSub]] = {}
            for s in matched:
                by_owner.setdefault(s.subscriber.addr, []).append(s)
            self._notify(event, by_owner, now)
            return
        assert node.table is not None
        targets = []
        for leaf in node.table.overlapping(space, scope, value, cutoff):
            inner = leaf if scope.is_ancestor_of(leaf) else scope
            targets.append(
                ProbeTarget.make(
                    leaf.attr, leaf.depth, leaf.path, inner.depth, inner.path, True, msg.jumps
                )
            )
        self._probe_out(event, targets, 0, now)

    # ----------------------------------------------------------------- probes: the two modes

    def _probe_out(self, event: Event, targets: list[ProbeTarget], hops: int, now: float) -> None:
        """Send RndRegionProbe ``targets`` (tree nodes of ``event``'s schema) on their way.

        ``unicast``: one ``ProbePub`` per target, routed by the DHT to the target's key.
        ``multicast``: targets this peer is root of are served here; the rest go as one
        ``ProbePubMulticast`` per next hop (``multicast.prefix.split``, the DHT's own routing
        decision), point to point: the next hop regroups them again. A multicast hop needs no
        routing header (key, uid, origin), since every hop decides afresh for every target."""
        schema = event.schema
        if self.cfg.probe == "unicast":
            for t in targets:
                tid = TreeId(t.attr, t.depth, t.path)
                ref = Ref(schema, t.attr, t.depth, t.path)
                pp = ProbePub(event, ref, t.scope_depth, t.scope_path, t.via_lrt, t.jumps)
                self._route(schema, tid, pp, now)
            return
        keys = [self._key(schema, TreeId(t.attr, t.depth, t.path)) for t in targets]
        plan = split_keys(self.dht, keys)
        encode = self._codec.encode
        for group in plan.groups:
            batch = [targets[i] for i in group.members]
            msg = ProbePubMulticast(event, hops + 1, batch)
            self.dht.send_direct(group.next_hop, encode(msg), now)
        for i in plan.local:
            t = targets[i]
            ref = Ref(schema, t.attr, t.depth, t.path)
            pp = ProbePub(event, ref, t.scope_depth, t.scope_path, t.via_lrt, t.jumps)
            try:  # one bad target must not take the others with it
                self._on_probe_pub(pp, None, now)
            except RemoteProtocolError as exc:
                self.stats.malformed += 1
                log.debug("dropped bad multicast target: %s", exc)

    def _on_multicast(self, msg: ProbePubMulticast, sender: Handle | None, now: float) -> None:
        """Serve the targets this peer is root of and send the rest on, regrouped."""
        event = msg.event
        self._check_event(event)
        if msg.hops >= MULTICAST_MAX_HOPS:
            self.stats.drop("multicast hop budget exhausted")
            return
        targets = []
        for t in msg.targets:
            try:
                self._resolve(Ref(event.schema, t.attr, t.depth, t.path))
                if t.scope_depth > MAX_DEPTH or t.below_path >> t.below:
                    raise RemoteProtocolError("multicast target scope malformed")
            except RemoteProtocolError as exc:
                self.stats.malformed += 1
                log.debug("dropped bad multicast target: %s", exc)
                continue
            targets.append(t)
        if targets:
            self._probe_out(event, targets, msg.hops, now)

    def _notify(self, event: Event, by_owner: dict[bytes, list[StoredSub]], now: float) -> None:
        """A leaf tells the matched subscribers: one ``EventDelivery`` each, or (``lbdd``, many
        subscribers) down the LBDD tree rooted at this peer, each subscriber relaying to its
        share of the next bucket."""
        space = self.dht.space
        if self.cfg.delivery == "multicast" and len(by_owner) > 1:
            notes = [Notify(g[0].subscriber, [s.sid for s in g]) for g in by_owner.values()]
            self._notify_multicast(event, notes, 0, now)
            return
        if self.cfg.delivery != "lbdd" or len(by_owner) < self.cfg.lbdd_min_subscribers:
            for group in by_owner.values():
                owner = Peer.from_handle(space, group[0].subscriber)
                self._send(owner, EventDelivery(event, [s.sid for s in group]), now)
            return
        me = self.dht.me.addr
        mine = by_owner.get(me)
        if mine is not None:  # this leaf's host subscribes too: no relay for itself
            self._send(self.dht.me, EventDelivery(event, [s.sid for s in mine]), now)
        addrs = [a for a in by_owner if a != me]
        tree = build_tree(me, addrs)
        relays = [Relay(by_owner[a][0].subscriber, [s.sid for s in by_owner[a]], -1) for a in addrs]
        for child in tree.source_children:
            below = tree.subtree(child)
            position = {m: k for k, m in enumerate(below)}
            listed = [
                Relay(
                    relays[m].subscriber,
                    relays[m].sids,
                    -1 if tree.parent[m] == child else position[tree.parent[m]],
                )
                for m in below
            ]
            owner = Peer.from_handle(space, relays[child].subscriber)
            self._send(owner, LbddDelivery(event, relays[child].sids, listed), now)

    def _notify_multicast(self, event: Event, notes: list[Notify], hops: int, now: float) -> None:
        space = self.dht.space
        plan = split_keys(self.dht, [space.from_bytes(n.subscriber.id) for n in notes])
        for group in plan.groups:
            batch = [notes[i] for i in group.members]
            self._send(group.next_hop, DeliveryMulticast(event, hops + 1, batch), now)
        me = self.dht.me.handle.id
        for i in plan.local:
            if notes[i].subscriber.id == me:
                self._on_delivery(EventDelivery(event, notes[i].sids), None, now)
            else:  # the subscriber's id has another root: it has left the overlay
                self.stats.drop("notification for a departed subscriber")

    def _on_delivery_multicast(
        self, msg: DeliveryMulticast, sender: Handle | None, now: float
    ) -> None:
        if msg.hops >= MULTICAST_MAX_HOPS:
            self.stats.drop("multicast hop budget exhausted")
            return
        nbytes = self.dht.space.nbytes
        for n in msg.targets:
            if len(n.subscriber.id) != nbytes:
                raise RemoteProtocolError("notification for a malformed subscriber id")
        self._notify_multicast(msg.event, msg.targets, msg.hops, now)

    def _on_lbdd_delivery(self, msg: LbddDelivery, sender: Handle | None, now: float) -> None:
        """Take our notification and pass the event on to our children, each with its own
        subtree. Parents are listed before their children, so one pass finds every entry's
        top-level ancestor and a malformed list cannot make a cycle."""
        below = msg.below
        top: list[int] = []
        space = self.dht.space
        for k, r in enumerate(below):
            if r.parent >= k:
                raise RemoteProtocolError("LBDD relay list names a later entry as parent")
            if len(r.subscriber.id) != space.nbytes:
                raise RemoteProtocolError("LBDD relay with a malformed subscriber id")
            top.append(k if r.parent == -1 else top[r.parent])
        self._on_delivery(EventDelivery(msg.event, msg.sids), sender, now)
        for j, r in enumerate(below):
            if r.parent != -1:
                continue
            mine = [k for k in range(j + 1, len(below)) if top[k] == j]
            position = {k: n for n, k in enumerate(mine)}
            listed = [
                Relay(
                    below[k].subscriber,
                    below[k].sids,
                    -1 if below[k].parent == j else position[below[k].parent],
                )
                for k in mine
            ]
            child = Peer.from_handle(space, r.subscriber)
            self._send(child, LbddDelivery(msg.event, r.sids, listed), now)

    def _on_delivery(self, msg: EventDelivery, sender: Handle | None, now: float) -> None:
        # At most one notification per subscription per event: an event in flight while a
        # subscription is modified can match its old generation at one leaf and its new one at
        # another. Repeats are dropped here and counted.
        eid = msg.event.eid
        got = self._got
        subs = self._subs
        fresh = []
        for sid in msg.sids:
            if sid not in subs:
                # Removed (or never ours): a leaf still holds an orphan piece of it, e.g. one a
                # refresh stored again while the removal was on its way. Not the application's.
                self.stats.stale_deliveries += 1
            elif (sid, eid) in got:
                self.stats.repeated_deliveries += 1
            else:
                got[(sid, eid)] = now
                fresh.append(sid)
        if len(got) % 1024 == 0:
            horizon = now - self.cfg.dedup_window_s
            self._got = {k: t for k, t in got.items() if t >= horizon}
        if fresh:
            self._events.append(EventDelivered(msg.event, tuple(fresh), now))

    # ------------------------------------------------------------------- shared mechanisms

    def _node_for(
        self, msg: ProbeSub | ProbePub, space: AttributeSpace, tid: TreeId, now: float
    ) -> TreeNode | None:
        """The hosted tree node a probe addresses; if there is none, take over a replica (its
        primary failed), wait for a hand-off (we just joined), park, or jump up."""
        key = (msg.target.schema, tid)
        node = self.nodes.get(key)
        if node is not None:
            return node
        if key in self.replicas:
            if self.dht.next_hop(self._key(*key)) is None:
                return self._promote(key, now)
            # Routed here on stale state while the primary lives on: send it on to the root.
            self._forward_to_root(msg, now)
            return None
        young = now - self._ready_at < self.cfg.handoff_wait_s
        if tid.depth == 0 and not young:
            node = self.nodes[key] = TreeNode(tid)  # the root always exists: create on use
            self._sync_replicas(key, node, now)
            return node
        if msg.via_lrt or young:
            self.stats.parked += 1
            wait = self.cfg.park_timeout_s if msg.via_lrt else self.cfg.handoff_wait_s
            deadline = now + wait
            self._parked.setdefault(key, []).append((msg, deadline))
            self._push_timer(deadline, key)
            return None
        self._jump(msg, now)
        return None

    def _push_timer(self, deadline: float, key: Any) -> None:
        self._seq += 1
        heapq.heappush(self._timers, (deadline, self._seq, key))

    def _forward_to_root(self, msg: ProbeSub | ProbePub, now: float) -> None:
        if msg.jumps >= self.cfg.max_jumps:
            self.stats.drop("too many jumps")
            return
        t = msg.target
        if isinstance(msg, ProbeSub):
            again: Message = ProbeSub(msg.op, t, msg.via_lrt, msg.jumps + 1, msg.sub)
        else:
            again = ProbePub(
                msg.event, t, msg.scope_depth, msg.scope_path, msg.via_lrt, msg.jumps + 1
            )
        self._route(t.schema, TreeId(t.attr, t.depth, t.path), again, now)

    # ------------------------------------------------------------------------- replication
    #
    # Every tree node hosted here (the primary) has copies on the other members of its key's
    # replica set (the k numerically closest peers): its position and its subscription pieces,
    # kept current with one ReplicaOp per change and a full ReplicaPut when a member joins the
    # set. Who holds what is re-checked on every leaf-set change and every reconcile_s: a
    # replica whose holder has become the key's root is promoted (its primary failed); a node
    # whose host is no longer the root is handed over to the peer that is (it joined). The
    # LeafNodeRoutingTable is not replicated: a promoted internal node starts from its two
    # children, which forward further, and refines it from the LeafUpdates that follow.

    def ready(self, now: float) -> None:
        if self.dht.by_join:
            self._ready_at = now  # keys we are now root of are on their way from their old root
        # Without keep-alives the DHT detects no failures, and the leaf set changes only
        # through joins, which the update upcall reports: no periodic check is needed (and an
        # endless timer would keep a failure-free simulation from ever going quiet).
        if self.dht.cfg.keepalive_s != math.inf:
            self._push_timer(now + self.rng.uniform(0.0, self.cfg.reconcile_s), _RECONCILE)
            if self.cfg.refresh_s != math.inf:
                self._push_timer(now + self.rng.uniform(0.0, self.cfg.refresh_s), _REFRESH)

    def update(self, peer: Peer, joined: bool, now: float) -> None:
        self._reconcile(now)

    def _reconcile(self, now: float) -> None:
        if not (self.nodes or self.replicas):
            return
        # Each step may change both maps under the loop: a promotion releases parked probes,
        # whose handling (routed through this very peer when it is the root) can promote,
        # create or hand off other nodes before the loop gets to them. Act only on what is
        # still there, as it is now.
        for key, node in list(self.nodes.items()):
            if self.nodes.get(key) is node:
                self._sync_replicas(key, node, now)
        for key in list(self.replicas):
            if key in self.replicas and self.dht.next_hop(self._key(*key)) is None:
                self._promote(key, now)

    def _promote(self, key: tuple[str, TreeId], now: float) -> TreeNode:
        node = self.replicas.pop(key)
        self.nodes[key] = node
        self.stats.promoted += 1
        self._sync_replicas(key, node, now)
        self._unpark(key, now)
        return node

    def _sync_replicas(self, key: tuple[str, TreeId], node: TreeNode, now: float) -> None:
        """Make the replica set of ``key`` hold copies of ``node``, or hand it over (with or
        without replication, a peer that joins takes over the keys it becomes root of)."""
        # Internal nodes hold no subscriptions, so copies cost almost nothing, while losing
        # one near the top (the root above all) would cut the tree: they get the widest set.
        k = self.cfg.replicas
        if node.index is None and k > 1:
            k = max(k, INTERNAL_REPLICAS)
        rs = self.dht.replica_set(self._key(*key), k)
        me = self.dht.me
        if rs[0].id != me.id:
            # No longer the root: the peer that is takes the node over.
            del self.nodes[key]
            self._replica_of.pop(key, None)
            self._send(rs[0], self._state_of(key, node, handoff=True), now)
            self.stats.handed_off += 1
            if any(p.id == me.id for p in rs):
                self.replicas[key] = node
            return
        want = {p.id: p for p in rs[1:]}
        have = self._replica_of.get(key, {})
        if want.keys() == have.keys():
            return
        fresh = [p for i, p in want.items() if i not in have]
        if fresh:
            put = self._state_of(key, node, handoff=False)
            for p in fresh:
                self._send(p, put, now)
                self.stats.replica_puts += 1
        for i, p in have.items():
            if i not in want:
                self._send(p, ReplicaDrop(self._ref(key)), now)
        self._replica_of[key] = want

    def _replicate_state(self, key: tuple[str, TreeId], node: TreeNode, now: float) -> None:
        """The node changed shape (created, split): every replica gets the whole state."""
        if self.cfg.replicas <= 1:
            return
        have = self._replica_of.get(key)
        if have is None:
            self._sync_replicas(key, node, now)
            return
        put = self._state_of(key, node, handoff=False)
        for p in have.values():
            self._send(p, put, now)
            self.stats.replica_puts += 1

    def _replicate_op(self, key: tuple[str, TreeId], op: int, sub: StoredSub, now: float) -> None:
        if self.cfg.replicas <= 1:
            return
        have = self._replica_of.get(key)
        if have is None:
            node = self.nodes.get(key)
            if node is not None:
                self._sync_replicas(key, node, now)  # a full state, this change included
            return
        msg = ReplicaOp(self._ref(key), op, sub)
        for p in have.values():
            self._send(p, msg, now)
            self.stats.replica_ops += 1

    @staticmethod
    def _ref(key: tuple[str, TreeId]) -> Ref:
        schema, tid = key
        return Ref(schema, tid.attr, tid.depth, tid.path)

    def _state_of(self, key: tuple[str, TreeId], node: TreeNode, handoff: bool) -> ReplicaPut:
        if node.index is not None:
            return ReplicaPut(self._ref(key), True, list(node.index), list(node.seen), handoff)
        return ReplicaPut(self._ref(key), False, [], [], handoff)

    def _on_replica_put(self, msg: ReplicaPut, sender: Handle | None, now: float) -> None:
        space, tid = self._resolve(msg.target)
        self._check_pieces(space, tid, msg.subs)
        key = (msg.target.schema, tid)
        incoming = TreeNode(tid, msg.subs)
        if msg.leaf:
            for eid in msg.seen:
                incoming.seen.setdefault(eid, now)
        else:
            incoming.become_internal()
        if not msg.handoff:
            if key not in self.nodes:
                self.replicas[key] = incoming
            return
        node = self.nodes.get(key)
        if node is None:
            self.replicas.pop(key, None)
            node = self.nodes[key] = incoming
        else:
            self._merge(msg.target, space, node, incoming, now)
        self._sync_replicas(key, node, now)
        self._unpark(key, now)

    def _merge(
        self, ref: Ref, space: AttributeSpace, node: TreeNode, incoming: TreeNode, now: float
    ) -> None:
        """Two versions of one tree node met (a hand-off crossed a promotion): keep every
        piece. A leaf meeting an internal version splits, and its pieces go down the tree."""
        if incoming.index is None and node.index is not None:
            pieces = list(node.index)
            node.become_internal()
        else:
            pieces = list(incoming.index) if incoming.index is not None else []
        for s in pieces:
            if node.index is not None:
                if node.index.add(s):
                    self._replicate_op((ref.schema, node.tid), OP_INSERT, s, now)
            else:
                self._on_probe_sub(ProbeSub(OP_INSERT, ref, True, 0, s), None, now)

    def _on_replica_op(self, msg: ReplicaOp, sender: Handle | None, now: float) -> None:
        space, tid = self._resolve(msg.target)
        self._check_pieces(space, tid, [msg.sub])
        key = (msg.target.schema, tid)
        node = self.replicas.get(key) or self.nodes.get(key)
        if node is None or node.index is None:
            return  # no copy here (yet): the next full state brings it
        s = msg.sub
        if msg.op == OP_INSERT:
            node.index.add(s)
        else:
            node.index.remove(s.subscriber.id, s.sid, s.gen, s.piece)

    def _on_replica_drop(self, msg: ReplicaDrop, sender: Handle | None, now: float) -> None:
        _, tid = self._resolve(msg.target)
        self.replicas.pop((msg.target.schema, tid), None)

    def _check_pieces(self, space: AttributeSpace, tid: TreeId, subs: list[StoredSub]) -> None:
        zone = space.zone(tid)
        nbytes = self.dht.space.nbytes
        for s in subs:
            if s.base != space.index or not zone.contains(s.x, s.y):
                raise RemoteProtocolError(f"piece outside {tid}")
            if len(s.subscriber.id) != nbytes:
                raise RemoteProtocolError("piece with a malformed subscriber id")

    def _unpark(self, key: tuple[str, TreeId], now: float) -> None:
        waiting = self._parked.pop(key, None)
        if waiting:
            for parked, _ in waiting:
                try:  # one bad parked probe must not take the others with it
                    _ROUTED[type(parked)](self, parked, None, now)
                except RemoteProtocolError as exc:
                    self.stats.malformed += 1
                    log.debug("dropped bad parked %s: %s", type(parked).__name__, exc)

    def _jump(self, msg: Message, now: float) -> None:
        """Guessed too deep: try the ancestor at half the depth (a binary search upwards)."""
        assert isinstance(msg, ProbeSub | ProbePub)
        if msg.jumps >= self.cfg.max_jumps:
            self.stats.drop("too many jumps")
            return
        self.stats.jumps += 1
        t = msg.target
        tid = TreeId(t.attr, t.depth, t.path).ancestor(t.depth // 2)
        ref = Ref(t.schema, tid.attr, tid.depth, tid.path)
        if isinstance(msg, ProbeSub):
            up: Message = ProbeSub(msg.op, ref, False, msg.jumps + 1, msg.sub)
        else:
            up = ProbePub(msg.event, ref, msg.scope_depth, msg.scope_path, False, msg.jumps + 1)
        self._route(t.schema, tid, up, now)

    def _key(self, schema: str, tid: TreeId) -> int:
        """The DHT key of a tree node (SHA-1 of its identifier), cached."""
        key = self._keys.get((schema, tid))
        if key is None:
            space = self._space(schema, tid.attr)
            key = self.dht.space.hash_key(space.identifier(tid))
            if len(self._keys) > 1 << 16:
                self._keys.clear()
            self._keys[(schema, tid)] = key
        return key

    def _route(self, schema: str, tid: TreeId, msg: Message, now: float) -> None:
        self.dht.route(self._key(schema, tid), self._codec.encode(msg), now)

    def _send(self, peer: Peer, msg: Message, now: float) -> None:
        self.dht.send_direct(peer, self._codec.encode(msg), now)

    def _cutoff(self, space: AttributeSpace) -> float | None:
        if not self.cfg.load_balancing:
            return None
        return self.cfg.cutoff * (space.max - space.min)

    def _schema(self, name: str) -> Schema:
        return self.schemas.get(name)  # an unknown name raises SchemaError (our misuse)

    def _schema_remote(self, name: str) -> Schema:
        try:
            schema = self.schemas.get(name)
        except (LocalProtocolError, KeyError):
            raise RemoteProtocolError(f"unknown schema {name!r}") from None
        self._schemas_seen[name] = schema
        return schema

    def _space(self, schema: str, attr: int) -> AttributeSpace:
        space = self._spaces.get((schema, attr))
        if space is None:
            sch = self._schema(schema)
            if not 0 <= attr < len(sch.attributes):
                raise LocalProtocolError(f"schema {schema!r} has no attribute #{attr}")
            a = sch.attributes[attr]
            space = AttributeSpace(sch.name, a.name, attr, a.min, a.max)
            self._spaces[(schema, attr)] = space
        return space

    def _resolve(self, ref: Ref) -> tuple[AttributeSpace, TreeId]:
        """Validate a tree reference from the network."""
        space = self._spaces.get((ref.schema, ref.attr))
        if space is None:
            sch = self._schema_remote(ref.schema)
            if ref.attr >= len(sch.attributes):
                raise RemoteProtocolError(f"schema {ref.schema!r} has no attribute #{ref.attr}")
            space = self._space(ref.schema, ref.attr)
        if ref.path >> ref.depth:
            raise RemoteProtocolError("tree path longer than its depth")
        return space, TreeId(ref.attr, ref.depth, ref.path)

    # ---------------------------------------------------------------------------- inspection

    def tree_nodes(self) -> list[tuple[str, TreeNode]]:
        return [(schema, node) for (schema, _), node in self.nodes.items()]


_Handler = Callable[[PubSubNode, Any, Handle | None, float], None]
_ROUTED: dict[type[Message], _Handler] = {
    ProbeSub: PubSubNode._on_probe_sub,
    TransferSub: PubSubNode._on_transfer,
    LeafUpdate: PubSubNode._on_leaf_update,
    ProbePub: PubSubNode._on_probe_pub,
}
_DIRECT: dict[type[Message], _Handler] = {
    InstallAck: PubSubNode._on_install_ack,
    EventDelivery: PubSubNode._on_delivery,
    LbddDelivery: PubSubNode._on_lbdd_delivery,
    ProbePubMulticast: PubSubNode._on_multicast,
    DeliveryMulticast: PubSubNode._on_delivery_multicast,
    ReplicaPut: PubSubNode._on_replica_put,
    ReplicaOp: PubSubNode._on_replica_op,
    ReplicaDrop: PubSubNode._on_replica_drop,
}
