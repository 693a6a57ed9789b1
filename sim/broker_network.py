"""Broker cores as simulated nodes: the engine, latency model and node set of ``sim run thesis``
driving ``brokers.broker.Broker`` cores, with the client registry and optional per-link output
queues.

Theory of operation
-------------------
A broker's id is its simulator node index, so the engine-facing adapter (``BrokerNode``) only
turns addresses into ints and back: ``receive(msg, src_addr, now)`` calls
``broker.receive(msg, index_of[src_addr], now)`` and ``take_messages`` maps each
``(broker id, message)`` to ``(addrs[id], message)``. The nodes are placed in the latency model
by the ``placement`` stream of the run seed, as ``SimNetwork`` places a thesis run's peers, so a
broker run and a thesis run of the same seed and size sit on the same hosts. Nodes a system does
not use as brokers (OctopiA's SCOT needs a multiple of m) stay empty slots: their clients attach
to the nearest broker.

**Clients.** A client (publisher or subscriber) sits at a home node and talks to one broker
(``brokers.clients.ClientRegistry``); each client call and each delivery crosses that hop, which
takes RTT(home, broker)/2 (``client_delay``; 0 when the home is the broker). A publisher
migration (POP, GRAPE) reaches the driver as a ``ClientCommand`` event: ``pause`` buffers the
client's publications and hands the target its migration ad, ``resume`` re-attaches it there and
publishes the buffer in order (the client registry's contract).

**Hops.** Every publication received is recorded per event: the receiver's hop count is the
sender's plus one (the publishing broker has 0), the first copy's count kept. A delivery's hop
count is the delivering broker's: broker-overlay hops, clique and iLink hops included.

**Per-link output queues** (``link_bps``, optional; BASELINES 4.6). The engine's own uplink model
is one FIFO per host, which cannot say how long the queue toward one neighbour is. With a
bandwidth set, each adapter keeps one FIFO per neighbour instead: a message waits its turn, then
takes size/bandwidth on the link, and only then is handed to the engine (which adds the
propagation delay); the adapter's timer is the next head-of-line departure. ``LinkQueueTable``
exposes the queues to strategies as ``brokers.broker.LinkQueues`` (OctopiA's IDR, GRAPE's
delay estimate). Without a bandwidth the adapter hands messages straight to the engine.

**Per-broker service time** (``service``, optional; BASELINES 4.6, OctopiA's host broker with one
input queue and one matcher). With a service time set, each adapter serves its inputs one at a
time in arrival order: broker messages and the clients' calls (``BrokerNetwork.submit``) join one
FIFO input queue. Serving an input runs the core at the start of its service and holds what it
emits (messages and deliveries) until the service ends, ``service`` + ``match_cost`` x PRT
entries the core scanned (``BrokerStats.matchings``) + ``send_cost`` x messages it emitted later:
the matcher is busy for that long and the copies it puts out (a PADRES broker serialising each
copy) are part of its work. The next input starts when the previous one ends; the adapter's
timer is the end of the current service. The core's own timers and the driver's direct calls
(``act``: migration steps) bypass the queue. A service that pauses a client (a migration's
first step) takes that client's publications still waiting in the queue back out of it
(``ClientCall``) before the next input starts: the driver returns them to the client, ahead
of its buffer, and they are published once, at the migration's target.

What the strategies see (``LinkQueues.sample``): with a service time, the queue toward ``dst``
also holds the inputs waiting at the broker (each will be routed onto its target links after
them), and the window counts add the input queue's arrivals and service starts since that
link's previous sample; ``sample(v, v, now)`` is the input queue alone (waiting inputs, arrivals
and service starts since the previous such sample).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from rangecast.brokers.broker import Broker, Delivered
from rangecast.brokers.clients import PAUSE, RESUME, ClientCommand, ClientRegistry
from rangecast.brokers.messages import Advertise, Publish, Subscribe
from rangecast.dht.errors import LocalProtocolError
from rangecast.dht.wire import Message
from rangecast.sim.engine import Simulator
from rangecast.sim.streams import stream

__all__ = ["BrokerNetwork", "BrokerNode", "ClientCall", "LinkQueueTable", "Receipt"]

_INF = float("inf")


class ClientCall:
    """A client's publication queued at its broker: ``publish(broker, client, item, now)`` when
    served; ``item`` is what the client registry buffers for it should the broker pause the
    client first."""

    __slots__ = ("client", "item", "publish")

    def __init__(
        self, client: int, item: Any, publish: Callable[[Broker, int, Any, float], Any]
    ) -> None:
        self.client = client
        self.item = item
        self.publish = publish

    def __call__(self, broker: Broker, now: float) -> Any:
        return self.publish(broker, self.client, self.item, now)


class _Link:
    """One output queue: messages waiting, the head's departure time, counts since a sample."""

    __slots__ = ("head_done", "n_in", "n_out", "q")

    def __init__(self) -> None:
        self.q: deque[tuple[Message, int]] = deque()
        self.head_done = _INF
        self.n_in = 0
        self.n_out = 0


class BrokerNode:
    """The engine's view of one broker (sim.engine.Core)."""

    __slots__ = (
        "_ads_seen",
        "_arrived",
        "_done",
        "_encode",
        "_held",
        "_held_events",
        "_inq",
        "_links",
        "_marks",
        "_now",
        "_q_last",
        "_ready",
        "_released",
        "_released_events",
        "_served",
        "addrs",
        "bps",
        "broker",
        "busy",
        "hops",
        "index_of",
        "match_cost",
        "queue_area",
        "queue_max",
        "send_cost",
        "service",
        "serving",
        "settled",
        "taken_back",
    )

    def __init__(
        self,
        broker: Broker,
        addrs: list[bytes],
        index_of: dict[bytes, int],
        hops: dict[int, dict[int, int]],
        settled: dict[tuple[int, int], float],
        bps: float = 0.0,
        encode: Callable[[Message], bytes] | None = None,
        service: float = 0.0,
        match_cost: float = 0.0,
        send_cost: float = 0.0,
    ) -> None:
        self.broker = broker
        self.addrs = addrs
        self.index_of = index_of
        #: Shared by every node: event id -> broker -> hops from the publishing broker.
        self.hops = hops
        #: Shared by every node: (0, ad id) -> when the last broker to learn the ad processed
        #: its first copy (a cyclic overlay's later copies are dropped, the ad had reached the
        #: broker already); (1, subscription id) -> when a broker last processed a Subscribe of
        #: it: the ends of their installations (the set-up delays).
        self.settled = settled
        self._ads_seen: set[int] = set()
        self.bps = bps
        self._encode = encode
        self._links: dict[int, _Link] = {}
        self._ready: list[tuple[bytes, Message]] = []
        #: The engine's time of the last input: the queues stamp the broker's outputs with it.
        self._now = 0.0
        #: Seconds per input served, per PRT entry scanned, per message emitted (module docs);
        #: all 0: no input queue, the core runs on arrival.
        self.service = service
        self.match_cost = match_cost
        self.send_cost = send_cost
        self.serving = bool(service or match_cost or send_cost)
        #: Waiting inputs: (message, sender) or (client call, -1).
        self._inq: deque[tuple[Any, int]] = deque()
        #: End of the current service (inf: idle) and what it emitted, held until then.
        self._done = _INF
        self._held: list[tuple[int, Message]] = []
        self._held_events: list[Any] = []
        self._released: list[tuple[int, Message]] = []
        self._released_events: list[Any] = []
        #: Inputs arrived and services started so far; per sampled queue, both at its last sample.
        self._arrived = 0
        self._served = 0
        self._marks: dict[int, tuple[int, int]] = {}
        #: The input queue's length integrated over time (message-seconds), to when it last
        #: changed, and its largest length (since the driver last reset it).
        self.queue_area = 0.0
        self._q_last = 0.0
        self.queue_max = 0
        #: Seconds of service started so far (the input side's busy time: the papers' input
        #: utilisation is this over the time elapsed).
        self.busy = 0.0
        #: client -> its queued publications taken back when a service paused it (module docs),
        #: until the driver hands them to the client registry.
        self.taken_back: dict[int, list[Any]] = {}

    # -- the Core protocol ------------------------------------------------------------------

    def receive(self, msg: Message, src: bytes, now: float) -> None:
        self._now = now
        s = self.index_of[src]
        if type(msg) is Publish:
            h = self.hops.get(msg.eid)  # type: ignore[attr-defined]
            if h is None:
                h = self.hops[msg.eid] = {}  # type: ignore[attr-defined]
            v = self.broker.id
            if v not in h:
                h[v] = h.get(s, 0) + 1
        if self.serving:
            self.enqueue(msg, s, now)
        else:
            self._to_core(msg, s, now)

    def _to_core(self, msg: Message, src: int, now: float) -> None:
        """A broker message into the core (on arrival, or when its service starts), noting
        when an advertisement or a subscription reached this broker (``settled``). A
        publication, the common case, costs one type test."""
        t = type(msg)
        if t is not Publish and (t is Advertise or t is Subscribe):
            self._settle(msg, now)  # type: ignore[arg-type]
        self.broker.receive(msg, src, now)

    def _settle(self, msg: Advertise | Subscribe, now: float) -> None:
        if type(msg) is Advertise:
            if msg.ad not in self._ads_seen:
                self._ads_seen.add(msg.ad)
                self.settled[(0, msg.ad)] = now
        else:
            self.settled[(1, msg.sub)] = now  # type: ignore[union-attr]

    def _queue_changes(self, now: float) -> None:
        """The input queue is about to change length at ``now``: integrate the old one."""
        self.queue_area += len(self._inq) * (now - self._q_last)
        self._q_last = now

    def queue_area_at(self, now: float) -> float:
        """``queue_area`` up to ``now``."""
        return self.queue_area + len(self._inq) * (now - self._q_last)

    def handle_timer(self, now: float) -> None:
        self._now = now
        self.broker.handle_timer(now)
        if self._done <= now:
            # the core's own timer outputs leave now, not behind the service that ends
            self._released.extend(self.broker.take_messages())
            self._released_events.extend(self.broker.take_events())
            self._serve(now)

    def get_timer(self) -> float | None:
        t = self.broker.get_timer()
        if self._done != _INF and (t is None or self._done < t):
            t = self._done
        if self.bps:
            for link in self._links.values():
                if link.head_done < (_INF if t is None else t):
                    t = link.head_done
        return t

    def take_messages(self) -> list[tuple[bytes, Message]]:
        out = self.broker.take_messages()
        if self._released:
            out = self._released + out
            self._released = []
        addrs = self.addrs
        if not self.bps:
            return [(addrs[d], m) for d, m in out] if out else []
        return self._queue(out)

    def take_events(self) -> list[Any]:
        ev = self.broker.take_events()
        if self._released_events:
            ev = self._released_events + ev
            self._released_events = []
        return ev

    # -- the input queue (per-broker service time) --------------------------------------------

    def enqueue(self, item: Any, src: int, now: float) -> None:
        """An input joins the queue: a message from broker ``src``, or a client call
        ``item(broker, now)`` with ``src`` -1; served at once if the broker is idle."""
        self._now = now
        self._queue_changes(now)
        self._inq.append((item, src))
        if len(self._inq) > self.queue_max:
            self.queue_max = len(self._inq)
        self._arrived += 1
        self._serve(now)

    def _serve(self, now: float) -> None:
        # Ends the services due by now (releasing what each emitted at its end), then starts
        # the next input, at the end of the previous service or now if the broker was idle.
        q = self._inq
        while self._done <= now:
            self._released.extend(self._held)
            self._released_events.extend(self._held_events)
            if q:  # a pause can only take back what is still waiting
                for ev in self._held_events:
                    if type(ev) is ClientCommand and ev.op == PAUSE:
                        self._take_back(ev.client)
            self._held, self._held_events = [], []
            t = self._done
            self._done = _INF
            if q:
                self._start(t)
        if self._done == _INF and q:
            self._start(now)

    def _take_back(self, client: int) -> None:
        """Out of the input queue: ``client``'s calls not yet served (module docs)."""
        keep: deque[tuple[Any, int]] = deque()
        back = []
        for x, src in self._inq:
            if type(x) is ClientCall and x.client == client:
                back.append(x.item)
            else:
                keep.append((x, src))
        if back:
            self._queue_changes(self._now)
            self._inq.clear()  # in place: ``_serve`` holds the deque
            self._inq.extend(keep)
            self.taken_back.setdefault(client, []).extend(back)

    def _start(self, t: float) -> None:
        broker = self.broker
        self._queue_changes(t)
        item, src = self._inq.popleft()
        self._served += 1
        before = broker.stats.matchings
        if src < 0:
            item(broker, t)
        else:
            self._to_core(item, src, t)
        self._held = broker.take_messages()
        self._held_events = broker.take_events()
        took = (
            self.service
            + self.match_cost * (broker.stats.matchings - before)
            + self.send_cost * len(self._held)
        )
        self.busy += took
        self._done = t + took

    # -- per-link output queues -------------------------------------------------------------

    def _queue(self, out: list[tuple[int, Message]]) -> list[tuple[bytes, Message]]:
        # The broker's outputs carry no time: they were made at the last input's. Messages
        # leave at their departure times, which the timer turns into inputs.
        now = self._now
        encode = self._encode
        assert encode is not None
        for d, m in out:
            link = self._links.get(d)
            if link is None:
                link = self._links[d] = _Link()
            size = len(encode(m)) + 1
            link.q.append((m, size))
            link.n_in += 1
            if len(link.q) == 1:
                link.head_done = now + size * 8.0 / self.bps
        for d, link in self._links.items():
            self._advance(d, link, now)
        ready, self._ready = self._ready, []
        return ready

    def _advance(self, d: int, link: _Link, now: float) -> None:
        q = link.q
        while q and link.head_done <= now:
            m, _ = q.popleft()
            self._ready.append((self.addrs[d], m))
            link.n_out += 1
            link.head_done = link.head_done + q[0][1] * 8.0 / self.bps if q else _INF

    def sample(self, dst: int, now: float) -> tuple[int, int, int]:
        if self._arrived:
            # the input queue: alone for dst = self, else added to the link's (module docs)
            a, s = self._marks.get(dst, (0, 0))
            self._marks[dst] = (self._arrived, self._served)
            q, n_in, n_out = len(self._inq), self._arrived - a, self._served - s
            if dst == self.broker.id:
                return q, n_in, n_out
        else:
            q = n_in = n_out = 0
        link = self._links.get(dst)
        if link is None:
            return q, n_in, n_out
        self._advance(dst, link, now)
        out = (q + len(link.q), n_in + link.n_in, n_out + link.n_out)
        link.n_in = link.n_out = 0
        return out


class LinkQueueTable:
    """``brokers.broker.LinkQueues`` over the adapters' per-link queues (zeros without them)."""

    def __init__(self) -> None:
        self.nodes: dict[int, BrokerNode] = {}

    def sample(self, broker: int, dst: int, now: float) -> tuple[int, int, int]:
        node = self.nodes.get(broker)
        return node.sample(dst, now) if node is not None else (0, 0, 0)


class Receipt:
    """A delivery to a subscriber client: (event id, broker, subscription ids, time at the
    client, hops)."""

    __slots__ = ("broker", "eid", "hops", "now", "sids")

    def __init__(self, eid: int, broker: int, sids: tuple[int, ...], now: float, hops: int):
        self.eid = eid
        self.broker = broker
        self.sids = sids
        self.now = now
        self.hops = hops


class BrokerNetwork:
    """Brokers on the engine, and the clients attached to them (module docs).

    ``place(brokers)`` names the nodes that run a broker (default: all), ``start(make)`` builds
    their cores (``make(v)``: broker ``v``'s). For a relocating system the driver sets
    ``migration_ad(target broker, pause command, now)``, which hands the target the client's
    migration ad, and ``on_resume(broker, client, item, now)``, which publishes a buffered
    publication at the client's new broker."""

    def __init__(
        self,
        sim: Simulator,
        seed: int,
        count: int,
        *,
        link_bps: float = 0.0,
        service: float = 0.0,
        match_cost: float = 0.0,
        send_cost: float = 0.0,
    ) -> None:
        if count < 1:
            raise LocalProtocolError("a broker network needs at least one node")
        self.sim = sim
        self.seed = seed
        self.count = count
        self.link_bps = link_bps
        #: Per-broker service time (s per input, per PRT entry scanned, per message emitted).
        self.service = (service, match_cost, send_cost)
        sim.add_nodes(count, stream(seed, "placement"))
        self.model = sim.latency
        self.hops: dict[int, dict[int, int]] = {}
        #: (0, ad) or (1, subscription) -> its last Advertise / Subscribe processed (BrokerNode).
        self.settled: dict[tuple[int, int], float] = {}
        self.brokers: dict[int, Broker] = {}
        self.broker_nodes: list[int] = list(range(count))
        self._is_broker = set(self.broker_nodes)
        self.queues = LinkQueueTable()
        self.clients: ClientRegistry[Any] = ClientRegistry()
        self.receipts: list[Receipt] = []
        #: Strategies' ClientCommand handlers (set by the driver of a relocating system).
        self.migration_ad: Callable[[Broker, ClientCommand, float], None] | None = None
        self.on_resume: Callable[[Broker, int, Any, float], None] | None = None
        self.commands: list[ClientCommand] = []
        sim.on_events = self._on_events

    def place(self, brokers: Sequence[int]) -> None:
        """The nodes that run a broker (clients elsewhere attach to the nearest)."""
        self.broker_nodes = sorted(set(brokers))
        self._is_broker = set(self.broker_nodes)

    def start(self, make: Callable[[int], Broker]) -> None:
        """Build the broker cores (``make(v)``) on the placed nodes; attach them to the engine."""
        sim = self.sim
        bps = self.link_bps
        encode = sim.codec.raw_encode
        for v in self.broker_nodes:
            b = make(v)
            if b.id != v:
                raise LocalProtocolError(f"broker {b.id} built for node {v}")
            self.brokers[v] = b
            node = BrokerNode(
                b, sim.addrs, sim.index_of, self.hops, self.settled, bps, encode, *self.service
            )
            self.queues.nodes[v] = node
            sim.attach(v, node)

    # -- clients ----------------------------------------------------------------------------

    def nearest_broker(self, home: int) -> int:
        if home in self._is_broker:
            return home
        return self.model.nearest(home, self.broker_nodes)

    def attach(self, client: int, home: int) -> int:
        """Attach ``client`` at ``home`` to the nearest broker; returns the broker."""
        b = self.nearest_broker(home)
        self.clients.attach(client, b, home)
        return b

    def client_delay(self, client: int, broker: int | None = None) -> float:
        """Seconds across the client's hop: RTT(home, broker)/2."""
        home = self.clients.home_of(client)
        b = self.clients.broker_of(client) if broker is None else broker
        return 0.0 if home == b else self.model.one_way_ms(home, b) * 0.001

    def ping(self, client: int, broker: int) -> float:
        """GRAPE's ping: the client's one-way delay (s) to a candidate broker."""
        return self.client_delay(client, broker)

    def call(self, client: int, fn: Callable[[Broker, float], Any], at: float) -> None:
        """The client acts at ``at`` (its home's time): ``fn(broker, now)`` runs at the broker
        once the client hop is crossed, then the broker is flushed."""
        b = self.clients.broker_of(client)

        def run() -> None:
            self.submit(b, fn)

        self.sim.call_at(at + self.client_delay(client, b), run)

    def submit(self, v: int, fn: Callable[[Broker, float], Any]) -> None:
        """A client's input to broker ``v`` now: it joins the broker's input queue when brokers
        have a service time (module docs), else it runs at once (``act``)."""
        node = self.queues.nodes[v]
        if node.serving:
            node.enqueue(fn, -1, self.sim.now)
            self.sim.poke(v)
        else:
            self.act(v, fn)

    def act(self, v: int, fn: Callable[[Broker, float], Any]) -> Any:
        """Call broker ``v`` now (a client call, a migration step), then flush it."""
        now = self.sim.now
        self.queues.nodes[v]._now = now
        out = fn(self.brokers[v], now)
        self.sim.poke(v)
        return out

    # -- outputs ----------------------------------------------------------------------------

    def _on_events(self, v: int, events: list[Any]) -> None:
        now = self.sim.now
        for ev in events:
            if type(ev) is Delivered:
                h = self.hops.get(ev.eid)
                self.receipts.append(Receipt(ev.eid, v, ev.sids, now, h.get(v, 0) if h else 0))
            elif isinstance(ev, ClientCommand):
                self.commands.append(ev)
                self._command(v, ev)

    def _command(self, v: int, cmd: ClientCommand) -> None:
        if cmd.op == PAUSE:
            self.clients.pause(cmd.client)
            back = self.queues.nodes[v].taken_back.pop(cmd.client, None)
            if back:
                self.clients.take_back(cmd.client, back)
            hand_over = self.migration_ad
            if hand_over is None:
                raise LocalProtocolError("a migration, but no system handles it")
            self.act(cmd.broker, lambda b, now: hand_over(b, cmd, now))
        elif cmd.op == RESUME:
            if self.on_resume is None:
                raise LocalProtocolError("a migration, but no system handles it")
            resume = self.on_resume
            items = self.clients.resume(cmd.client, v)
            self.act(v, lambda b, now: [resume(b, cmd.client, item, now) for item in items])

    # -- measurements -----------------------------------------------------------------------

    def busy(self) -> dict[int, float]:
        """Each broker's input-side busy time so far (s; 0 without service times)."""
        return {v: node.busy for v, node in self.queues.nodes.items()}

    def table_entries(self) -> list[int]:
        """SRT + PRT entries of each broker, over all its overlays."""
        return [b.srt_size() + b.prt_size() for _, b in sorted(self.brokers.items())]
