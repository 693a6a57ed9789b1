"""The content-based overlay on one peer, as a sans-IO state machine on top of a DHT node.

Theory of operation
-------------------
``PubSubNode`` is the DHT node's ``Application``: it receives routed payloads (``deliver``) and
point-to-point ones (``receive_direct``) through the KBR upcalls, and sends with ``route`` and
``send_direct``. Its own inputs are the API calls (``subscribe``, ``unsubscribe``, ``modify``,
``publish``) and ``handle_timer(now)``; its outputs are the DHT node's messages, ``get_timer()``
and the application events in ``take_events()``. It reads no clock and draws randomness only from
the ``random.Random`` it is given.

It is composed of parts, each an object of its own module with one responsibility
(``pubsub.base`` says what they share and how):

* **Subscriber** (``pubsub.subscriber``): RndLeafProbe (thesis 3.3), its subscriptions'
  install, change, removal and refresh, and the notifications they receive.
* **Publisher** (``pubsub.publisher``): RndRegionProbe's selection of zones (thesis 3.4.1).
* **Host of tree nodes** (``pubsub.host``): storing, splitting and forwarding at the tree nodes
  whose DHT root this peer is, with parking and jumps for probes whose node is not here yet.
* **Replication** (``pubsub.replication``): replica sets, promotion, hand-off.
* **Expiry** (``pubsub.expiry``), if configured: pieces no subscriber refreshes are removed.

How probes and notifications travel (``OverlayConfig.probe``, ``OverlayConfig.delivery``) is a
pair of strategies from ``pubsub.dissemination``, chosen once here; the application events are
in ``pubsub.events``. This module builds the parts, gives each the others' methods it calls,
and dispatches every message through a table (message type -> the part and its handler, one
table for routed and one for point-to-point messages) and every timer through another (timer
kind -> the part and its handler, on the ``dht.timers`` heap). A variant of a policy subclasses
its part and names it here (``host_class``: the split rule).

Whose fault: our own misuse (an unknown schema, a subscription for another schema, an unknown sid)
raises ``LocalProtocolError`` at the call. A malformed or inconsistent message from the network
is counted in ``stats``, logged and dropped.
"""

from __future__ import annotations

import heapq
import logging
import math
import random
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from rangecast.dht.core import READY, Application, DhtCore
from rangecast.dht.errors import LocalProtocolError, RemoteProtocolError, WireError
from rangecast.dht.routing import Peer
from rangecast.dht.timers import TimerHeap
from rangecast.dht.wire import Codec, Handle, Message
from rangecast.pubsub.base import (
    T_EXPIRE,
    T_PARK,
    T_RECONCILE,
    T_REFRESH,
    Handler,
    NodeBase,
    NodeKey,
    OverlayConfig,
    OverlayStats,
)
from rangecast.pubsub.dissemination import (
    MulticastProbes,
    Notifier,
    UnicastProbes,
    make_notifier,
    make_prober,
    on_delivery_multicast,
    on_lbdd_delivery,
    on_probe_multicast,
)
from rangecast.pubsub.events import (
    AppEvent,
    EventDelivered,
    PieceStored,
    SubscriptionInstalled,
    SubscriptionRefused,
    SubscriptionRemoved,
)
from rangecast.pubsub.expiry import Expiry
from rangecast.pubsub.host import TreeHost
from rangecast.pubsub.messages import (
    PUBSUB_TABLE,
    DeliveryMulticast,
    EventDelivery,
    InstallAck,
    LbddDelivery,
    LeafUpdate,
    ProbePub,
    ProbePubMulticast,
    ProbeSub,
    ReplicaDrop,
    ReplicaOp,
    ReplicaPut,
    TransferSub,
)
from rangecast.pubsub.publisher import Publisher
from rangecast.pubsub.replication import INTERNAL_REPLICAS, Replication
from rangecast.pubsub.schema import SchemaRegistry
from rangecast.pubsub.space import AttributeSpace, TreeId
from rangecast.pubsub.subscriber import MySubscription, Subscriber
from rangecast.pubsub.subscription import Subscription
from rangecast.pubsub.tree import TreeNode

log = logging.getLogger("rangecast.pubsub")


#: The parts, by their index in the dispatch tables.
_SUBSCRIBER, _PUBLISHER, _HOST, _REPLICATION, _EXPIRY = 0, 1, 2, 3, 4


class PubSubNode(Application):
    """One peer's overlay: its parts composed (see the module's header)."""

    __slots__ = (
        "_codec",
        "_events",
        "_notifier",
        "_parked",
        "_parts",
        "_prober",
        "_timer_heap",
        "_timers",
        "capacity",
        "cfg",
        "dht",
        "expiry",
        "host",
        "nodes",
        "publisher",
        "replicas",
        "replication",
        "rng",
        "schemas",
        "stats",
        "subscriber",
    )

    #: The tree-host part's class: a variant of the split rule subclasses ``TreeHost``.
    host_class: ClassVar[type[TreeHost]] = TreeHost

    dht: DhtCore
    schemas: SchemaRegistry
    capacity: int
    rng: random.Random
    cfg: OverlayConfig
    stats: OverlayStats
    #: Tree nodes hosted here (the primary copies), and copies of nodes whose primary is
    #: another peer (the parts' shared maps).
    nodes: dict[NodeKey, TreeNode]
    replicas: dict[NodeKey, TreeNode]
    subscriber: Subscriber
    publisher: Publisher
    host: TreeHost
    replication: Replication
    expiry: Expiry
    _codec: Codec
    _events: list[AppEvent]
    _timers: TimerHeap[int]
    _timer_heap: list[tuple[float, int, int, Any]]
    _parked: dict[NodeKey, list[tuple[ProbeSub | ProbePub, float]]]
    _parts: tuple[Subscriber, Publisher, TreeHost, Replication, Expiry]
    _prober: UnicastProbes | MulticastProbes
    _notifier: Notifier

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
        # The stack's codec, which its builder gave the DHT node: it must speak our messages.
        dht.codec.require(PUBSUB_TABLE, "a PubSubNode")
        cfg = config or OverlayConfig()
        shared = NodeBase()
        shared.dht = self.dht = dht
        shared.schemas = self.schemas = schemas
        shared.capacity = self.capacity = capacity
        shared.rng = self.rng = rng
        shared.cfg = self.cfg = cfg
        shared.stats = self.stats = OverlayStats()
        shared.nodes = self.nodes = {}
        shared.replicas = self.replicas = {}
        shared._codec = self._codec = dht.codec
        shared._events = self._events = []
        shared._timers = self._timers = TimerHeap()
        shared._parked = self._parked = {}
        shared._spaces = {}
        shared._schemas_seen = {}
        shared._keys = {}
        # Expiry needs the subscribers' refresh, which runs only where the DHT detects
        # failures (``Replication.ready``).
        refreshed = dht.cfg.keepalive_s != math.inf and cfg.refresh_s != math.inf
        shared._expiring = refreshed and cfg.expire_after_s != math.inf
        #: The heap's list, read by ``get_timer`` (and ``OverlayPeer``) without a call.
        self._timer_heap = self._timers.heap

        sub = self.subscriber = Subscriber(shared)
        pub = self.publisher = Publisher(shared)
        host = self.host = self.host_class(shared)
        rep = self.replication = Replication(shared)
        exp = self.expiry = Expiry(shared)
        self._parts = (sub, pub, host, rep, exp)
        # The dissemination strategies, chosen once; they work for the host.
        self._prober = make_prober(cfg.probe, host)
        self._notifier = make_notifier(cfg.delivery, host)
        probe_out = self._prober.out
        pub._probe_out = host._probe_out = probe_out
        host._forward_out = (
            probe_out if cfg.forward == "probe" else make_prober(cfg.forward, host).out
        )
        host._notify = self._notifier.notify
        # Each part's calls on the others.
        host._on_delivery = sub._on_delivery
        host._promote = rep._promote
        host._sync_replicas = rep._sync_replicas
        host._replicate_state = rep._replicate_state
        host._replicate_op = exp._replicate_op = rep._replicate_op
        host._touch = rep._touch = exp._touch
        host._touch_node = rep._touch_node = exp._touch_node
        host._forget = exp._forget
        rep._on_probe_sub = host._on_probe_sub
        rep._unpark = host._unpark
        dht.app = self

    # ------------------------------------------------------------------------------ API calls

    def subscribe(self, sub: Subscription, now: float) -> int:
        """Install ``sub``; returns its sid (``Subscriber.subscribe``)."""
        return self.subscriber.subscribe(sub, now)

    def unsubscribe(self, sid: int, now: float) -> None:
        self.subscriber.unsubscribe(sid, now)

    def modify(self, sid: int, sub: Subscription, now: float) -> None:
        """Replace subscription ``sid`` by ``sub`` (``Subscriber.modify``)."""
        self.subscriber.modify(sid, sub, now)

    def subscriptions(self) -> dict[int, Subscription]:
        return self.subscriber.subscriptions()

    def publish(self, schema_name: str, values: Sequence[float | None], now: float) -> int:
        """Publish an event; returns its id (``Publisher.publish``)."""
        return self.publisher.publish(schema_name, values, now)

    # -------------------------------------------------------------------------------- outputs

    def take_events(self) -> list[AppEvent]:
        events = self._events
        if not events:
            return []
        # The parts hold this very list: empty it in place.
        out = events[:]
        events.clear()
        return out

    def get_timer(self) -> float | None:
        heap = self._timer_heap
        parked = self._parked
        # Entries of probes served meanwhile are stale; shed them so the driver is not woken.
        while heap and heap[0][2] == T_PARK and heap[0][3] not in parked:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def handle_timer(self, now: float) -> None:
        if self.dht.state is not READY:
            # The peer has left (a runtime's timer may still fire while its links flush):
            # there is nothing to route through, and nobody to hand parked messages to.
            self._timers.clear()
            self._parked.clear()
            return
        timers = self._timers
        parts = self._parts
        while (due := timers.pop_due(now)) is not None:
            kind, arg = due
            part, handler = _TIMERS[kind]
            handler(parts[part], arg, now)

    # ---------------------------------------------------------------------------- DHT upcalls

    def deliver(self, key: int, payload: bytes, origin: Handle, hops: int, now: float) -> None:
        self._dispatch(payload, None, now)

    def receive_direct(self, payload: bytes, sender: Handle, now: float) -> None:
        self._dispatch(payload, sender, now)

    def ready(self, now: float) -> None:
        if self.dht.by_join:
            self.host.joined(now)
        self.replication.ready(now)

    def update(self, peer: Peer, joined: bool, now: float) -> None:
        self.replication.update(peer, joined, now)

    def _dispatch(self, payload: bytes, sender: Handle | None, now: float) -> None:
        try:
            msg = self._codec.decode(payload)
        except WireError as exc:
            self.stats.malformed += 1
            log.debug("dropped malformed overlay payload: %s", exc)
            return
        entry = _ROUTED.get(type(msg)) if sender is None else _DIRECT.get(type(msg))
        if entry is None:
            self.stats.malformed += 1
            return
        part, handler = entry
        try:
            handler(self._parts[part], msg, sender, now)
        except RemoteProtocolError as exc:
            self.stats.malformed += 1
            log.debug("dropped bad %s: %s", type(msg).__name__, exc)

    # ---------------------------------------------------------------------------- inspection

    def tree_nodes(self) -> list[tuple[str, TreeNode]]:
        return [(schema, node) for (schema, _), node in self.nodes.items()]

    def replica_sets(self) -> dict[NodeKey, list[Peer]]:
        """For every tree node hosted here: this peer, then the peers holding its copies."""
        return self.replication.replica_sets()

    def _key(self, schema: str, tid: TreeId) -> int:
        """The DHT key of a tree node (``NodeBase._key``, through any part)."""
        return self.host._key(schema, tid)

    def _space(self, schema: str, attr: int) -> AttributeSpace:
        return self.host._space(schema, attr)

    @property
    def _subs(self) -> dict[int, MySubscription]:
        """The subscriber's records of our subscriptions, by sid."""
        return self.subscriber._subs


#: Messages routed to a tree node's key, by type: (the part, its handler).
_ROUTED: dict[type[Message], tuple[int, Handler]] = {
    ProbeSub: (_HOST, TreeHost._on_probe_sub),
    TransferSub: (_HOST, TreeHost._on_transfer),
    LeafUpdate: (_HOST, TreeHost._on_leaf_update),
    ProbePub: (_HOST, TreeHost._on_probe_pub),
}
#: Messages sent straight to this peer, by type.
_DIRECT: dict[type[Message], tuple[int, Handler]] = {
    InstallAck: (_SUBSCRIBER, Subscriber._on_install_ack),
    EventDelivery: (_SUBSCRIBER, Subscriber._on_delivery),
    LbddDelivery: (_HOST, on_lbdd_delivery),
    ProbePubMulticast: (_HOST, on_probe_multicast),
    DeliveryMulticast: (_HOST, on_delivery_multicast),
    ReplicaPut: (_REPLICATION, Replication._on_replica_put),
    ReplicaOp: (_REPLICATION, Replication._on_replica_op),
    ReplicaDrop: (_REPLICATION, Replication._on_replica_drop),
}
#: Timer kind -> (the part, its handler (part, the entry's argument, now)).
_TIMERS: dict[int, tuple[int, Callable[[Any, Any, float], None]]] = {
    T_PARK: (_HOST, TreeHost._on_park_timer),
    T_RECONCILE: (_REPLICATION, Replication._on_reconcile_timer),
    T_REFRESH: (_SUBSCRIBER, Subscriber._on_refresh_timer),
    T_EXPIRE: (_EXPIRY, Expiry._on_expire_timer),
}

__all__ = [
    "INTERNAL_REPLICAS",
    "AppEvent",
    "EventDelivered",
    "MySubscription",
    "OverlayConfig",
    "OverlayStats",
    "PieceStored",
    "PubSubNode",
    "SubscriptionInstalled",
    "SubscriptionRefused",
    "SubscriptionRemoved",
]
