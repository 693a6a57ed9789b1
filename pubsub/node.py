"""The content-based overlay on one peer, as a sans-IO state machine on top of a DHT node.

Theory of operation
-------------------
``PubSubNode`` is the DHT node's ``Application``: it receives routed payloads (``deliver``) and
point-to-point ones (``receive_direct``) through the KBR upcalls, and sends with ``route`` and
``send_direct``. Its own inputs are the API calls (``subscribe``, ``unsubscribe``, ``modify``,
``publish``) and ``handle_timer(now)``; its outputs are the DHT node's messages, ``get_timer()``
and the application events in ``take_events()``. It reads no clock and draws randomness only from
the ``random.Random`` it is given.

It plays three roles at once, each a part of its own module (mixed into this one class, so that
a part calls another without a layer between them; ``pubsub.base`` says why):

* **Subscriber** (``pubsub.subscriber``): RndLeafProbe (thesis 3.3), its subscriptions'
  install, change, removal and refresh, and the notifications they receive.
* **Publisher** (``pubsub.publisher``): RndRegionProbe's selection of zones (thesis 3.4.1).
* **Host of tree nodes** (``pubsub.host``): storing, splitting and forwarding at the tree nodes
  whose DHT root this peer is, with parking and jumps for probes whose node is not here; and
  their **replication** (``pubsub.replication``): replica sets, promotion, hand-off; and, if
  configured, the **expiry** of pieces no subscriber refreshes (``pubsub.expiry``).

How probes and notifications travel (``OverlayConfig.probe``, ``OverlayConfig.delivery``) is a
pair of strategies from ``pubsub.dissemination``, chosen once here; what the parts share
(configuration, counters, helpers) is in ``pubsub.base``, the application events in
``pubsub.events``. This module holds them together: it dispatches every message through a table
(message type -> handler, one for routed and one for point-to-point messages) and every timer
through another (timer kind -> handler, on the ``dht.timers`` heap).

Whose fault: our own misuse (an unknown schema, a subscription for another schema, an unknown sid)
raises ``LocalProtocolError`` at the call. A malformed or inconsistent message from the network
is counted in ``stats``, logged and dropped.
"""

from __future__ import annotations

import heapq
import logging
import math
import random
from collections.abc import Callable
from typing import Any

from rangecast.dht.core import Application, DhtCore, State
from rangecast.dht.errors import LocalProtocolError, RemoteProtocolError, WireError
from rangecast.dht.routing import Peer
from rangecast.dht.timers import TimerHeap
from rangecast.dht.wire import Handle, Message
from rangecast.pubsub.base import (
    T_EXPIRE,
    T_PARK,
    T_RECONCILE,
    T_REFRESH,
    Handler,
    NodeBase,
    OverlayConfig,
    OverlayStats,
)
from rangecast.pubsub.dissemination import (
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
from rangecast.pubsub.expiry import Expiry, ExpiryQueue
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
from rangecast.pubsub.subscriber import MySubscription, Subscriber
from rangecast.pubsub.tree import TreeNode

log = logging.getLogger("rangecast.pubsub")


class PubSubNode(Subscriber, Publisher, TreeHost, Replication, Expiry, NodeBase, Application):
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
        self.dht = dht
        dht.app = self
        self.schemas = schemas
        self.capacity = capacity
        self.rng = rng
        self.cfg = config or OverlayConfig()
        self.stats = OverlayStats()
        self.nodes = {}
        self.replicas = {}
        self._spaces = {}
        self._schemas_seen = {}
        self._got = {}
        self._got_prune_at = 0.0
        self._keys = {}
        self._subs = {}
        self._next_sid = 1
        self._events = []
        self._parked = {}
        self._timers = TimerHeap()
        #: The heap's list, read by ``get_timer`` (and ``OverlayPeer``) without a call.
        self._timer_heap = self._timers.heap
        self._replica_of = {}
        self._held_from = {}
        # Expiry needs the subscribers' refresh, which runs only where the DHT detects
        # failures (``Replication.ready``).
        refreshed = dht.cfg.keepalive_s != math.inf and self.cfg.refresh_s != math.inf
        expire = self.cfg.expire_after_s
        self._expiring = refreshed and expire != math.inf
        self._expiry = ExpiryQueue(expire) if self._expiring else None
        self._orphan_since = {}
        self._ready_at = -math.inf
        self._codec = dht.codec
        # The dissemination strategies, chosen once: the node calls their bound methods.
        self._prober = make_prober(self.cfg.probe, self)
        self._notifier = make_notifier(self.cfg.delivery, self)
        self._probe_out = self._prober.out
        self._forward_out = (
            self._probe_out
            if self.cfg.forward == "probe"
            else make_prober(self.cfg.forward, self).out
        )
        self._notify = self._notifier.notify

    # -------------------------------------------------------------------------------- outputs

    def take_events(self) -> list[AppEvent]:
        out = self._events
        self._events = []
        return out

    def get_timer(self) -> float | None:
        heap = self._timer_heap
        parked = self._parked
        # Entries of probes served meanwhile are stale; shed them so the driver is not woken.
        while heap and heap[0][2] == T_PARK and heap[0][3] not in parked:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def handle_timer(self, now: float) -> None:
        if self.dht.state is not State.READY:
            # The peer has left (a runtime's timer may still fire while its links flush):
            # there is nothing to route through, and nobody to hand parked messages to.
            self._timers.clear()
            self._parked.clear()
            return
        timers = self._timers
        while (due := timers.pop_due(now)) is not None:
            kind, arg = due
            _TIMERS[kind](self, arg, now)

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

    # ---------------------------------------------------------------------------- inspection

    def tree_nodes(self) -> list[tuple[str, TreeNode]]:
        return [(schema, node) for (schema, _), node in self.nodes.items()]


#: Messages routed to a tree node's key, by type.
_ROUTED: dict[type[Message], Handler] = {
    ProbeSub: PubSubNode._on_probe_sub,
    TransferSub: PubSubNode._on_transfer,
    LeafUpdate: PubSubNode._on_leaf_update,
    ProbePub: PubSubNode._on_probe_pub,
}
#: Messages sent straight to this peer, by type.
_DIRECT: dict[type[Message], Handler] = {
    InstallAck: PubSubNode._on_install_ack,
    EventDelivery: PubSubNode._on_delivery,
    LbddDelivery: on_lbdd_delivery,
    ProbePubMulticast: on_probe_multicast,
    DeliveryMulticast: on_delivery_multicast,
    ReplicaPut: PubSubNode._on_replica_put,
    ReplicaOp: PubSubNode._on_replica_op,
    ReplicaDrop: PubSubNode._on_replica_drop,
}
#: Timer kind -> handler (node, the entry's argument, now).
_TIMERS: dict[int, Callable[[PubSubNode, Any, float], None]] = {
    T_PARK: PubSubNode._on_park_timer,
    T_RECONCILE: PubSubNode._on_reconcile_timer,
    T_REFRESH: PubSubNode._on_refresh_timer,
    T_EXPIRE: PubSubNode._on_expire_timer,
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
