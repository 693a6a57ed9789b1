"""What every DHT core shares: the KBR upcalls, node states and counters, and the plumbing of a
sans-IO node (validated construction, the outbox, strict input, the handler table, the timer
heap and its dispatch, routed hops with acknowledgements and their re-route on a timeout).

``PastryNode`` (``dht.node``) and ``KademliaNode`` (``dht.kademlia``) subclass ``DhtCore``; each
brings its routing state, its handler table (``_handlers``), its timer kinds with their table
(``_timer_handlers``), its rule for the next hop (``_advance``) and what else a missed hop ack
re-routes (``_reroute``: Pastry's joins). The overlay above sees only the API they have in
common.
"""

from __future__ import annotations

import heapq
import logging
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar

from rangecast.dht.e2e import EndToEnd, Track, direct_ledger
from rangecast.dht.errors import LocalProtocolError, RemoteProtocolError, WireError
from rangecast.dht.healing import Graveyard
from rangecast.dht.ids import IdSpace
from rangecast.dht.locality import Locality
from rangecast.dht.messages import (
    DHT_TABLE,
    AckedDirect,
    Direct,
    HopAck,
    JoinRequest,
    Ping,
    Route,
    RouteDone,
    RouteWait,
)
from rangecast.dht.notary import Notary
from rangecast.dht.routing import Peer
from rangecast.dht.suspicion import Suspects
from rangecast.dht.timers import TimerHeap
from rangecast.dht.wire import Codec, Handle, Message

log = logging.getLogger("rangecast.dht")

Proximity = Callable[[Peer], float]
"""Estimated round-trip time to a peer in ms (the simulator's latency model, or measured RTTs)."""


class State(Enum):
    IDLE = "idle"
    JOINING = "joining"
    READY = "ready"
    FAILED = "failed"  # the join gave up
    LEFT = "left"


# The states as module constants, for the per-message checks: ``State.READY`` goes through the
# enum class's attribute lookup every time, a constant is one global read.
IDLE, JOINING, READY, FAILED, LEFT = (
    State.IDLE,
    State.JOINING,
    State.READY,
    State.FAILED,
    State.LEFT,
)


class Application:
    """Upcalls of the common KBR API. Subclass and override what you need."""

    def deliver(self, key: int, payload: bytes, origin: Handle, hops: int, now: float) -> None:
        """``payload`` routed to ``key`` arrived at its root (this node). ``origin``: the
        handle of the node that routed it, as sent (its id's length checked; ``Peer.from_handle``
        makes a ``Peer`` of it for those that need one: most applications do not, and a peer
        delivers a routed message on every one of its events' probes)."""

    def forward(self, key: int, payload: bytes, next_hop: Peer, now: float) -> bytes | None:
        """Called before forwarding; return the (possibly changed) payload, or None to stop."""
        return payload

    def update(self, peer: Peer, joined: bool, now: float) -> None:
        """``peer`` entered (joined=True) or left this node's neighbourhood (Pastry: its leaf
        set; Kademlia: its buckets)."""

    def receive_direct(self, payload: bytes, sender: Handle, now: float) -> None:
        """A point-to-point message from ``sender`` (its handle as sent, the id's length
        checked; ``Peer.from_handle`` makes a ``Peer`` of it for those that need one)."""

    def ready(self, now: float) -> None:
        """The node has joined the overlay (or was bootstrapped) and routes."""


@dataclass(slots=True)
class DropStats:
    """What every core's counters share: malformed input, and what was dropped, by reason.
    Each core's statistics subclass it with their own counters."""

    malformed: int = 0
    dropped: int = 0
    by_reason: dict[str, int] = field(default_factory=dict)

    def drop(self, reason: str) -> None:
        self.dropped += 1
        self.by_reason[reason] = self.by_reason.get(reason, 0) + 1


@dataclass(slots=True)
class NodeStats(DropStats):
    delivered: int = 0
    forwarded: int = 0
    reroutes: int = 0
    peers_failed: int = 0
    #: End-to-end acknowledgements (``dht.e2e``): routed messages confirmed by their root,
    #: deadlines missed (a loss charged to the next hop), re-routes after one, next hops
    #: demoted, and what a quarantined id was refused (announcements, pings, table entries).
    e2e_done: int = 0
    e2e_losses: int = 0
    e2e_retries: int = 0
    demoted: int = 0
    quarantine_refused: int = 0
    #: ``RouteDone``-s that came after their deadline, from the hop charged: losses forgiven.
    e2e_late: int = 0
    #: Signed ``RouteDone``-s refused (``dht.notary``): a bad signature, or a root the
    #: judging hop knows cannot be the key's.
    e2e_forged: int = 0
    #: ``RouteWait``-s refused: the asker's budget for the message was spent (``dht.e2e``).
    e2e_waits_refused: int = 0
    #: ``Direct``-s acknowledged by their receiver (``dht.e2e``), unanswered by their deadline,
    #: and charged as losses once their receiver proved alive.
    e2e_direct_done: int = 0
    e2e_direct_unanswered: int = 0
    e2e_direct_losses: int = 0
    #: Healing a split (``dht.healing``): pings to peers declared failed, and such peers heard
    #: from again.
    heal_pings: int = 0
    healed: int = 0
    #: Suspicion (``dht.suspicion``): peers suspected after a silence, and suspicions their
    #: own word cleared (the rest end in ``peers_failed``).
    suspected: int = 0
    suspicions_cleared: int = 0


class Pending:
    """A routed message awaiting its next hop's ack."""

    __slots__ = ("deadline", "key", "msg", "next_hop", "reroutes")

    def __init__(
        self, msg: Route | JoinRequest, key: int, next_hop: Peer, deadline: float, reroutes: int
    ) -> None:
        self.msg = msg
        self.key = key
        self.next_hop = next_hop
        self.deadline = deadline
        self.reroutes = reroutes


#: Timer kind of a hop ack's deadline (each core numbers its other timers from 1).
T_ACK = 0
#: Timer kind of an end-to-end deadline (``dht.e2e``), above every core's own kinds.
T_E2E = 31
#: Timer kind of a ``Direct``'s end-to-end deadline (``dht.e2e``).
T_DIRECT = 30

#: A timer handler: (node, the entry's argument, its deadline, now).
TimerHandler = Callable[[Any, Any, float, float], None]
#: A message handler: (node, message, sender address, now).
MessageHandler = Callable[[Any, Any, bytes, float], None]


class DhtCore:
    __slots__ = (
        "_avoiding",
        "_e2e",
        "_graveyard",
        "_hop_acks",
        "_join_attempts",
        "_join_contact",
        "_nbytes",
        "_out",
        "_pending",
        "_suspects",
        "_timers",
        "app",
        "by_join",
        "cfg",
        "codec",
        "locality",
        "me",
        "notary",
        "proximity",
        "rng",
        "space",
        "state",
        "stats",
    )
    #: Message type -> handler, filled in by each subclass.
    _handlers: ClassVar[dict[type[Message], MessageHandler]] = {}
    #: Message types a joining node keeps for later instead of handling (Kademlia's).
    _held: ClassVar[tuple[type[Message], ...]] = ()
    #: Timer kind -> handler, filled in by each subclass (``T_ACK``: ``_on_ack_timeout``).
    _timer_handlers: ClassVar[dict[int, TimerHandler]] = {}

    def __init__(
        self,
        ident: int,
        addr: bytes,
        rng: random.Random,
        cfg: Any,
        proximity: Proximity | None,
        app: Application | None,
        stats: NodeStats,
        codec: Codec,
    ) -> None:
        self.cfg = cfg
        self.space: IdSpace = cfg.space
        self.space.check(ident)
        # Read on every routed hop and direct message (compiled: C fields). The configuration
        # is fixed for the node's life.
        self._nbytes = self.space.nbytes
        self._hop_acks = cfg.hop_acks
        if not isinstance(addr, bytes) or not 0 < len(addr) <= 64:
            raise LocalProtocolError(f"address must be 1-64 bytes, got {addr!r}")
        if not isinstance(rng, random.Random):
            raise LocalProtocolError("rng must be a seeded random.Random")
        self.me = Peer.make(self.space, ident, addr)
        if not isinstance(codec, Codec):
            raise LocalProtocolError(f"codec must be a Codec, got {codec!r}")
        codec.require(DHT_TABLE, f"a {type(self).__name__}")
        #: The codec of the stack this node is the bottom of (built by whoever built the stack):
        #: frames are decoded with it, and the layers above encode and decode with it too.
        self.codec = codec
        self.rng = rng
        self.proximity: Proximity = proximity or _no_proximity
        self.app = app or Application()
        #: Signs and checks end-to-end acks (``dht.notary``); set by the driver before the node
        #: starts. None: unsigned acks, believed as they come.
        self.notary: Notary | None = None
        self.state = State.IDLE
        self.stats = stats
        self._out: list[tuple[bytes, Message]] = []
        self._timers: TimerHeap[int] = TimerHeap()
        self._pending: dict[int, Pending] = {}
        self._join_contact = b""
        self._join_attempts = 0
        #: Entered an existing overlay through the join protocol (rather than starting one or
        #: being bootstrapped with the whole membership): its keys are still being handed over.
        self.by_join = False
        #: The address group of a peer (``dht.locality``), set by a driver that knows addresses
        #: (the runtime): replica sets then spread across groups. None: the k closest.
        self.locality: Locality | None = None
        #: End-to-end acknowledgements, where the configuration asks for them (Pastry's).
        self._e2e: EndToEnd | None = (
            EndToEnd(cfg.demote_after, cfg.quarantine_s)
            if getattr(cfg, "e2e_acks", False)
            else None
        )
        #: Suspicion before declaration (``dht.suspicion``), where the configuration asks.
        self._suspects: Suspects | None = Suspects() if getattr(cfg, "suspect_s", 0.0) > 0 else None
        #: Next hops excluded while one re-routed message is handled here (``dht.e2e``).
        self._avoiding: frozenset[int] = frozenset()
        #: Peers declared failed, asked again now and then (``dht.healing``); None: off.
        self._graveyard: Graveyard | None = Graveyard.of(cfg)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.space.hexid(self.me.id)[:8]}…, {self.state.value})"

    @property
    def id(self) -> int:
        return self.me.id

    @property
    def healing(self) -> Graveyard | None:
        """The peers declared failed and asked again now and then (``dht.healing``), None
        where healing is off."""
        return self._graveyard

    @property
    def end_to_end(self) -> EndToEnd | None:
        """The end-to-end acknowledgement state (``dht.e2e``), None where they are off."""
        return self._e2e

    # ------------------------------------------------------------------------------- outputs

    def take_messages(self) -> list[tuple[bytes, Message]]:
        """Messages to send, as (destination address, message); the list is handed over."""
        out = self._out
        self._out = []
        return out

    # -------------------------------------------------------------------------------- inputs

    def receive_frame(self, frame: bytes, src: bytes, now: float) -> None:
        """Raw bytes from the network: decode strictly with the stack's codec, drop (and count)
        anything bad, a message of a table the codec lacks included."""
        try:
            msg = self.codec.decode(frame)
        except WireError as exc:
            self.stats.malformed += 1
            log.debug("%r: dropped malformed frame from %r: %s", self, src, exc)
            return
        self.receive(msg, src, now)

    def receive(self, msg: Message, src: bytes, now: float) -> None:
        if self.state is LEFT or self.state is IDLE:
            self.stats.drop("not running")
            return
        handler = self._handlers.get(type(msg))
        if handler is None:
            # Not a DHT message: a driver that shares a port with other layers routes those.
            self.stats.drop("not a dht message")
            return
        if self.state is JOINING and type(msg) in self._held:
            self._hold(msg, src)
            return
        try:
            handler(self, msg, src, now)
        except RemoteProtocolError as exc:
            self.stats.malformed += 1
            log.debug("%r: dropped bad %s from %r: %s", self, type(msg).__name__, src, exc)

    def _hold(self, msg: Message, src: bytes) -> None:
        raise NotImplementedError

    def resumed(self, gap_s: float) -> None:
        """The driver tells the node it could not run for ``gap_s`` seconds (its process was
        stopped, the machine suspended or starved). Nothing was heard in that time because
        nothing was listened to, so it is no evidence against anyone: every deadline (hop
        acks, keep-alives, lookups) and every "last heard" moves on by the gap. Suspicion
        thus counts only time in which this node itself was able to listen, and the input
        that queued up during the pause is read before any deadline falls due."""
        if not gap_s > 0.0 or gap_s == math.inf:
            return
        self._timers.shift(gap_s)
        for p in self._pending.values():
            p.deadline += gap_s
        if self._e2e is not None:
            for t in self._e2e.tracks.values():
                t.deadline += gap_s
        self._shift_liveness(gap_s)

    def _shift_liveness(self, gap_s: float) -> None:
        """Move the node's own liveness bookkeeping (when each neighbour was last heard, when
        a lookup query was sent) on by ``gap_s``; each DHT knows its own."""

    # --------------------------------------------- the common API, implemented by each DHT

    def get_timer(self) -> float | None:
        """The earliest deadline at which ``handle_timer`` must be called, if any."""
        timers = self._timers.heap
        pending = self._pending
        # Acks that arrived leave stale entries behind; shed them so the driver is not woken.
        while timers:
            deadline, _, kind, arg = timers[0]
            if kind == T_ACK:
                p = pending.get(arg)
                if p is None or p.deadline != deadline:
                    heapq.heappop(timers)
                    continue
            elif kind == T_E2E and self._e2e is not None:
                t = self._e2e.tracks.get(arg)
                if t is None or t.deadline != deadline:
                    heapq.heappop(timers)
                    continue
            elif kind == T_DIRECT and self._e2e is not None and arg not in self._e2e.directs:
                heapq.heappop(timers)
                continue
            return deadline
        return None

    def handle_timer(self, now: float) -> None:
        """Fire every timer due at ``now``, in order, through the subclass's table."""
        timers = self._timers
        handlers = self._timer_handlers
        while (due := timers.pop_due_at(now)) is not None:
            deadline, kind, arg = due
            try:
                handlers[kind](self, arg, deadline, now)
            except RemoteProtocolError as exc:  # remote data met late; never escapes the core
                self.stats.malformed += 1
                log.debug("%r: dropped bad state from the network: %s", self, exc)

    def start_alone(self, now: float) -> None:
        """Become the first node of a new overlay."""
        self._require(State.IDLE, "start_alone")
        self._become_ready(now)

    def join(self, contact: bytes, now: float) -> None:
        """Join the overlay that the node at address ``contact`` belongs to."""
        self._require(State.IDLE, "join")
        if contact == self.me.addr:
            raise LocalProtocolError("cannot join through ourselves; use start_alone")
        self.state = State.JOINING
        self.by_join = True
        self._join_contact = contact
        self._join_attempts = 0
        self._send_join(now)

    def _send_join(self, now: float) -> None:
        """One join attempt (and its timeout, ``_on_join_timeout``)."""
        raise NotImplementedError

    def _on_join_timeout(self, arg: Any, deadline: float, now: float) -> None:
        if self.state is not JOINING:
            return
        if self._join_attempts >= self.cfg.join_attempts:
            self.state = State.FAILED
            log.warning("%r: join through %r gave up", self, self._join_contact)
            return
        self._send_join(now)

    def _become_ready(self, now: float) -> None:
        raise NotImplementedError

    def route(self, key: int, payload: bytes, now: float) -> int:
        """Route ``payload`` to the root of ``key`` (``deliver`` upcall there); its uid."""
        raise NotImplementedError

    def leave(self, now: float) -> None:
        """Depart gracefully."""
        raise NotImplementedError

    def next_hop(self, key: int) -> Peer | None:
        """Where this node would send a message for ``key`` (None: it is the root itself)."""
        raise NotImplementedError

    def replica_set(self, key: int, k: int) -> list[Peer]:
        """Up to ``k`` nodes closest to ``key`` (in this DHT's metric), the root first."""
        raise NotImplementedError

    def neighbours(self) -> list[Peer]:
        """The nodes nearest this one (Pastry: the leaf set; Kademlia: the siblings)."""
        raise NotImplementedError

    def known_peers(self) -> list[Peer]:
        raise NotImplementedError

    def send_direct(self, peer: Peer, payload: bytes, now: float, confirm: bool = False) -> None:
        """Send ``payload`` straight to ``peer``'s address (no routing). ``confirm``: the
        receiver keeps or passes on what it carries for others (a copy, a relay), so with
        ``e2e_acks`` it must answer (``dht.e2e``); a message whose receiver is its end (a
        notification, a reply) asks nothing, since an answer would be only the word of the
        one party it concerns."""
        e2e = self._e2e
        if not confirm or e2e is None or peer.id == self.me.id:
            self._out.append((peer.addr, Direct(self.me.handle, payload)))
            return
        uid = self.rng.getrandbits(63)
        self._out.append((peer.addr, AckedDirect(uid, self.me.handle, payload)))
        e2e.directs[uid] = peer
        cfg = self.cfg
        # One hop's end-to-end unit: the deadline a routed message's last hop gets.
        deadline = now + cfg.ack_floor_s + cfg.ack_rtt_factor * cfg.e2e_rtt_s
        self._timers.push(deadline, T_DIRECT, uid)

    def send_to_end(self, addr: bytes, payload: bytes) -> None:
        """``send_direct(peer, payload, now)`` of a message whose receiver is its end (no
        ``confirm``), by the receiver's address alone: a leaf notifies its subscribers from the
        handles it stores, and would otherwise make a ``Peer`` (its id as an int) of each one
        for nothing."""
        self._out.append((addr, Direct(self.me.handle, payload)))

    # -------------------------------------------------------------------- routed hops, acked

    def _send_route(
        self, msg: Route | JoinRequest, key: int, nh: Peer, now: float, reroutes: int
    ) -> None:
        """Forward a routed message to ``nh``, expecting its ``HopAck`` (and, with
        ``e2e_acks``, its ``RouteDone``)."""
        self._out.append((nh.addr, msg))
        self.stats.forwarded += 1
        if self.cfg.hop_acks:
            deadline = (
                now + self.cfg.ack_floor_s + self.cfg.ack_rtt_factor * (self.proximity(nh) / 1000.0)
            )
            self._pending[msg.uid] = Pending(msg, key, nh, deadline, reroutes)
            self._timers.push(deadline, T_ACK, msg.uid)
        if self._e2e is not None and isinstance(msg, Route):
            # After the hop ack's timer: at an equal deadline a silent next hop is a crash
            # (its hop ack missed), not a loss to charge.
            self._e2e_sent(msg, key, nh, now, reroutes)

    def _on_route(self, msg: Route, src: bytes, now: float) -> None:
        key = self.space.from_bytes(msg.key)
        # Validate everything from the wire now: a re-route after an ack timeout must not be
        # the first to find the origin malformed.
        if len(msg.origin.id) != self._nbytes:
            raise RemoteProtocolError(f"origin id of {len(msg.origin.id)} bytes")
        if self._hop_acks:
            self._out.append((src, HopAck(msg.uid)))
        if self.state is not READY:
            self.stats.drop("route before ready")
            return
        e2e = self._e2e
        if e2e is None:
            self._advance(msg, key, now, 0)
            return
        track = e2e.tracks[msg.uid] = Track(src)
        track.key = key
        track.sign = self.notary is not None and src != msg.origin.addr
        self._advance(msg, key, now, 0)
        self._e2e_settle(msg.uid, track, 0)

    def _advance(self, msg: Route, key: int, now: float, reroutes: int) -> None:
        raise NotImplementedError

    def _on_ack_timeout(self, uid: int, deadline: float, now: float) -> None:
        """No ack from the next hop in time: declare it failed and send the message on
        another way (``_reroute``), up to ``max_reroutes`` times."""
        p = self._pending.get(uid)
        if p is None or p.deadline != deadline:
            return
        del self._pending[uid]
        self._silent(p.next_hop, now)
        track = self._e2e.tracks.get(uid) if self._e2e is not None else None
        if p.reroutes >= self.cfg.max_reroutes:
            self.stats.drop("too many reroutes")
            if track is not None:
                del self._e2e.tracks[uid]  # type: ignore[union-attr]
            return
        self.stats.reroutes += 1
        if track is None:
            self._reroute(p.msg, p.key, now, p.reroutes + 1)
            return
        sends = track.sends
        self._reroute(p.msg, p.key, now, p.reroutes + 1)
        self._e2e_settle(uid, track, sends)

    def _reroute(self, msg: Route | JoinRequest, key: int, now: float, reroutes: int) -> None:
        """The DHT-specific part of a re-route (Pastry also re-routes joins): a ``Route`` goes
        on from here as if from the previous hop, since the failed attempt is not a hop."""
        assert isinstance(msg, Route)
        back = Route(msg.uid, msg.key, msg.origin, max(msg.hops - 1, 0), msg.payload)
        self._advance(back, key, now, reroutes)

    def _peer_failed(self, peer: Peer, now: float) -> None:
        raise NotImplementedError

    def _silent(self, peer: Peer, now: float) -> None:
        """``peer`` did not answer in time: declared failed, or with ``suspect_s`` suspected
        and pinged (``dht.suspicion``)."""
        s = self._suspects
        if s is None:
            self._peer_failed(peer, now)
        elif s.suspect(peer, now):
            self.stats.suspected += 1
            self._out.append((peer.addr, Ping(self.me.handle)))

    def _cleared(self, ident: int, now: float) -> None:
        """``ident`` spoke to us itself: a suspicion of it was wrong (``dht.suspicion``), and
        the ``Direct``-s it left unanswered it dropped (``dht.e2e``)."""
        s = self._suspects
        if s is not None and s.clear(ident):
            self.stats.suspicions_cleared += 1
        e2e = self._e2e
        if e2e is not None and e2e.doubted:
            doubt = e2e.doubted.pop(ident, None)
            if doubt is not None:
                for _ in range(doubt[1]):
                    self.stats.e2e_direct_losses += 1
                    self._charge(doubt[0], direct_ledger(ident), now)

    def _declare_suspects(self, now: float) -> None:
        """Declare failed the peers suspected for longer than ``suspect_s``."""
        s = self._suspects
        if s is not None and len(s):
            for p in s.due(now, self.cfg.suspect_s):  # type: ignore[attr-defined]
                self._peer_failed(p, now)

    # ----------------------------------------------- end-to-end acknowledgements (dht.e2e)

    def _e2e_sent(self, msg: Route, key: int, nh: Peer, now: float, reroutes: int) -> None:
        """``msg`` went to ``nh``: (re)start its end-to-end deadline, nested by the hops
        still to go; a second send (a re-route) tells the upstream hop to wait."""
        e2e = self._e2e
        assert e2e is not None
        track = e2e.tracks.get(msg.uid)
        if track is None:  # we are its origin
            track = e2e.tracks[msg.uid] = Track(None)
        if track.sends:
            if track.upstream is not None:
                self._out.append((track.upstream, RouteWait(msg.uid, self.me.handle.id)))
            # A new attempt: the waits the old next hop drew are not the new one's doing.
            track.waits.clear()
        track.sends += 1
        track.msg = msg
        track.key = key
        track.next_hop = nh
        track.reroutes = reroutes
        track.hops = msg.hops
        self._e2e_arm(msg.uid, track, now)

    def _e2e_arm(self, uid: int, track: Track, now: float) -> None:
        assert track.next_hop is not None
        cfg = self.cfg
        # The same unit on every hop, whatever its own link's RTT: a downstream hop on a slower
        # link must still time out before its upstream does.
        unit = cfg.ack_floor_s + cfg.ack_rtt_factor * cfg.e2e_rtt_s
        track.deadline = now + unit * max(1, cfg.e2e_hops - track.hops)
        self._timers.push(track.deadline, T_E2E, uid)

    def _e2e_settle(self, uid: int, track: Track, sends: int) -> None:
        """After handling (or re-routing) a tracked message: if it was not sent on from here
        it ended here (delivered, taken by the application, or dropped): confirm it upstream."""
        e2e = self._e2e
        assert e2e is not None
        if track.sends != sends or e2e.tracks.get(uid) is not track:
            return
        del e2e.tracks[uid]
        if track.upstream is not None:
            notary = self.notary
            done = (
                RouteDone(uid, self.me.handle.id, notary.sign(uid, track.key))
                if track.sign and notary is not None
                else RouteDone(uid)
            )
            self._out.append((track.upstream, done))

    def _track_from(self, uid: int, src: bytes) -> Track | None:
        """The track of ``uid`` if ``src`` is the hop it was sent on to; None (a late,
        duplicate or misdirected answer) otherwise, counted when nothing was asked."""
        e2e = self._e2e
        if e2e is None:
            self.stats.drop("end-to-end ack unasked")
            return None
        track = e2e.tracks.get(uid)
        if track is None or track.next_hop is None or track.next_hop.addr != src:
            return None
        return track

    def _demote(self, hop: Peer, now: float) -> None:
        e2e = self._e2e
        assert e2e is not None
        self.stats.demoted += 1
        e2e.demote(hop.id, now)
        log.info("%r: demoted %r: routed messages it acknowledged never arrived", self, hop)
        self._peer_failed(hop, now)

    def _confirm_demotions(self, now: float) -> None:
        """Demote the hops whose losses no late answer cleared in ``demote_confirm_s``."""
        e2e = self._e2e
        if e2e is not None and e2e.pending:
            for hop in e2e.due(now):
                if not e2e.quarantined(hop.id, now):
                    self._demote(hop, now)

    def _on_route_done(self, msg: RouteDone, src: bytes, now: float) -> None:
        e2e = self._e2e
        if e2e is not None and msg.uid in e2e.directs:
            self._on_direct_done(msg.uid, src, now)
            return
        track = self._track_from(msg.uid, src)
        if track is None:
            late = e2e.late_from(msg.uid, src) if e2e is not None else None
            if late is None:
                return
            # A ``Direct``'s (key -1) is its receiver's own word; a route's may need proof.
            if late[1] >= 0 and not self._done_believed(msg, late[1], late[0], set()):
                return
            assert e2e is not None
            # Slow, not lost: the hop forwards what it acknowledges (``dht.e2e``).
            e2e.late_answer(msg.uid)
            self.stats.e2e_late += 1
            self._cleared(late[0], now)
            return
        assert e2e is not None and track.next_hop is not None
        if not self._done_believed(msg, track.key, track.next_hop.id, track.excluded):
            return  # as if unsaid: the deadline charges the hop that passed it on
        del e2e.tracks[msg.uid]
        self.stats.e2e_done += 1
        e2e.delivered(track.next_hop.id)
        self._cleared(track.next_hop.id, now)
        if track.upstream is not None:
            self._out.append((track.upstream, msg))

    def _done_believed(self, msg: RouteDone, key: int, hop: int, excluded: set[int]) -> bool:
        """Whether a ``RouteDone`` for ``key`` from next hop ``hop`` shows the message ended at
        a node that may end it (``dht.notary``); always, without a notary. Unsigned, it is the
        next hop's own word that it ended it (its link is authenticated, as is a root naming
        itself); naming another node, it needs that node's proof."""
        notary = self.notary
        if notary is None:
            return True
        space = self.space
        if not msg.root:
            root = hop
        elif len(msg.root) != space.nbytes:
            root = -1
        else:
            root = space.from_bytes(msg.root)
            if root != hop and not notary.verify(msg.uid, key, msg.root, msg.proof):
                root = -1
        if root >= 0 and self._root_plausible(key, root, excluded):
            return True
        self.stats.e2e_forged += 1
        return False

    def _root_plausible(self, key: int, root: int, excluded: set[int]) -> bool:
        """Whether ``root`` may be the node that ends a message for ``key``, as far as this
        node knows (the DHT's own test; the base believes any)."""
        return True

    def _on_route_wait(self, msg: RouteWait, src: bytes, now: float) -> None:
        track = self._track_from(msg.uid, src)
        if track is None:
            return
        if not self._wait_granted(track, msg.by):
            self.stats.e2e_waits_refused += 1
            return  # a hop that keeps asking for time is not given it for ever
        self._e2e_arm(msg.uid, track, now)
        if track.upstream is not None:
            self._out.append((track.upstream, msg))

    def _wait_granted(self, track: Track, by: bytes) -> bool:
        """Whether ``track`` honours one more ``RouteWait`` asked by ``by`` (``dht.e2e``).

        Each asker gets ``max_reroutes`` per attempt, and at most ``e2e_hops`` askers count.
        The next hop asking for itself has re-routed: a new attempt further on, so the budgets
        of the hops beyond it start again (bounded, since its own asks are). A staller next to
        an honest hop exhausts its budget there and at every hop above at the same count; the
        hop nearest it, its deadline nested shortest, times out first and charges it, and that
        hop's own re-route then renews the budgets above it instead of costing an honest hop
        a loss. Claims of ``by`` are not checked: a liar can name at most ``e2e_hops`` askers,
        so it stalls a message by at most ``e2e_hops * max_reroutes`` waits and is then
        charged."""
        cfg = self.cfg
        waits = track.waits
        n = waits.get(by, 0)
        if n >= cfg.max_reroutes or (n == 0 and len(waits) >= cfg.e2e_hops):
            return False
        nh = track.next_hop
        if nh is not None and nh.handle.id == by:
            mine = n + 1
            waits.clear()
            waits[by] = mine
        else:
            waits[by] = n + 1
        return True

    def _on_e2e_timeout(self, uid: int, deadline: float, now: float) -> None:
        """No ``RouteDone`` from the next hop in time: charge it a loss (demote it after
        ``demote_after`` in a row) and re-route the message around it."""
        e2e = self._e2e
        assert e2e is not None
        track = e2e.tracks.get(uid)
        if track is None or track.deadline != deadline or track.msg is None:
            return
        nh = track.next_hop
        assert nh is not None
        self._pending.pop(uid, None)  # its hop ack no longer matters
        self.stats.e2e_losses += 1
        e2e.timed_out(uid, nh, track.key)
        self._charge(nh, nh.id, now)
        if track.reroutes >= self.cfg.max_reroutes:
            del e2e.tracks[uid]
            self.stats.drop("end-to-end: too many reroutes")
            return
        self.stats.e2e_retries += 1
        track.excluded.add(nh.id)
        sends = track.sends
        self._avoiding = frozenset(track.excluded)
        try:
            self._reroute(track.msg, track.key, now, track.reroutes + 1)
        finally:
            self._avoiding = frozenset()
        self._e2e_settle(uid, track, sends)

    def _charge(self, hop: Peer, ledger: int, now: float) -> None:
        """One loss to ``hop`` in ``ledger`` (``EndToEnd.losses``): after ``demote_after`` in a
        row it is demoted, at once or, with ``demote_confirm_s``, unless it answers late
        first."""
        e2e = self._e2e
        assert e2e is not None
        # Losses of messages still in flight when it was demoted do not demote it again.
        if e2e.lost(ledger) and not e2e.quarantined(hop.id, now):
            confirm = self.cfg.demote_confirm_s  # type: ignore[attr-defined]
            if confirm > 0:
                e2e.pending.setdefault(ledger, (hop, now + confirm))
            else:
                self._demote(hop, now)

    def _on_direct_done(self, uid: int, src: bytes, now: float) -> None:
        e2e = self._e2e
        assert e2e is not None
        peer = e2e.directs[uid]
        if peer.addr != src:
            return  # only its receiver answers for it
        del e2e.directs[uid]
        self.stats.e2e_direct_done += 1
        e2e.direct_delivered(peer.id)
        self._cleared(peer.id, now)

    def _on_direct_timeout(self, uid: int, deadline: float, now: float) -> None:
        """No ``RouteDone`` for a ``Direct`` in time: with suspicion the receiver is doubted
        and suspected, a loss once it proves alive; without, a loss now (``dht.e2e``)."""
        e2e = self._e2e
        assert e2e is not None
        peer = e2e.directs.pop(uid, None)
        if peer is None:
            return
        self.stats.e2e_direct_unanswered += 1
        e2e.timed_out(uid, peer, -1)
        if self._suspects is None:
            self.stats.e2e_direct_losses += 1
            self._charge(peer, direct_ledger(peer.id), now)
            return
        e2e.doubt(peer)
        self._silent(peer, now)

    def _forget_doubts(self, ident: int) -> None:
        """``ident`` was declared failed or left: what it did not answer was a crash's."""
        if self._e2e is not None:
            self._e2e.doubted.pop(ident, None)

    # ------------------------------------------------------- healing a split (dht.healing)
    def _bury(self, peer: Peer, now: float) -> None:
        """``peer`` was declared failed (not: it left): ask it again later, if healing is on."""
        if self._graveyard is not None:
            self._graveyard.bury(peer, now)

    def _forget_failed(self, ident: int) -> None:
        """``ident`` left on purpose: it rejoins by itself, so it is not asked again."""
        if self._graveyard is not None:
            self._graveyard.revive(ident)

    def _revived(self, ident: int) -> bool:
        """``ident`` spoke to us: if it was declared failed, it is back (the split it was
        behind has healed) and no longer asked; whether it was."""
        g = self._graveyard
        if g is None or ident not in g:
            return False
        g.revive(ident)
        self.stats.healed += 1
        return True

    def _heal(self, now: float) -> None:
        """Now and then, ping one peer declared failed (``dht.healing``): if it is alive, its
        answer and our ping put each of us back in the other's tables."""
        g = self._graveyard
        if g is None or not g.due(now):
            return
        e2e = self._e2e
        peer = g.next(now, None if e2e is None else lambda i: e2e.quarantined(i, now))
        if peer is not None:
            self.stats.heal_pings += 1
            self._out.append((peer.addr, Ping(self.me.handle)))

    def _quarantined(self, ident: int, now: float) -> bool:
        """Whether ``ident`` was demoted and is kept out of the tables for now."""
        if self._e2e is None or not self._e2e.quarantined(ident, now):
            return False
        self.stats.quarantine_refused += 1
        return True

    def _on_hop_ack(self, msg: HopAck, src: bytes, now: float) -> None:
        p = self._pending.get(msg.uid)
        if p is not None and p.next_hop.addr == src:
            del self._pending[msg.uid]
            if self._suspects is not None:
                self._cleared(p.next_hop.id, now)

    def _on_direct(self, msg: Direct | AckedDirect, src: bytes, now: float) -> None:
        sender = msg.sender
        if len(sender.id) != self._nbytes:
            raise RemoteProtocolError(f"sender id of {len(sender.id)} bytes")
        if type(msg) is AckedDirect:
            # Taken, before the application judges it: a refusal is an answer, not a loss.
            self._out.append((src, RouteDone(msg.uid)))
        self.app.receive_direct(msg.payload, sender, now)

    # -------------------------------------------------------------------------------- helpers

    def _require(self, state: State, what: str) -> None:
        if self.state is not state:
            raise LocalProtocolError(
                f"{what}() needs state {state.value}, node is {self.state.value}"
            )


def _no_proximity(peer: Peer) -> float:
    return 0.0


__all__ = [
    "T_ACK",
    "T_DIRECT",
    "T_E2E",
    "Application",
    "DhtCore",
    "DropStats",
    "MessageHandler",
    "NodeStats",
    "Pending",
    "Proximity",
    "State",
    "TimerHandler",
]
