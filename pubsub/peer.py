"""One peer's protocol stack: the Pastry node with the content-based overlay on top, presented
to a driver (the simulator or the runtime) as a single sans-IO core.

The stack speaks the DHT's messages and the overlay's (``OverlayPeer.TABLES``): its builder makes
one codec of them (``codec_for(*OverlayPeer.TABLES)``) and builds the DHT node with it; the
overlay encodes and decodes with the node's codec."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import ClassVar

from rangecast.dht.core import DhtCore
from rangecast.dht.messages import DHT_TABLE
from rangecast.dht.wire import Message, MessageTable
from rangecast.pubsub.messages import PUBSUB_TABLE
from rangecast.pubsub.node import AppEvent, OverlayConfig, PubSubNode
from rangecast.pubsub.schema import SchemaRegistry


class OverlayPeer:
    """Inputs go to the DHT node (which upcalls the overlay); outputs are the DHT node's
    messages, the earlier of the two layers' deadlines, and the overlay's application events."""

    __slots__ = ("_overlay_timers", "dht", "overlay", "receive", "take_events", "take_messages")
    receive: Callable[[Message, bytes, float], None]
    take_messages: Callable[[], list[tuple[bytes, Message]]]
    take_events: Callable[[], list[AppEvent]]
    #: The tables this stack speaks.
    TABLES: ClassVar[tuple[MessageTable, ...]] = (DHT_TABLE, PUBSUB_TABLE)

    def __init__(
        self,
        dht: DhtCore,
        *,
        schemas: SchemaRegistry,
        capacity: int,
        rng: random.Random,
        overlay: OverlayConfig | None = None,
        node_class: type[PubSubNode] = PubSubNode,
    ) -> None:
        self.dht = dht
        # ``node_class``: a subclass swaps a policy of the overlay (its split rule, say).
        self.overlay = node_class(dht, schemas, capacity=capacity, rng=rng, config=overlay)
        # Bound once: the driver calls these for every message.
        self.receive = dht.receive
        self.take_messages = dht.take_messages
        self.take_events = self.overlay.take_events
        # The overlay's timer heap (the list object never changes), read after every input
        # without going through the overlay object.
        self._overlay_timers = self.overlay._timer_heap

    def receive_frame(self, frame: bytes, src: bytes, now: float) -> None:
        self.dht.receive_frame(frame, src, now)

    def handle_timer(self, now: float) -> None:
        self.dht.handle_timer(now)
        self.overlay.handle_timer(now)

    def get_timer(self) -> float | None:
        a = self.dht.get_timer()
        if not self._overlay_timers:  # the common case: nothing parked
            return a
        b = self.overlay.get_timer()
        if a is None:
            return b
        return a if b is None or a <= b else b
