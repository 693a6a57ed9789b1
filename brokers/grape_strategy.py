"""GRAPE on broker cores (Cheung & Jacobsen, CSRG-597): trace sessions over a PADRES tree, TIR/TIA
aggregation back to the source, the centralised choice (``Grape.select``, brokers/grape.py) and
the shared migration (``Relocation``, brokers/migration.py).

Theory of operation
-------------------
Every publication of a publisher belongs to a *trace session* of ``threshold`` (G_threshold)
consecutive publications, named by its first publication's id (the trace id). The source routes
each one itself with the header ``[SESSION, trace id, k]`` (k: its index in the session, since
our event ids are not consecutive per publisher), and so does every broker it reaches (the
tagged-publication plumbing is ``migration.Tracing``, which POP's traced publications use too):

================  =============================================================================
event at b        action
================  =============================================================================
session pub k     match, deliver, forward (the core's ``match``/``deliver``); the broker's
                  ``SessionLog`` sets bit k if it delivered locally and adds the deliveries;
                  it remembers the upstream link and the links it sent session traffic on
k = G-1 at S      the session ends: S sends a TIR (``Control`` TIR, ``ref`` = trace id) down
                  every link that carried session traffic
TIR from up       forward the TIR down the same links; answer at once if there are none
all TIAs in       TIA(own record + the children's) to up; the session state is cleared.
                  At S: ``Grape.select`` over the records (candidates: S, then the other
                  responders), and if the choice is another broker, ``start_migration``
                  along the tree path the records describe
================  =============================================================================

A TIA record is a broker's id, deliveries, neighbours, bit vector, input-queue and matching
delay and output-queue delay per neighbour and toward its clients: about 75 B on the wire
(ints in ``ints``; bits and the float64 delays in ``blob``). Links are FIFO, so a TIR reaches
each broker after the session's last publication did. The delays come from the driver when it
has them: the output-queue delay is the queue length (``LinkQueues.sample``) times ``service``
(seconds per queued message); the input-queue delay and the client queue are constants; matching
is ``match_cost`` per PRT entry scanned. Without a driver they are zeros.

A migration started while a session is open (the choice of the previous session, or a driver's
own move) ends it early: its TIR clears the state on every broker it reached, and the source
discards the answers. Brokers that never saw the session are left out of the records; from any
candidate they carry nothing (no delivery past them), so the choice is the same.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal, cast

from rangecast.brokers.broker import Broker, LinkQueues
from rangecast.brokers.grape import CLIENT, G_THRESHOLD, Grape, Node, SessionLog, TraceInfo
from rangecast.brokers.messages import Control, Publish
from rangecast.brokers.migration import Tracing, tree_path
from rangecast.brokers.tables import LOCAL
from rangecast.dht.errors import LocalProtocolError, RemoteProtocolError

__all__ = ["OP_TIA", "OP_TIR", "SESSION", "GrapeStrategy", "Selection", "pack_tia", "unpack_tia"]

#: Control ops: trace information request and answer (POP uses 10-12, the migration 20-21).
OP_TIR, OP_TIA = 13, 14
#: Header of a session publication: [SESSION, trace id, k].
SESSION = 2

Priority = Literal["delay", "load"]


def pack_tia(records: Mapping[int, TraceInfo], size: int) -> tuple[list[int], bytes]:
    """A TIA's content: ``ints`` = [bit-vector bytes w, then per broker: id, deliveries,
    neighbour count m, m neighbours]; ``blob`` = per broker w bytes of bits (little-endian),
    then float64 input queue, matching, client queue and m neighbour queues."""
    w = (size + 7) // 8
    ints = [w]
    blob = bytearray()
    for b, info in records.items():
        nbrs = cast(tuple[int, ...], info.neighbours)
        ints += (b, info.deliveries, len(nbrs), *nbrs)
        blob += info.bits.to_bytes(w, "little")
        out = info.out_queue
        delays = (
            info.in_queue,
            info.matching,
            out.get(CLIENT, 0.0),
            *(out.get(n, 0.0) for n in nbrs),
        )
        blob += struct.pack(f"<{len(delays)}d", *delays)
    return ints, bytes(blob)


def unpack_tia(ints: Sequence[int], blob: bytes) -> dict[int, TraceInfo]:
    """The records of a TIA (``RemoteProtocolError`` if it is malformed)."""
    try:
        w, i, j = ints[0], 1, 0
        out: dict[int, TraceInfo] = {}
        while i < len(ints):
            b, deliveries, m = ints[i : i + 3]
            nbrs = tuple(ints[i + 3 : i + 3 + m])
            if len(nbrs) != m or b in out or deliveries < 0 or w < 0:
                raise RemoteProtocolError(f"a malformed TIA record for {b}")
            i += 3 + m
            bits = int.from_bytes(blob[j : j + w], "little")
            d = struct.unpack_from(f"<{3 + m}d", blob, j + w)
            j += w + 8 * (3 + m)
            queues: dict[Node, float] = {CLIENT: d[2]}
            queues.update(zip(nbrs, d[3:], strict=True))
            out[b] = TraceInfo(nbrs, bits, deliveries, d[0], d[1], queues)
    except (IndexError, ValueError, struct.error):
        raise RemoteProtocolError("a malformed TIA") from None
    if j != len(blob):
        raise RemoteProtocolError("a TIA with trailing bytes")
    return out


class _Session:
    """One broker's state for one trace session, until it has answered the TIR."""

    __slots__ = ("down", "log", "records", "up", "waiting")

    def __init__(self, trace_id: int, size: int, up: int) -> None:
        self.log = SessionLog(trace_id, size=size)
        self.up = up
        #: links this broker sent session traffic on
        self.down: set[int] = set()
        #: children whose TIA is due (None: no TIR yet)
        self.waiting: set[int] | None = None
        self.records: dict[int, TraceInfo] = {}


@dataclass(frozen=True, slots=True)
class Selection:
    """A choice made at the source: the records it used (neighbours restricted to the
    responders), the candidates in order, and the broker chosen."""

    trace_id: int
    ad: int
    infos: dict[Node, TraceInfo]
    candidates: tuple[int, ...]
    pings: dict[Node, float]
    target: int


class GrapeStrategy(Tracing):
    """GRAPE on a PADRES tree of broker cores (overlay 0); see the module docs.

    ``priority``/``weight``: the selection (``load``/100: the minimum message rate; ``delay``/100:
    the minimum delay). ``ping(client, broker)``: the publisher's one-way delay to a candidate
    (RTT/2; 0 without it). ``link_delay(a, b)``: adds the tree hop's latency to Algorithm 1 (the
    paper's has none). ``queues``, ``service``, ``in_queue``, ``client_queue``, ``match_cost``:
    the delay measurements of the TIAs (module docs)."""

    def __init__(
        self,
        priority: Priority = "load",
        weight: float = 100.0,
        threshold: int = G_THRESHOLD,
        ping: Callable[[int, int], float] | None = None,
        link_delay: Callable[[Node, Node], float] | None = None,
        queues: LinkQueues | None = None,
        service: float = 0.0,
        in_queue: float = 0.0,
        client_queue: float = 0.0,
        match_cost: float = 0.0,
    ) -> None:
        super().__init__()
        if threshold < 1:
            raise LocalProtocolError("a session holds at least one publication")
        if priority not in ("delay", "load") or not 0 <= weight <= 100:
            raise LocalProtocolError(f"priority delay|load and a weight 0-100, not {priority}")
        self.priority: Priority = priority
        self.weight = weight
        self.threshold = threshold
        self.ping = ping
        self.link_delay = link_delay
        self.queues = queues
        self.service = service
        self.in_queue = in_queue
        self.client_queue = client_queue
        self.match_cost = match_cost
        #: trace id -> this broker's state for the session
        self.sessions: dict[int, _Session] = {}
        #: At the source: ad -> (trace id, publications so far) of its open session, and the
        #: ad of each session still collecting TIAs.
        self.open: dict[int, tuple[int, int]] = {}
        self.session_ad: dict[int, int] = {}
        self.selections: list[Selection] = []

    # -- client calls ----------------------------------------------------------------------

    def publish(self, broker: Broker, ad: int, values: Sequence[float | None], now: float) -> int:
        """A publication of the session: routed here with the session header."""
        self.check_publish(broker, ad, values)
        eid = broker.new_id()
        trace_id, k = self.open.get(ad, (eid, 0))
        if k == 0:
            self.session_ad[trace_id] = ad
        self.open[ad] = (trace_id, k + 1)
        msg = Publish(self.OVERLAY, eid, list(values), hdr=[SESSION, trace_id, k])
        self.on_traced(broker, msg, LOCAL, now)
        if k + 1 == self.threshold:
            self._end_session(broker, ad, now)
        return eid

    def start_migration(self, broker: Broker, ad: int, path: Sequence[int], now: float) -> None:
        super().start_migration(broker, ad, path, now)
        if ad in self.open:
            self._end_session(broker, ad, now)  # cut short: clears the state, answers dropped

    # -- hooks -----------------------------------------------------------------------------

    def on_system_control(self, broker: Broker, msg: Control, src: int, now: float) -> None:
        if msg.op == OP_TIR:
            self._tir(broker, msg.ref, src, now)
        elif msg.op == OP_TIA:
            s = self.sessions.get(msg.ref)
            if s is None or s.waiting is None or src not in s.waiting:
                raise RemoteProtocolError(f"unexpected TIA for session {msg.ref} from {src}")
            records = unpack_tia(msg.ints, msg.blob)
            if records.keys() & s.records.keys():
                raise RemoteProtocolError(f"a TIA repeating brokers of session {msg.ref}")
            s.waiting.discard(src)
            s.records.update(records)
            self._maybe_answer(broker, msg.ref, now)
        else:
            raise RemoteProtocolError(f"GRAPE has no control op {msg.op}")

    # -- Phase 1 ---------------------------------------------------------------------------

    def on_traced(self, broker: Broker, msg: Publish, src: int, now: float) -> None:
        hdr = msg.hdr
        if len(hdr) != 3 or hdr[0] != SESSION or not 0 <= hdr[2] < self.threshold:
            raise RemoteProtocolError(f"bad session header {hdr}")
        trace_id, k = hdr[1], hdr[2]
        s = self.sessions.get(trace_id)
        if s is None:
            s = self.sessions[trace_id] = _Session(trace_id, self.threshold, src)
        elif s.up != src or s.waiting is not None:
            raise RemoteProtocolError(f"session {trace_id} traffic from {src} out of order")
        local, targets = self.route(broker, msg, src, now)
        s.log.deliver(trace_id + k, local)
        s.down.update(targets)

    def _end_session(self, broker: Broker, ad: int, now: float) -> None:
        trace_id, _ = self.open.pop(ad)
        self._tir(broker, trace_id, LOCAL, now)

    def _tir(self, broker: Broker, trace_id: int, src: int, now: float) -> None:
        s = self.sessions.get(trace_id)
        if s is None or s.up != src or s.waiting is not None:
            raise RemoteProtocolError(f"unexpected TIR for session {trace_id} from {src}")
        s.waiting = set(s.down)
        for n in sorted(s.down):
            broker.send(n, Control(self.OVERLAY, OP_TIR, trace_id), now)
        self._maybe_answer(broker, trace_id, now)

    def _measure(self, broker: Broker, log: SessionLog, now: float) -> TraceInfo:
        nbrs = broker.neighbours(self.OVERLAY)
        out: dict[Node, float] = {CLIENT: self.client_queue}
        for n in nbrs:
            q = self.queues.sample(broker.id, n, now)[0] if self.queues is not None else 0
            out[n] = q * self.service
        matching = self.match_cost * len(broker.tables(self.OVERLAY).prt)
        return TraceInfo(nbrs, log.bits, log.deliveries, self.in_queue, matching, out)

    def _maybe_answer(self, broker: Broker, trace_id: int, now: float) -> None:
        s = self.sessions[trace_id]
        if s.waiting:
            return
        del self.sessions[trace_id]
        s.records[broker.id] = self._measure(broker, s.log, now)
        if s.up != LOCAL:
            ints, blob = pack_tia(s.records, self.threshold)
            broker.send(s.up, Control(self.OVERLAY, OP_TIA, trace_id, ints, blob), now)
            return
        ad = self.session_ad.pop(trace_id)
        if ad in self.publishers and ad not in self.migrating:
            self._select(broker, ad, trace_id, s.records, now)

    # -- Phase 2 ---------------------------------------------------------------------------

    def _select(
        self, broker: Broker, ad: int, trace_id: int, records: dict[int, TraceInfo], now: float
    ) -> None:
        infos: dict[Node, TraceInfo] = {
            b: replace(i, neighbours=tuple(n for n in i.neighbours if n in records))
            for b, i in records.items()
        }
        cands = (broker.id, *sorted(b for b in records if b != broker.id))
        client = self.publishers[ad]
        pings: dict[Node, float] = {
            c: self.ping(client, c) if self.ping is not None else 0.0 for c in cands
        }
        grape = Grape(infos)
        target = cast(int, grape.select(cands, pings, self.priority, self.weight, self.link_delay))
        self.selections.append(Selection(trace_id, ad, infos, cands, pings, target))
        if target != broker.id:
            adj: dict[int, Sequence[int]] = {
                cast(int, b): cast(tuple[int, ...], i.neighbours) for b, i in infos.items()
            }
            self.start_migration(broker, ad, tree_path(adj, target, broker.id), now)
