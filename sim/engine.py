"""The discrete-event engine and the simulated network the sans-IO cores talk through.

Theory of operation
-------------------
One heap of events ordered by (virtual time, sequence number): the sequence number breaks ties in
insertion order, which is what makes a run reproducible bit for bit. There are three kinds of
event, matching the cores' three inputs:

* ``_MSG``: a message arrives at a node: ``core.receive(msg, src_addr, now)``;
* ``_TIMER``: a node's deadline has come: ``core.handle_timer(now)``;
* ``_CALL``: the scenario acts (an API call such as ``route`` or ``join``, a crash, a probe of
  the state).

After every input the engine *flushes* the node: it takes the messages the core emitted and puts
each on the network, and (re)arms the node's single timer from ``core.get_timer()``.

The network charges each message its real encoded size (the codec the driver gives the engine, the
one the run's stack speaks, encodes the same bytes the runtime sends), delays
it by the latency model's one-way delay, optionally drops it (random ``loss``, or the ``drop``
hook: a partition, a cut link) and, when per-host uplink capacities are set, serialises it
behind the host's earlier messages (FIFO), so that large transfers queue as they would on a
real access link. A per-flow cap (``set_flow_cap``) also paces each sender -> receiver pair at
a fixed rate, as one connection of an application that cannot fill the link on its own; a
message leaves when both its host's FIFO and its flow allow. Messages to a crashed node vanish,
as on a real network.
"""

from __future__ import annotations

import gc
import heapq
import itertools
import math
import random
import time
from array import array
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

try:
    import cython
except ImportError:  # interpreted, without Cython installed
    from rangecast import _nocython as cython  # type: ignore[no-redef]

from rangecast.dht.errors import LocalProtocolError
from rangecast.dht.messages import CARRIERS
from rangecast.dht.wire import Codec, Message, payload_tag
from rangecast.sim.latency import Delays, LatencyModel

if cython.compiled:  # the event heap's memory (see Simulator._grow)
    from cython.cimports.cpython.mem import PyMem_Free, PyMem_Realloc

_MSG, _TIMER, _CALL = 0, 1, 2
_INF = math.inf
PORT = b"\x0f\xa0"  # every simulated host listens on port 4000


@contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Run a simulation with Python's cyclic garbage collector off.

    A run builds millions of long-lived objects (nodes, routing tables, tree state) and then
    mostly short-lived acyclic ones (messages, events), which reference counting frees. The
    cyclic collector would rescan the ever larger long-lived heap to find nothing: a quarter of
    the bootstrap at 10^5 route nodes, ~30 % of a 20,000-node thesis run (none at 5,000 nodes,
    where RSS is the same either way, so nothing cyclic piles up)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class Core(Protocol):
    """What the engine needs of a sans-IO core."""

    def receive(self, msg: Message, src: bytes, now: float) -> None: ...
    def handle_timer(self, now: float) -> None: ...
    def get_timer(self) -> float | None: ...
    def take_messages(self) -> list[tuple[bytes, Message]]: ...


def sim_addr(index: int) -> bytes:
    """A 6-byte transport address (4-byte host, 2-byte port) as an IPv4 peer would have, so that
    handles cost on the wire what they would cost for real."""
    return index.to_bytes(4, "big") + PORT


#: The run log's hook: (time, src, dst, type name, bytes, message, dropped, one-way delay ms).
MessageHook = Callable[[float, int, int, str, int, Any, bool, float], None]


def _counters(n: int = 0) -> array[int]:
    """Per-node counters in one compact array (64-bit: a node sends far fewer than 2^63
    bytes): each message updates a few at random nodes, and in a list every count would be an
    int object of its own somewhere in a heap of GBs."""
    return array("q", bytes(8 * n))


class TypeCount:
    """One message type's traffic: messages, bytes, and bytes by sending node."""

    __slots__ = ("bytes", "messages", "name", "per_node")

    def __init__(self, name: str = "", per_node: array[int] | None = None) -> None:
        self.name = name
        self.messages = 0
        self.bytes = 0
        #: Bytes sent by each node.
        self.per_node: array[int] = _counters() if per_node is None else per_node


class NetStats:
    """Counters per node and per message type. (Plain classes with slots, not dataclasses: the
    compiled engine makes both extension types, ``sim/engine.pxd``, updated in C per message.)"""

    __slots__ = (
        "by_type",
        "delay_ms",
        "events",
        "lost",
        "received_messages",
        "sent_bytes",
        "sent_messages",
        "to_dead",
        "unknown_addr",
    )

    def __init__(self) -> None:
        self.sent_messages: array[int] = _counters()
        self.sent_bytes: array[int] = _counters()
        self.received_messages: array[int] = _counters()
        self.by_type: dict[str, TypeCount] = {}
        #: One-way propagation delays of every message sent, summed (ms): traffic weighed by
        #: latency, so a 66 ms hop counts ten times a 7 ms one (queueing left out: it is the
        #: load's effect, not the route's).
        self.delay_ms = 0.0
        self.lost = 0
        self.to_dead = 0
        self.unknown_addr = 0
        self.events = 0

    @property
    def messages(self) -> int:
        return sum(self.sent_messages)

    @property
    def bytes(self) -> int:
        return sum(self.sent_bytes)

    def types_json(self) -> dict[str, dict[str, int]]:
        return {
            k: {"messages": v.messages, "bytes": v.bytes} for k, v in sorted(self.by_type.items())
        }


class Simulator:
    """Event loop + network. Nodes are numbered 0..n-1 in the order they are added."""

    def __init__(
        self,
        latency: LatencyModel,
        net_rng: random.Random,
        *,
        codec: Codec,
        loss: float = 0.0,
        progress: Callable[[Simulator], None] | None = None,
        progress_every_s: float = 0.5,
    ) -> None:
        if not 0.0 <= loss < 1.0:
            raise LocalProtocolError(f"loss must be in [0, 1), got {loss}")
        self.latency = latency
        self.loss = loss
        self.now = 0.0
        self.cores: list[Core | None] = []
        self.addrs: list[bytes] = []
        self.alive: list[bool] = []
        self.index_of: dict[bytes, int] = {}
        self.stats = NetStats()
        #: Per-host uplink capacity in bits/s (None: unlimited). See ``set_uplink``.
        self.uplink_bps: list[float] | None = None
        self._uplink_free: list[float] = []
        #: Per-flow cap in bits/s (None: none). See ``set_flow_cap``.
        self.flow_bps: float | None = None
        #: When each (sender, receiver) pair's pacing lets its next message go.
        self._flow_free: dict[tuple[int, int], float] = {}
        #: The event queue, interpreted: a heap of (time, seq, kind, node, a, b) tuples.
        #: Compiled, it is a heap of C structs (``Entry`` in ``sim/engine.pxd``: no tuple, no
        #: float and no int object per event, and comparisons in C) whose objects (a message,
        #: a call) wait in ``_objs`` slots; ``_push`` and ``_pop_c`` keep the same order.
        self._q: list[tuple[float, int, int, int, Any, Any]] = []
        #: Tie-breaker of the event queue: events at the same time run in the order scheduled.
        self._counter = itertools.count(1)
        if cython.compiled:
            self._heap = cython.NULL
            self._free = cython.NULL
            self._objs: list[Any] = []
            self._n = self._cap = self._nfree = 0
            self._seq = 0
        #: Each node's armed deadline, in a compact array: the flush compares it after every
        #: input at a random node, and a list would point to a float object anywhere in memory.
        self._armed: array[float] = array("d")
        self._rng = net_rng
        self._stop = False
        self._progress = progress
        self._progress_every = progress_every_s
        #: Accounting key of each message: its type, or for a message carrying an application
        #: payload (``dht.messages.CARRIERS``), the type of the payload, so that bytes are
        #: charged to what the application sent (routing headers included).
        self._type_counts: dict[Any, TypeCount] = {}
        #: The codec of the run's stack (``codec_for(*tables)``, built by the driver): the nodes
        #: of a ``SimNetwork`` are built with it, messages are charged its encoded size, and a
        #: routed payload's tag is named by its tables.
        self.codec = codec
        self._encode = codec.raw_encode
        #: The flush closure (``_make_flush``), rebuilt when a hook or an uplink changes.
        self._flush_fn: Callable[[int], None] | None = None
        self._on_events: Callable[[int, list[Any]], None] | None = None
        self._take_events: list[Callable[[], list[Any]] | None] = []
        self._message_log: MessageHook | None = None
        self._drop: Callable[[int, int, Any], bool] | None = None

    @property
    def on_events(self) -> Callable[[int, list[Any]], None] | None:
        """Cores with application events (``take_events``) hand them to this hook after every
        input: (node index, events)."""
        return self._on_events

    @on_events.setter
    def on_events(self, hook: Callable[[int, list[Any]], None] | None) -> None:
        self._on_events = hook
        self._flush_fn = None

    @property
    def message_log(self) -> MessageHook | None:
        """Run log hook (``sim.runlog.MessageLog.record``): every charged message, with whether
        the network dropped it and its one-way propagation delay (ms; 0 when dropped). None
        (the default) costs one check per message."""
        return self._message_log

    @message_log.setter
    def message_log(self, hook: MessageHook | None) -> None:
        self._message_log = hook
        self._flush_fn = None

    @property
    def drop(self) -> Callable[[int, int, Any], bool] | None:
        """Fault-injection hook: (sender index, destination index, message) -> whether the
        network loses it (a partition, a cut link, a selective drop); charged as sent and
        counted as lost, as random ``loss`` is. None (the default) costs nothing per message.
        After random loss: a run with a hook that drops nothing draws the same numbers."""
        return self._drop

    @drop.setter
    def drop(self, hook: Callable[[int, int, Any], bool] | None) -> None:
        self._drop = hook
        self._flush_fn = None

    # ----------------------------------------------------------------------------- topology

    def add_nodes(self, count: int, place_rng: random.Random) -> range:
        """Reserve ``count`` node slots (placing them in the latency model); cores come later
        through ``attach``."""
        start = len(self.cores)
        self.latency.place(count, place_rng)
        for i in range(start, start + count):
            addr = sim_addr(i)
            self.cores.append(None)
            self._take_events.append(None)
            self.addrs.append(addr)
            self.alive.append(True)
            self.index_of[addr] = i
            self._armed.append(_INF)
            self.stats.sent_messages.append(0)
            self.stats.sent_bytes.append(0)
            self.stats.received_messages.append(0)
            self._uplink_free.append(0.0)
            for tc in self.stats.by_type.values():
                tc.per_node.append(0)
            if self.uplink_bps is not None:
                self.uplink_bps.append(_INF)
        return range(start, start + count)

    def attach(self, index: int, core: Core) -> None:
        self.cores[index] = core
        self._take_events[index] = getattr(core, "take_events", None)

    def set_uplink(self, index: int, bits_per_s: float) -> None:
        """Give host ``index`` a finite uplink: its messages then leave one after another, each
        taking size/capacity seconds on the wire before the propagation delay."""
        if bits_per_s <= 0:
            raise LocalProtocolError("uplink capacity must be positive")
        if self.uplink_bps is None:
            self.uplink_bps = [_INF] * len(self.cores)
            self._flush_fn = None
        self.uplink_bps[index] = bits_per_s

    def set_flow_cap(self, bits_per_s: float | None) -> None:
        """Pace every sender -> receiver pair at ``bits_per_s`` (None: no cap), on top of the
        hosts' uplinks: a message of size s leaves when the host's FIFO has sent it (s / uplink
        after the host's previous message) and its flow has had s / cap since the pair's
        previous one. The uplink is charged when the message is queued, so other flows use the
        capacity a paced flow leaves idle: a host sends min(uplink, flows x cap)."""
        if bits_per_s is not None and bits_per_s <= 0:
            raise LocalProtocolError("flow capacity must be positive")
        self.flow_bps = bits_per_s
        if self.uplink_bps is None:
            self.uplink_bps = [_INF] * len(self.cores)
        self._flow_free.clear()
        self._flush_fn = None

    def crash(self, index: int) -> None:
        """The node stops dead: no more inputs, its messages in flight still arrive."""
        self.alive[index] = False
        self._armed[index] = _INF

    # ---------------------------------------------------------------------------- scheduling

    def call_at(self, at: float, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` at virtual time ``at`` (scenario actions)."""
        if at < self.now:
            raise LocalProtocolError(f"cannot schedule in the past ({at} < {self.now})")
        self._push(at, _CALL, -1, fn, args)

    def _push(self, t: float, kind: int, node: int, a: Any, b: Any) -> int:
        """Queue an event (see the module docstring for what ``a`` and ``b`` are per kind)."""
        if cython.compiled:
            if kind == _MSG:
                return self._push_c(t, kind, node, a, b)
            if kind == _TIMER:
                return self._push_c(t, kind, node, -1, None)
            return self._push_c(t, kind, node, -1, (a, b))
        heapq.heappush(self._q, (t, next(self._counter), kind, node, a, b))
        return 0

    # The compiled heap: the same algorithm as heapq (sift the new entry up; move the last one
    # down from the top), on (t, seq) keys, which are unique, so the order is heapq's exactly.

    def _push_c(self, t: float, kind: int, node: int, src: int, obj: Any) -> int:
        if self._n == self._cap:
            self._grow()
        slot = -1
        if obj is not None:
            self._nfree -= 1
            slot = self._free[self._nfree]
            self._objs[slot] = obj
        self._seq += 1
        h = self._heap
        pos = self._n
        self._n += 1
        while pos > 0:
            parent = (pos - 1) >> 1
            if h[parent].t < t or (h[parent].t == t and h[parent].seq < self._seq):
                break
            h[pos] = h[parent]
            pos = parent
        h[pos].t = t
        h[pos].seq = self._seq
        h[pos].kind = kind
        h[pos].node = node
        h[pos].src = src
        h[pos].slot = slot
        return 0

    def _pop_c(self) -> Any:
        """The earliest entry, taken off the heap (its object stays in its slot)."""
        h = self._heap
        top = h[0]
        self._n -= 1
        n = self._n
        if n > 0:
            last = h[n]
            pos = 0
            while True:
                child = 2 * pos + 1
                if child >= n:
                    break
                c = h[child]
                if child + 1 < n:
                    r = h[child + 1]
                    if r.t < c.t or (r.t == c.t and r.seq < c.seq):
                        child += 1
                        c = r
                if last.t < c.t or (last.t == c.t and last.seq < c.seq):
                    break
                h[pos] = c
                pos = child
            h[pos] = last
        return top

    def _grow(self) -> int:
        """Double the heap's capacity (and its object slots)."""
        cap = max(1024, 2 * self._cap)
        heap = PyMem_Realloc(self._heap, cap * cython.sizeof(Entry))  # type: ignore[name-defined]  # noqa: F821
        if heap == cython.NULL:
            raise MemoryError
        self._heap = cython.cast(cython.pointer(Entry), heap)  # type: ignore[name-defined]  # noqa: F821
        free = PyMem_Realloc(self._free, cap * cython.sizeof(cython.Py_ssize_t))
        if free == cython.NULL:
            raise MemoryError
        self._free = cython.cast(cython.pointer(cython.Py_ssize_t), free)
        for slot in range(cap - 1, self._cap - 1, -1):
            self._free[self._nfree] = slot
            self._nfree += 1
        self._objs.extend([None] * (cap - self._cap))
        self._cap = cap
        return 0

    def __dealloc__(self) -> None:
        if cython.compiled:
            PyMem_Free(self._heap)
            PyMem_Free(self._free)

    def stop(self) -> None:
        """Make ``run`` return after the current event."""
        self._stop = True

    def poke(self, index: int) -> None:
        """Flush node ``index`` after the scenario called its API directly."""
        self._get_flush()(index)

    # ------------------------------------------------------------------------------ the loop

    def run(self, until: float = _INF) -> None:
        """Process events until the queue is empty, virtual time passes ``until`` or ``stop``."""
        q = self._q
        pop = heapq.heappop
        cores = self.cores
        alive = self.alive
        addrs = self.addrs
        armed = self._armed
        stats = self.stats
        received = stats.received_messages
        flush = self._get_flush()
        self._stop = False
        check_every = 1 << 14
        countdown = check_every
        next_report = time.monotonic() + self._progress_every
        limit = until  # compiled: a C double (sim/engine.pxd), compared in C per event
        a: Any
        b: Any
        while True:
            # Take the earliest event: (t, kind, i, a, b) as the module docstring says.
            if cython.compiled:
                if self._n == 0:
                    break
                if self._heap[0].t > limit:
                    self.now = until
                    return
                top = self._pop_c()
                t, kind, i = top.t, top.kind, top.node
                a = b = None
                if top.slot >= 0:
                    obj = self._objs[top.slot]
                    self._objs[top.slot] = None
                    self._free[self._nfree] = top.slot
                    self._nfree += 1
                    if kind == _MSG:
                        a, b = addrs[top.src], obj
                    else:
                        a, b = obj
            else:
                if not q:
                    break
                if q[0][0] > until:
                    self.now = until
                    return
                t, _, kind, i, a, b = pop(q)
                if kind == _MSG:
                    a = addrs[a]  # the sender's address
            # One float object for the event's time, the engine's clock and the core's input
            # (compiled, ``t`` is a C double: each use as an object would box it anew).
            now: Any = t
            self.now = now
            if kind == _MSG:
                if alive[i]:
                    received[i] += 1
                    cores[i].receive(b, a, now)  # type: ignore[union-attr]
                    flush(i)
                else:
                    stats.to_dead += 1
            elif kind == _TIMER:
                if armed[i] != t or not alive[i]:
                    continue
                armed[i] = _INF
                cores[i].handle_timer(now)  # type: ignore[union-attr]
                flush(i)
            else:
                a(*b)
                # A scenario action may have set a hook (message log, events) or an uplink.
                flush = self._flush_fn or self._get_flush()
            stats.events += 1
            if self._stop:
                return
            countdown -= 1
            if countdown == 0:
                countdown = check_every
                if self._progress is not None and time.monotonic() >= next_report:
                    next_report = time.monotonic() + self._progress_every
                    self._progress(self)
        # The queue ran dry before ``until``: virtual time still reaches it.
        if until != _INF:
            self.now = max(self.now, until)

    def _new_count(self, kind: Any) -> TypeCount:
        if isinstance(kind, int):
            cls = self.codec.types.get(kind)
            name = cls.__name__ if cls is not None else f"payload#{kind}"
        else:
            name = kind.__name__
        tc = self.stats.by_type.get(name)
        if tc is None:
            tc = TypeCount(name=name, per_node=_counters(len(self.cores)))
            self.stats.by_type[name] = tc
        return tc

    def _get_flush(self) -> Callable[[int], None]:
        fn = self._flush_fn
        if fn is None:
            fn = self._flush_fn = self._make_flush()
        return fn

    @cython.locals(stats=NetStats, delays=Delays)
    def _make_flush(self) -> Callable[[int], None]:
        """The flush of one node (see the module docstring), as a closure over everything that
        stays fixed while the loop runs: it runs after every input, so every attribute it needs
        is looked up once here rather than on every call. Built on first use and again after
        the scenario sets ``message_log``, ``on_events`` or an uplink (``_get_flush``)."""
        cores = self.cores
        stats = self.stats
        sent_messages = stats.sent_messages
        sent_bytes = stats.sent_bytes
        index_of = self.index_of
        delays = self.latency.delays()
        encode = self._encode
        type_counts = self._type_counts
        new_count = self._new_count
        uplink = self.uplink_bps
        uplink_free = self._uplink_free
        flow_bps = self.flow_bps
        flow_free = self._flow_free
        loss = self.loss
        rand = self._rng.random
        drop = self._drop
        # One test per message for both kinds of loss, as there was for random loss alone.
        lossy = bool(loss) or drop is not None
        log = self._message_log
        take_events = self._take_events
        on_events = self._on_events
        armed = self._armed
        carriers = CARRIERS
        # Interpreted, a message goes on the heapq heap inline (a call to ``_push`` per message
        # would cost the interpreted engine about 4 %); compiled, ``_push`` is a C call.
        compiled = cython.compiled
        q = self._q
        push = heapq.heappush
        seq = self._counter

        @cython.locals(
            i=cython.Py_ssize_t,
            now=cython.double,
            nbytes=cython.Py_ssize_t,
            delay=cython.double,
            size=cython.Py_ssize_t,
            depart=cython.double,
            paced=cython.double,
            d=cython.double,
            tc=TypeCount,
        )
        def flush(i: int) -> None:
            core = cores[i]
            out = core.take_messages()  # type: ignore[union-attr]
            if out:
                now = self.now
                nbytes = 0
                delay = 0.0
                for addr, msg in out:
                    size = len(encode(msg)) + 1
                    nbytes += size
                    cls = type(msg)
                    kind: Any = cls
                    if cls in carriers:
                        kind = payload_tag(msg.payload) or cls  # type: ignore[attr-defined,union-attr]
                    tc = type_counts.get(kind)
                    if tc is None:
                        tc = type_counts[kind] = new_count(kind)
                    tc.messages += 1
                    tc.bytes += size
                    tc.per_node[i] += size
                    dst = index_of.get(addr)
                    if dst is None:
                        stats.unknown_addr += 1
                        if log is not None:
                            log(now, i, -1, tc.name, size, msg, True, 0.0)
                        continue
                    depart = now
                    if uplink is not None:
                        if uplink[i] != _INF:
                            depart = max(now, uplink_free[i]) + size * 8.0 / uplink[i]
                            uplink_free[i] = depart
                        if flow_bps is not None:
                            pair = (i, dst)
                            paced = max(now, flow_free.get(pair, 0.0)) + size * 8.0 / flow_bps
                            flow_free[pair] = paced
                            if paced > depart:
                                depart = paced
                    if lossy and (
                        (loss and rand() < loss) or (drop is not None and drop(i, dst, msg))
                    ):
                        stats.lost += 1
                        if log is not None:
                            log(now, i, dst, tc.name, size, msg, True, 0.0)
                        continue
                    d = delays.one_way_ms(i, dst)
                    delay += d
                    if log is not None:
                        log(now, i, dst, tc.name, size, msg, False, d)
                    if compiled:
                        self._push(depart + d * 0.001, _MSG, dst, i, msg)
                    else:
                        push(q, (depart + d * 0.001, next(seq), _MSG, dst, i, msg))
                sent_messages[i] += len(out)
                sent_bytes[i] += nbytes
                stats.delay_ms += delay
            take = take_events[i]
            if take is not None:
                events = take()
                if events and on_events is not None:
                    on_events(i, events)
            t = core.get_timer()  # type: ignore[union-attr]
            if t is not None and t < armed[i]:
                armed[i] = t
                if compiled:
                    self._push(t, _TIMER, i, None, None)
                else:
                    push(q, (t, next(seq), _TIMER, i, None, None))

        return flush
