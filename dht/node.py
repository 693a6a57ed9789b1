"""A Pastry node as a sans-IO state machine.

Theory of operation
-------------------
The node has three inputs and no others:

* ``receive(msg, src, now)`` (or ``receive_frame(frame, src, now)`` for raw bytes): a message
  from the transport address ``src``;
* ``handle_timer(now)``: the driver calls it when ``get_timer()``'s deadline has come;
* API calls: ``start_alone``, ``join``, ``route``, ``send_direct``, ``leave``, and the read-only
  queries ``next_hop``, ``replica_set``, ``local_lookup``.

Its outputs are the messages in ``take_messages()`` (pairs of destination address and message),
the deadline in ``get_timer()``, and upcalls into the ``Application`` above it (``deliver``,
``forward``, ``update``, ``receive_direct``, ``ready``), which is how the common KBR API reaches
the overlay. ``now`` (seconds) and a seeded ``random.Random`` come from the driver; nothing here
reads a clock, a socket or the global random generator, so the simulator and the trio runtime
drive the very same code.

Routing rule (Pastry): deliver when the key is within the leaf set's range (to the numerically
closest member, or here); otherwise the routing-table entry for the key's next digit; otherwise
(the rare case) any known node with at least as long a shared prefix that is numerically closer;
otherwise here.

Reliability: every routed hop is acknowledged (``HopAck``). A missing ack within
``ack_floor_s + ack_rtt_factor * RTT`` marks the next hop failed; the message is re-routed around
it and the routing table slot is repaired lazily by asking a peer in the same row. With
``e2e_acks`` the root also confirms every routed message back along its path (``RouteDone``),
and a next hop that acks hops but loses what it forwards is routed around and demoted
(``dht.e2e``). Leaf-set members are pinged every ``keepalive_s``; one not heard from for
``fail_after_s`` is declared failed, and the leaf set is repaired from the farthest live leaf on
that side.

Join: the joiner sends ``JoinRequest`` to a contact, which routes it to the joiner's id; every node
on the path sends the routing rows the joiner needs, the root sends its leaf set, and the joiner
then ``Announce``-s itself to the nodes it learnt. Nodes that take the joiner into their leaf set
answer with their own leaf set, so concurrent joins in the same neighbourhood still converge.
"""

from __future__ import annotations

import logging
import math
import random
from dataclasses import dataclass
from itertools import chain
from typing import Any, ClassVar

from rangecast.dht.core import (
    JOINING,
    READY,
    T_ACK,
    T_DIRECT,
    T_E2E,
    Application,
    DhtCore,
    MessageHandler,
    NodeStats,
    Proximity,
    State,
    TimerHandler,
)
from rangecast.dht.errors import LocalProtocolError, RemoteProtocolError
from rangecast.dht.healing import HEAL_KEEP_S, HEAL_PEERS, check_heal_config
from rangecast.dht.ids import DEFAULT_SPACE, IdSpace
from rangecast.dht.locality import spread
from rangecast.dht.messages import (
    AckedDirect,
    Announce,
    Direct,
    HopAck,
    JoinReply,
    JoinRequest,
    JoinRows,
    LeafSetReply,
    LeafSetRequest,
    Leave,
    Ping,
    Pong,
    Route,
    RouteDone,
    RouteWait,
    RowReply,
    RowRequest,
)
from rangecast.dht.routing import LeafSet, Peer, RoutingTable
from rangecast.dht.wire import Codec, Handle, Message

log = logging.getLogger("rangecast.dht")


@dataclass(frozen=True, slots=True)
class PastryConfig:
    space: IdSpace = DEFAULT_SPACE
    leaf_set_size: int = 16
    #: Leaf-set ping period; ``math.inf`` switches keep-alives off (no failure detection but
    #: hop acks), for failure-free experiments where maintenance traffic would only cost time.
    keepalive_s: float = 5.0
    fail_after_s: float = 12.0
    hop_acks: bool = True
    ack_floor_s: float = 0.3
    ack_rtt_factor: float = 2.0
    max_reroutes: int = 8
    #: How long a failed node is kept out of the tables even if stale leaf sets mention it.
    dead_ttl_s: float = 60.0
    join_timeout_s: float = 10.0
    #: Every this many keep-alive rounds a node swaps leaf sets with its two nearest neighbours.
    exchange_rounds: int = 3
    join_attempts: int = 5
    #: End-to-end acknowledgement of routed messages (``dht.e2e``): a next hop that acks hops
    #: but whose messages never reach the root is charged a loss and routed around, and after
    #: ``demote_after`` losses in a row demoted (failed, and its id quarantined for
    #: ``quarantine_s``). Off in the simulator (its figures predate it); real peers turn it on.
    e2e_acks: bool = False
    #: Path length the end-to-end deadlines are nested over: a hop with h hops behind it waits
    #: ``max(1, e2e_hops - h)`` units of ``ack_floor_s + ack_rtt_factor * e2e_rtt_s`` (the
    #: same unit on every hop, bounding a hop's RTT), so the hop nearest a loss times out first.
    e2e_hops: int = 6
    e2e_rtt_s: float = 0.25
    demote_after: int = 3
    quarantine_s: float = 600.0
    #: Healing a split (``dht.healing``): every ``heal_s`` ping one of the last ``heal_peers``
    #: peers declared failed (each asked for ``heal_keep_s``). Off in the simulator (its
    #: figures predate it); real peers turn it on.
    heal_s: float = math.inf
    heal_peers: int = HEAL_PEERS
    heal_keep_s: float = HEAL_KEEP_S
    #: Suspicion before declaration (``dht.suspicion``): a peer silent past its hop ack's
    #: deadline or ``fail_after_s`` is suspected (routed around, pinged) and declared failed
    #: only after this long without a word from it. 0: declared at once (the simulator's
    #: default: its figures predate it); real peers turn it on.
    suspect_s: float = 0.0
    #: A next hop reaching ``demote_after`` losses is demoted only if no late ``RouteDone``
    #: from it (and no delivery) comes within this long (``dht.e2e``): a slow hop answers
    #: late, a dropper never. 0: at once (the simulator's default).
    demote_confirm_s: float = 0.0
    #: With a notary (``dht.notary``), a signed ``RouteDone`` is believed only from one of the
    #: ``e2e_root_rank`` nodes closest to the key that the judging hop knows, no further than
    #: ``e2e_root_spread`` mean leaf-set spacings from it. Ours: the papers do not treat a
    #: lying root; 3 leaves room for the node serving in place of a dropper and one stale entry.
    e2e_root_rank: int = 3
    e2e_root_spread: float = 8.0

    def __post_init__(self) -> None:
        check_heal_config(self.heal_s, self.heal_peers, self.heal_keep_s)
        if self.leaf_set_size < 2 or self.leaf_set_size % 2:
            raise LocalProtocolError(f"leaf_set_size {self.leaf_set_size} must be even and >= 2")
        if self.keepalive_s <= 0 or (
            self.keepalive_s != math.inf and self.fail_after_s <= self.keepalive_s
        ):
            raise LocalProtocolError("need 0 < keepalive_s < fail_after_s")
        if self.e2e_acks and not self.hop_acks:
            raise LocalProtocolError("e2e_acks needs hop_acks")
        if self.e2e_hops < 1 or self.demote_after < 1 or not self.quarantine_s >= 0:
            raise LocalProtocolError("need e2e_hops >= 1, demote_after >= 1, quarantine_s >= 0")
        if not self.e2e_rtt_s >= 0:
            raise LocalProtocolError("e2e_rtt_s must be >= 0")
        if self.e2e_root_rank < 1 or not self.e2e_root_spread > 0:
            raise LocalProtocolError("need e2e_root_rank >= 1 and e2e_root_spread > 0")
        if not 0 <= self.suspect_s < math.inf or not 0 <= self.demote_confirm_s < math.inf:
            raise LocalProtocolError("suspect_s and demote_confirm_s must be >= 0 and finite")


_T_KEEPALIVE, _T_JOIN = 1, 2


class PastryNode(DhtCore):
    __slots__ = (
        "_announced",
        "_b",
        "_bits",
        "_dead",
        "_digit_mask",
        "_digits",
        "_last_heard",
        "_probing",
        "_rounds",
        "leaves",
        "table",
    )
    #: Its own handler tables (filled in at the end of this module), not DhtCore's.
    _handlers: ClassVar[dict[type[Message], MessageHandler]] = {}
    _timer_handlers: ClassVar[dict[int, TimerHandler]] = {}

    def __init__(
        self,
        ident: int,
        addr: bytes,
        rng: random.Random,
        *,
        codec: Codec,
        config: PastryConfig | None = None,
        proximity: Proximity | None = None,
        app: Application | None = None,
    ) -> None:
        cfg = config or PastryConfig()
        super().__init__(ident, addr, rng, cfg, proximity, app, NodeStats(), codec)
        self.leaves = LeafSet(self.space, ident, cfg.leaf_set_size // 2)
        self.table = RoutingTable(self.space, ident)
        # The id space's shape, read on every hop (``_next_hop``): compiled, as C integers.
        space = self.space
        self._bits, self._b, self._digits = space.bits, space.b, space.digits
        self._digit_mask = space.radix - 1
        self._last_heard: dict[int, float] = {}
        self._dead: dict[int, float] = {}
        self._announced: set[int] = set()
        self._rounds = 0
        #: Would-be neighbours learnt second-hand and pinged, not yet heard from.
        self._probing: dict[int, float] = {}

    # ----------------------------------------------------------------------------- API calls

    def install_state(
        self, left: list[Peer], right: list[Peer], rows: list[list[Peer | None]], now: float
    ) -> None:
        """Take routing state computed from the whole membership (the simulator's oracle
        bootstrap, for large N where running every join would only cost time)."""
        self._require(State.IDLE, "install_state")
        self.leaves.replace(left, right)
        self.table.install(rows)
        if self.cfg.keepalive_s != math.inf:
            # Only keep-alives read when a leaf was last heard: without them (failure-free
            # simulations) the entries would be ~0.6 KB per node of dead weight.
            for p in self.leaves.members():
                self._last_heard[p.id] = now
        self._become_ready(now)

    def route(self, key: int, payload: bytes, now: float) -> int:
        """Route ``payload`` to the root of ``key``; returns the message's uid."""
        self._require(READY, "route")
        self.space.check(key)
        uid = self.rng.getrandbits(63)
        nh = self._next_hop(key, -1)
        if nh is None:
            self.stats.delivered += 1
            self.app.deliver(key, payload, self.me.handle, 0, now)
            return uid
        fwd = self.app.forward(key, payload, nh, now)
        if fwd is not None:
            msg = Route(uid, self.space.to_bytes(key), self.me.handle, 1, fwd)
            self._send_route(msg, key, nh, now, 0)
        return uid

    def leave(self, now: float) -> None:
        """Depart gracefully: tell every node we know so they drop us at once."""
        if self.state is not READY:
            self.state = State.LEFT
            return
        bye = Leave(self.me.handle)
        seen: set[int] = set()
        for p in chain(self.leaves.members(), self.table.entries()):
            if p.id not in seen:
                seen.add(p.id)
                self._out.append((p.addr, bye))
        self.state = State.LEFT
        self._timers.clear()
        self._pending.clear()

    def next_hop(self, key: int) -> Peer | None:
        """Where this node would send a message for ``key`` (None: it is the root itself).
        Multicast groups target keys by this decision. While a re-routed message is handled
        (``dht.e2e``), the next hops that lost it are left out."""
        avoid = self._avoid()
        if avoid:
            return self._next_hop_avoiding(key, avoid)
        return self._next_hop(key, -1)

    def replica_set(self, key: int, k: int) -> list[Peer]:
        """Up to ``k`` nodes, numerically closest to ``key`` first, among the leaf set and
        this node (only meaningful for k <= leaf_set_size / 2 + 1); with ``locality``, spread
        across address groups (``dht.locality.spread``)."""
        if k < 0:
            raise LocalProtocolError("k must be >= 0")
        cands = [self.me, *self.leaves.members()]
        avoid = self._avoid()
        if avoid:
            cands = [p for p in cands if p.id not in avoid]
        space = self.space
        cands.sort(key=lambda p: (space.distance(p.id, key), p.id))
        return cands[:k] if self.locality is None else spread(cands, k, self.locality)

    def local_lookup(self, key: int, n: int) -> list[Peer]:
        """Up to ``n`` known nodes usable as next hops towards ``key``, best first: longer
        shared prefix with the key, then numerically closer. Only nodes that make progress
        (over this node) are listed."""
        space = self.space
        own_shl = space.shared_prefix(self.me.id, key)
        own_d = space.distance(self.me.id, key)
        best: dict[int, Peer] = {}
        for p in chain(self.leaves.members(), self.table.entries()):
            shl = space.shared_prefix(p.id, key)
            if shl > own_shl or (shl == own_shl and space.distance(p.id, key) < own_d):
                best[p.id] = p
        ranked = sorted(
            best.values(),
            key=lambda p: (-space.shared_prefix(p.id, key), space.distance(p.id, key), p.id),
        )
        return ranked[:n]

    def neighbours(self) -> list[Peer]:
        """The leaf set's members: the peers the overlay's replicas live on."""
        return self.leaves.members()

    def known_peers(self) -> list[Peer]:
        seen: dict[int, Peer] = {}
        for p in chain(self.leaves.members(), self.table.entries()):
            seen.setdefault(p.id, p)
        return list(seen.values())

    def _root_plausible(self, key: int, root: int, excluded: set[int]) -> bool:
        """Whether ``root`` may have ended a message for ``key`` (``dht.notary``): among the
        ``e2e_root_rank`` nodes closest to it that this node knows (itself included, the
        next hops the message lost excluded), and, unless the leaf set covers the ring, within
        ``e2e_root_spread`` mean leaf-set spacings of it."""
        cfg = self.cfg
        space = self.space
        d = space.distance(root, key)
        closer = 1 if space.distance(self.me.id, key) < d and root != self.me.id else 0
        for p in self.known_peers():
            if p.id != root and p.id not in excluded and space.distance(p.id, key) < d:
                closer += 1
                if closer >= cfg.e2e_root_rank:
                    return False
        leaves = self.leaves
        if leaves.wraps:
            return True
        return d * len(leaves) <= cfg.e2e_root_spread * leaves.span()

    # ------------------------------------------------------------------------------- routing

    def _next_hop(self, key: int, exclude: int) -> Peer | None:
        leaves = self.leaves
        if leaves.wraps or leaves.in_range(key):
            return leaves.closest(key, exclude)
        bits, b = self._bits, self._b
        row = (bits - (key ^ self.me.id).bit_length()) // b
        if row >= self._digits:
            return None
        rows = self.table.rows
        if row < len(rows):
            entry = rows[row][(key >> (bits - b * (row + 1))) & self._digit_mask]
            if entry is not None and entry.id != exclude:
                return entry
        return self._rare_case(key, row, exclude)

    def _rare_case(self, key: int, row: int, exclude: int) -> Peer | None:
        space = self.space
        best_d = space.distance(self.me.id, key)
        best: Peer | None = None
        for p in chain(self.leaves.members(), self.table.entries()):
            if p.id == exclude or space.shared_prefix(p.id, key) < row:
                continue
            d = space.distance(p.id, key)
            if d < best_d:
                best_d, best = d, p
        return best

    def _next_hop_avoiding(self, key: int, avoid: frozenset[int]) -> Peer | None:
        """``_next_hop`` with the peers in ``avoid`` left out: the closest other member when
        the key is in the leaf set's range (possibly this node), else the best known peer that
        makes progress."""
        nh = self._next_hop(key, -1)
        if nh is None or nh.id not in avoid:
            return nh
        leaves = self.leaves
        space = self.space
        if leaves.wraps or leaves.in_range(key):
            best: Peer | None = None
            best_d, best_id = space.distance(self.me.id, key), self.me.id
            for p in leaves.members():
                d = space.distance(p.id, key)
                if p.id not in avoid and (d < best_d or (d == best_d and p.id < best_id)):
                    best, best_d, best_id = p, d, p.id
            return best
        for p in self.local_lookup(key, len(avoid) + 1):
            if p.id not in avoid:
                return p
        return None

    def _avoid(self) -> frozenset[int]:
        """The peers routing leaves out now: the next hops that lost the message being
        re-routed (``dht.e2e``) and the suspects (``dht.suspicion``)."""
        s = self._suspects
        if s is None or not s.ids:
            return self._avoiding
        return self._avoiding | s.ids if self._avoiding else s.ids

    def _advance(self, msg: Route, key: int, now: float, reroutes: int) -> None:
        avoid = self._avoiding if self._suspects is None else self._avoid()
        nh = self._next_hop_avoiding(key, avoid) if avoid else self._next_hop(key, -1)
        if nh is None:
            self.stats.delivered += 1
            self.app.deliver(key, msg.payload, msg.origin, msg.hops, now)
            return
        if msg.hops >= 255:
            self.stats.drop("hop limit")
            return
        payload = self.app.forward(key, msg.payload, nh, now)
        if payload is None:
            return
        out = Route(msg.uid, msg.key, msg.origin, msg.hops + 1, payload)
        self._send_route(out, key, nh, now, reroutes)

    def _reroute(self, msg: Route | JoinRequest, key: int, now: float, reroutes: int) -> None:
        if isinstance(msg, JoinRequest):  # a join goes on towards the joiner's id
            self._forward_join(msg, key, now, reroutes)
            return
        super()._reroute(msg, key, now, reroutes)

    # ---------------------------------------------------------------------------------- join

    def _send_join(self, now: float) -> None:
        self._join_attempts += 1
        join = JoinRequest(self.me.handle, -1, 0, self.rng.getrandbits(63))
        self._out.append((self._join_contact, join))
        self._timers.push(now + self.cfg.join_timeout_s, _T_JOIN)

    def _on_join_request(self, msg: JoinRequest, src: bytes, now: float) -> None:
        if self.state is not READY:
            self.stats.drop("join before ready")
            return
        joiner = Peer.from_handle(self.space, msg.joiner)
        if msg.hops > 0 and self.cfg.hop_acks:
            self._out.append((src, HopAck(msg.uid)))  # from a node on the path, not the joiner
        if joiner.id == self.me.id:
            return
        row = self.space.shared_prefix(self.me.id, joiner.id)
        entries = [self.me.handle]
        for r in range(max(msg.prev_row + 1, 0), min(row, len(self.table.rows) - 1) + 1):
            entries.extend(p.handle for p in self.table.rows[r] if p is not None)
        self._out.append((joiner.addr, JoinRows(self.me.handle, entries)))
        self._forward_join(JoinRequest(msg.joiner, row, msg.hops, msg.uid), joiner.id, now, 0)

    def _forward_join(self, msg: JoinRequest, joiner_id: int, now: float, reroutes: int) -> None:
        """Pass the join on towards the joiner's id, or answer it as the root."""
        nh = self._next_hop(joiner_id, joiner_id)
        if nh is None or msg.hops >= 255:
            leaves = [p.handle for p in self.leaves.members() if p.id != joiner_id]
            self._out.append((msg.joiner.addr, JoinReply(self.me.handle, leaves)))
            return
        out = JoinRequest(msg.joiner, msg.prev_row, msg.hops + 1, msg.uid)
        self._send_route(out, joiner_id, nh, now, reroutes)

    def _on_join_rows(self, msg: JoinRows, src: bytes, now: float) -> None:
        if self.state is not JOINING and self.state is not READY:
            return
        for h in msg.entries:
            self._learn(Peer.from_handle(self.space, h), now, direct=False)

    def _on_join_reply(self, msg: JoinReply, src: bytes, now: float) -> None:
        if self.state is not JOINING:
            return  # a duplicate from a retried join
        root = Peer.from_handle(self.space, msg.root)
        self._learn(root, now, direct=True)
        for h in msg.leaves:
            self._learn(Peer.from_handle(self.space, h), now, direct=False)
        self._become_ready(now)
        hello = Announce(self.me.handle)
        for p in self.known_peers():
            self._announced.add(p.id)
            self._out.append((p.addr, hello))

    def _become_ready(self, now: float) -> None:
        self.state = State.READY
        # Desynchronise keep-alives so a bootstrapped swarm does not ping in lock-step.
        if self.cfg.keepalive_s != math.inf:
            first = now + self.rng.uniform(0.0, self.cfg.keepalive_s)
            self._timers.push(first, _T_KEEPALIVE)
        self.app.ready(now)

    def _on_announce(self, msg: Announce, src: bytes, now: float) -> None:
        if self.state is not READY:
            return
        peer = Peer.from_handle(self.space, msg.node)
        was_leaf = peer.id in self.leaves
        self._learn(peer, now, direct=True)
        if not was_leaf and peer.id in self.leaves:
            # It is our neighbour now: tell it about ours, which it may not know yet.
            self._announced.add(peer.id)
            self._out.append((peer.addr, self._leafset_reply()))

    # ------------------------------------------------------------------- leaf-set maintenance

    def _leafset_reply(self) -> LeafSetReply:
        return LeafSetReply(self.me.handle, [p.handle for p in self.leaves.members()])

    def _on_keepalive(self, arg: Any, deadline: float, now: float) -> None:
        if self.state is not READY:
            return
        fail_after = self.cfg.fail_after_s
        heard = self._last_heard
        members = self.leaves.members()
        for p in members:
            t = heard.get(p.id)
            if t is None:
                heard[p.id] = now
            elif now - t > fail_after:
                self._silent(p, now)
        self._declare_suspects(now)
        self._confirm_demotions(now)
        ping = Ping(self.me.handle)
        members = self.leaves.members()
        for p in members:
            self._out.append((p.addr, ping))
        self._rounds += 1
        if self._rounds % self.cfg.exchange_rounds == 0:
            # Periodic leaf-set exchange with the immediate neighbours: what one node learnt
            # (a concurrent joiner, a replacement for a failed leaf) spreads along the ring, so
            # leaf sets converge even when announcements crossed or a node died mid-join.
            req = LeafSetRequest(self.me.handle)
            for side in (self.leaves.left, self.leaves.right):
                if side:
                    self._out.append((side[0].addr, req))
        # Forget bookkeeping about nodes that are no longer neighbours, and expired deaths.
        if len(heard) > 2 * len(members):
            self._last_heard = {p.id: heard.get(p.id, now) for p in members}
        if self._dead:
            self._dead = {i: t for i, t in self._dead.items() if t > now}
        if self._e2e is not None:
            self._e2e.sweep(now)
        if self._probing:
            horizon = now - fail_after
            self._probing = {i: t for i, t in self._probing.items() if t > horizon}
        self._heal(now)
        self._timers.push(now + self.cfg.keepalive_s, _T_KEEPALIVE)

    def _on_ping(self, msg: Ping, src: bytes, now: float) -> None:
        peer = Peer.from_handle(self.space, msg.sender)
        was_member = peer.id in self.leaves
        self._learn(peer, now, direct=True)
        if was_member:
            self._last_heard[peer.id] = now
        else:
            # A probe from a would-be neighbour, or a node that counts on us although we do not
            # ping it: answer explicitly.
            self._out.append((peer.addr, Pong(self.me.handle)))

    def _on_pong(self, msg: Pong, src: bytes, now: float) -> None:
        peer = Peer.from_handle(self.space, msg.sender)
        self._learn(peer, now, direct=True)
        if peer.id in self.leaves:
            self._last_heard[peer.id] = now

    def _on_leafset_request(self, msg: LeafSetRequest, src: bytes, now: float) -> None:
        peer = Peer.from_handle(self.space, msg.sender)
        self._learn(peer, now, direct=True)
        self._out.append((peer.addr, self._leafset_reply()))

    def _on_leafset_reply(self, msg: LeafSetReply, src: bytes, now: float) -> None:
        sender = Peer.from_handle(self.space, msg.sender)
        self._learn(sender, now, direct=True)
        if sender.id in self.leaves:
            self._last_heard[sender.id] = now
        for h in msg.leaves:
            self._learn(Peer.from_handle(self.space, h), now, direct=False)

    def _on_leave(self, msg: Leave, src: bytes, now: float) -> None:
        peer = Peer.from_handle(self.space, msg.sender)
        if peer.addr != src:
            raise RemoteProtocolError("Leave for another node's address")
        self._peer_failed(peer, now)
        self._forget_failed(peer.id)

    def _learn(self, peer: Peer, now: float, direct: bool) -> None:
        """Consider ``peer`` for the leaf set and routing table. ``direct``: it spoke to us
        itself, which proves it alive and overrides an earlier failure verdict."""
        ident = peer.id
        if ident == self.me.id:
            return
        if self._quarantined(ident, now):
            return  # demoted (``dht.e2e``): not even its own word brings it back yet
        if direct:
            if self._suspects is not None:
                self._cleared(ident, now)
            self._dead.pop(ident, None)
            if self._graveyard is not None and self._revived(ident) and self.state is READY:
                # Back from the other side of a split: learn its neighbours, some of which
                # belong in our leaf set now (``dht.healing``).
                self._out.append((peer.addr, LeafSetRequest(self.me.handle)))
        elif ident in self._dead:
            return
        leaves = self.leaves
        if ident in leaves and not leaves.wraps:
            return  # already a neighbour, and was offered to the table when it became one
        if not direct and self.state is READY:
            # Second-hand news of a would-be neighbour may be stale (it may have died since and
            # the teller not noticed yet): ping it, and let its answer, a direct message, put it
            # in. The ping also tells it about us.
            if leaves.would_enter(peer) and ident not in self._probing:
                self._probing[ident] = now
                self._out.append((peer.addr, Ping(self.me.handle)))
            self.table.add(peer, self.proximity)
            return
        self._probing.pop(ident, None)
        was_member = ident in leaves
        entered, evicted = leaves.add(peer)
        if was_member:
            return
        if entered:
            self._last_heard[ident] = now
            self.app.update(peer, True, now)
            for gone in evicted:
                self.app.update(gone, False, now)
        self.table.add(peer, self.proximity)

    def _shift_liveness(self, gap_s: float) -> None:
        self._last_heard = {i: t + gap_s for i, t in self._last_heard.items()}
        self._probing = {i: t + gap_s for i, t in self._probing.items()}

    def _peer_failed(self, peer: Peer, now: float) -> None:
        ident = peer.id
        if self._suspects is not None:
            self._suspects.forget(ident)
        self._forget_doubts(ident)
        self._dead[ident] = now + self.cfg.dead_ttl_s
        self._last_heard.pop(ident, None)
        self._announced.discard(ident)
        slot = self.table.remove(ident)
        on_left, on_right = self.leaves.side_of(ident)
        was_leaf = self.leaves.remove(ident)
        if slot is None and not was_leaf:
            return
        self.stats.peers_failed += 1
        self._bury(peer, now)
        if slot is not None:
            self._repair_slot(*slot)
        if was_leaf:
            self.app.update(peer, False, now)
            self._repair_leaves(on_left, on_right)

    def _repair_leaves(self, on_left: bool, on_right: bool) -> None:
        """Ask the farthest live leaf on each damaged side for its leaf set."""
        ask: dict[int, Peer] = {}
        for damaged, side, other in (
            (on_left, self.leaves.left, self.leaves.right),
            (on_right, self.leaves.right, self.leaves.left),
        ):
            if not damaged:
                continue
            source = side[-1] if side else (other[-1] if other else None)
            if source is not None:
                ask[source.id] = source
        req = LeafSetRequest(self.me.handle)
        for p in ask.values():
            self._out.append((p.addr, req))

    def _repair_slot(self, row: int, col: int) -> None:
        """Lazy routing-table repair: ask a node of the same row (else the next row) for an
        entry for the empty slot."""
        for r in (row, row + 1):
            cands = [p for p in self.table.row(r)]
            if cands:
                peer = cands[self.rng.randrange(len(cands))]
                self._out.append((peer.addr, RowRequest(self.me.handle, row)))
                return

    def _on_row_request(self, msg: RowRequest, src: bytes, now: float) -> None:
        peer = Peer.from_handle(self.space, msg.sender)
        entries = [p.handle for p in self.table.row(msg.row)]
        self._out.append((peer.addr, RowReply(self.me.handle, msg.row, entries)))

    def _on_row_reply(self, msg: RowReply, src: bytes, now: float) -> None:
        self._learn(Peer.from_handle(self.space, msg.sender), now, direct=True)
        for h in msg.entries:
            peer = Peer.from_handle(self.space, h)
            if (
                peer.id not in self._dead
                and peer.id != self.me.id
                and not self._quarantined(peer.id, now)
            ):
                self.table.add(peer, self.proximity)


# Filled in place: a compiled PastryNode is an extension type, whose attributes are fixed.
PastryNode._handlers.update(
    {
        Route: DhtCore._on_route,
        HopAck: DhtCore._on_hop_ack,
        JoinRequest: PastryNode._on_join_request,
        JoinRows: PastryNode._on_join_rows,
        JoinReply: PastryNode._on_join_reply,
        Announce: PastryNode._on_announce,
        LeafSetRequest: PastryNode._on_leafset_request,
        LeafSetReply: PastryNode._on_leafset_reply,
        Ping: PastryNode._on_ping,
        Pong: PastryNode._on_pong,
        RowRequest: PastryNode._on_row_request,
        RowReply: PastryNode._on_row_reply,
        Direct: DhtCore._on_direct,
        AckedDirect: DhtCore._on_direct,
        Leave: PastryNode._on_leave,
        RouteDone: DhtCore._on_route_done,
        RouteWait: DhtCore._on_route_wait,
    }
)
PastryNode._timer_handlers.update(
    {
        T_ACK: DhtCore._on_ack_timeout,
        _T_KEEPALIVE: PastryNode._on_keepalive,
        _T_JOIN: DhtCore._on_join_timeout,
        T_E2E: DhtCore._on_e2e_timeout,
        T_DIRECT: DhtCore._on_direct_timeout,
    }
)

__all__ = ["Application", "Handle", "PastryConfig", "PastryNode", "Peer", "Proximity", "State"]
