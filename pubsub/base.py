"""What every part of the content-based overlay shares: configuration, counters, timer kinds, and
the state and helpers of one ``PubSubNode``.

Theory of operation
-------------------
``PubSubNode`` (``pubsub.node``) is one sans-IO core composed of parts, each an object that owns
one concern: the subscriber (``pubsub.subscriber``), the publisher (``pubsub.publisher``), the
host of tree nodes (``pubsub.host``), replication (``pubsub.replication``) and expiry
(``pubsub.expiry``); how probes and notifications travel is a strategy picked once from the
configuration when the node is built (``pubsub.dissemination``).

``NodeBase`` is what they share: the state (the DHT node, the configuration, the counters, the
hosted tree nodes and replicas, the timer heap, the parked probes, the application events) and
the helpers every part uses: the DHT key of a tree node (``_key``, cached), routing and sending
an overlay message (``_route``, ``_send``), the attribute spaces of the schemas (``_space``,
``_resolve`` for a reference from the network), and the checks every part makes on what the
network sends (``_check_event``, ``_check_pieces``).

Every part is a ``NodeBase`` holding the *same* shared objects (``NodeBase.__init__`` copies the
references from the node's one ``NodeBase``), not a pointer to a context to look them up in: the
simulator runs millions of messages through the parts, and compiled (docs/simulator.md, "Two
speeds") a shared field is then one C field read. The rule that makes the copies safe: a shared
field is never rebound after the node is built, only mutated (``take_events`` empties the event
list in place). State one part alone writes is that part's own field (the subscriber's
subscriptions, the host's ``_ready_at``). A part calls another through a bound method it is
given when the node is built (its class names them as attributes), so that each type-checks on
its own and none knows the others' classes.

Nothing here reads a clock or the global random generator: time comes with every input and
random numbers from the ``random.Random`` the driver passed in.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rangecast.dht.core import DhtCore, DropStats
from rangecast.dht.errors import FieldError, LocalProtocolError, RemoteProtocolError
from rangecast.dht.routing import Peer
from rangecast.dht.timers import TimerHeap
from rangecast.dht.wire import MAX_FRAME_BYTES, Codec, Handle, Message
from rangecast.pubsub.events import AppEvent
from rangecast.pubsub.messages import (
    CUSTODY,
    Event,
    ProbePub,
    ProbeSub,
    Ref,
    StoredSub,
)
from rangecast.pubsub.schema import Schema, SchemaRegistry
from rangecast.pubsub.space import MAX_DEPTH, AttributeSpace, TreeId, tree_id
from rangecast.pubsub.tree import TreeNode


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
    #: How an internal tree node sends a probe on to the leaves its LeafNodeRoutingTable names:
    #: as the publisher sends its probes ("probe": the thesis' Program 3.3 calls the same
    #: sendoutProbPubMessage in both places), or one routed ProbePub each whatever ``probe``
    #: says ("unicast": the other reading of the thesis, whose ProbePubMessage "is currently
    #: sent by unicast instead of multicast", section 4.2.1). The two differ only under
    #: ``probe = "multicast"``; docs/overlay.md measures both.
    forward: str = "probe"
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
    #: A tree host removes a stored piece that no probe has installed or refreshed for this
    #: long (``pubsub.expiry``): soft state end to end, so the pieces of a subscriber that is
    #: gone do not stay for ever. ``math.inf`` (the default) switches it off; otherwise it
    #: needs the refresh on and at least twice ``refresh_s`` (a late refresh must not lose
    #: its piece).
    expire_after_s: float = math.inf
    #: A leaf refuses a new piece (``InstallAck`` not stored; ``OverlayStats.refused``) once its
    #: pieces would encode past this many bytes (``tree.piece_bytes``, an upper bound): a leaf
    #: that cannot split (pieces at one point) must still fit its replicas' ``ReplicaPut`` and
    #: a split's ``TransferSub`` in one frame. Half a frame leaves room for the events it
    #: remembers and the envelope.
    max_leaf_bytes: int = MAX_FRAME_BYTES // 2
    #: The part of ``max_leaf_bytes`` one subscriber (a peer, for all its clients) may hold in
    #: one leaf: a peer cannot fill a leaf that cannot split and lock everyone else out of it.
    max_leaf_share: float = 0.25

    def __post_init__(self) -> None:
        # Each complaint names the field at fault and its value (FieldError); the command
        # line shows the options' names instead (cli.options.field_error).
        def bad(name: str, why: str) -> FieldError:
            return FieldError(name, getattr(self, name), why)

        if not 1 <= self.max_probe_level <= MAX_DEPTH:
            raise bad("max_probe_level", f"must be in [1, {MAX_DEPTH}]")
        if not 0 <= self.min_level <= MAX_DEPTH:
            raise bad("min_level", f"must be in [0, {MAX_DEPTH}]")
        if not 0 <= self.max_level <= MAX_DEPTH:
            raise bad("max_level", f"must be in [0, {MAX_DEPTH}]")
        if self.min_level > self.max_level:
            raise bad("min_level", f"must be at most {{max_level}} ({self.max_level})")
        if not 0.0 <= self.p <= 1.0:
            raise bad("p", "must be a probability, in [0, 1]")
        if not 1 <= self.max_depth <= MAX_DEPTH:
            raise bad("max_depth", f"must be in [1, {MAX_DEPTH}]")
        if not 4096 <= self.max_leaf_bytes <= MAX_FRAME_BYTES // 2:
            raise bad("max_leaf_bytes", f"must be in [4096, {MAX_FRAME_BYTES // 2}] (half a frame)")
        if not 0.0 < self.max_leaf_share <= 1.0:
            raise bad("max_leaf_share", "must be in (0, 1]")
        if not 0.0 <= self.widen < 0.01:
            raise bad("widen", "must be in [0, 0.01)")
        if self.load_balancing and not 4 * self.widen < self.cutoff <= 1.0:
            raise bad("cutoff", f"must be in (4 x {{widen}}, 1] ({{widen}} {self.widen:g})")
        if self.probe not in ("unicast", "multicast"):
            raise bad("probe", "must be 'unicast' or 'multicast'")
        if self.forward not in ("probe", "unicast"):
            raise bad("forward", "must be 'probe' or 'unicast'")
        if self.delivery not in ("unicast", "multicast", "lbdd"):
            raise bad("delivery", "must be 'unicast', 'multicast' or 'lbdd'")
        if self.lbdd_min_subscribers < 2:
            raise bad("lbdd_min_subscribers", "must be >= 2")
        if not 1 <= self.replicas <= 9:
            raise bad("replicas", "must be in [1, 9] (the leaf set's half plus one)")
        if self.handoff_wait_s < 0:
            raise bad("handoff_wait_s", "must be >= 0")
        if self.reconcile_s <= 0:
            raise bad("reconcile_s", "must be > 0")
        if self.refresh_s <= 0:
            raise bad("refresh_s", "must be > 0")
        if self.expire_after_s != math.inf and not self.expire_after_s >= 2 * self.refresh_s:
            raise bad(
                "expire_after_s",
                "must be inf (off) or at least 2 x {refresh_s} (a finite refresh)",
            )


@dataclass(slots=True)
class OverlayStats(DropStats):
    """The node's counters, one set for all its parts. ``dropped`` (read as ``lost`` too)
    counts what was given up, ``by_reason`` says why."""

    stored: int = 0
    splits: int = 0
    jumps: int = 0
    parked: int = 0
    park_timeouts: int = 0
    duplicate_probes: int = 0
    #: Notifications for a (subscription, event) already notified, dropped at the subscriber.
    repeated_deliveries: int = 0
    matched: int = 0
    #: Pieces a leaf refused: its pieces would no longer fit one frame (``max_leaf_bytes``), or
    #: their subscriber would hold more than its share of it (``max_leaf_share``).
    refused: int = 0
    refused_share: int = 0
    #: Stored pieces a leaf holds each time it matches an event: the entries its match tests
    #: (the comparison's matchings, like a broker's PRT entries scanned per publication).
    scanned: int = 0
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
    #: Stored pieces removed because no probe refreshed them for ``expire_after_s``, and
    #: replica copies released because they had been outside their replica set that long.
    expired: int = 0
    replicas_released: int = 0

    @property
    def lost(self) -> int:
        """Messages given up (the overlay's name for ``dropped``)."""
        return self.dropped


#: Tree nodes are known by (schema name, tree id).
NodeKey = tuple[str, TreeId]

#: Timer kinds of the overlay's heap (``PubSubNode`` maps each to its handler): a probe parked
#: at the node key in the argument has waited long enough; the periodic replica check; the
#: subscriber's periodic refresh; the sweep of pieces not refreshed (``pubsub.expiry``).
T_PARK, T_RECONCILE, T_REFRESH, T_EXPIRE = 0, 1, 2, 3

#: A message handler: (the part, message, the sender for a point-to-point one else None, now).
Handler = Callable[[Any, Any, Handle | None, float], None]


class NodeBase:
    """The state and helpers every part of a ``PubSubNode`` shares (see the module's header).
    ``NodeBase(shared)`` is a part holding ``shared``'s objects; ``NodeBase()`` is empty, for
    the node to fill."""

    __slots__ = (
        "_codec",
        "_events",
        "_expiring",
        "_keys",
        "_parked",
        "_schemas_seen",
        "_spaces",
        "_timers",
        "capacity",
        "cfg",
        "dht",
        "nodes",
        "replicas",
        "rng",
        "schemas",
        "stats",
    )

    dht: DhtCore
    schemas: SchemaRegistry
    capacity: int
    rng: random.Random
    cfg: OverlayConfig
    stats: OverlayStats
    #: Tree nodes hosted here (the primary copies), and copies of nodes whose primary is
    #: another peer (replication).
    nodes: dict[NodeKey, TreeNode]
    replicas: dict[NodeKey, TreeNode]
    _codec: Codec
    #: The application events not taken yet (``PubSubNode.take_events``).
    _events: list[AppEvent]
    _timers: TimerHeap[int]
    #: Probes waiting for a tree node to be created here, with their deadlines.
    _parked: dict[NodeKey, list[tuple[ProbeSub | ProbePub, float]]]
    _spaces: dict[tuple[str, int], AttributeSpace]
    _schemas_seen: dict[str, Schema]
    _keys: dict[NodeKey, int]
    #: Whether stored pieces expire here (``pubsub.expiry``: configured, and refreshed).
    _expiring: bool

    def __init__(self, shared: NodeBase | None = None) -> None:
        if shared is None:
            return
        self.dht = shared.dht
        self.schemas = shared.schemas
        self.capacity = shared.capacity
        self.rng = shared.rng
        self.cfg = shared.cfg
        self.stats = shared.stats
        self.nodes = shared.nodes
        self.replicas = shared.replicas
        self._codec = shared._codec
        self._events = shared._events
        self._timers = shared._timers
        self._parked = shared._parked
        self._spaces = shared._spaces
        self._schemas_seen = shared._schemas_seen
        self._keys = shared._keys
        self._expiring = shared._expiring

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
        self.dht.send_direct(peer, self._codec.encode(msg), now, type(msg) in CUSTODY)

    def _send_end(self, addr: bytes, msg: Message) -> None:
        """``_send`` of a message whose receiver is its end (not in ``CUSTODY``: it asks no
        answer), to a transport address (``DhtCore.send_to_end``)."""
        self.dht.send_to_end(addr, self._codec.encode(msg))

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
        return space, tree_id(ref.attr, ref.depth, ref.path)

    def _check_event(self, event: Event) -> Schema:
        schema = self._schemas_seen.get(event.schema) or self._schema_remote(event.schema)
        if len(event.values) != len(schema.attributes):
            raise RemoteProtocolError("event values do not match its schema's attributes")
        for v in event.values:
            if v is not None and not math.isfinite(v):
                raise RemoteProtocolError("event value is not a finite number")
        return schema

    def _check_pieces(self, space: AttributeSpace, tid: TreeId, subs: list[StoredSub]) -> None:
        zone = space.zone(tid)
        nbytes = self.dht.space.nbytes
        for s in subs:
            if s.base != space.index or not zone.contains(s.x, s.y):
                raise RemoteProtocolError(f"piece outside {tid}")
            if len(s.subscriber.id) != nbytes:
                raise RemoteProtocolError("piece with a malformed subscriber id")

    @staticmethod
    def _ref(key: NodeKey) -> Ref:
        schema, tid = key
        return Ref(schema, tid.attr, tid.depth, tid.path)
