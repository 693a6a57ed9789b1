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
import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from rangecast.brokers.broker import Broker, Delivered, RoutingConfig, Strategy
from rangecast.brokers.clients import PAUSE, RESUME, ClientCommand, ClientRegistry
from rangecast.brokers.filters import Box, matches
from rangecast.brokers.graphs import BrokerGraph, Overlay
from rangecast.brokers.messages import Publish, broker_codec
from rangecast.brokers.migration import Relocation
from rangecast.dht.wire import Message
from rangecast.pubsub.schema import Schema

CODEC = broker_codec()
T = TypeVar("T")


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
    #: Other output events (a strategy's client commands), and who handles them.
    events: list[tuple[int, Any]] = field(default_factory=list)
    on_event: Callable[[int, Any], None] | None = None
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
            if type(ev) is Delivered:
                self.delivered.append((v, ev))
            else:
                self.events.append((v, ev))
                if self.on_event is not None:
                    self.on_event(v, ev)

    def run(self, until: float | None = None) -> None:
        """Deliver until no message is in flight (or the next one is due after ``until``),
        firing the brokers' timers in time order with the messages."""
        while True:
            t_msg = self._queue[0][0] if self._queue else None
            t_tim = min(
                (d for d in (b.get_timer() for b in self.brokers.values()) if d is not None),
                default=None,
            )
            if t_msg is None and (t_tim is None or until is None):
                if until is not None:
                    self.now = max(self.now, until)
                return
            t = min(x for x in (t_msg, t_tim) if x is not None)
            if until is not None and t > until:
                self.now = max(self.now, until)
                return
            self.now = max(self.now, t)
            if t_tim is not None and (t_msg is None or t_tim < t_msg):
                for v, b in self.brokers.items():
                    d = b.get_timer()
                    if d is not None and d <= t:
                        b.handle_timer(t)
                        self.flush(v)
                continue
            _, _, src, dst, frame = heapq.heappop(self._queue)
            self.brokers[dst].receive(CODEC.decode(frame), src, t)
            self.flush(dst)

    def act(self, v: int, fn: Callable[[Broker, float], T], settle: bool = True) -> T:
        """Run a client call on broker ``v`` (a strategy's API: ``fn(broker, now)``), then
        deliver what it sent (unless ``settle`` is False: the messages stay in flight)."""
        out = fn(self.brokers[v], self.now)
        self.flush(v)
        if settle:
            self.run()
        return out

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


class Publishers:
    """Publisher clients on a ``BrokerNet`` whose brokers run a ``Relocation`` strategy: the
    client registry, and the driver's part of a migration (pause -> the migration ad at the
    target; resume -> publish the buffer there). Records every publication as (eid, values)."""

    def __init__(self, net: BrokerNet) -> None:
        self.net = net
        self.registry: ClientRegistry[tuple[float | None, ...]] = ClientRegistry()
        self.ads: dict[int, int] = {}
        self.published: list[tuple[int, tuple[float | None, ...]]] = []
        net.on_event = self._event

    def _strategy(self, v: int) -> Relocation:
        s = self.net.brokers[v].strategy
        assert isinstance(s, Relocation)
        return s

    def attach(self, client: int, v: int, box: Box) -> int:
        self.registry.attach(client, v)
        ad = self.net.act(v, lambda b, now: self._strategy(v).attach_publisher(b, client, box, now))
        self.ads[client] = ad
        return ad

    def publish(self, client: int, values: Sequence[float | None], settle: bool = True) -> None:
        vals = tuple(values)
        v = self.registry.publish(client, vals)
        if v is None:
            return  # buffered: published at the target on resume
        ad = self.ads[client]
        eid = self.net.act(v, lambda b, now: self._strategy(v).publish(b, ad, vals, now), settle)
        self.published.append((eid, vals))

    def _event(self, v: int, ev: Any) -> None:
        if not isinstance(ev, ClientCommand):
            return
        net = self.net
        if ev.op == PAUSE:
            self.registry.pause(ev.client)
            t = ev.broker
            self._strategy(t).migration_ad(net.brokers[t], ev.client, ev.ad, ev.path, net.now)
            net.flush(t)
        elif ev.op == RESUME:
            ad = self.ads[ev.client]
            for vals in self.registry.resume(ev.client, v):
                b = net.brokers[v]
                self.published.append((self._strategy(v).publish(b, ad, vals, net.now), vals))
            net.flush(v)


def random_rtt(rng: random.Random, n: int, lo: float, hi: float) -> list[list[float]]:
    """A symmetric RTT matrix with uniform random entries: varied timings for the loop."""
    rtt = [[0.0] * n for _ in range(n)]
    for a in range(n):
        for b in range(a + 1, n):
            rtt[a][b] = rtt[b][a] = rng.uniform(lo, hi)
    return rtt
