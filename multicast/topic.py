"""LBDD topic mode: a topic's members found through the DHT, its data spread down an LBDD tree.

Theory of operation
-------------------
``TopicNode`` is a sans-IO state machine on top of a DHT node (it is the node's
``Application``). Its inputs are the topic messages (``receive(msg, src, now)``), routed payloads
(the ``deliver`` upcall), ``handle_timer(now)`` and the API (``join``, ``leave``, ``publish``,
``publish_slices``); its outputs are ``take_messages()``, ``get_timer()`` and the application
events in ``take_events()``. ``TopicPeer`` bundles it with its Pastry node into the one core a
driver (the simulator, the runtime) talks to. Nothing here reads a clock or the global random
generator.

**Rendezvous and membership.** A topic's rendezvous is the DHT root of
``hash_key("topic:" + name)``. A node joins by routing ``TopicJoin`` to that key; the rendezvous
keeps the list of receivers (and of publishers that only need the list) and pushes the full list
of receivers, with a version number, to everyone (``TopicMembers``). Pushes are batched
(``push_delay_s``): a burst of joins costs one push, not one per join.

**Heartbeats (member to rendezvous only).** Every ``heartbeat_s`` each member sends a small
``TopicHeartbeat`` straight to the rendezvous, which answers ``TopicBeat`` (or the list, if the
member's version is old). That is 2n small messages per period, where the paper's all-to-all
heartbeats cost n^2; the price is that failures are detected at one place, which is enough
because the member list lives there anyway. A member not heard from for ``fail_after_s`` is
removed (path update: the next push, and every node recomputes its tree); ``leave`` is announced
with ``TopicLeave``. A member that does not hear from the rendezvous for ``fail_after_s`` routes
its join again: it lands on the key's new root, which rebuilds the lists from the re-joins (soft
state). A rendezvous taking over like that waits ``fail_after_s`` before its first push, so that
it does not push a half-rebuilt list; meanwhile the members keep using the old one. A rendezvous
that finds it is no longer the key's root hands its lists over (``TopicHandoff``, routed).
Versions only grow: joins and heartbeats carry the member's version and a digest of its list, and
a rendezvous never pushes a version at or below one it has seen; the digest catches two
incarnations of the rendezvous that used the same number for different lists. Each join draws a
fresh *nonce*, listed with the member (``TopicMember``): a node that left and joined again is a
new member to everyone even if no list without it was ever pushed. Heartbeats are authoritative
about the member's role (receiver or publisher only), which corrects a join that arrived late.

**Trees.** Every node computes the LBDD tree locally from its member list
(``multicast.lbdd.build_tree``, rooted at the publication's publisher); the publication's mode,
carried by every slice, says which rule (near-bucket merge, the paper's exact rule, or a star for
the point-to-point baseline), so all nodes with the same list build the same tree.

**Slices and flows.** A publication is cut into slices (64 KiB by default). A sender keeps a
*flow* per receiver it serves: a cursor over the slice indices, the indices the receiver said it
has, and the slices in flight. A slice is forwarded as soon as it arrives (pipelining). Each
receiver acknowledges every slice (``TopicAck``); a node keeps at most ``send_budget_slices``
slices unacknowledged over all its flows, served round robin, which is what a sender with a
bounded socket buffer does. It keeps the node's outgoing queue short, so heartbeats are not stuck
behind seconds of data, while still filling the link (the budget covers the bandwidth-delay
product).

**Who serves whom (receiver-driven).** When a node first learns of a publication (from its first
slice), it opens flows from slice 0 to its own children. Beyond that, a node serves exactly the
receivers that *pulled* it: a ``TopicPull`` says "I have [0, have) and these extra slices" and
resets the puller's flow at the sender. A receiver pulls its parent whenever its parent changes
(a path update after a failure, a leave or a join), when no slice has arrived for ``stall_s``
(a lost pull, a parent that died before the failure was noticed), and when its parent sends it a
slice it already has. It sends ``TopicStop`` to a node that sends it slices but is not its
parent. A node that receives a pull for a publication it has not seen yet pulls its own parent
in turn. A receiver cannot pull for a publication it has never heard of, so a parent tells a
child that became its child in a path update (``TopicOffer``), and repeats the offer every
``stall_s`` to any child it neither serves nor has served to the end (lost offers, views that
changed under it); a child that has it all answers with a pull that says so. Slices whose
acknowledgement does not come within ``2 * stall_s`` are sent again. Together: after the last
path update every live receiver has pulled its parent in the final tree, every parent serves
everything it has that the child lacks, and by induction down the tree every live receiver gets
every slice. Slices that an orphaned subtree missed while its parent was dead are recovered
this way, from the new parent, starting where each orphan stopped.

**Exactly once.** A receiver delivers each slice index once (``SliceDelivered``) and
``PublicationComplete`` once; a slice that arrives again (in flight from an old parent when the
tree changed, or resent after a lost acknowledgement) is acknowledged and counted in
``stats.duplicates``, not delivered. After a path update that costs at most the old parent's
unacknowledged slices per re-parented receiver; without failures, membership changes or loss
no slice crosses the network twice.

**Late members.** A member that joins while a publication is under way is served by its parent
from slice 0 (a new member has nothing). Nodes keep a publication's slices for ``retain_s``
after the last activity, so a member joining within that time still gets it.

Whose fault: our own misuse (joining a topic twice, leaving one we are not in, an oversized
slice, an unknown mode) raises ``LocalProtocolError`` at the call. A malformed or inconsistent
message from the network is counted in ``stats``, logged and dropped; it never raises out of the
core.
"""

from __future__ import annotations

import heapq
import logging
import math
import random
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dht.core import Application, DhtCore, State
from dht.errors import LocalProtocolError, RemoteProtocolError, WireError
from dht.routing import Peer
from dht.wire import Message, codec
from multicast.lbdd import SOURCE, build_tree
from multicast.messages import (
    MAX_EXTRA,
    MAX_MEMBERS,
    MAX_SLICE_BYTES,
    MAX_SLICES,
    MODE_LBDD,
    MODE_STAR,
    MODES,
    TOPIC_MESSAGES,
    TopicAck,
    TopicBeat,
    TopicData,
    TopicHandoff,
    TopicHeartbeat,
    TopicJoin,
    TopicLeave,
    TopicMember,
    TopicMembers,
    TopicOffer,
    TopicPull,
    TopicStop,
    list_digest,
)

log = logging.getLogger("rangecast.multicast.topic")

#: A publication: (topic, publisher address, publication id).
PubKey = tuple[str, bytes, int]


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """Knobs of the topic mode. Members of a topic should agree on the timing ones."""

    #: Slice size ``publish`` cuts data into (the paper: 64 KB).
    slice_bytes: int = 64 * 1024
    #: Member-to-rendezvous heartbeat period (also the period of every other check).
    heartbeat_s: float = 1.0
    #: Silence after which the rendezvous drops a member, or a member gives up its rendezvous.
    fail_after_s: float = 4.0
    #: The rendezvous batches membership changes for this long before pushing the list.
    push_delay_s: float = 0.25
    #: A join that got no answer is routed again after this long.
    join_retry_s: float = 3.0
    #: Slices a node may have unacknowledged over all its flows (its send buffer).
    send_budget_slices: int = 64
    #: ... and to any one receiver (bounds what a receiver gets twice when it changes parent:
    #: the old parent's unacknowledged slices). 48 x 64 KiB covers 50 Mbit/s at 500 ms RTT.
    flow_window_slices: int = 48
    #: A receiver that got no new slice for this long pulls its parent again.
    stall_s: float = 2.0
    #: Slices are kept this long after a publication's last activity, to serve late pulls.
    retain_s: float = 60.0
    #: An incomplete publication with no progress for this long is given up.
    abandon_s: float = 300.0
    #: ``PublicationComplete`` carries the assembled payload up to this size (else None).
    assemble_limit_bytes: int = 16 * 1024 * 1024

    def __post_init__(self) -> None:
        if not 1 <= self.slice_bytes <= MAX_SLICE_BYTES:
            raise LocalProtocolError(f"slice_bytes must be in [1, {MAX_SLICE_BYTES}]")
        if not 0 < self.heartbeat_s < self.fail_after_s:
            raise LocalProtocolError("need 0 < heartbeat_s < fail_after_s")
        if self.push_delay_s < 0 or self.join_retry_s <= 0 or self.stall_s <= 0:
            raise LocalProtocolError("push_delay_s >= 0, join_retry_s > 0 and stall_s > 0")
        if self.send_budget_slices < 1 or self.flow_window_slices < 1:
            raise LocalProtocolError("send_budget_slices and flow_window_slices must be >= 1")
        if self.retain_s < 0 or self.abandon_s <= self.stall_s:
            raise LocalProtocolError("retain_s >= 0 and abandon_s > stall_s")


# ------------------------------------------------------------------------ application events


@dataclass(frozen=True, slots=True)
class MembershipChanged:
    """Our member list of ``topic`` became version ``version`` (receivers' addresses)."""

    topic: str
    version: int
    members: tuple[bytes, ...]
    now: float


@dataclass(frozen=True, slots=True)
class SliceDelivered:
    """Slice ``index`` of ``total`` of a publication arrived (once per index)."""

    topic: str
    publisher: bytes
    pid: int
    index: int
    total: int
    data: bytes
    now: float


@dataclass(frozen=True, slots=True)
class PublicationComplete:
    """Every slice of a publication has arrived. ``payload``: the whole data when it is at
    most ``assemble_limit_bytes``, else None (the slices came in ``SliceDelivered``)."""

    topic: str
    publisher: bytes
    pid: int
    total: int
    size: int
    payload: bytes | None
    now: float


@dataclass(frozen=True, slots=True)
class PublicationAbandoned:
    """A publication made no progress for ``abandon_s`` (its publisher is gone) and was
    dropped with ``received`` of ``total`` slices."""

    topic: str
    publisher: bytes
    pid: int
    received: int
    total: int
    now: float


TopicEvent = MembershipChanged | SliceDelivered | PublicationComplete | PublicationAbandoned


@dataclass(frozen=True, slots=True)
class TreeView:
    """One node's own view of a publication's tree: from its member list of ``version``."""

    version: int
    parent: bytes | None
    children: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class PubInfo:
    """Inspection of a publication at one node."""

    received: int
    total: int | None
    complete: bool
    upstream: bytes | None
    #: How many new slices came from each sender (the tree actually used).
    senders: dict[bytes, int]
    #: Receivers this node is serving now.
    serving: tuple[bytes, ...]


@dataclass(slots=True)
class TopicStats:
    malformed: int = 0
    dropped: int = 0
    slices_received: int = 0
    #: Slices that arrived again (in flight from an old parent when the tree changed).
    duplicates: int = 0
    slices_sent: int = 0
    pulls_sent: int = 0
    stops_sent: int = 0
    pushes: int = 0
    by_reason: dict[str, int] = field(default_factory=dict)

    def drop(self, reason: str) -> None:
        self.dropped += 1
        self.by_reason[reason] = self.by_reason.get(reason, 0) + 1


# ----------------------------------------------------------------------------- internal state


class _Membership:
    """Our attachment to one topic: our role and our copy of the member list."""

    __slots__ = (
        "addrs",
        "asked",
        "digest",
        "has_list",
        "join_sent",
        "key",
        "last_contact",
        "nonce",
        "order",
        "receiver",
        "rendezvous",
        "topic",
        "trees",
        "version",
    )

    def __init__(self, topic: str, key: int, receiver: bool) -> None:
        self.topic = topic
        self.key = key
        self.receiver = receiver
        self.version = 0
        self.has_list = False
        #: Receivers' addresses in list order, and the same as a set.
        self.order: tuple[bytes, ...] = ()
        #: Each receiver's join nonce (``TopicMember``).
        self.addrs: dict[bytes, int] = {}
        self.digest = list_digest(())
        #: Our own join nonce, drawn by ``_attach`` (and again when a publisher joins).
        self.nonce = 0
        self.rendezvous: bytes | None = None
        self.last_contact = -math.inf
        self.join_sent = -math.inf
        #: Last version we asked the rendezvous about (rate-limits requests for the list).
        self.asked = -1
        #: (publisher, mode) -> (parent, children), for the current version.
        self.trees: dict[tuple[bytes, int], tuple[bytes | None, tuple[bytes, ...]]] = {}


class _Rendezvous:
    """The lists we keep as the rendezvous of a topic."""

    __slots__ = (
        "changed",
        "digest",
        "heard",
        "key",
        "members",
        "publishers",
        "push_at",
        "settle_until",
        "topic",
        "version",
    )

    def __init__(self, topic: str, key: int) -> None:
        self.topic = topic
        self.key = key
        self.version = 0
        self.members: dict[bytes, TopicMember] = {}
        self.publishers: dict[bytes, TopicMember] = {}
        self.heard: dict[bytes, float] = {}
        self.changed = False
        #: Digest of the list pushed as ``version``.
        self.digest = list_digest(())
        self.push_at: float | None = None
        self.settle_until = -math.inf


class _Pub:
    """A publication at one node: its slices, who we take it from, whom we serve."""

    __slots__ = (
        "children",
        "complete",
        "count",
        "done_for",
        "flows",
        "gap",
        "is_source",
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
        "stopped",
        "total",
        "upstream",
        "waiting",
    )

    def __init__(self, key: PubKey, mode: int, now: float) -> None:
        self.key = key
        self.mode = mode
        self.total: int | None = None
        self.size = 0
        self.slices: list[bytes | None] = []
        self.count = 0
        #: Every slice below ``prefix`` is here.
        self.prefix = 0
        self.complete = False
        self.is_source = False
        #: Whether we opened flows from slice 0 to our children (on our first slice, or as the
        #: publisher once we have a member list), and who our children were when we last looked.
        self.opened = False
        self.children: tuple[bytes, ...] = ()
        self.upstream: bytes | None = None
        self.flows: dict[bytes, _Flow] = {}
        #: Receivers we served to the end (they have it all), and when we last offered it to
        #: each child that is neither served nor done.
        self.done_for: set[bytes] = set()
        self.offered: dict[bytes, float] = {}
        #: Flows whose cursor is at a slice we do not have yet, by that index.
        self.waiting: dict[int, list[_Flow]] = {}
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
        self.total = total
        self.size = size
        self.slices = [None] * total


class _Flow:
    """What a sender does for one receiver of one publication."""

    __slots__ = (
        "blocked",
        "cursor",
        "dead",
        "dest",
        "inflight",
        "last_ack",
        "pub",
        "queued",
        "retx",
        "skip",
    )

    def __init__(self, pub: _Pub, dest: bytes, cursor: int, skip: Iterable[int], now: float):
        self.pub = pub
        self.dest = dest
        self.cursor = cursor
        self.skip = set(skip)
        self.inflight: set[int] = set()
        #: Slices sent whose acknowledgement never came: sent again before the cursor moves on.
        self.retx: set[int] = set()
        self.dead = False
        self.queued = False
        #: Waiting for an acknowledgement: its window is full.
        self.blocked = False
        self.last_ack = now


_T_TICK, _T_PUSH = 0, 1


def topic_key(node: DhtCore, topic: str) -> int:
    return node.space.hash_key("topic:" + topic)


class TopicNode(Application):
    def __init__(self, dht: DhtCore, rng: random.Random, config: TopicConfig | None = None) -> None:
        if not isinstance(rng, random.Random):
            raise LocalProtocolError("rng must be a seeded random.Random")
        self.dht = dht
        dht.app = self
        self.rng = rng
        self.cfg = config or TopicConfig()
        self.me = dht.me.addr
        self.stats = TopicStats()
        self._codec = codec()
        self._out: list[tuple[bytes, Message]] = []
        self._events: list[TopicEvent] = []
        self._local: deque[Message] = deque()
        self._draining = False
        self._topics: dict[str, _Membership] = {}
        self._hosted: dict[str, _Rendezvous] = {}
        self._pubs: dict[PubKey, _Pub] = {}
        #: Publications dropped after retention or abandonment, until when to ignore them.
        self._done: dict[PubKey, float] = {}
        self._ready: deque[_Flow] = deque()
        self._inflight = 0
        self._timers: list[tuple[float, int, int, str]] = []
        self._seq = 0
        self._tick_at: float | None = None

    def __repr__(self) -> str:
        return f"TopicNode({self.me.hex()})"

    # -------------------------------------------------------------------------------- outputs

    def take_messages(self) -> list[tuple[bytes, Message]]:
        out = self._out
        self._out = []
        return out

    def take_events(self) -> list[TopicEvent]:
        out = self._events
        self._events = []
        return out

    def get_timer(self) -> float | None:
        return self._timers[0][0] if self._timers else None

    # --------------------------------------------------------------------------------- inputs

    def receive(self, msg: Message, src: bytes, now: float) -> None:
        """A topic message from the transport address ``src``."""
        self._handle(msg, src, now)
        self._drain(now)

    def handle_timer(self, now: float) -> None:
        timers = self._timers
        while timers and timers[0][0] <= now:
            _, _, kind, topic = heapq.heappop(timers)
            try:
                if kind == _T_TICK:
                    self._tick_at = None
                    self._on_tick(now)
                else:
                    self._on_push_timer(topic, now)
            except RemoteProtocolError as exc:  # remote data met late; never escapes the core
                self.stats.malformed += 1
                log.debug("%r: dropped bad state from the network: %s", self, exc)
        self._drain(now)

    def deliver(self, key: int, payload: bytes, origin: Peer, hops: int, now: float) -> None:
        try:
            msg = self._codec.decode(payload)
        except WireError as exc:
            self.stats.malformed += 1
            log.debug("%r: dropped malformed routed payload: %s", self, exc)
            return
        handler = _ROUTED.get(type(msg))
        if handler is None:
            self.stats.malformed += 1
            return
        try:
            if key != topic_key(self.dht, msg.topic):  # type: ignore[attr-defined]
                raise RemoteProtocolError("routed topic message to the wrong key")
            handler(self, msg, origin, now)
        except RemoteProtocolError as exc:
            self.stats.malformed += 1
            log.debug("%r: dropped bad routed %s: %s", self, type(msg).__name__, exc)
        self._drain(now)

    def ready(self, now: float) -> None:
        # Joins asked for before the DHT node could route go out now.
        for m in self._topics.values():
            if m.rendezvous is None:
                self._send_join(m, now)
        self._drain(now)

    # ------------------------------------------------------------------------------ API calls

    def join(self, topic: str, now: float) -> None:
        """Become a receiver of ``topic``. ``MembershipChanged`` follows when the list comes."""
        _check_topic(topic)
        m = self._topics.get(topic)
        if m is not None:
            if m.receiver:
                raise LocalProtocolError(f"already a member of topic {topic!r}")
            m.receiver = True  # a publisher becomes a receiver as well, a new one
            m.nonce = self.rng.getrandbits(63)
        else:
            m = self._attach(topic, receiver=True, now=now)
        self._send_join(m, now)
        self._drain(now)

    def attach(self, topic: str, now: float) -> None:
        """Get ``topic``'s member list without receiving its data (a publisher that wants the
        list before it publishes; ``publish`` attaches by itself otherwise)."""
        _check_topic(topic)
        if topic in self._topics:
            raise LocalProtocolError(f"already attached to topic {topic!r}")
        self._send_join(self._attach(topic, receiver=False, now=now), now)
        self._drain(now)

    def leave(self, topic: str, now: float) -> None:
        """Stop receiving ``topic`` (and publishing on it): announced to the rendezvous."""
        m = self._topics.pop(topic, None)
        if m is None:
            raise LocalProtocolError(f"not attached to topic {topic!r}")
        bye = TopicLeave(topic, self.dht.me.handle)
        if m.rendezvous is not None:
            self._send(m.rendezvous, bye)
        else:
            self._route(m.key, bye, now)
        for key in [k for k in self._pubs if k[0] == topic]:
            self._drop_pub(self._pubs[key], now, remember=False)
        self._drain(now)

    def publish(self, topic: str, data: bytes, now: float, *, mode: int = MODE_LBDD) -> int:
        """Publish ``data`` on ``topic`` in ``slice_bytes`` slices; returns the publication id.
        A node that is not a member attaches as a publisher (it gets the member list but no
        data); the publication starts once it has the list."""
        size = self.cfg.slice_bytes
        view = memoryview(data)
        slices = [bytes(view[i : i + size]) for i in range(0, len(view), size)] or [b""]
        return self.publish_slices(topic, slices, now, mode=mode)

    def publish_slices(
        self, topic: str, slices: Sequence[bytes], now: float, *, mode: int = MODE_LBDD
    ) -> int:
        """Publish data already cut into slices (no copy: the bytes objects are sent as they
        are). Every slice must be at most ``MAX_SLICE_BYTES``."""
        _check_topic(topic)
        if mode not in MODES:
            raise LocalProtocolError(f"unknown dissemination mode {mode!r}")
        if not 1 <= len(slices) <= MAX_SLICES:
            raise LocalProtocolError(f"a publication has 1 to {MAX_SLICES} slices")
        size = 0
        for s in slices:
            if not isinstance(s, bytes) or len(s) > MAX_SLICE_BYTES:
                raise LocalProtocolError(f"slices must be bytes of at most {MAX_SLICE_BYTES}")
            size += len(s)
        m = self._topics.get(topic)
        if m is None:
            m = self._attach(topic, receiver=False, now=now)
            self._send_join(m, now)
        pid = self.rng.getrandbits(63)
        key = (topic, self.me, pid)
        pub = _Pub(key, mode, now)
        pub.init(len(slices), size)
        pub.slices = list(slices)
        pub.count = pub.prefix = len(slices)
        pub.complete = pub.is_source = True
        self._pubs[key] = pub
        if m.has_list:
            self._open_children(m, pub, now)
        self._pump(now)
        self._drain(now)
        return pid

    # ----------------------------------------------------------------------------- inspection

    def topics(self) -> list[str]:
        return list(self._topics)

    def members(self, topic: str) -> tuple[int, tuple[bytes, ...]]:
        """(version, receivers' addresses) of our list of ``topic``."""
        m = self._topics.get(topic)
        if m is None:
            raise LocalProtocolError(f"not attached to topic {topic!r}")
        return m.version, m.order

    def rendezvous(self, topic: str) -> bytes | None:
        m = self._topics.get(topic)
        return None if m is None else m.rendezvous

    def hosts(self, topic: str) -> bool:
        """Are we the rendezvous of ``topic``?"""
        return topic in self._hosted

    def hosted_members(self, topic: str) -> tuple[int, tuple[bytes, ...]]:
        r = self._hosted.get(topic)
        if r is None:
            raise LocalProtocolError(f"not the rendezvous of topic {topic!r}")
        return r.version, tuple(r.members)

    def tree_view(self, topic: str, publisher: bytes, mode: int = MODE_LBDD) -> TreeView:
        """Our parent and children in the tree rooted at ``publisher``, from our own list."""
        m = self._topics.get(topic)
        if m is None:
            raise LocalProtocolError(f"not attached to topic {topic!r}")
        if mode not in MODES:
            raise LocalProtocolError(f"unknown dissemination mode {mode!r}")
        parent, children = self._tree(m, publisher, mode)
        return TreeView(m.version, parent, children)

    def publication(self, topic: str, publisher: bytes, pid: int) -> PubInfo | None:
        pub = self._pubs.get((topic, publisher, pid))
        if pub is None:
            return None
        return PubInfo(
            pub.count, pub.total, pub.complete, pub.upstream, dict(pub.senders), tuple(pub.flows)
        )

    # -------------------------------------------------------------------------------- helpers

    def _send(self, addr: bytes, msg: Message) -> None:
        if addr == self.me:
            self._local.append(msg)  # to ourselves (e.g. the rendezvous is also a member)
        else:
            self._out.append((addr, msg))

    def _drain(self, now: float) -> None:
        """Handle the messages we sent ourselves, after the input that produced them."""
        if self._draining:
            return
        self._draining = True
        try:
            while self._local:
                self._handle(self._local.popleft(), self.me, now)
        finally:
            self._draining = False

    def _handle(self, msg: Message, src: bytes, now: float) -> None:
        handler = _DIRECT.get(type(msg))
        if handler is None:
            self.stats.drop("not a topic message")
            return
        try:
            handler(self, msg, src, now)
        except RemoteProtocolError as exc:
            self.stats.malformed += 1
            log.debug("%r: dropped bad %s from %r: %s", self, type(msg).__name__, src, exc)

    def _route(self, key: int, msg: Message, now: float) -> bool:
        if self.dht.state is not State.READY:
            return False  # the tick or ``ready`` tries again
        self.dht.route(key, self._codec.encode(msg), now)
        return True

    def _push_timer(self, deadline: float, kind: int, topic: str) -> None:
        self._seq += 1
        heapq.heappush(self._timers, (deadline, self._seq, kind, topic))

    def _ensure_tick(self, now: float) -> None:
        if self._tick_at is None:
            # Desynchronised: a swarm started together does not heartbeat in lock-step.
            self._tick_at = now + self.rng.uniform(0.0, self.cfg.heartbeat_s)
            self._push_timer(self._tick_at, _T_TICK, "")

    def _attach(self, topic: str, *, receiver: bool, now: float) -> _Membership:
        m = _Membership(topic, topic_key(self.dht, topic), receiver)
        m.nonce = self.rng.getrandbits(63)
        self._topics[topic] = m
        self._ensure_tick(now)
        return m

    def _send_join(self, m: _Membership, now: float) -> None:
        me = self.dht.me.handle
        join = TopicJoin(m.topic, me, m.nonce, m.receiver, m.version, m.digest)
        if self._route(m.key, join, now):
            m.join_sent = now

    def _heartbeat(self, m: _Membership) -> None:
        if m.rendezvous is not None:
            me = self.dht.me.handle
            hb = TopicHeartbeat(m.topic, me, m.nonce, m.receiver, m.version, m.digest)
            self._send(m.rendezvous, hb)

    # ------------------------------------------------------------------------ the rendezvous

    def _host(self, topic: str, key: int, version: int, now: float) -> _Rendezvous:
        r = self._hosted.get(topic)
        if r is None:
            r = _Rendezvous(topic, key)
            if version > 0:
                # A takeover: the old rendezvous is gone and members are re-joining. Wait for
                # them before pushing, rather than push a list that lacks most of them.
                r.settle_until = now + self.cfg.fail_after_s
            self._hosted[topic] = r
            self._ensure_tick(now)
        return r

    def _admit(
        self,
        r: _Rendezvous,
        member: TopicMember,
        receiver: bool,
        version: int,
        digest: int | None,
        now: float,
    ) -> None:
        Peer.from_handle(self.dht.space, member.handle)  # a wrong id length: the sender's fault
        addr = member.handle.addr
        if not addr:
            raise RemoteProtocolError("member with an empty address")
        self._compare(r, version, digest, now)
        r.heard[addr] = now
        if receiver:
            known = r.members.get(addr)
            if known is None or known.nonce != member.nonce:  # new, or joined again
                if known is None and len(r.members) >= MAX_MEMBERS:
                    self.stats.drop("topic full")
                    r.heard.pop(addr, None)
                    return
                r.members[addr] = member
                r.publishers.pop(addr, None)
                r.changed = True
        else:
            if r.members.pop(addr, None) is not None:
                r.changed = True  # a receiver that left and came back as a publisher only
            elif addr not in r.publishers and len(r.publishers) >= MAX_MEMBERS:
                self.stats.drop("topic full")
                r.heard.pop(addr, None)
                return
            r.publishers[addr] = member
        if not r.changed and now >= r.settle_until:
            self._send(addr, TopicMembers(r.topic, r.version, list(r.members.values())))
            return
        if r.changed:
            self._schedule_push(r, now)
        # The list comes with the next push; meanwhile this tells the member where we are, so
        # it heartbeats us instead of routing its join again.
        self._send(addr, TopicBeat(r.topic, r.version))

    def _compare(self, r: _Rendezvous, version: int, digest: int | None, now: float) -> None:
        """A member reports the list it holds. If it is newer than ours, or the same version
        but a different list (an earlier incarnation of the rendezvous used that number), our
        next push must carry a higher version than the member's."""
        if version > r.version or (
            version == r.version and digest is not None and digest != r.digest
        ):
            r.version = version
            r.changed = True
            self._schedule_push(r, now)

    def _schedule_push(self, r: _Rendezvous, now: float) -> None:
        if r.push_at is None:
            r.push_at = max(now + self.cfg.push_delay_s, r.settle_until)
            self._push_timer(r.push_at, _T_PUSH, r.topic)

    def _on_push_timer(self, topic: str, now: float) -> None:
        r = self._hosted.get(topic)
        if r is None or r.push_at is None or r.push_at > now:
            return
        r.push_at = None
        if r.changed:
            r.version += 1
            r.changed = False
            r.digest = list_digest((a, tm.nonce) for a, tm in r.members.items())
        self.stats.pushes += 1
        msg = TopicMembers(topic, r.version, list(r.members.values()))
        for addr in r.members:
            self._send(addr, msg)
        for addr in r.publishers:
            self._send(addr, msg)

    def _on_join(self, msg: TopicJoin, origin: Peer, now: float) -> None:
        if origin.addr != msg.member.addr:
            raise RemoteProtocolError("TopicJoin for another node")
        r = self._host(msg.topic, topic_key(self.dht, msg.topic), msg.version, now)
        member = TopicMember(msg.member, msg.nonce)
        self._admit(r, member, msg.receiver, msg.version, msg.digest, now)

    def _on_leave(self, msg: TopicLeave, src: bytes, now: float) -> None:
        if src != msg.member.addr:
            raise RemoteProtocolError("TopicLeave for another node")
        r = self._hosted.get(msg.topic)
        if r is None:
            # Sent to a rendezvous that is no longer one: pass it on to the key's root.
            self._route(topic_key(self.dht, msg.topic), msg, now)
            return
        self._forget(r, src, now)

    def _on_routed_leave(self, msg: TopicLeave, origin: Peer, now: float) -> None:
        # The origin may be a former rendezvous passing the member's leave on (``_on_leave``).
        r = self._hosted.get(msg.topic)
        if r is None:
            self.stats.drop("leave for a topic we do not host")
            return
        self._forget(r, msg.member.addr, now)

    def _forget(self, r: _Rendezvous, addr: bytes, now: float) -> None:
        r.heard.pop(addr, None)
        r.publishers.pop(addr, None)
        if r.members.pop(addr, None) is not None:
            r.changed = True
            self._schedule_push(r, now)

    def _on_handoff(self, msg: TopicHandoff, origin: Peer, now: float) -> None:
        r = self._host(msg.topic, topic_key(self.dht, msg.topic), 0, now)
        r.changed = True
        for tm in msg.members:
            self._admit(r, tm, True, msg.version, None, now)
        for tm in msg.publishers:
            self._admit(r, tm, False, msg.version, None, now)
        r.changed = True
        self._schedule_push(r, now)

    def _on_heartbeat(self, msg: TopicHeartbeat, src: bytes, now: float) -> None:
        if src != msg.member.addr:
            raise RemoteProtocolError("TopicHeartbeat for another node")
        r = self._hosted.get(msg.topic)
        if r is None:
            key = topic_key(self.dht, msg.topic)
            if self.dht.state is not State.READY or self.dht.next_hop(key) is not None:
                self.stats.drop("heartbeat for a topic we do not host")
                return  # the member will time out and route its join to the real root
            r = self._host(msg.topic, key, msg.version, now)
        # Heartbeats say what the member is now; a join that arrived late (re-routed around a
        # failure, after the member's leave) may have said otherwise.
        known = r.members.get(src)
        if (
            src not in r.heard
            or (msg.receiver and (known is None or known.nonce != msg.nonce))
            or (not msg.receiver and known is not None)
        ):
            member = TopicMember(msg.member, msg.nonce)
            self._admit(r, member, msg.receiver, msg.version, msg.digest, now)  # (re-)admit
            return
        r.heard[src] = now
        self._compare(r, msg.version, msg.digest, now)
        if msg.version < r.version and now >= r.settle_until:
            self._send(src, TopicMembers(r.topic, r.version, list(r.members.values())))
        else:
            self._send(src, TopicBeat(r.topic, r.version))

    def _rendezvous_tick(self, now: float) -> None:
        limit = now - self.cfg.fail_after_s
        for topic, r in list(self._hosted.items()):
            gone = [a for a, t in r.heard.items() if t < limit]
            for addr in gone:
                self._forget(r, addr, now)
            if self.dht.state is State.READY and self.dht.next_hop(r.key) is not None:
                # No longer the key's root (a node joined closer to it): hand over.
                version = r.version + (1 if r.changed else 0)
                # One frame's worth: whoever does not fit re-joins by itself when its
                # heartbeats go unanswered.
                members = list(r.members.values())
                publishers = list(r.publishers.values())[: MAX_MEMBERS - len(members)]
                handoff = TopicHandoff(topic, version, members, publishers)
                del self._hosted[topic]
                self._route(r.key, handoff, now)

    # ----------------------------------------------------------------------------- members

    def _on_members(self, msg: TopicMembers, src: bytes, now: float) -> None:
        m = self._topics.get(msg.topic)
        if m is None:
            self.stats.drop("list for a topic we are not in")
            return
        if m.has_list and msg.version <= m.version:
            if src == m.rendezvous:
                m.last_contact = now
            return
        order: list[bytes] = []
        nbytes = self.dht.space.nbytes
        nonces: dict[bytes, int] = {}
        for tm in msg.members:
            h = tm.handle
            if len(h.id) != nbytes:
                raise RemoteProtocolError(f"member id of {len(h.id)} bytes")
            if not h.addr or h.addr in nonces:
                raise RemoteProtocolError("member list with an empty or repeated address")
            nonces[h.addr] = tm.nonce
            order.append(h.addr)
        old = m.addrs if m.has_list else {}
        m.version = msg.version
        m.order = tuple(order)
        m.addrs = nonces
        m.digest = list_digest(nonces.items())
        m.has_list = True
        m.trees = {}
        m.rendezvous = src
        m.last_contact = now
        self._events.append(MembershipChanged(m.topic, m.version, m.order, now))
        if m.receiver and self.me not in m.addrs and m.asked != m.version:
            m.asked = m.version
            self._heartbeat(m)  # we were dropped (a late heartbeat?): this re-admits us
        self._view_changed(m, old, now)

    def _on_beat(self, msg: TopicBeat, src: bytes, now: float) -> None:
        m = self._topics.get(msg.topic)
        if m is None:
            self.stats.drop("beat for a topic we are not in")
            return
        if m.rendezvous is None:
            m.rendezvous = src
        if src == m.rendezvous:
            m.last_contact = now
            if msg.version > m.version:
                self._ask_list(m, msg.version)

    def _ask_list(self, m: _Membership, version: int) -> None:
        """Someone has a newer list than ours: a heartbeat makes the rendezvous send it."""
        if m.asked < version:
            m.asked = version
            self._heartbeat(m)

    def _member_tick(self, now: float) -> None:
        cfg = self.cfg
        for m in self._topics.values():
            if m.rendezvous is not None and now - m.last_contact > cfg.fail_after_s:
                m.rendezvous = None  # the rendezvous is gone: find the key's new root
                m.join_sent = -math.inf
            if m.rendezvous is None:
                if now - m.join_sent >= cfg.join_retry_s:
                    self._send_join(m, now)
            else:
                self._heartbeat(m)

    # ------------------------------------------------------------------------------- trees

    def _tree(
        self, m: _Membership, source: bytes, mode: int
    ) -> tuple[bytes | None, tuple[bytes, ...]]:
        cached = m.trees.get((source, mode))
        if cached is not None:
            return cached
        me = self.me
        receivers = [a for a in m.order if a != source]
        parent: bytes | None = None
        children: tuple[bytes, ...] = ()
        if mode == MODE_STAR:
            if me == source:
                children = tuple(receivers)
            elif me in m.addrs:
                parent = source
        else:
            tree = build_tree(source, receivers, near_bucket=mode == MODE_LBDD)
            if me == source:
                children = tuple(receivers[j] for j in tree.source_children)
            elif me in m.addrs:
                i = receivers.index(me)
                p = tree.parent[i]
                parent = source if p == SOURCE else receivers[p]
                children = tuple(receivers[j] for j in tree.children[i])
        m.trees[(source, mode)] = (parent, children)
        return parent, children

    def _view_changed(self, m: _Membership, old: dict[bytes, int], now: float) -> None:
        """Path update: recompute every publication's targets from the new list. ``old``: the
        previous list's members and nonces (empty for our first list)."""
        nonces = m.addrs
        # Members that joined since (or left and joined again): they hold none of the
        # publications under way.
        fresh = {a for a, n in nonces.items() if old and old.get(a) != n}
        for pub in [p for k, p in self._pubs.items() if k[0] == m.topic]:
            for dest, flow in list(pub.flows.items()):
                if dest not in nonces or dest in fresh:
                    self._kill(flow)  # failed, left, or a flow to an earlier incarnation
            pub.done_for -= fresh
            parent, children = self._tree(m, pub.key[1], pub.mode)
            if not pub.opened:
                if pub.is_source or pub.count:
                    self._open_children(m, pub, now)
            else:
                topic, publisher, pid = pub.key
                before = pub.children
                for c in children:
                    if c in pub.flows:
                        continue
                    if c in fresh:
                        self._open(pub, c, 0, (), now)  # a new member has nothing yet
                    elif c not in before and pub.total is not None:
                        # Re-parented to us: it may have part of it, or not know it at all.
                        offer = TopicOffer(topic, publisher, pid, pub.total, pub.size, pub.mode)
                        self._send(c, offer)
                pub.children = children
            if (
                not pub.complete
                and not pub.is_source
                and parent is not None
                and parent != pub.upstream
            ):
                self._switch_upstream(pub, parent, now)
        self._pump(now)

    # ------------------------------------------------------------------------------ data path

    def _on_data(self, msg: TopicData, src: bytes, now: float) -> None:
        m = self._topics.get(msg.topic)
        if m is None:
            self.stats.drop("data for a topic we are not in")
            return
        key = (msg.topic, msg.publisher, msg.pid)
        ack = TopicAck(msg.topic, msg.publisher, msg.pid, msg.index)
        if msg.index >= msg.total or msg.mode not in MODES:
            raise RemoteProtocolError("slice index past the total, or unknown mode")
        if msg.size > msg.total * MAX_SLICE_BYTES or len(msg.data) > msg.size:
            raise RemoteProtocolError("publication size inconsistent with its slices")
        if key in self._done or msg.publisher == self.me:
            self._send(src, ack)
            self.stats.drop("slice of a finished publication")
            return
        pub = self._pubs.get(key)
        if pub is None:
            pub = self._pubs[key] = _Pub(key, msg.mode, now)
        self._shape(pub, msg.total, msg.size, msg.mode)
        self._send(src, ack)
        if msg.version > m.version:
            self._ask_list(m, msg.version)
        parent: bytes | None = None
        if m.has_list:
            parent = self._tree(m, msg.publisher, msg.mode)[0]
            if not pub.opened:
                # Our first slice of it: serve our children from the start.
                self._open_children(m, pub, now)
        pub.last_active = now
        if pub.slices[msg.index] is not None:
            self.stats.duplicates += 1
            if src == pub.upstream:
                if pub.count > pub.pulled:
                    # Our parent is behind what we have (it started from what our last pull
                    # said, and slices kept coming from our old parent since): tell it. At most
                    # one pull per new slice, so this cannot run away.
                    self._pull(pub, src)
            else:
                self._stop(pub, src, now)
            self._pump(now)
            return
        self._store(pub, msg.index, msg.data, src, now)
        if pub.upstream is None:
            if parent is None or src == parent:
                pub.upstream = src
            else:
                self._stop(pub, src, now)
                self._pull(pub, parent)
        elif src != pub.upstream:
            self._stop(pub, src, now)
        self._pump(now)

    def _store(self, pub: _Pub, index: int, data: bytes, src: bytes, now: float) -> None:
        pub.slices[index] = data
        pub.count += 1
        slices = pub.slices
        total = pub.total
        assert total is not None
        while pub.prefix < total and slices[pub.prefix] is not None:
            pub.prefix += 1
        if pub.count > 1:
            pub.gap += 0.2 * (now - pub.last_progress - pub.gap)
        pub.last_progress = now
        pub.senders[src] = pub.senders.get(src, 0) + 1
        self.stats.slices_received += 1
        topic, publisher, pid = pub.key
        self._events.append(SliceDelivered(topic, publisher, pid, index, total, data, now))
        waiting = pub.waiting.pop(index, None)
        if waiting:
            for f in waiting:
                if not f.dead:
                    self._place(f)
        if pub.count == total:
            pub.complete = True
            payload = None
            if pub.size <= self.cfg.assemble_limit_bytes:
                payload = b"".join(s for s in slices if s is not None)
            self._events.append(
                PublicationComplete(topic, publisher, pid, total, pub.size, payload, now)
            )

    def _on_ack(self, msg: TopicAck, src: bytes, now: float) -> None:
        pub = self._pubs.get((msg.topic, msg.publisher, msg.pid))
        if pub is None:
            return
        f = pub.flows.get(src)
        if f is None or msg.index not in f.inflight:
            return  # for a flow that was reset or stopped since
        f.inflight.discard(msg.index)
        self._inflight -= 1
        f.last_ack = now
        if f.blocked:
            f.blocked = False
            self._place(f)
        elif pub.total is not None and f.cursor >= pub.total and not f.inflight and not f.retx:
            self._finish(f)
        self._pump(now)

    def _on_pull(self, msg: TopicPull, src: bytes, now: float) -> None:
        m = self._topics.get(msg.topic)
        if m is None:
            self.stats.drop("pull for a topic we are not in")
            return
        if msg.mode not in MODES:
            raise RemoteProtocolError(f"unknown mode {msg.mode}")
        key = (msg.topic, msg.publisher, msg.pid)
        pub = self._pubs.get(key)
        if pub is None:
            if key in self._done or msg.publisher == self.me:
                self.stats.drop("pull for a publication we no longer keep")
                return
            # We have not seen it yet (our parent was slow, or died): keep the puller waiting
            # and pull our own parent in turn.
            pub = self._pubs[key] = _Pub(key, msg.mode, now)
        elif pub.mode != msg.mode:
            raise RemoteProtocolError("pull disagrees with its publication's mode")
        if pub.total is not None and msg.have > pub.total:
            raise RemoteProtocolError("pull claims more slices than the publication has")
        pub.last_active = now
        self._open(pub, src, msg.have, msg.extra, now)
        if not pub.complete and not pub.is_source and pub.upstream is None and m.has_list:
            parent = self._tree(m, msg.publisher, msg.mode)[0]
            if parent is not None:
                self._pull(pub, parent)
        self._pump(now)

    def _on_stop(self, msg: TopicStop, src: bytes, now: float) -> None:
        pub = self._pubs.get((msg.topic, msg.publisher, msg.pid))
        if pub is not None:
            f = pub.flows.get(src)
            if f is not None:
                self._kill(f)
                self._pump(now)

    def _pull(self, pub: _Pub, dest: bytes) -> None:
        topic, publisher, pid = pub.key
        extra: list[int] = []
        if pub.total is not None and pub.count > pub.prefix:
            slices = pub.slices
            for i in range(pub.prefix + 1, pub.total):
                if slices[i] is not None:
                    extra.append(i)
                    if len(extra) == MAX_EXTRA:
                        break
        self._send(dest, TopicPull(topic, publisher, pid, pub.mode, pub.prefix, extra))
        pub.upstream = dest
        pub.pulled = pub.count
        self.stats.pulls_sent += 1

    def _stop(self, pub: _Pub, dest: bytes, now: float) -> None:
        last = pub.stopped.get(dest, -math.inf)
        if now - last < self.cfg.stall_s:
            return
        pub.stopped[dest] = now
        topic, publisher, pid = pub.key
        self._send(dest, TopicStop(topic, publisher, pid))
        self.stats.stops_sent += 1

    def _switch_upstream(self, pub: _Pub, parent: bytes, now: float) -> None:
        if pub.upstream is not None and pub.upstream != parent:
            self._stop(pub, pub.upstream, now)
        self._pull(pub, parent)
        pub.repull_at = now + self.cfg.stall_s

    def _open_children(self, m: _Membership, pub: _Pub, now: float) -> None:
        children = self._tree(m, pub.key[1], pub.mode)[1]
        for c in children:
            if c not in pub.flows:
                self._open(pub, c, 0, (), now)
        pub.children = children
        pub.opened = True

    def _shape(self, pub: _Pub, total: int, size: int, mode: int) -> None:
        """Learn (or check) a publication's shape from a slice or an offer."""
        if mode not in MODES:
            raise RemoteProtocolError(f"unknown mode {mode}")
        if size > total * MAX_SLICE_BYTES:
            raise RemoteProtocolError("publication size larger than its slices can hold")
        if pub.total is None:
            if mode != pub.mode:
                raise RemoteProtocolError("publication's mode differs from the pull's")
            pub.init(total, size)
            parked, pub.waiting = pub.waiting, {}
            for lst in parked.values():
                for f in lst:
                    if not f.dead:
                        self._place(f)
        elif pub.total != total or pub.size != size or pub.mode != mode:
            raise RemoteProtocolError("publication's shape differs from what we know")

    def _on_offer(self, msg: TopicOffer, src: bytes, now: float) -> None:
        m = self._topics.get(msg.topic)
        if m is None:
            self.stats.drop("offer for a topic we are not in")
            return
        key = (msg.topic, msg.publisher, msg.pid)
        if msg.publisher == self.me:
            return
        pub = self._pubs.get(key)
        if key in self._done or (pub is not None and pub.complete):
            # We have it all: say so, or the parent would keep offering.
            self._send(src, TopicPull(*key, msg.mode, msg.total, []))
            return
        if pub is None:
            if msg.mode not in MODES:
                raise RemoteProtocolError(f"unknown mode {msg.mode}")
            pub = self._pubs[key] = _Pub(key, msg.mode, now)
        self._shape(pub, msg.total, msg.size, msg.mode)
        parent = self._tree(m, msg.publisher, msg.mode)[0] if m.has_list else None
        target = parent or src
        if pub.upstream != target:
            self._switch_upstream(pub, target, now)
        self._pump(now)

    # ---------------------------------------------------------------------------------- flows

    def _open(self, pub: _Pub, dest: bytes, cursor: int, skip: Iterable[int], now: float) -> None:
        """Serve ``dest`` from ``cursor`` on, except ``skip``. A flow we already have for it is
        reset in place: it keeps its turn in the round robin (a receiver that pulls again while
        it waits its turn must not be sent to the back), the slices it has in flight are not
        resent (they are on their way) and its acknowledgement timeout keeps running."""
        f = pub.flows.get(dest)
        if f is None:
            f = pub.flows[dest] = _Flow(pub, dest, cursor, skip, now)
        else:
            f.cursor = cursor
            f.skip = set(skip)
            f.skip |= f.inflight
            f.retx = {k for k in f.retx if k >= cursor and k not in f.skip}
        self._place(f)

    def _kill(self, f: _Flow) -> None:
        f.dead = True
        self._inflight -= len(f.inflight)
        f.inflight.clear()
        if f.pub.flows.get(f.dest) is f:
            del f.pub.flows[f.dest]

    def _finish(self, f: _Flow) -> None:
        f.pub.done_for.add(f.dest)
        self._kill(f)

    def _place(self, f: _Flow) -> None:
        """Put a flow where it belongs: ready to send, waiting for a slice, or finished."""
        pub = f.pub
        total = pub.total
        if total is None:
            parked = pub.waiting.setdefault(f.cursor, [])
            if f not in parked:
                parked.append(f)
            return
        skip = f.skip
        while f.cursor < total and f.cursor in skip:
            skip.discard(f.cursor)
            f.cursor += 1
        if f.cursor >= total and not f.retx:
            if not f.inflight:
                self._finish(f)  # everything sent and acknowledged
            return
        if len(f.inflight) >= self.cfg.flow_window_slices:
            f.blocked = True  # its next acknowledgement places it again
            return
        if f.retx or pub.slices[f.cursor] is not None:
            if not f.queued:
                f.queued = True
                self._ready.append(f)
        elif not f.queued:  # (a queued flow is placed again when its turn comes)
            pub.waiting.setdefault(f.cursor, []).append(f)

    def _pump(self, now: float) -> None:
        """Send slices, round robin over the ready flows, while the send budget allows."""
        ready = self._ready
        budget = self.cfg.send_budget_slices
        while self._inflight < budget and ready:
            f = ready.popleft()
            f.queued = False
            if f.dead:
                continue
            pub = f.pub
            assert pub.total is not None  # flows are only queued once it is known
            if f.retx:
                k = f.retx.pop()
            elif f.cursor < pub.total and pub.slices[f.cursor] is not None:
                k = f.cursor
            else:
                self._place(f)
                continue
            data = pub.slices[k]
            assert data is not None  # a slice we sent once, or checked just now
            topic, publisher, pid = pub.key
            m = self._topics.get(topic)
            version = m.version if m is not None else 0
            self._send(
                f.dest,
                TopicData(topic, publisher, pid, k, pub.total, pub.size, pub.mode, version, data),
            )
            self.stats.slices_sent += 1
            f.inflight.add(k)
            self._inflight += 1
            f.last_ack = now  # last activity: the ack timeout counts from the newest send
            if k == f.cursor:
                f.cursor = k + 1
            pub.last_active = now
            self._place(f)

    # -------------------------------------------------------------------------- periodic work

    def _on_tick(self, now: float) -> None:
        try:
            self._member_tick(now)
            self._rendezvous_tick(now)
            self._pub_tick(now)
            if self._done:
                self._done = {k: t for k, t in self._done.items() if t > now}
            self._pump(now)
        finally:
            # Even if bad state from the network surfaced: the periodic work must go on.
            if self._topics or self._hosted or self._pubs or self._done:
                self._tick_at = now + self.cfg.heartbeat_s
                self._push_timer(self._tick_at, _T_TICK, "")

    def _pub_tick(self, now: float) -> None:
        cfg = self.cfg
        for key, pub in list(self._pubs.items()):
            m = self._topics.get(key[0])
            if m is None:
                self._drop_pub(pub, now, remember=False)
                continue
            # A flow whose acks stopped coming (lost slices or acks, or a receiver that died and
            # is not yet off the list) gives its budget back and sends those slices again.
            for f in list(pub.flows.values()):
                if f.inflight and now - f.last_ack > 2 * cfg.stall_s:
                    self._inflight -= len(f.inflight)
                    f.retx |= f.inflight
                    f.inflight.clear()
                    f.blocked = False
                    self._place(f)
            if pub.opened and pub.total is not None and m.has_list:
                # Backstop for lost offers and views that changed under us: a child we neither
                # serve nor finished serving is told about the publication again.
                topic, publisher, pid = key
                for c in self._tree(m, publisher, pub.mode)[1]:
                    if (
                        c not in pub.flows
                        and c not in pub.done_for
                        and now - pub.offered.get(c, -math.inf) >= cfg.stall_s
                    ):
                        pub.offered[c] = now
                        offer = TopicOffer(topic, publisher, pid, pub.total, pub.size, pub.mode)
                        self._send(c, offer)
            if pub.complete or pub.is_source:
                if not pub.flows and now - pub.last_active > cfg.retain_s:
                    self._drop_pub(pub, now, remember=True)
                continue
            if now - pub.last_progress > cfg.abandon_s:
                topic, publisher, pid = key
                self._events.append(
                    PublicationAbandoned(topic, publisher, pid, pub.count, pub.total or 0, now)
                )
                self._drop_pub(pub, now, remember=True)
                continue
            stalled = now - pub.last_progress > max(cfg.stall_s, 4.0 * pub.gap)
            if stalled and now >= pub.repull_at and m.has_list:
                parent = self._tree(m, key[1], pub.mode)[0] or pub.upstream
                if parent is not None:
                    self._switch_upstream(pub, parent, now)

    def _drop_pub(self, pub: _Pub, now: float, *, remember: bool) -> None:
        for f in list(pub.flows.values()):
            self._kill(f)
        for lst in pub.waiting.values():
            for f in lst:
                f.dead = True
        pub.waiting.clear()
        self._pubs.pop(pub.key, None)
        if remember:
            # Remember it a while, so that a late slice is not taken for a new publication.
            self._done[pub.key] = now + 10 * max(self.cfg.retain_s, self.cfg.abandon_s)


def _check_topic(topic: str) -> None:
    if not isinstance(topic, str) or not 1 <= len(topic) <= 128:
        raise LocalProtocolError(f"topic name must be a str of 1-128 characters, got {topic!r}")


_Direct = Callable[[TopicNode, Any, bytes, float], None]
_DIRECT: dict[type[Message], _Direct] = {
    TopicMembers: TopicNode._on_members,
    TopicHeartbeat: TopicNode._on_heartbeat,
    TopicBeat: TopicNode._on_beat,
    TopicLeave: TopicNode._on_leave,
    TopicData: TopicNode._on_data,
    TopicAck: TopicNode._on_ack,
    TopicPull: TopicNode._on_pull,
    TopicStop: TopicNode._on_stop,
    TopicOffer: TopicNode._on_offer,
}
_Routed = Callable[[TopicNode, Any, Peer, float], None]
_ROUTED: dict[type[Message], _Routed] = {
    TopicJoin: TopicNode._on_join,
    TopicLeave: TopicNode._on_routed_leave,
    TopicHandoff: TopicNode._on_handoff,
}
_TOPIC_TYPES = frozenset(TOPIC_MESSAGES)


class TopicPeer:
    """One peer's stack for the topic mode: the Pastry node with a ``TopicNode`` on top,
    presented to a driver as one sans-IO core. Topic messages travel as top-level frames (not
    wrapped in the DHT's ``Direct``), so inputs are dispatched by type."""

    __slots__ = ("dht", "take_events", "topic")
    take_events: Callable[[], list[TopicEvent]]

    def __init__(self, dht: DhtCore, rng: random.Random, config: TopicConfig | None = None) -> None:
        self.dht = dht
        self.topic = TopicNode(dht, rng, config)
        self.take_events = self.topic.take_events

    def receive(self, msg: Message, src: bytes, now: float) -> None:
        if type(msg) in _TOPIC_TYPES:
            self.topic.receive(msg, src, now)
        else:
            self.dht.receive(msg, src, now)

    def receive_frame(self, frame: bytes, src: bytes, now: float) -> None:
        try:
            msg = codec().decode(frame)
        except WireError as exc:
            self.topic.stats.malformed += 1
            log.debug("dropped malformed frame from %r: %s", src, exc)
            return
        self.receive(msg, src, now)

    def take_messages(self) -> list[tuple[bytes, Message]]:
        a = self.dht.take_messages()
        b = self.topic.take_messages()
        if not a:
            return b
        if b:
            a.extend(b)
        return a

    def handle_timer(self, now: float) -> None:
        self.dht.handle_timer(now)
        self.topic.handle_timer(now)

    def get_timer(self) -> float | None:
        a = self.dht.get_timer()
        b = self.topic.get_timer()
        if a is None:
            return b
        return a if b is None or a <= b else b


__all__ = [
    "MembershipChanged",
    "PubInfo",
    "PublicationAbandoned",
    "PublicationComplete",
    "SliceDelivered",
    "TopicConfig",
    "TopicEvent",
    "TopicNode",
    "TopicPeer",
    "TopicStats",
    "TreeView",
    "topic_key",
]
