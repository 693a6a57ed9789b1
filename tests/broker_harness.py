"""A tiny deterministic message loop over broker cores, for the broker tests only (the simulator
integration is separate).

``BrokerNet`` builds one ``Broker`` per node of a ``BrokerGraph``, one routing state per overlay
given, and delivers messages in time order: each hop takes the edge's latency (RTT/2; a graph
without RTT gives 0, and ties go in sending order, so the loop is then FIFO per link). Every
message is encoded and strictly decoded on the way (the receiver gets the decoded copy), so the
wire format is exercised by every test. It records every message sent and every delivery.

Not a test module (no ``test_`` prefix)."""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from rangecast.brokers.broker import Broker, Delivered, RoutingConfig, Strategy
from rangecast.brokers.filters import Box, matches
from rangecast.brokers.graphs import BrokerGraph, Overlay
from rangecast.brokers.messages import Publish, broker_codec
from rangecast.dht.wire import Message
from rangecast.pubsub.schema import Schema

CODEC = broker_codec()


@dataclass
class Sent:
    time: float
    src: int
    dst: int
    msg: Message


@dataclass
class BrokerNet:
    graph: BrokerGraph
    overlays: Sequence[Overlay]
    schema: Schema
    config: RoutingConfig | Mapping[int, RoutingConfig]
    strategy: Callable[[int], Strategy] | None = None
    now: float = 0.0
    brokers: dict[int, Broker] = field(default_factory=dict)
    log: list[Sent] = field(default_factory=list)
    delivered: list[tuple[int, Delivered]] = field(default_factory=list)
    bytes: int = 0
    _queue: list[tuple[float, int, int, int, bytes]] = field(default_factory=list)
    _seq: int = 0

    def __post_init__(self) -> None:
        for v in self.graph.nodes:
            ovs = {i: ov.neighbours(v) for i, ov in enumerate(self.overlays)}
            strat = self.strategy(v) if self.strategy is not None else None
            self.brokers[v] = Broker(v, self.schema, ovs, self.config, strat)

    def flush(self, v: int) -> None:
        b = self.brokers[v]
        for dst, msg in b.take_messages():
            frame = CODEC.encode(msg)
            self.bytes += len(frame)
            self.log.append(Sent(self.now, v, dst, msg))
            t = self.now + self.graph.latency(v, dst)
            self._seq += 1
            heapq.heappush(self._queue, (t, self._seq, v, dst, frame))
        for ev in b.take_events():
            self.delivered.append((v, ev))

    def run(self) -> None:
        """Deliver until no message is in flight."""
        while self._queue:
            t, _, src, dst, frame = heapq.heappop(self._queue)
            self.now = t
            self.brokers[dst].receive(CODEC.decode(frame), src, t)
            self.flush(dst)

    # -- API through the loop ----------------------------------------------------------------

    def advertise(self, v: int, box: Box, overlay: int = 0) -> int:
        ad = self.brokers[v].advertise(box, self.now, overlay)
        self.flush(v)
        self.run()
        return ad

    def subscribe(self, v: int, box: Box, overlay: int = 0) -> int:
        sid = self.brokers[v].subscribe(box, self.now, overlay)
        self.flush(v)
        self.run()
        return sid

    def unsubscribe(self, v: int, sid: int, overlay: int = 0) -> None:
        self.brokers[v].unsubscribe(sid, self.now, overlay)
        self.flush(v)
        self.run()

    def publish(
        self, v: int, values: Sequence[float | None], overlay: int = 0, ad: int | None = None
    ) -> int:
        eid = self.brokers[v].publish(values, self.now, overlay, ad)
        self.flush(v)
        self.run()
        return eid

    # -- observations ------------------------------------------------------------------------

    def publications(self, eid: int | None = None) -> list[Sent]:
        return [
            s for s in self.log if isinstance(s.msg, Publish) and (eid is None or s.msg.eid == eid)
        ]

    def deliveries_of(self, eid: int) -> Counter[tuple[int, int]]:
        """(broker, subscription) -> how many times ``eid`` was delivered for it."""
        c: Counter[tuple[int, int]] = Counter()
        for v, ev in self.delivered:
            if ev.eid == eid:
                for sid in ev.sids:
                    c[(v, sid)] += 1
        return c


def oracle(
    subs: Mapping[int, tuple[int, Box]], values: Sequence[float | None]
) -> Counter[tuple[int, int]]:
    """Brute force: every live subscription (sid -> (broker, box)) the event matches, once."""
    return Counter({(v, sid): 1 for sid, (v, box) in subs.items() if matches(box, values)})
