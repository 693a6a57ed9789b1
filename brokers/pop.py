"""POP, Publisher Optimistic Placement (Cheung & Jacobsen, CSRG-597): trace publications, keep
per-publisher profile tables, walk to the weighted 1-median of the broker tree.

Theory of operation
-------------------
**Phase 1, tracing.** The publisher's first broker tags a publication with probability
``P_trace = 1 - T/N`` (T: this window's tags for this publisher; N = 50 per W = 60 s), so at most
N are traced per window and a slow publisher gets its first publication traced for sure. A broker
handling a traced publication answers upstream with a TRM carrying its local deliveries plus the
counts of every child TRM, once all children it sent to have answered (at once if it sent to
none). With the counts it updates its **PPTable** for the publisher: one row per neighbour and one
for itself (key: its own id), ``avg <- 0.25*new + 0.75*avg``; the first trace sets the rows, a
neighbour that did not receive the publication counts 0 (BASELINES' reading), a row that first
appears later starts from the 0s it implicitly had.

**Phase 2, the walk.** After ``P_threshold`` = 100 traces, none outstanding, the source sends an
RRM(up = 0, list = []) to itself. Broker b, receiving from u (u = b at the source):

==========================================  ================================================
D(n) = PPTable[n] for n != u, D(u) = up      L = PPTable[b] (local), S = L + sum of D
n* = argmax D (ties: first row)
D(n*) > S - D(n*)                            RRM(S - D(n*), [b] + list) -> n*
else, b is the source                        abort, trace again
else                                         RAM([b] + list) -> source; b is the target
==========================================  ================================================

Moving to n* needs more than half of the weight beyond n*; there, the side back toward b holds
less than half, so the walk never turns back and stops at a weighted 1-median (a broker
minimising sum(deliveries(v) * hops(b, v))).

The paper's example (Fig. 1, an image): at B1 the rows B2 6, B4 3, B5 15 and local 1 send the
RRM to B5 with up 10, then to B6. The text says B6 "discovers 15 subscribers on the link to
B5"; B6 continues only if its subtree holds more than 12.5 of the 25, so B6 must see fewer than
12.5 upstream: 10 in the smallest consistent tree (B5 delivers nothing locally). A slip.
"""

from __future__ import annotations

import math
import random
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

from rangecast.brokers.broker import Broker
from rangecast.brokers.messages import Control, Publish
from rangecast.brokers.migration import Tracing
from rangecast.brokers.tables import LOCAL
from rangecast.dht.errors import LocalProtocolError, RemoteProtocolError

Node = Hashable
Adjacency = Mapping[Node, Sequence[Node]] | Mapping[Node, set[Node]]

NEW_WEIGHT = 0.25
N_TRACE = 50
WINDOW_S = 60.0
P_THRESHOLD = 100


def p_trace(tagged: int, n: int = N_TRACE) -> float:
    """Probability to tag the next publication after ``tagged`` tags in this window."""
    if n <= 0:
        raise LocalProtocolError("N must be positive")
    return max(0.0, 1.0 - tagged / n)


def should_trace(rng: random.Random, tagged: int, n: int = N_TRACE) -> bool:
    return rng.random() < p_trace(tagged, n)


@dataclass(slots=True)
class PPTable:
    """A broker's profile of one publisher: row -> running average of deliveries at and past it.
    ``owner`` is the broker; its row is its own local deliveries."""

    owner: Node
    rows: dict[Node, float] = field(default_factory=dict)
    traces: int = 0

    def record(self, counts: Mapping[Node, float]) -> None:
        """One traced publication: ``counts`` holds the local count (key ``owner``) and the TRM
        counts of the neighbours that received it; every other known row counts 0."""
        for key in self.rows:
            self.rows[key] = NEW_WEIGHT * counts.get(key, 0.0) + (1 - NEW_WEIGHT) * self.rows[key]
        for key, new in counts.items():
            if key not in self.rows:
                # earlier traces saw 0 here; the very first trace sets the value
                self.rows[key] = new if self.traces == 0 else NEW_WEIGHT * new
        self.traces += 1

    @property
    def local(self) -> float:
        return self.rows.get(self.owner, 0.0)

    def clear(self) -> None:
        """After a migration (the MUM clears the table along the path)."""
        self.rows.clear()
        self.traces = 0


@dataclass(slots=True)
class TraceReply:
    """A broker's pending TRM for one traced publication."""

    local: int
    waiting: set[Node]
    counts: dict[Node, int] = field(default_factory=dict)

    def on_trm(self, child: Node, count: int) -> None:
        if child not in self.waiting:
            raise LocalProtocolError(f"no TRM expected from {child!r}")
        self.waiting.discard(child)
        self.counts[child] = count

    @property
    def ready(self) -> bool:
        return not self.waiting

    @property
    def total(self) -> int:
        """The count this broker reports upstream: local plus every child's."""
        return self.local + sum(self.counts.values())


def trace_once(
    adj: Adjacency, source: Node, deliveries: Mapping[Node, int], tables: dict[Node, PPTable]
) -> int:
    """One traced publication on a tree, all TRMs answered: the publication reaches the
    brokers with deliveries at or past them (filter-based routing), each records its PPTable.
    Returns the number of TRMs sent."""
    order: list[tuple[Node, Node | None]] = []
    stack: list[tuple[Node, Node | None]] = [(source, None)]
    while stack:
        b, parent = stack.pop()
        order.append((b, parent))
        stack.extend((n, b) for n in adj[b] if n != parent)
    below: dict[Node, int] = {}
    for b, parent in reversed(order):  # children before parents
        below[b] = deliveries.get(b, 0) + sum(below[n] for n in adj[b] if n != parent)
    trms = 0
    for b, parent in order:
        if parent is not None and below[b] == 0:
            continue  # not reached: no subscription at or past b
        counts: dict[Node, float] = {b: deliveries.get(b, 0)}
        counts.update({n: below[n] for n in adj[b] if n != parent and below[n] > 0})
        tables.setdefault(b, PPTable(b)).record(counts)
        trms += parent is not None
    return trms


# ----------------------------------------------------------------------------------- phase 2
@dataclass(frozen=True, slots=True)
class Forward:
    to: Node
    up: float
    path: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Answer:
    #: the RAM's broker list: the target first, the source last
    path: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Abort:
    pass


Decision = Forward | Answer | Abort


def rrm_step(
    table: PPTable, frm: Node, up: float, path: tuple[Node, ...], is_source: bool
) -> Decision:
    """The RRM rule at ``table.owner`` receiving from ``frm`` (the table above)."""
    b = table.owner
    d = {n: v for n, v in table.rows.items() if n not in (b, frm)}
    if frm != b:
        d[frm] = up
    s = table.local + sum(d.values())
    best = max(d, key=d.__getitem__, default=None)  # first maximal row wins ties
    if best is not None and d[best] > s - d[best]:
        return Forward(best, s - d[best], (b, *path))
    if is_source:
        return Abort()
    return Answer((b, *path))


def walk(source: Node, tables: Mapping[Node, PPTable]) -> tuple[list[Forward], Decision]:
    """Run Phase 2 from ``source``: the RRMs sent and the final decision."""
    frm: Node = source
    up = 0.0
    path: tuple[Node, ...] = ()
    at = source
    sent: list[Forward] = []
    while True:
        dec = rrm_step(tables.get(at, PPTable(at)), frm, up, path, at == source)
        if not isinstance(dec, Forward):
            return sent, dec
        sent.append(dec)
        frm, up, path, at = at, dec.up, dec.path, dec.to


# ------------------------------------------------------------------------- on broker cores
#: Control ops: trace reply, relocation request, relocation answer.
OP_TRM, OP_RRM, OP_RAM = 10, 11, 12
#: Header of a traced publication: [TRACED, ad].
TRACED = 1


class PopStrategy(Tracing):
    """POP on a PADRES tree of broker cores (overlay 0): the source traces publications with
    ``p_trace``; every broker a traced publication reaches answers upstream with a TRM
    (``Control`` TRM, ``ref`` = event id, ``ints`` = [ad, count]) once its children have, and
    records its PPTable; after ``threshold`` traces with none outstanding the source starts the
    RRM walk (``rrm_step`` at each hop: RRM carries ``up`` in ``values`` and the path in
    ``ints``); the RAM returns hop by hop along the path and the source starts the migration
    (``Relocation``). Traced publications are routed here (``Tracing.route``),
    the others by the core."""

    def __init__(
        self,
        rng: random.Random,
        n_trace: int = N_TRACE,
        window: float = WINDOW_S,
        threshold: int = P_THRESHOLD,
    ) -> None:
        super().__init__()
        self.rng = rng
        self.n_trace = n_trace
        self.window = window
        self.threshold = threshold
        #: ad -> this broker's profile of its publisher.
        self.pp: dict[int, PPTable] = {}
        #: event id -> (the neighbour to answer, ad, the pending reply).
        self.pending: dict[int, tuple[int, int, TraceReply]] = {}
        #: At the source: ad -> (window index, tags in it), traces outstanding.
        self.tags: dict[int, tuple[int, int]] = {}
        self.outstanding: dict[int, int] = {}

    def publish(self, broker: Broker, ad: int, values: Sequence[float | None], now: float) -> int:
        w = math.floor(now / self.window)
        win, tagged = self.tags.get(ad, (w, 0))
        if win != w:
            tagged = 0
        if ad in self.migrating or not should_trace(self.rng, tagged, self.n_trace):
            self.tags[ad] = (w, tagged)
            return super().publish(broker, ad, values, now)
        self.tags[ad] = (w, tagged + 1)
        self.check_publish(broker, ad, values)
        self.outstanding[ad] = self.outstanding.get(ad, 0) + 1
        msg = Publish(self.OVERLAY, broker.new_id(), list(values), hdr=[TRACED, ad])
        self.on_traced(broker, msg, LOCAL, now)
        return msg.eid

    def on_migrated(self, broker: Broker, ad: int) -> None:
        t = self.pp.get(ad)
        if t is not None:
            t.clear()

    def on_traced(self, broker: Broker, msg: Publish, src: int, now: float) -> None:
        if len(msg.hdr) != 2 or msg.hdr[0] != TRACED:
            raise RemoteProtocolError(f"bad trace header {msg.hdr}")
        local, targets = self.route(broker, msg, src, now)
        self.pending[msg.eid] = (src, msg.hdr[1], TraceReply(local, set(targets)))
        self._maybe_reply(broker, msg.eid, now)

    def _maybe_reply(self, broker: Broker, eid: int, now: float) -> None:
        up, ad, reply = self.pending[eid]
        if not reply.ready:
            return
        del self.pending[eid]
        counts: dict[Node, float] = {broker.id: reply.local}
        counts.update({n: c for n, c in reply.counts.items() if c > 0})
        self.pp.setdefault(ad, PPTable(broker.id)).record(counts)
        if up >= 0:
            broker.send(up, Control(self.OVERLAY, OP_TRM, eid, [ad, reply.total]), now)
            return
        self.outstanding[ad] -= 1
        table = self.pp[ad]
        if table.traces >= self.threshold and not self.outstanding[ad]:
            self._step(broker, ad, broker.id, 0.0, (), now)

    def _step(
        self, broker: Broker, ad: int, frm: int, up: float, path: tuple[Node, ...], now: float
    ) -> None:
        table = self.pp.get(ad) or PPTable(broker.id)
        is_source = ad in self.publishers and frm == broker.id
        dec = rrm_step(table, frm, up, path, is_source)
        if isinstance(dec, Forward) and (dec.to == frm or dec.to in path):
            # Consistent tables never send the walk back; tables of different ages can (a
            # migration clears them only along its path): the walk ends where it would turn.
            dec = Abort() if is_source else Answer(dec.path)
        if isinstance(dec, Forward):
            hops = [int(x) for x in dec.path]  # type: ignore[call-overload]
            broker.send(int(dec.to), Control(self.OVERLAY, OP_RRM, ad, hops, values=[dec.up]), now)  # type: ignore[call-overload]
        elif isinstance(dec, Answer):
            self._ram(broker, ad, [int(x) for x in dec.path], now)  # type: ignore[call-overload]
        else:
            table.clear()  # the source is the median: trace again

    def _ram(self, broker: Broker, ad: int, path: list[int], now: float) -> None:
        j = path.index(broker.id)
        if j + 1 < len(path):
            broker.send(path[j + 1], Control(self.OVERLAY, OP_RAM, ad, path), now)
        elif ad in self.publishers:
            self.start_migration(broker, ad, path, now)

    def on_system_control(self, broker: Broker, msg: Control, src: int, now: float) -> None:
        if msg.op == OP_TRM:
            entry = self.pending.get(msg.ref)
            if entry is None or len(msg.ints) != 2:
                raise RemoteProtocolError(f"unexpected TRM for {msg.ref}")
            try:
                entry[2].on_trm(src, msg.ints[1])
            except LocalProtocolError as exc:
                raise RemoteProtocolError(str(exc)) from None
            self._maybe_reply(broker, msg.ref, now)
        elif msg.op == OP_RRM:
            up = msg.values[0] if msg.values else None
            if up is None:
                raise RemoteProtocolError("an RRM without its upstream count")
            self._step(broker, msg.ref, src, float(up), tuple(msg.ints), now)
        elif msg.op == OP_RAM:
            self._ram(broker, msg.ref, list(msg.ints), now)
        else:
            raise RemoteProtocolError(f"POP has no control op {msg.op}")
