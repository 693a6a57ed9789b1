"""LBDD topic mode: a topic's members found through the DHT, its data spread down an LBDD tree.

Theory of operation
-------------------
``TopicNode`` is a sans-IO state machine on top of a DHT node (it is the node's
``Application``). Its inputs are the topic messages (``receive(msg, src, now)``), routed payloads
(the ``deliver`` upcall), ``handle_timer(now)`` and the API (``join``, ``attach``, ``leave``,
``publish``, ``publish_slices``); its outputs are ``take_messages()``, ``get_timer()`` and the
application events in ``take_events()``. ``TopicPeer`` bundles it with its Pastry node into the
one core a driver (the simulator, the runtime) talks to. Nothing here reads a clock or the global
random generator.

In short: a topic's *rendezvous*, the DHT root of its key, keeps the member list and pushes it
to every member; members heartbeat the rendezvous only. Every node builds the LBDD tree of a
publication locally from its list. A publication is cut into slices that flow down the tree,
pipelined, acknowledged and windowed; receivers pull their parent whenever the tree changes
under them, so that every live member gets every slice exactly once. The node is split along
those seams, one concept per module, each with its own theory of operation:

* ``multicast.rendezvous``: joins, leaves, heartbeats, pushes of member lists, hand-offs
  (``Members``), and each node's view of the trees (``Membership.tree``);
* ``multicast.publications``: who serves whom: slices, pulls, offers, stops, path updates,
  retention (``Publications``);
* ``multicast.flows``: a flow per receiver served and the send budget (``Sender``), with the
  named states of flows and publications (``FlowState``, ``PubState``) and their transition
  tables;
* ``multicast.topic_base``: configuration, statistics, the timer heap and the outbox the parts
  write into (``TopicContext``); ``multicast.topic_events``: the application events.

This module is the core that holds them: it dispatches each input through a table (message
type -> handler, routed message type -> handler, timer kind -> handler), lets the publications
follow each new member list (the path update), runs the periodic tick, and hands messages a node
sent to itself back in after the input that produced them (``_drain``).

Whose fault: our own misuse (joining a topic twice, leaving one we are not in, an oversized
slice, an unknown mode) raises ``LocalProtocolError`` at the call. A malformed or inconsistent
message from the network is counted in ``stats``, logged and dropped; it never raises out of the
core.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from rangecast.dht.core import Application, DhtCore
from rangecast.dht.errors import LocalProtocolError, RemoteProtocolError, WireError
from rangecast.dht.messages import DHT_TABLE
from rangecast.dht.routing import Peer
from rangecast.dht.wire import Handle, Message, MessageTable
from rangecast.multicast.flows import Sender
from rangecast.multicast.messages import (
    MAX_SLICE_BYTES,
    MAX_SLICES,
    MODE_LBDD_PAPER,
    MODES,
    MULTICAST_TABLE,
    TOPIC_MESSAGES,
    TopicAck,
    TopicBeat,
    TopicData,
    TopicHandoff,
    TopicHeartbeat,
    TopicJoin,
    TopicLeave,
    TopicMembers,
    TopicOffer,
    TopicPull,
    TopicStop,
)
from rangecast.multicast.publications import Publications
from rangecast.multicast.rendezvous import Members
from rangecast.multicast.topic_base import (
    PubKey,
    TimerKind,
    TopicConfig,
    TopicContext,
    TopicStats,
    check_topic,
    topic_key,
)
from rangecast.multicast.topic_events import (
    MembershipChanged,
    PubInfo,
    PublicationAbandoned,
    PublicationComplete,
    SliceDelivered,
    TopicEvent,
    TreeView,
)

log = logging.getLogger("rangecast.multicast.topic")

_Direct = Callable[[Any, bytes, float], None]
_Routed = Callable[[Any, Peer, float], None]


class TopicNode(Application):
    def __init__(self, dht: DhtCore, rng: random.Random, config: TopicConfig | None = None) -> None:
        if not isinstance(rng, random.Random):
            raise LocalProtocolError("rng must be a seeded random.Random")
        # The stack's codec, which its builder gave the DHT node: it must speak our messages.
        dht.codec.require(MULTICAST_TABLE, "a TopicNode")
        self.dht = dht
        dht.app = self
        self.rng = rng
        self.cfg = config or TopicConfig()
        self.me = dht.me.addr
        self._codec = dht.codec
        ctx = self._ctx = TopicContext(dht, rng, self.cfg, self._codec)
        self.stats: TopicStats = ctx.stats
        members = self._members = Members(ctx)
        self._sender = Sender(ctx, members.topics)
        pubs = self._pubs = Publications(ctx, members, self._sender)
        self._draining = False
        self._timer_heap = ctx.timers.heap
        #: Messages sent to us directly (by transport address), by type.
        self._direct: dict[type[Message], _Direct] = {
            TopicMembers: self._on_members,  # the list, then the path update
            TopicHeartbeat: members.on_heartbeat,
            TopicBeat: members.on_beat,
            TopicLeave: members.on_leave,
            TopicData: pubs.on_data,
            TopicAck: pubs.on_ack,
            TopicPull: pubs.on_pull,
            TopicStop: pubs.on_stop,
            TopicOffer: pubs.on_offer,
        }
        #: Messages routed to a topic's key (to its rendezvous), by type.
        self._routed: dict[type[Message], _Routed] = {
            TopicJoin: members.on_join,
            TopicLeave: members.on_routed_leave,
            TopicHandoff: members.on_handoff,
        }

    def __repr__(self) -> str:
        return f"TopicNode({self.me.hex()})"

    # -------------------------------------------------------------------------------- outputs

    def take_messages(self) -> list[tuple[bytes, Message]]:
        ctx = self._ctx
        out = ctx.out
        ctx.out = []
        return out

    def take_events(self) -> list[TopicEvent]:
        ctx = self._ctx
        out = ctx.events
        ctx.events = []
        return out

    def get_timer(self) -> float | None:
        heap = self._timer_heap
        return heap[0][0] if heap else None

    # --------------------------------------------------------------------------------- inputs

    def receive(self, msg: Message, src: bytes, now: float) -> None:
        """A topic message from the transport address ``src``."""
        self._handle(msg, src, now)
        self._drain(now)

    def handle_timer(self, now: float) -> None:
        timers = self._ctx.timers
        while (due := timers.pop_due(now)) is not None:
            kind, arg = due
            try:
                _TIMERS[kind](self, arg, now)
            except RemoteProtocolError as exc:  # remote data met late; never escapes the core
                self.stats.malformed += 1
                log.debug("%r: dropped bad state from the network: %s", self, exc)
        self._drain(now)

    def deliver(self, key: int, payload: bytes, origin: Handle, hops: int, now: float) -> None:
        try:
            msg = self._codec.decode(payload)
        except WireError as exc:
            self.stats.malformed += 1
            log.debug("%r: dropped malformed routed payload: %s", self, exc)
            return
        handler = self._routed.get(type(msg))
        if handler is None:
            self.stats.malformed += 1
            return
        try:
            if key != topic_key(self.dht, msg.topic):  # type: ignore[attr-defined]
                raise RemoteProtocolError("routed topic message to the wrong key")
            handler(msg, Peer.from_handle(self.dht.space, origin), now)
        except RemoteProtocolError as exc:
            self.stats.malformed += 1
            log.debug("%r: dropped bad routed %s: %s", self, type(msg).__name__, exc)
        self._drain(now)

    def ready(self, now: float) -> None:
        self._members.ready(now)
        self._drain(now)

    # ------------------------------------------------------------------------------ API calls

    def join(self, topic: str, now: float) -> None:
        """Become a receiver of ``topic``. ``MembershipChanged`` follows when the list comes."""
        check_topic(topic)
        self._members.join(topic, now)
        self._drain(now)

    def attach(self, topic: str, now: float) -> None:
        """Get ``topic``'s member list without receiving its data (a publisher that wants the
        list before it publishes; ``publish`` attaches by itself otherwise)."""
        check_topic(topic)
        members = self._members
        if topic in members.topics:
            raise LocalProtocolError(f"already attached to topic {topic!r}")
        members.send_join(members.attach(topic, receiver=False, now=now), now)
        self._drain(now)

    def leave(self, topic: str, now: float) -> None:
        """Stop receiving ``topic`` (and publishing on it): announced to the rendezvous."""
        self._members.leave(topic, now)
        self._pubs.drop_topic(topic, now)
        self._drain(now)

    def publish(self, topic: str, data: bytes, now: float, *, mode: int = MODE_LBDD_PAPER) -> int:
        """Publish ``data`` on ``topic`` in ``slice_bytes`` slices; returns the publication id.
        A node that is not a member attaches as a publisher (it gets the member list but no
        data); the publication starts once it has the list."""
        size = self.cfg.slice_bytes
        view = memoryview(data)
        slices = [bytes(view[i : i + size]) for i in range(0, len(view), size)] or [b""]
        return self.publish_slices(topic, slices, now, mode=mode)

    def publish_slices(
        self, topic: str, slices: Sequence[bytes], now: float, *, mode: int = MODE_LBDD_PAPER
    ) -> int:
        """Publish data already cut into slices (no copy: the bytes objects are sent as they
        are). Every slice must be at most ``MAX_SLICE_BYTES``."""
        check_topic(topic)
        if mode not in MODES:
            raise LocalProtocolError(f"unknown dissemination mode {mode!r}")
        if not 1 <= len(slices) <= MAX_SLICES:
            raise LocalProtocolError(f"a publication has 1 to {MAX_SLICES} slices")
        size = 0
        for s in slices:
            if not isinstance(s, bytes) or len(s) > MAX_SLICE_BYTES:
                raise LocalProtocolError(f"slices must be bytes of at most {MAX_SLICE_BYTES}")
            size += len(s)
        pid = self._pubs.publish(topic, slices, size, mode, now)
        self._drain(now)
        return pid

    # ----------------------------------------------------------------------------- inspection

    def topics(self) -> list[str]:
        return list(self._members.topics)

    def members(self, topic: str) -> tuple[int, tuple[bytes, ...]]:
        """(version, receivers' addresses) of our list of ``topic``."""
        m = self._members.topics.get(topic)
        if m is None:
            raise LocalProtocolError(f"not attached to topic {topic!r}")
        return m.version, m.order

    def rendezvous(self, topic: str) -> bytes | None:
        m = self._members.topics.get(topic)
        return None if m is None else m.rendezvous

    def hosts(self, topic: str) -> bool:
        """Are we the rendezvous of ``topic``?"""
        return topic in self._members.hosted

    def hosted_members(self, topic: str) -> tuple[int, tuple[bytes, ...]]:
        r = self._members.hosted.get(topic)
        if r is None:
            raise LocalProtocolError(f"not the rendezvous of topic {topic!r}")
        return r.version, tuple(r.members)

    def tree_view(self, topic: str, publisher: bytes, mode: int = MODE_LBDD_PAPER) -> TreeView:
        """Our parent and children in the tree rooted at ``publisher``, from our own list."""
        m = self._members.topics.get(topic)
        if m is None:
            raise LocalProtocolError(f"not attached to topic {topic!r}")
        if mode not in MODES:
            raise LocalProtocolError(f"unknown dissemination mode {mode!r}")
        parent, children = m.tree(self.me, publisher, mode)
        return TreeView(m.version, parent, children)

    def publication(self, topic: str, publisher: bytes, pid: int) -> PubInfo | None:
        return self._pubs.info((topic, publisher, pid))

    # ------------------------------------------------------------------------------ dispatch

    def _drain(self, now: float) -> None:
        """Handle the messages we sent ourselves, after the input that produced them."""
        if self._draining:
            return
        self._draining = True
        local = self._ctx.local
        try:
            while local:
                self._handle(local.popleft(), self.me, now)
        finally:
            self._draining = False

    def _handle(self, msg: Message, src: bytes, now: float) -> None:
        handler = self._direct.get(type(msg))
        if handler is None:
            self.stats.drop("not a topic message")
            return
        try:
            handler(msg, src, now)
        except RemoteProtocolError as exc:
            self.stats.malformed += 1
            log.debug("%r: dropped bad %s from %r: %s", self, type(msg).__name__, src, exc)

    def _on_members(self, msg: TopicMembers, src: bytes, now: float) -> None:
        update = self._members.on_members(msg, src, now)
        if update is not None:
            self._pubs.view_changed(*update, now)  # path update

    # -------------------------------------------------------------------------------- timers

    def _on_tick_timer(self, arg: str, now: float) -> None:
        ctx = self._ctx
        ctx.tick_at = None
        try:
            self._members.member_tick(now)
            self._members.rendezvous_tick(now)
            self._pubs.tick(now)
        finally:
            # Even if bad state from the network surfaced: the periodic work must go on.
            if self._members.topics or self._members.hosted or self._pubs.pubs or self._pubs.done:
                ctx.tick_at = now + self.cfg.heartbeat_s
                ctx.timers.push(ctx.tick_at, TimerKind.TICK)

    def _on_push_timer(self, topic: str, now: float) -> None:
        self._members.on_push_timer(topic, now)


_TIMERS: dict[TimerKind, Callable[[TopicNode, str, float], None]] = {
    TimerKind.TICK: TopicNode._on_tick_timer,
    TimerKind.PUSH: TopicNode._on_push_timer,
}
_TOPIC_TYPES = frozenset(TOPIC_MESSAGES)


class TopicPeer:
    """One peer's stack for the topic mode: the Pastry node with a ``TopicNode`` on top,
    presented to a driver as one sans-IO core. Topic messages travel as top-level frames (not
    wrapped in the DHT's ``Direct``), so inputs are dispatched by type."""

    __slots__ = ("dht", "take_events", "topic")
    take_events: Callable[[], list[TopicEvent]]
    #: The tables this stack speaks: build its codec with ``codec_for(*TopicPeer.TABLES)`` and
    #: the DHT node with that codec.
    TABLES: ClassVar[tuple[MessageTable, ...]] = (DHT_TABLE, MULTICAST_TABLE)

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
            msg = self.dht.codec.decode(frame)
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
    "PubKey",
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
