"""Publications and the flows that serve them: the named states and the sender's scheduler.

Theory of operation
-------------------
**Slices and flows.** A publication is cut into slices (64 KiB by default). A sender keeps a
*flow* per receiver it serves: a cursor over the slice indices, the indices the receiver said it
has, and the slices in flight. A slice is forwarded as soon as it arrives (pipelining). Each
receiver acknowledges every slice (``TopicAck``); a node keeps at most ``send_budget_slices``
slices unacknowledged over all its flows, served round robin (``Sender.pump``), which is what a
sender with a bounded socket buffer does. It keeps the node's outgoing queue short, so heartbeats
are not stuck behind seconds of data, while still filling the link (the budget covers the
bandwidth-delay product). Any one flow has at most ``flow_window_slices`` in flight. Slices whose
acknowledgement does not come within ``2 * stall_s`` are sent again (``Sender.time_out``).

Who opens, resets and closes flows (pulls, offers, stops, path updates) is decided by
``multicast.publications``; this module holds the states and the mechanics.

Flow states
-----------
A flow is always in exactly one ``FlowState``:

==========  =====================================================================================
IDLE        new, or just taken off the ready queue for its turn; placed again at once
PARKED      waits in ``pub.waiting[cursor]`` for that slice (or for the publication's shape)
READY       has its one entry in the ready queue
BLOCKED     ``flow_window_slices`` in flight: an acknowledgement places it again
DRAINING    every slice sent, waits for the last acknowledgements
DONE        served to the end; the receiver is in ``pub.done_for``                        (final)
CLOSED      stopped, dropped by a path update, or dropped with its publication            (final)
==========  =====================================================================================

``Sender.place`` decides where a flow belongs from its data, first match wins: publication's shape
unknown -> PARKED; cursor at the end and nothing to resend -> DONE if nothing is in flight, else
DRAINING; window full -> BLOCKED; a slice to resend, or the slice at the cursor here -> READY;
otherwise -> PARKED. A READY flow stays READY whatever ``place`` decides, DONE apart: it keeps
its turn in the round robin (a receiver that pulls again while it waits its turn is not sent to
the back), and its turn places it again.

===================================  ==================  =====================================
input                                from                to
===================================  ==================  =====================================
open (a pull, a new child, reset)    IDLE, any live      ``place``
its turn in the round robin          READY               IDLE, one slice sent, then ``place``
the slice at the cursor arrives      PARKED              ``place``
the publication's shape is learned   PARKED              ``place``
acknowledgement                      BLOCKED             ``place``
acknowledgement of the last slice    DRAINING, READY     DONE
acknowledgement timeout              any live            ``place`` (slices in flight resent)
stop, path update, pub dropped       any live            CLOSED
===================================  ==================  =====================================

``FLOW_TRANSITIONS`` is the same table as data (which state may follow which); a test holds the
code to it. Entries a flow left behind in the ready queue or in ``pub.waiting`` (it was reset or
closed since) are skipped or placed again harmlessly: ``place`` is idempotent.

Publication states
------------------
==========  ===================================================================================
PENDING     known only from a pull: its shape (slice count, size) is not known yet
RECEIVING   shape known, slices missing
COMPLETE    every slice here (``PublicationComplete`` was emitted)
SOURCE      we published it
DROPPED     forgotten: kept ``retain_s`` idle, given up after ``abandon_s``, or topic left (final)
==========  ===================================================================================

A pull for an unknown publication creates it PENDING; a slice or an offer creates it (PENDING
and at once) RECEIVING, ``publish`` creates it SOURCE. RECEIVING becomes COMPLETE with the last
slice. Any state becomes DROPPED: an incomplete one after ``abandon_s`` without progress, a
complete one or the source once it has no flows and was idle for ``retain_s``, any when we leave
the topic (``PUB_TRANSITIONS``).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from enum import Enum

from rangecast.multicast.messages import TopicData
from rangecast.multicast.rendezvous import Membership
from rangecast.multicast.topic_base import PubKey, TopicContext


class FlowState(Enum):
    IDLE = "idle"
    PARKED = "parked"
    READY = "ready"
    BLOCKED = "blocked"
    DRAINING = "draining"
    DONE = "done"
    CLOSED = "closed"


class PubState(Enum):
    PENDING = "pending"
    RECEIVING = "receiving"
    COMPLETE = "complete"
    SOURCE = "source"
    DROPPED = "dropped"


_IDLE = FlowState.IDLE
_PARKED = FlowState.PARKED
_READY = FlowState.READY
_BLOCKED = FlowState.BLOCKED
_DRAINING = FlowState.DRAINING
_DONE = FlowState.DONE
_CLOSED = FlowState.CLOSED

#: What ``Sender.place`` may decide.
_PLACED = frozenset({_PARKED, _READY, _BLOCKED, _DRAINING, _DONE})
#: Which state may follow which (the transition table of the module docstring).
FLOW_TRANSITIONS: dict[FlowState, frozenset[FlowState]] = {
    _IDLE: _PLACED,
    _PARKED: _PLACED | {_CLOSED},
    _READY: frozenset({_IDLE, _DONE, _CLOSED}),
    _BLOCKED: _PLACED | {_CLOSED},
    _DRAINING: _PLACED | {_CLOSED},
    _DONE: frozenset(),
    _CLOSED: frozenset(),
}
PUB_TRANSITIONS: dict[PubState, frozenset[PubState]] = {
    PubState.PENDING: frozenset({PubState.RECEIVING, PubState.DROPPED}),
    PubState.RECEIVING: frozenset({PubState.COMPLETE, PubState.DROPPED}),
    PubState.COMPLETE: frozenset({PubState.DROPPED}),
    PubState.SOURCE: frozenset({PubState.DROPPED}),
    PubState.DROPPED: frozenset(),
}
#: The states a publication is created in (from a pull, a slice or an offer; by ``publish``).
PUB_INITIAL = frozenset({PubState.PENDING, PubState.SOURCE})
#: States in which a publication has every slice.
HAS_ALL = frozenset({PubState.COMPLETE, PubState.SOURCE})


class Publication:
    """A publication at one node: its slices, who we take it from, whom we serve."""

    __slots__ = (
        "children",
        "count",
        "done_for",
        "flows",
        "gap",
        "key",
        "last_active",
        "last_progress",
        "mode",
        "offered",
        "opened",
        "prefix",
        "pulled",
        "repull_at",
        "senders",
        "size",
        "slices",
        "state",
        "stopped",
        "total",
        "upstream",
        "waiting",
    )

    def __init__(
        self, key: PubKey, mode: int, now: float, state: PubState = PubState.PENDING
    ) -> None:
        self.key = key
        self.mode = mode
        self.state = state
        self.total: int | None = None
        self.size = 0
        self.slices: list[bytes | None] = []
        self.count = 0
        #: Every slice below ``prefix`` is here.
        self.prefix = 0
        #: Whether we opened flows from slice 0 to our children (on our first slice, or as the
        #: publisher once we have a member list), and who our children were when we last looked.
        self.opened = False
        self.children: tuple[bytes, ...] = ()
        self.upstream: bytes | None = None
        #: The flows we serve, by receiver (never a DONE or CLOSED one).
        self.flows: dict[bytes, Flow] = {}
        #: Receivers we served to the end (they have it all), and when we last offered it to
        #: each child that is neither served nor done.
        self.done_for: set[bytes] = set()
        self.offered: dict[bytes, float] = {}
        #: PARKED flows, by the index of the slice they wait for.
        self.waiting: dict[int, list[Flow]] = {}
        self.senders: dict[bytes, int] = {}
        #: When we last sent a TopicStop to each stray sender (rate limit).
        self.stopped: dict[bytes, float] = {}
        self.repull_at = -math.inf
        #: How many slices we had when we last pulled.
        self.pulled = 0
        #: Smoothed time between new slices: a receiver that a busy parent (say, a publisher
        #: serving hundreds point to point) feeds slowly is not taken for a stalled one.
        self.gap = 0.0
        self.last_progress = now
        self.last_active = now

    def init(self, total: int, size: int) -> None:
        """The shape is known (``total`` slices, ``size`` bytes)."""
        self.total = total
        self.size = size
        self.slices = [None] * total


class Flow:
    """What a sender does for one receiver of one publication."""

    __slots__ = ("cursor", "dest", "inflight", "last_ack", "pub", "retx", "skip", "state")

    def __init__(
        self, pub: Publication, dest: bytes, cursor: int, skip: Iterable[int], now: float
    ) -> None:
        self.pub = pub
        self.dest = dest
        self.state = _IDLE
        self.cursor = cursor
        self.skip = set(skip)
        self.inflight: set[int] = set()
        #: Slices sent whose acknowledgement never came: sent again before the cursor moves on.
        self.retx: set[int] = set()
        self.last_ack = now


class Sender:
    """One node's flows over all its publications: the ready queue and the send budget."""

    __slots__ = ("_ctx", "_topics", "inflight", "ready")

    def __init__(self, ctx: TopicContext, topics: Mapping[str, Membership]) -> None:
        self._ctx = ctx
        #: The topics we are attached to (``Members.topics``): every slice carries our list
        #: version of its topic.
        self._topics = topics
        self.ready: deque[Flow] = deque()
        #: Slices unacknowledged over all flows.
        self.inflight = 0

    def open(
        self, pub: Publication, dest: bytes, cursor: int, skip: Iterable[int], now: float
    ) -> None:
        """Serve ``dest`` from ``cursor`` on, except ``skip``. A flow we already have for it is
        reset in place: it keeps its turn in the round robin (a receiver that pulls again while
        it waits its turn must not be sent to the back), the slices it has in flight are not
        resent (they are on their way) and its acknowledgement timeout keeps running."""
        f = pub.flows.get(dest)
        if f is None:
            f = pub.flows[dest] = Flow(pub, dest, cursor, skip, now)
        else:
            f.cursor = cursor
            f.skip = set(skip)
            f.skip |= f.inflight
            f.retx = {k for k in f.retx if k >= cursor and k not in f.skip}
        self.place(f)

    def close(self, f: Flow, state: FlowState = _CLOSED) -> None:
        f.state = state
        self.inflight -= len(f.inflight)
        f.inflight.clear()
        if f.pub.flows.get(f.dest) is f:
            del f.pub.flows[f.dest]

    def _finish(self, f: Flow) -> None:
        f.pub.done_for.add(f.dest)
        self.close(f, _DONE)

    def wake(self, flows: Iterable[Flow]) -> None:
        """Place parked flows again (the slice they waited for, or the shape, is here)."""
        for f in flows:
            if f.state is not _DONE and f.state is not _CLOSED:
                self.place(f)

    def place(self, f: Flow) -> None:
        """Put a flow where it belongs (the decision of the module docstring)."""
        pub = f.pub
        total = pub.total
        queued = f.state is _READY
        if total is None:
            parked = pub.waiting.setdefault(f.cursor, [])
            if f not in parked:
                parked.append(f)
            f.state = _PARKED
            return
        skip = f.skip
        while f.cursor < total and f.cursor in skip:
            skip.discard(f.cursor)
            f.cursor += 1
        if f.cursor >= total and not f.retx:
            if not f.inflight:
                self._finish(f)  # everything sent and acknowledged
            elif not queued:
                f.state = _DRAINING
            return
        if len(f.inflight) >= self._ctx.cfg.flow_window_slices:
            if not queued:
                f.state = _BLOCKED  # its next acknowledgement places it again
            return
        if queued:
            return  # placed again when its turn comes
        if f.retx or pub.slices[f.cursor] is not None:
            f.state = _READY
            self.ready.append(f)
        else:
            pub.waiting.setdefault(f.cursor, []).append(f)
            f.state = _PARKED

    def pump(self, now: float) -> None:
        """Send slices, round robin over the ready flows, while the send budget allows."""
        ctx = self._ctx
        ready = self.ready
        budget = ctx.cfg.send_budget_slices
        stats = ctx.stats
        while self.inflight < budget and ready:
            f = ready.popleft()
            if f.state is not _READY:
                continue  # finished or closed while it waited its turn
            f.state = _IDLE
            pub = f.pub
            assert pub.total is not None  # flows are only queued once it is known
            if f.retx:
                k = f.retx.pop()
            elif f.cursor < pub.total and pub.slices[f.cursor] is not None:
                k = f.cursor
            else:
                self.place(f)
                continue
            data = pub.slices[k]
            assert data is not None  # a slice we sent once, or checked just now
            topic, publisher, pid = pub.key
            m = self._topics.get(topic)
            version = m.version if m is not None else 0
            ctx.send(
                f.dest,
                TopicData(topic, publisher, pid, k, pub.total, pub.size, pub.mode, version, data),
            )
            stats.slices_sent += 1
            f.inflight.add(k)
            self.inflight += 1
            f.last_ack = now  # last activity: the ack timeout counts from the newest send
            if k == f.cursor:
                f.cursor = k + 1
            pub.last_active = now
            self.place(f)

    def ack(self, f: Flow, index: int, now: float) -> None:
        """``f``'s receiver acknowledged slice ``index``."""
        if index not in f.inflight:
            return  # for a flow that was reset or stopped since
        f.inflight.discard(index)
        self.inflight -= 1
        f.last_ack = now
        total = f.pub.total
        if f.state is _BLOCKED:
            self.place(f)
        elif total is not None and f.cursor >= total and not f.inflight and not f.retx:
            self._finish(f)
        self.pump(now)

    def time_out(self, pub: Publication, now: float) -> None:
        """A flow whose acks stopped coming (lost slices or acks, or a receiver that died and
        is not yet off the list) gives its budget back and sends those slices again."""
        limit = 2 * self._ctx.cfg.stall_s
        for f in list(pub.flows.values()):
            if f.inflight and now - f.last_ack > limit:
                self.inflight -= len(f.inflight)
                f.retx |= f.inflight
                f.inflight.clear()
                self.place(f)
