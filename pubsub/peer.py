"""One peer's protocol stack: the Pastry node with the content-based overlay on top, presented
to a driver (the simulator or the runtime) as a single sans-IO core."""

from __future__ import annotations

import random

from dht.node import PastryNode
from dht.wire import Message
from pubsub.node import AppEvent, OverlayConfig, PubSubNode
from pubsub.schema import SchemaRegistry


class OverlayPeer:
    """Inputs go to the DHT node (which upcalls the overlay); outputs are the DHT node's
    messages, the earlier of the two layers' deadlines, and the overlay's application events."""

    __slots__ = ("dht", "overlay")

    def __init__(
        self,
        dht: PastryNode,
        *,
        schemas: SchemaRegistry,
        capacity: int,
        rng: random.Random,
        overlay: OverlayConfig | None = None,
    ) -> None:
        self.dht = dht
        self.overlay = PubSubNode(dht, schemas, capacity=capacity, rng=rng, config=overlay)

    def receive(self, msg: Message, src: bytes, now: float) -> None:
        self.dht.receive(msg, src, now)

    def receive_frame(self, frame: bytes, src: bytes, now: float) -> None:
        self.dht.receive_frame(frame, src, now)

    def handle_timer(self, now: float) -> None:
        self.dht.handle_timer(now)
        self.overlay.handle_timer(now)

    def get_timer(self) -> float | None:
        a = self.dht.get_timer()
        b = self.overlay.get_timer()
        if a is None:
            return b
        return a if b is None or a <= b else b

    def take_messages(self) -> list[tuple[bytes, Message]]:
        return self.dht.take_messages()

    def take_events(self) -> list[AppEvent]:
        return self.overlay.take_events()
