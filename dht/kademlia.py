"""Kademlia as a sans-IO state machine: the second DHT substrate under the overlay.

Theory of operation
-------------------
``KademliaNode`` offers exactly what the overlay uses of ``PastryNode`` (the common KBR API):
``route`` a payload to the root of a key, ``deliver``/``update``/``ready``/``receive_direct``
upcalls into the ``Application``, ``send_direct``, ``next_hop`` (the multicast grouping asks it
for every key), ``replica_set`` and the same three inputs (``receive``, ``handle_timer``, API
calls) and outputs (``take_messages``, ``get_timer``, upcalls). ``now`` and a seeded
``random.Random`` come from the driver, so the simulator and the trio runtime drive this code.

Distance is XOR, so a key's root is the live node whose id XOR the key is smallest.

Routing state: one k-bucket per shared-prefix length with this node's id (the paper's 160
lists). The buckets are the ``kademlia`` package's ``KBucket`` (least-recently-seen order and
the replacement cache of the paper's section 4.1) holding ``kademlia.node.Node`` contacts, and
lookups keep their shortlist in the package's ``NodeHeap``; both are free of I/O. The package's
``RoutingTable`` is not used here because it pings from inside ``add_contact`` (an asyncio task),
which a sans-IO core must not do.

``route`` has two modes (``KademliaConfig.lookup``):

* ``iterative`` (Kademlia proper): the origin runs a lookup, ``alpha`` ``FindNode`` queries in
  flight, each answered with the responder's ``k`` closest contacts, until the closest node it
  has heard of has itself answered; that node's answer holds nothing closer, so it is the root
  (every bucket of a node that covers a live node holds at least one, so a node that knows no
  closer contact has none). The payload then goes to it in one ``Route`` message. Hops = lookup
  round trips + 1.
* ``recursive``: each hop forwards the ``Route`` to the XOR-closest contact it knows, which is in
  the bucket of the key's first bit that differs from this node's id: at least one more bit of
  the key is matched per hop, as Pastry matches a digit.

A ``Route`` that reaches a node knowing a closer contact is sent on greedily, so whatever the
mode, a payload is delivered by a node that considers itself the root, the same condition under
which ``next_hop`` returns None (multicast and the overlay's root checks agree with it).

Membership: ``join`` looks up the node's own id through a contact (everyone queried learns the
joiner from the ``sender`` field), then refreshes every bucket farther than its nearest
neighbour with a lookup of a random id in it. A node learns only peers that spoke to it (a
second-hand contact may be dead). Every contact that enters or leaves the buckets is an
``update`` upcall (the overlay re-checks which keys it is root of, and its replicas). The
``siblings`` closest contacts are this node's neighbourhood: with keep-alives on they are
pinged; silent ones, and any contact that misses a lookup or hop deadline, are dropped (the
bucket then promotes a replacement), and losing a sibling starts a lookup of our own id. Since
the nodes a joiner queries learn it before its lookup ends, application messages that reach a
joiner early are held until it is ready.
"""

from __future__ import annotations

import heapq
import logging
import math
import random
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from kademlia.node import Node, NodeHeap
from kademlia.routing import KBucket

from rangecast.dht.core import (
    JOINING,
    READY,
    T_ACK,
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
    Direct,
    FindNode,
    FoundNodes,
    HopAck,
    Leave,
    Ping,
    Pong,
    Route,
)
from rangecast.dht.routing import Peer
from rangecast.dht.wire import Codec, Message

log = logging.getLogger("rangecast.dht.kademlia")

LOOKUP_MODES = ("iterative", "recursive")

#: Roots remembered per node by default (``KademliaConfig.root_cache``).
ROOT_CACHE = 1024


@dataclass(frozen=True, slots=True)
class KademliaConfig:
    space: IdSpace = DEFAULT_SPACE
    #: Bucket size and the number of contacts a ``FindNode`` answer carries.
    k: int = 20
    #: Lookup queries in flight at once.
    alpha: int = 3
    lookup: str = "iterative"
    #: The neighbourhood: closest contacts, kept alive and repaired by a self-lookup.
    siblings: int = 8
    #: Sibling ping period; ``math.inf`` switches keep-alives (and failure detection) off.
    keepalive_s: float = 5.0
    fail_after_s: float = 12.0
    #: Deadlines on lookup queries and acks on routed hops (off: no failure can be noticed).
    hop_acks: bool = True
    ack_floor_s: float = 0.3
    ack_rtt_factor: float = 2.0
    max_reroutes: int = 8
    dead_ttl_s: float = 60.0
    join_timeout_s: float = 10.0
    join_attempts: int = 5
    #: Iterative mode: remember the root each lookup found for this many keys (least recently
    #: used go first) and send later messages for a key straight to it; 0: a lookup per message.
    root_cache: int = ROOT_CACHE
    #: A cached root is trusted this long (simulated or real seconds) after its lookup.
    root_cache_ttl_s: float = math.inf
    #: Healing a split (``dht.healing``): every ``heal_s`` ping one of the last ``heal_peers``
    #: contacts declared failed (each asked for ``heal_keep_s``). Off in the simulator (its
    #: figures predate it); real peers turn it on.
    heal_s: float = math.inf
    heal_peers: int = HEAL_PEERS
    heal_keep_s: float = HEAL_KEEP_S

    def __post_init__(self) -> None:
        check_heal_config(self.heal_s, self.heal_peers, self.heal_keep_s)
        if self.k < 1 or self.alpha < 1 or self.siblings < 1:
            raise LocalProtocolError("k, alpha and siblings must be >= 1")
        if self.lookup not in LOOKUP_MODES:
            raise LocalProtocolError(f"lookup must be one of {LOOKUP_MODES}, got {self.lookup!r}")
        if self.keepalive_s <= 0 or (
            self.keepalive_s != math.inf and self.fail_after_s <= self.keepalive_s
        ):
            raise LocalProtocolError("need 0 < keepalive_s < fail_after_s")
        if self.root_cache < 0 or not self.root_cache_ttl_s > 0:
            raise LocalProtocolError("root_cache must be >= 0 and root_cache_ttl_s > 0")


@dataclass(slots=True)
class KademliaStats(NodeStats):
    lookups: int = 0
    #: ``FindNode`` queries sent by this node's lookups.
    queries: int = 0
    #: Lookup round trips on the path to each route's root, summed (mean = this / lookups).
    lookup_rounds: int = 0
    #: Routed messages sent straight to a cached root (no lookup).
    root_cache_hits: int = 0


class Contact(Node):
    """A ``kademlia.node.Node`` that also carries our ``Peer`` (int id, transport address)."""

    def __init__(self, peer: Peer) -> None:
        # Not Node.__init__: it re-derives the int id from a hex string, on a hot path.
        self.id = peer.handle.id
        self.ip = None
        self.port = None
        self.long_id = peer.id
        self.peer = peer


class _Bucket(KBucket):
    def touch_last_updated(self) -> None:
        # The package stamps each bucket with the system clock when it is used; a core reads
        # no clock, and bucket refreshes here are driven by lookups, not by these stamps.
        self.last_updated = 0.0


class BucketTable:
    """k-buckets indexed by the length of the prefix a contact shares with ``own``."""

    __slots__ = ("bits", "buckets", "k", "near", "own", "space")

    def __init__(self, space: IdSpace, own: int, k: int, near: int = 0) -> None:
        self.space = space
        self.bits = space.bits
        self.own = own
        self.k = k
        #: A full bucket still takes a peer that would be among our ``near`` closest contacts
        #: (the role of the paper's relaxed bucket splitting, section 4.2: a node must know all
        #: of its nearest neighbours, even where a bucket near it holds more than k nodes).
        self.near = near
        self.buckets: dict[int, _Bucket] = {}

    def index(self, ident: int) -> int:
        return self.bits - (ident ^ self.own).bit_length()

    def __contains__(self, ident: int) -> bool:
        b = self.buckets.get(self.index(ident))
        return b is not None and self.space.to_bytes(ident) in b.nodes

    def get(self, ident: int) -> Peer | None:
        b = self.buckets.get(self.index(ident))
        if b is None:
            return None
        c = b.nodes.get(self.space.to_bytes(ident))
        return c.peer if c is not None else None

    def add(self, peer: Peer) -> bool:
        """Insert or refresh ``peer``; False if its bucket is full (it waits as a replacement)."""
        i = self.index(peer.id)
        b = self.buckets.get(i)
        if b is None:
            shift = self.bits - i - 1
            lo = ((self.own >> shift) ^ 1) << shift
            b = self.buckets[i] = _Bucket(lo, lo + (1 << shift) - 1, self.k)
        c = Contact(peer)
        if b.add_node(c):
            return True
        if self.near:
            # The deeper buckets' contacts are all closer to us than this bucket's: if they
            # are ``near`` already, the peer is not among our nearest (no sort needed).
            deeper = 0
            for j, other in self.buckets.items():
                if j > i:
                    deeper += len(other.nodes)
            if deeper >= self.near:
                return False
            closest = self.closest(self.own, self.near)
            if len(closest) < self.near or (peer.id ^ self.own) < (closest[-1].id ^ self.own):
                b.replacement_nodes.pop(c.id, None)
                b.nodes[c.id] = c
                return True
        return False

    def remove(self, ident: int) -> bool:
        i = self.index(ident)
        b = self.buckets.get(i)
        if b is None:
            return False
        node_id = self.space.to_bytes(ident)
        stored = b.nodes.get(node_id) or b.replacement_nodes.get(node_id)
        if stored is None:
            return False
        had = node_id in b.nodes
        b.remove_node(stored)
        return had

    def peers(self) -> Iterable[Peer]:
        for i in sorted(self.buckets):
            for c in self.buckets[i].nodes.values():
                yield c.peer

    def install(self, peers: Iterable[Peer]) -> None:
        for p in peers:
            self.add(p)

    def closest(self, key: int, n: int) -> list[Peer]:
        """The ``n`` contacts XOR-closest to ``key``, closest first.

        Buckets come in strict distance order relative to the key: the bucket of the first bit
        where key and own id differ (its members match that bit), then every deeper bucket
        (they share it with us, so they all differ from the key there first), then the
        shallower buckets, deepest first. Only as many groups as needed are sorted."""
        buckets = self.buckets
        i = self.bits - (key ^ self.own).bit_length()
        picked: list[Contact] = []
        b = buckets.get(i)
        if b is not None:
            picked.extend(b.nodes.values())
        if len(picked) < n:
            for j, b in buckets.items():
                if j > i:
                    picked.extend(b.nodes.values())
            # Only the buckets that exist (a dozen at 1,000 nodes, against up to 160 indices:
            # walking every index cost a third of a Kademlia run's time).
            for j in sorted((j for j in buckets if j < i), reverse=True):
                if len(picked) >= n:
                    break
                picked.extend(buckets[j].nodes.values())
        picked.sort(key=lambda c: c.long_id ^ key)
        return [c.peer for c in picked[:n]]

    def nearest(self, key: int) -> Peer | None:
        """The contact closest to ``key`` if it is closer than ``own``, else None."""
        buckets = self.buckets
        x = key ^ self.own
        if not x:
            return None
        i = self.bits - x.bit_length()
        b = buckets.get(i)
        if b is not None and b.nodes:
            # Every member matches the key on the bit where we differ from it: all are closer.
            return min(b.nodes.values(), key=lambda c: c.long_id ^ key).peer
        best: Contact | None = None
        best_d = x
        for j, b in buckets.items():
            if j > i:
                for c in b.nodes.values():
                    d = c.long_id ^ key
                    if d < best_d:
                        best_d, best = d, c
        return best.peer if best is not None else None


_ROUTE, _JOIN, _REFRESH = 0, 1, 2
_T_KEEPALIVE, _T_QUERY, _T_JOIN = 1, 2, 3


class _Lookup:
    __slots__ = ("depth", "heap", "inflight", "key", "lid", "payload", "purpose", "responded")

    def __init__(self, lid: int, key: int, space: IdSpace, k: int, purpose: int) -> None:
        self.lid = lid
        self.key = key
        self.purpose = purpose
        self.heap = NodeHeap(_Target(space.to_bytes(key), key), k)
        self.responded: set[int] = set()
        #: Queried peers (by id) awaiting an answer, with the query's deadline.
        self.inflight: dict[int, float] = {}
        #: Lookup round trips that led to each candidate, by wire id (0: from our own table).
        self.depth: dict[bytes, int] = {}
        self.payload: bytes | None = None


class _Target(Node):
    def __init__(self, node_id: bytes, long_id: int) -> None:
        self.id = node_id
        self.ip = None
        self.port = None
        self.long_id = long_id


def expected_siblings(ids: Iterable[int], own: int, n: int) -> list[int]:
    """The ``n`` ids XOR-closest to ``own`` (itself excluded): the sibling list a node with the
    whole membership in view has; the checks of converged state compare against it."""
    return sorted((x for x in ids if x != own), key=lambda x: x ^ own)[:n]


class KademliaNode(DhtCore):
    __slots__ = (
        "_dead",
        "_early",
        "_last_heard",
        "_lookups",
        "_repair_again",
        "_roots",
        "_siblings",
        "table",
    )
    #: Its own handler tables (filled in at the end of this module), not DhtCore's; and the
    #: messages for the application that reach a joiner before its lookup ends (held, then
    #: handled).
    _handlers: ClassVar[dict[type[Message], MessageHandler]] = {}
    _timer_handlers: ClassVar[dict[int, TimerHandler]] = {}
    _held: ClassVar[tuple[type[Message], ...]] = (Route, Direct, AckedDirect)

    def __init__(
        self,
        ident: int,
        addr: bytes,
        rng: random.Random,
        *,
        codec: Codec,
        config: KademliaConfig | None = None,
        proximity: Proximity | None = None,
        app: Application | None = None,
    ) -> None:
        cfg = config or KademliaConfig()
        self.stats: KademliaStats
        super().__init__(ident, addr, rng, cfg, proximity, app, KademliaStats(), codec)
        self.table = BucketTable(self.space, ident, cfg.k, near=cfg.siblings)
        self._lookups: dict[int, _Lookup] = {}
        self._siblings: list[Peer] = []
        self._last_heard: dict[int, float] = {}
        self._dead: dict[int, float] = {}
        self._repair_again = False
        self._early: list[tuple[Message, bytes]] = []
        #: Key -> (the root a lookup found for it, until when it is trusted), least recently
        #: used first (dict order).
        self._roots: dict[int, tuple[Peer, float]] = {}

    # ------------------------------------------------------------------------------- outputs

    def get_timer(self) -> float | None:
        timers = self._timers.heap
        while timers:
            deadline, _, kind, arg = timers[0]
            if kind == T_ACK:
                p = self._pending.get(arg)
                if p is None or p.deadline != deadline:
                    heapq.heappop(timers)
                    continue
            elif kind == _T_QUERY:
                lk = self._lookups.get(arg[0])
                if lk is None or lk.inflight.get(arg[1]) != deadline:
                    heapq.heappop(timers)
                    continue
            return deadline
        return None

    # ----------------------------------------------------------------------------- API calls

    def install_state(self, contacts: Iterable[Peer], now: float) -> None:
        """Take buckets computed from the whole membership (the simulator's oracle bootstrap)."""
        self._require(State.IDLE, "install_state")
        self.table.install(contacts)
        self._siblings = self.table.closest(self.me.id, self.cfg.siblings)
        for p in self._siblings:
            self._last_heard[p.id] = now
        self._become_ready(now)

    def route(self, key: int, payload: bytes, now: float) -> int:
        """Route ``payload`` to the root of ``key``; returns the message's uid."""
        self._require(READY, "route")
        self.space.check(key)
        uid = self.rng.getrandbits(63)
        nh = self.table.nearest(key)
        if nh is None:
            self.stats.delivered += 1
            self.app.deliver(key, payload, self.me.handle, 0, now)
            return uid
        if self.cfg.lookup == "recursive":
            msg = Route(uid, self.space.to_bytes(key), self.me.handle, 1, payload)
            self._send_route(msg, key, nh, now, 0)
            return uid
        if self.cfg.root_cache and self._send_to_cached_root(uid, key, nh, payload, now):
            return uid
        lk = self._start_lookup(uid, key, _ROUTE)
        lk.payload = payload
        self._lookups[uid] = lk
        self._step(lk, now)
        return uid

    def _send_to_cached_root(
        self, uid: int, key: int, nearest: Peer, payload: bytes, now: float
    ) -> bool:
        """Send the payload straight to the root a recent lookup found for ``key``, if that
        entry still holds; False: a lookup is needed.

        The cached root handles the ``Route`` like any other: if it knows a closer node (one
        joined since) it sends it on greedily, so a payload is still delivered only where the
        node's own table says it is the root. An entry goes when its root is declared failed
        (a missed ack or query deadline, a ``Leave``), when a contact of ours is closer to the
        key than it, and after ``root_cache_ttl_s``."""
        roots = self._roots
        hit = roots.pop(key, None)
        if hit is None:
            return False
        root, until = hit
        if until <= now or (nearest.id ^ key) < (root.id ^ key) or root.id in self._dead:
            return False
        roots[key] = hit  # most recently used now
        self.stats.root_cache_hits += 1
        msg = Route(uid, self.space.to_bytes(key), self.me.handle, 1, payload)
        self._send_route(msg, key, root, now, 0)
        return True

    def _remember_root(self, key: int, root: Peer, now: float) -> None:
        roots = self._roots
        roots.pop(key, None)
        roots[key] = (root, now + self.cfg.root_cache_ttl_s)
        if len(roots) > self.cfg.root_cache:
            del roots[next(iter(roots))]

    def _forget_root(self, ident: int) -> None:
        """``ident`` was declared failed: no cached route may lead to it."""
        if self._roots:
            self._roots = {k: v for k, v in self._roots.items() if v[0].id != ident}

    def leave(self, now: float) -> None:
        if self.state is not READY:
            self.state = State.LEFT
            return
        bye = Leave(self.me.handle)
        for p in self.table.peers():
            self._out.append((p.addr, bye))
        self.state = State.LEFT
        self._timers.clear()
        self._pending.clear()
        self._lookups.clear()
        self._roots.clear()

    def next_hop(self, key: int) -> Peer | None:
        """The XOR-closest contact if it is closer to ``key`` than this node (None: root)."""
        return self.table.nearest(key)

    def replica_set(self, key: int, k: int) -> list[Peer]:
        """Up to ``k`` nodes XOR-closest to ``key`` first, among our contacts and ourselves;
        with ``locality``, spread across address groups (``dht.locality.spread``)."""
        if k < 0:
            raise LocalProtocolError("k must be >= 0")
        # Spreading across address groups chooses among a wider neighbourhood of the key
        # (as wide as Pastry's leaf set is to its siblings).
        wide = k if self.locality is None else max(k, 2 * self.cfg.siblings)
        cands = self.table.closest(key, wide)
        cands.append(self.me)
        cands.sort(key=lambda p: p.id ^ key)
        return cands[:k] if self.locality is None else spread(cands, k, self.locality)

    def known_peers(self) -> list[Peer]:
        return list(self.table.peers())

    def neighbours(self) -> list[Peer]:
        """The ``siblings`` closest contacts (what Pastry's leaf set is to the overlay)."""
        return list(self._siblings)

    # ------------------------------------------------------------------------------- lookups

    def _start_lookup(self, lid: int, key: int, purpose: int) -> _Lookup:
        lk = _Lookup(lid, key, self.space, self.cfg.k, purpose)
        lk.depth[self.me.handle.id] = -1  # answers that name us are not candidates
        heap = lk.heap.heap
        for p in self.table.closest(key, self.cfg.k):
            lk.depth[p.handle.id] = 0
            heap.append((p.id ^ key, Contact(p)))
        heapq.heapify(heap)
        self.stats.lookups += 1
        return lk

    def _query(self, lk: _Lookup, peer: Peer, now: float) -> None:
        lk.heap.contacted.add(peer.handle.id)
        self._out.append((peer.addr, FindNode(lk.lid, self.me.handle, self.space.to_bytes(lk.key))))
        self.stats.queries += 1
        deadline = math.inf
        if self.cfg.hop_acks:
            deadline = (
                now
                + self.cfg.ack_floor_s
                + self.cfg.ack_rtt_factor * (self.proximity(peer) / 1000.0)
            )
            self._timers.push(deadline, _T_QUERY, (lk.lid, peer.id))
        lk.inflight[peer.id] = deadline

    def _step(self, lk: _Lookup, now: float) -> None:
        """Query more of the closest candidates, or finish the lookup."""
        alpha = self.cfg.alpha
        top: list[Contact] = list(lk.heap)  # the k closest candidates, closest first
        best = top[0] if top else None
        if lk.purpose == _ROUTE and best is not None and best.long_id in lk.responded:
            self._finish(lk, best.peer, now)
            return
        if len(lk.inflight) < alpha:
            contacted = lk.heap.contacted
            for c in top:
                if c.id in contacted:
                    continue
                self._query(lk, c.peer, now)
                if len(lk.inflight) >= alpha:
                    break
        if not lk.inflight:
            # Every one of the k closest candidates answered or failed.
            self._finish(lk, best.peer if best is not None else None, now)

    def _finish(self, lk: _Lookup, root: Peer | None, now: float) -> None:
        self._lookups.pop(lk.lid, None)
        if lk.purpose == _ROUTE:
            assert lk.payload is not None
            if root is None:
                self.stats.drop("lookup failed")
                return
            rounds = lk.depth.get(root.handle.id, 0) + 1
            self.stats.lookup_rounds += rounds
            if self.cfg.root_cache:
                self._remember_root(lk.key, root, now)
            msg = Route(lk.lid, self.space.to_bytes(lk.key), self.me.handle, rounds, lk.payload)
            self._send_route(msg, lk.key, root, now, 0)
        elif lk.purpose == _JOIN and self.state is JOINING and self.table.buckets:
            self._become_ready(now)
            self._refresh_buckets(now)
        elif lk.purpose == _REFRESH and lk.key == self.me.id and self._repair_again:
            self._repair_neighbourhood(now)
        # Other refreshes: the lookup's queries told the nodes of that bucket about us.

    def _refresh_buckets(self, now: float) -> None:
        """Look up a random id in every bucket farther than our nearest neighbour: it fills
        our far buckets and tells their nodes we exist."""
        near = self.table.closest(self.me.id, 1)
        if not near:
            return
        deepest = self.table.index(near[0].id)
        bits = self.space.bits
        for i in range(deepest):
            shift = bits - i - 1
            lo = ((self.me.id >> shift) ^ 1) << shift
            target = lo | self.rng.getrandbits(shift) if shift else lo
            lk = self._start_lookup(self.rng.getrandbits(63), target, _REFRESH)
            if not lk.heap.heap:
                continue
            self._lookups[lk.lid] = lk
            self._step(lk, now)

    def _on_find_node(self, msg: FindNode, src: bytes, now: float) -> None:
        sender = self._sender(msg.sender, src)
        target = self.space.from_bytes(msg.target)
        self._learn(sender, now)
        nodes = [p.handle for p in self.table.closest(target, self.cfg.k + 1) if p.id != sender.id]
        self._out.append((src, FoundNodes(msg.lid, self.me.handle, nodes[: self.cfg.k])))

    def _on_found_nodes(self, msg: FoundNodes, src: bytes, now: float) -> None:
        sender = self._sender(msg.sender, src)
        self._learn(sender, now)
        lk = self._lookups.get(msg.lid)
        if lk is None:
            return  # late: the lookup finished (or this is not an answer of ours)
        if sender.id not in lk.inflight:
            if not (lk.purpose == _JOIN and -1 in lk.inflight):
                return
            lk.inflight.pop(-1)
            lk.heap.push(Contact(sender))
            lk.heap.contacted.add(sender.handle.id)
            lk.depth[sender.handle.id] = 0
        else:
            del lk.inflight[sender.id]
        lk.responded.add(sender.id)
        seen = lk.depth
        depth = seen.get(sender.handle.id, 0) + 1
        space, dead, key = self.space, self._dead, lk.key
        heap = lk.heap.heap
        for h in msg.nodes[: self.cfg.k]:
            if h.id in seen:
                continue
            p = Peer.from_handle(space, h)
            ident = p.id
            if ident in dead:
                continue
            seen[h.id] = depth
            # Straight onto the NodeHeap's heap: ``seen`` already rules out duplicates, which
            # NodeHeap.push would look for with a linear scan per node.
            heapq.heappush(heap, (ident ^ key, Contact(p)))
        self._step(lk, now)

    def _on_query_timeout(self, arg: tuple[int, int], deadline: float, now: float) -> None:
        lid, peer_id = arg
        lk = self._lookups.get(lid)
        if lk is None or lk.inflight.get(peer_id) != deadline:
            return
        del lk.inflight[peer_id]
        lk.heap.remove([self.space.to_bytes(peer_id)])
        self._forget_root(peer_id)
        peer = self.table.get(peer_id)
        if peer is not None:
            self._peer_failed(peer, now)
        self._step(lk, now)

    # ------------------------------------------------------------------------------- routing

    def _advance(self, msg: Route, key: int, now: float, reroutes: int) -> None:
        nh = self.table.nearest(key)
        if nh is None:
            self.stats.delivered += 1
            self.app.deliver(key, msg.payload, msg.origin, msg.hops, now)
            return
        if msg.hops >= 255:
            self.stats.drop("hop limit")
            return
        out = Route(msg.uid, msg.key, msg.origin, msg.hops + 1, msg.payload)
        self._send_route(out, key, nh, now, reroutes)

    # A missed hop ack: ``DhtCore._on_ack_timeout`` (Kademlia joins are lookups, never acked
    # hops, so only ``Route``s are re-routed).

    # ---------------------------------------------------------------------------------- join

    def _send_join(self, now: float) -> None:
        self._join_attempts += 1
        lk = _Lookup(self.rng.getrandbits(63), self.me.id, self.space, self.cfg.k, _JOIN)
        lk.depth[self.me.handle.id] = -1
        lk.inflight[-1] = math.inf  # the contact, whose id we learn from its answer
        self._lookups[lk.lid] = lk
        self.stats.lookups += 1
        target = self.space.to_bytes(self.me.id)
        self._out.append((self._join_contact, FindNode(lk.lid, self.me.handle, target)))
        self._timers.push(now + self.cfg.join_timeout_s, _T_JOIN, lk.lid)

    def _hold(self, msg: Message, src: bytes) -> None:
        """A joiner is known to the nodes it has queried before its own lookup ends, and they
        may already route to it: keep such messages until it is ready (Pastry's joiner is
        only announced once it is)."""
        if isinstance(msg, Route) and self.cfg.hop_acks:
            self._out.append((src, HopAck(msg.uid)))
        if len(self._early) >= MAX_HELD:
            self.stats.drop("held while joining: full")
            return
        self._early.append((msg, src))

    def _become_ready(self, now: float) -> None:
        self.state = State.READY
        if self.cfg.keepalive_s != math.inf:
            self._timers.push(now + self.rng.uniform(0.0, self.cfg.keepalive_s), _T_KEEPALIVE)
        self.app.ready(now)
        early, self._early = self._early, []
        for msg, src in early:
            try:
                if isinstance(msg, Route):
                    self._advance(msg, self.space.from_bytes(msg.key), now, 0)
                else:
                    self._handlers[type(msg)](self, msg, src, now)
            except RemoteProtocolError as exc:
                self.stats.malformed += 1
                log.debug("%r: dropped bad held %s: %s", self, type(msg).__name__, exc)

    # ----------------------------------------------------------------------------- liveness

    def _on_keepalive(self, arg: Any, deadline: float, now: float) -> None:
        if self.state is not READY:
            return
        heard = self._last_heard
        for p in list(self._siblings):
            t = heard.get(p.id)
            if t is None:
                heard[p.id] = now
            elif now - t > self.cfg.fail_after_s:
                self._peer_failed(p, now)
        ping = Ping(self.me.handle)
        for p in self._siblings:
            self._out.append((p.addr, ping))
        if len(heard) > 2 * len(self._siblings):
            keep = {p.id for p in self._siblings}
            self._last_heard = {i: t for i, t in heard.items() if i in keep}
        if self._dead:
            self._dead = {i: t for i, t in self._dead.items() if t > now}
        self._heal(now)
        self._timers.push(now + self.cfg.keepalive_s, _T_KEEPALIVE)

    def _on_ping(self, msg: Ping, src: bytes, now: float) -> None:
        peer = self._sender(msg.sender, src)
        self._learn(peer, now)
        self._out.append((src, Pong(self.me.handle)))

    def _on_pong(self, msg: Pong, src: bytes, now: float) -> None:
        self._learn(self._sender(msg.sender, src), now)

    def _on_leave(self, msg: Leave, src: bytes, now: float) -> None:
        peer = self._sender(msg.sender, src)
        self._peer_failed(peer, now)
        self._forget_failed(peer.id)

    def _sender(self, handle: Any, src: bytes) -> Peer:
        peer = Peer.from_handle(self.space, handle)
        if peer.addr != src:
            raise RemoteProtocolError("sender field names another address")
        return peer

    def _learn(self, peer: Peer, now: float) -> None:
        """``peer`` spoke to us: it is alive. Put it in (or refresh it in) its bucket."""
        ident = peer.id
        if ident == self.me.id:
            return
        self._dead.pop(ident, None)
        self._last_heard[ident] = now
        table = self.table
        was = ident in table
        table.add(peer)
        if self._graveyard is not None and self._revived(ident) and self.state is READY:
            # Back from the other side of a split: look up our own id (from a table that has
            # it again), whose answers now come from both sides (``dht.healing``).
            self._repair_neighbourhood(now)
        if was or ident not in table:
            return
        sib = self._siblings
        n = self.cfg.siblings
        if len(sib) < n or (ident ^ self.me.id) < (sib[-1].id ^ self.me.id):
            self._siblings = table.closest(self.me.id, n)
        # Every new contact is reported, not only a new sibling: a node may become the root of
        # a key this node hosts without being among its nearest few (XOR closeness to the key
        # is not closeness to us), and the overlay must hand that key over at once.
        self.app.update(peer, True, now)

    def _shift_liveness(self, gap_s: float) -> None:
        self._last_heard = {i: t + gap_s for i, t in self._last_heard.items()}
        # A query's timer is valid while its lookup still records the same deadline.
        for lk in self._lookups.values():
            lk.inflight = {i: t + gap_s for i, t in lk.inflight.items()}

    def _peer_failed(self, peer: Peer, now: float) -> None:
        ident = peer.id
        self._dead[ident] = now + self.cfg.dead_ttl_s
        self._last_heard.pop(ident, None)
        self._forget_root(ident)
        if not self.table.remove(ident):
            return
        self.stats.peers_failed += 1
        self._bury(peer, now)
        was_sibling = any(p.id == ident for p in self._siblings)
        if was_sibling:
            self._siblings = self.table.closest(self.me.id, self.cfg.siblings)
        self.app.update(peer, False, now)
        if was_sibling and self.state is READY:
            self._repair_neighbourhood(now)

    def _repair_neighbourhood(self, now: float) -> None:
        """A sibling died: look up our own id. Every node the lookup asks answers in person,
        so the live nodes closest to us, which our buckets may not all hold, get in."""
        if any(lk.purpose == _REFRESH and lk.key == self.me.id for lk in self._lookups.values()):
            # One repair at a time, and one more when it ends: answers it got while dead
            # siblings still held their places may have been turned away by a full bucket.
            self._repair_again = True
            return
        self._repair_again = False
        lk = self._start_lookup(self.rng.getrandbits(63), self.me.id, _REFRESH)
        if lk.heap.heap:
            self._lookups[lk.lid] = lk
            self._step(lk, now)


#: At most this many messages are held by a joiner.
MAX_HELD = 4096

# Filled in place: a compiled KademliaNode is an extension type, whose attributes are fixed.
KademliaNode._handlers.update(
    {
        FindNode: KademliaNode._on_find_node,
        FoundNodes: KademliaNode._on_found_nodes,
        Route: DhtCore._on_route,
        HopAck: DhtCore._on_hop_ack,
        Ping: KademliaNode._on_ping,
        Pong: KademliaNode._on_pong,
        Direct: DhtCore._on_direct,
        AckedDirect: DhtCore._on_direct,
        Leave: KademliaNode._on_leave,
    }
)
KademliaNode._timer_handlers.update(
    {
        _T_QUERY: KademliaNode._on_query_timeout,
        T_ACK: DhtCore._on_ack_timeout,
        _T_KEEPALIVE: KademliaNode._on_keepalive,
        _T_JOIN: DhtCore._on_join_timeout,
    }
)

__all__ = [
    "LOOKUP_MODES",
    "ROOT_CACHE",
    "BucketTable",
    "Contact",
    "KademliaConfig",
    "KademliaNode",
    "expected_siblings",
]
