"""The trio driver: one real peer running the same sans-IO cores as the simulator.

Theory of operation
-------------------
The peer owns one ``OverlayPeer`` core (a Pastry or Kademlia node, ``PeerConfig.dht``, with the
content-based overlay on top and the multicast and LBDD modes its ``OverlayConfig`` selects) and
feeds it the core's three inputs:

* frames from the network: every connection's reader task splits the byte stream into frames,
  applies the connection's rate limit, decodes strictly and passes signed envelopes through the
  ``Gate`` (destination, key-id binding, signature, replay, sender field). What survives goes to
  ``core.receive(msg, src, now)``;
* timer firings: one task sleeps until ``core.get_timer()`` and calls ``core.handle_timer(now)``;
* API calls: subscribe / unsubscribe / publish from clients or from Python.

After every input the peer ``_pump``-s the core: encodes, signs and queues each outgoing message on
the link to its destination, hands application events to their owners (client sessions), and
moves the timer task's deadline forward if the core wants to be woken earlier. ``now`` is trio's
clock; the core never sees a socket or a clock. trio runs every task on one thread and the core is
only touched between awaits, so no locks are needed.

Transport: TCP with 4-byte length-prefixed frames, one pooled outgoing connection per destination
(``_Link``), opened on first use and closed when idle. Links are one-way: a peer sends on the
connections it opened and reads on the ones it accepted, so a frame's sender is known from its
signature, never from the socket. Keep-alives are the DHT's own pings over the same links (see
docs/runtime.md for why no UDP). A link's queue is bounded: when a destination cannot keep up its
frames are dropped and counted rather than stalling the core (the DHT's hop acks and keep-alives
treat it as a lost message).

Kademlia mode also runs the kademlia package's asyncio server on the same port number over UDP,
on a thread of its own (``runtime.kademlia_bridge``): that is the only non-trio code in a peer,
and it shares no state with the core.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import os
import random
import resource
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import trio

from rangecast.dht.errors import (
    FieldError,
    LocalProtocolError,
    RangecastError,
    RemoteProtocolError,
    WireError,
)
from rangecast.dht.healing import HEAL_S
from rangecast.dht.kademlia import KademliaConfig, KademliaNode
from rangecast.dht.messages import AckedDirect, Direct, HopAck, Route, RouteDone, RouteWait
from rangecast.dht.node import PastryConfig, State
from rangecast.dht.routing import Peer
from rangecast.dht.substrate import DHTS, DhtConfig, DhtNode, make_dht, substrate
from rangecast.dht.wire import Message, codec_for
from rangecast.pubsub.node import (
    EventDelivered,
    OverlayConfig,
    PieceStored,
    SubscriptionInstalled,
    SubscriptionRefused,
    SubscriptionRemoved,
)
from rangecast.pubsub.peer import OverlayPeer
from rangecast.pubsub.schema import Schema, SchemaError, SchemaRegistry
from rangecast.pubsub.subscription import Subscription
from rangecast.runtime.batching import (
    BatchConfig,
    QueueItem,
    done_item,
    expand_acks,
    is_batch,
    only_acks,
    pack,
    unpack,
)
from rangecast.runtime.candidates import LinkCaps, SecondHand, TrustConfig
from rangecast.runtime.guard import (
    ID_PUZZLE,
    AddressLimiter,
    FrameReader,
    FrameTooLarge,
    Gate,
    HandshakeRefused,
    IdPuzzleFailed,
    InSession,
    OutSession,
    Rejections,
    SessionInitiator,
    SwarmKeyRefused,
    TokenBucket,
    frame,
    wire_codec,
)
from rangecast.runtime.identity import (
    DEFAULT_ID_DIFFICULTY,
    Identity,
    PeerAddress,
    StateDir,
    SwarmKey,
    address_group,
    check_difficulty,
    meets_puzzle,
    node_id_of,
    puzzle_bits,
)
from rangecast.runtime.kademlia_bridge import KademliaService
from rangecast.runtime.messages import Authed, Hello, HelloReply, Sealed, SessionOpen
from rangecast.runtime.notary import Ed25519Notary
from rangecast.runtime.quotas import DEFAULT_QUOTAS, ClientLedger, Quotas, remote_host
from rangecast.runtime.service import ClientSession, Owner
from rangecast.runtime.tokens import ClientTokens

log = logging.getLogger("rangecast.peer")

#: accept() errors that mean "no descriptor (or buffer) for a new connection now".
_OUT_OF_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})

#: Real networks are slower and burstier than the simulator's model: a hop ack that misses its
#: deadline declares the next hop dead for ``dead_ttl_s``, so the floor is generous. Routed
#: messages are acknowledged end to end (``dht.e2e``): a peer that acks hops and drops them is
#: routed around and demoted. Peers declared failed are asked again every ``HEAL_S``
#: (``dht.healing``), so a swarm split by a network partition merges when the network heals.
#: Real peers suspect before they declare (``dht.suspicion``) and confirm a demotion
#: (``dht.e2e``), 30 s each: a peer stalled by load for less is routed around, not failed.
RUNTIME_PASTRY = PastryConfig(
    ack_floor_s=2.0,
    ack_rtt_factor=4.0,
    e2e_acks=True,
    heal_s=HEAL_S,
    suspect_s=30.0,
    demote_confirm_s=30.0,
)
RUNTIME_KADEMLIA = KademliaConfig(ack_floor_s=2.0, ack_rtt_factor=4.0, heal_s=HEAL_S)
#: Real peers expire stored pieces no live subscriber refreshed for three refresh periods: a
#: whole entry peer that vanished stops costing the swarm (a disconnected client's
#: subscriptions are removed at its entry peer at once). The simulator keeps expiry off.
RUNTIME_OVERLAY = OverlayConfig(refresh_s=30.0, expire_after_s=90.0)


@dataclass(frozen=True, slots=True)
class PeerConfig:
    host: str = "127.0.0.1"
    #: 0: let the OS pick a free port (the bound one is in ``PeerRuntime.address``).
    port: int = 0
    capacity: int = 100
    #: The substrate: "pastry", or "kademlia" (the overlay routes with the Kademlia core, and
    #: the kademlia package's own server answers Kademlia RPCs on the same port over UDP).
    dht: str = "pastry"
    pastry: PastryConfig = RUNTIME_PASTRY
    #: Signed end-to-end acks (``dht.notary``, ``--signed-acks``): a hop that drops a routed
    #: message cannot answer for its root. Off by default: on the 32-peer one-process bench
    #: it cost 12% of the sustained event rate and 20% more bytes per event (docs/runtime.md).
    signed_acks: bool = False
    kademlia: KademliaConfig = RUNTIME_KADEMLIA
    #: With ``dht="kademlia"``: also run the kademlia package's server (UDP, same port number),
    #: so plain Kademlia nodes can bootstrap from this peer and share its key/value store.
    kademlia_rpc: bool = True
    overlay: OverlayConfig = RUNTIME_OVERLAY
    #: Per connection, and per signing peer: frames per second and burst before frames are
    #: dropped as a flood.
    rate_per_s: float = 20_000.0
    burst: float = 40_000.0
    #: A connection that has had this many frames refused by the rate limit is closed.
    flood_close_after: int = 100_000
    #: Frames queued per destination before new ones are dropped.
    send_queue: int = 8192
    #: Several messages per link frame, hop acks coalesced (``runtime/batching.py``).
    batching: BatchConfig = field(default_factory=BatchConfig)
    connect_timeout_s: float = 3.0
    #: After a failed connect, frames to that destination are dropped for this long.
    retry_after_s: float = 1.0
    idle_close_s: float = 120.0
    #: Seed of the core's random generator (ids of messages, probe choices); None: from the OS.
    seed: int | None = None
    #: How often the known peers are written to the state directory, for rejoining.
    save_every_s: float = 30.0
    #: When no contact answers (or a join through them fails): try them again, waiting
    #: 1, 2, 4, ... up to this many seconds between rounds, logging each; 0: give up at once.
    join_retry_max_s: float = 0.0
    #: When no contact answers: start a new overlay alone instead of retrying or failing.
    alone_if_unreachable: bool = False
    #: Descriptors kept free for links, state saves and the kademlia server: incoming
    #: connections beyond the process's descriptor limit minus this are refused at once.
    fd_reserve: int = 64
    #: The heartbeat's period, and the clock jump between two wake-ups taken as a pause of
    #: the whole process; after one, timers wait ``drain_s`` for the queued input.
    tick_s: float = 0.5
    pause_s: float = 2.0
    drain_s: float = 1.0
    #: What clients may cost and when publishes are refused (``runtime/quotas.py``).
    quotas: Quotas = DEFAULT_QUOTAS
    #: The id puzzle (runtime.identity): leading zero bits asked of every peer's key. A peer
    #: refuses links and frames from keys below its own setting, whatever theirs is, so every
    #: peer of a swarm should use the same; this peer's own key must meet it.
    id_difficulty: int = DEFAULT_ID_DIFFICULTY
    #: Limits on untrusted peers: second-hand routing entries, outgoing links and connects,
    #: link-handshake openings per source address (``runtime.candidates``).
    trust: TrustConfig = field(default_factory=TrustConfig)
    #: Client tokens the client API requires (``runtime/tokens.py``); None: anyone may use it.
    client_tokens: ClientTokens | None = None
    #: Peer admission: the swarm key every link handshake must prove, both ways
    #: (``SwarmKey``, ``runtime/guard.py``); None: off, any peer may link and join.
    swarm_key: SwarmKey | None = None

    def __post_init__(self) -> None:
        if self.dht not in DHTS:
            raise LocalProtocolError(f"dht must be one of {', '.join(DHTS)}, got {self.dht!r}")
        if self.capacity < 1:
            raise FieldError("capacity", self.capacity, "must be >= 1 (subscriptions a leaf holds)")
        check_difficulty(self.id_difficulty)

    @property
    def dht_config(self) -> DhtConfig:
        """The chosen substrate's configuration (``pastry`` or ``kademlia``)."""
        kind = substrate(self.dht).config_type
        return self.pastry if isinstance(self.pastry, kind) else self.kademlia


# ------------------------------------------------------------------ knobs for tests only

#: Test-only: ``name=value,...`` applied to every peer's ``PeerConfig`` (see ``tuned``). Real
#: peer processes started by a test (``peer start``, ``swarm up``) inherit it from the
#: environment; no command-line option or network input reaches it.
TUNING_ENV = "RANGECAST_TEST_TUNING"
#: Test-only: ``Type:n``, the n-th ``Type`` message (a DHT message class name such as ``Ping``)
#: given to the core raises instead of being handled, to test the barrier (``_feed``); or
#: ``drop-all`` (``DROP_ALL``): the peer acknowledges every routed hop and drops every routed and
#: direct message instead of handling or forwarding it (a dropping peer, for the e2e tests);
#: ``forge-done`` (``FORGE_DONE``): the same with routed messages only, answering each one's
#: ``RouteDone`` itself, signed as if it were the key's root; ``stall`` (``STALL``): the same,
#: asking the hop before it for more time (``RouteWait``) for every message it holds, every
#: ``tick_s``;
#: ``drop-direct`` (``DROP_DIRECT``): it routes honestly and drops every direct message (the
#: hand-offs, replica copies, notifications and relays sent to it), answering none.
FAULT_ENV = "RANGECAST_TEST_FAULT"
DROP_ALL = "drop-all"
DROP_DIRECT = "drop-direct"
FORGE_DONE = "forge-done"
STALL = "stall"
#: Messages a ``stall`` fault keeps asking time for (the most recent).
STALL_HELD = 1024
_TUNABLE_PARTS = ("pastry", "kademlia", "overlay", "quotas", "batching", "trust")
#: What reaching a peer (connect and link handshake) may raise, whatever the far end does:
#: refuse, accept and close, reset, time out, answer garbage.
UNREACHABLE = (
    OSError,
    trio.TooSlowError,
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    RemoteProtocolError,
)


def _coerce(name: str, old: object, text: str) -> object:
    if isinstance(old, bool):
        if text.lower() not in ("true", "false", "1", "0"):
            raise ValueError(f"{name} must be true or false, got {text!r}")
        return text.lower() in ("true", "1")
    if isinstance(old, int):
        return int(text)
    if isinstance(old, float):
        value = float(text)
        if math.isnan(value):
            raise ValueError(f"{name} must be a number, got {text!r}")
        return value
    if isinstance(old, str):
        return text
    raise ValueError(f"{name} cannot be tuned")


def tuned(cfg: PeerConfig, spec: str) -> PeerConfig:
    """``cfg`` with the comma-separated ``name=value`` pairs of ``spec`` applied: ``name`` is a
    ``PeerConfig`` field (``tick_s``) or a part and one of its fields (``pastry.keepalive_s``,
    ``kademlia.ack_floor_s``, ``overlay.refresh_s``). For tests that need a peer process with
    short timers; a bad spec is one line naming ``RANGECAST_TEST_TUNING``."""
    # Any: each value is coerced to the type of the field it replaces (``_coerce``).
    parts: dict[str, dict[str, Any]] = {}
    top: dict[str, Any] = {}
    try:
        for item in filter(None, (s.strip() for s in spec.split(","))):
            name, sep, text = item.partition("=")
            name = name.strip()
            if not sep:
                raise ValueError(f"{item!r} is not name=value")
            part, dot, key = name.partition(".")
            if dot:
                if part not in _TUNABLE_PARTS or not hasattr(getattr(cfg, part), key):
                    raise ValueError(f"unknown setting {name!r}")
                old = getattr(getattr(cfg, part), key)
                parts.setdefault(part, {})[key] = _coerce(name, old, text.strip())
            else:
                if part in _TUNABLE_PARTS or not hasattr(cfg, part):
                    raise ValueError(f"unknown setting {name!r}")
                top[part] = _coerce(name, getattr(cfg, part), text.strip())
        changed = {p: replace(getattr(cfg, p), **kw) for p, kw in parts.items()}
        return replace(cfg, **top, **changed)
    except (ValueError, LocalProtocolError) as exc:
        raise LocalProtocolError(f"{TUNING_ENV}: {exc}") from None


class _Fault:
    """``RANGECAST_TEST_FAULT``: which message to fail (see ``FAULT_ENV``); or, for a peer in a
    test's process (``PeerRuntime.cut_off``), the peers whose messages are lost (a partition)."""

    __slots__ = ("cut", "drop_direct", "drop_routes", "held", "kind", "left")

    def __init__(self, spec: str, cut: frozenset[bytes] = frozenset()) -> None:
        self.cut = cut
        self.drop_routes = spec in (DROP_ALL, FORGE_DONE, STALL)
        self.drop_direct = spec in (DROP_ALL, DROP_DIRECT)
        #: ``stall``: (uid, the hop it came from) of the messages held.
        self.held: dict[int, bytes] = {}
        if cut:
            self.kind, self.left = "cut", 0
            return
        if self.drop_routes or self.drop_direct:
            self.kind, self.left = spec, 0
            return
        kind, _, n = spec.partition(":")
        try:
            self.left = int(n or "1")
        except ValueError:
            raise LocalProtocolError(f"{FAULT_ENV}: {spec!r} is not Type:n") from None
        if not kind or self.left < 1:
            raise LocalProtocolError(f"{FAULT_ENV}: {spec!r} is not Type:n")
        self.kind = kind

    def check(self, msg: Message) -> None:
        if type(msg).__name__ != self.kind or self.left <= 0:
            return
        self.left -= 1
        if self.left == 0:
            raise RuntimeError(f"fault injected by {FAULT_ENV} while handling {self.kind}")


class _Link:
    """The pooled outgoing connection to one destination."""

    __slots__ = ("addr", "broken", "down_until", "rtt_ms", "rx", "scope", "sent", "tx", "used")

    def __init__(self, addr: PeerAddress, size: int) -> None:
        self.addr = addr
        #: Last frame queued (for the least-recently-used eviction), and what cancels the task.
        self.used = -math.inf
        self.scope = trio.CancelScope()
        self.tx, self.rx = trio.open_memory_channel[QueueItem](size)
        self.rtt_ms = 1.0
        self.down_until = -math.inf
        self.sent = 0
        #: The far end closed the connection (it exited, or restarted): reconnect before sending.
        self.broken = False


@dataclass(slots=True)
class TransportStats:
    frames_in: int = 0
    frames_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    connections_in: int = 0
    connects: int = 0
    connect_failures: int = 0
    #: Messages we could not send (destination unreachable, queue full, connection broke).
    dropped_out: int = 0
    #: Of those, frames dropped because the destination's link queue was full.
    dropped_queue_full: int = 0
    #: Core messages carried by the frames (a ``Batch`` frame carries several).
    messages_in: int = 0
    messages_out: int = 0


class PeerRuntime:
    """One peer. ``await nursery.start(peer.run)`` binds, joins and returns once it routes."""

    def __init__(
        self,
        identity: Identity,
        schemas: SchemaRegistry,
        config: PeerConfig | None = None,
        *,
        state: StateDir | None = None,
        epoch: int | None = None,
    ) -> None:
        self.identity = identity
        self.schemas = schemas
        cfg = config or PeerConfig()
        spec = os.environ.get(TUNING_ENV)
        if spec:
            cfg = tuned(cfg, spec)
            log.warning("%s in effect (for tests only): %s", TUNING_ENV, spec)
        self.cfg = cfg
        if not meets_puzzle(identity.node_id, cfg.id_difficulty):
            # Every peer would refuse it: say so now rather than fail to join.
            raise LocalProtocolError(
                f"this peer's key solves the id puzzle at {puzzle_bits(identity.node_id)} bits; "
                f"the swarm asks for {cfg.id_difficulty} (Identity.generate(difficulty))"
            )
        fault = os.environ.get(FAULT_ENV)
        self._fault = _Fault(fault) if fault else None
        if fault:
            log.warning("%s in effect (for tests only): %s", FAULT_ENV, fault)
        self.state_dir = state
        self.epoch = epoch if epoch is not None else time.time_ns() // 1000
        seed = self.cfg.seed if self.cfg.seed is not None else int.from_bytes(os.urandom(8))
        self.rng = random.Random(seed)
        self.rejections = Rejections()
        self.transport = TransportStats()
        self.clients = ClientLedger(cfg.quotas, self.rejections)
        self.address: PeerAddress | None = None
        self.core: OverlayPeer | None = None
        #: ``core.dht`` as the concrete node it is (the core only knows it as a ``DhtCore``).
        self._node: DhtNode | None = None
        self._links: dict[bytes, _Link] = {}
        self._owners: dict[int, Owner] = {}
        self._local: list[Message] = []
        self._timer_scope = trio.CancelScope()
        self._ready = trio.Event()
        self._stopping = trio.Event()
        #: Set when ``run`` has returned (after a graceful leave or a crash).
        self.stopped = trio.Event()
        self._nursery: trio.Nursery | None = None
        # The stack's codecs, built once: the cores' (the overlay on the DHT), and the one for
        # whole frames on a connection (the cores' tables and the runtime's).
        self._codec = codec_for(*OverlayPeer.TABLES)
        self._wire = wire_codec(*OverlayPeer.TABLES)
        #: Bugs met while handling one input (logged with their traceback); the peer went on.
        self.internal_errors = 0
        #: Messages the ``drop-all`` test fault dropped.
        self.fault_dropped = 0
        self.save_failures = 0
        #: Times the peer noticed it had not been able to run (``_check_pause``).
        self.pauses = 0
        self._alive_at = 0.0
        self._drain_until = -math.inf
        #: Incoming connections open now, and those refused for want of descriptors.
        self._open_in = 0
        self.refused_in = 0
        self._gate: Gate | None = None
        trust = self.cfg.trust
        self._caps = LinkCaps(trust, self.cfg.retry_after_s)
        self._second_hand = SecondHand(trust, self.rejections, 0.0)
        self._handshakes = AddressLimiter(trust.handshake_per_s, trust.handshake_burst)
        self._probe_wakeup = trio.Event()
        self._started = 0.0
        #: The kademlia package's server (``dht="kademlia"`` with ``kademlia_rpc``).
        self.kademlia: KademliaService | None = None
        #: The contact a join waits on, and why its link handshake was refused (if it was):
        #: the join then fails at once, naming the contact (``_join_round``).
        self._joining: bytes | None = None
        self._join_refused: str | None = None
        self._join_wakeup = trio.Event()

    # ------------------------------------------------------------------------------ lifecycle

    @property
    def addr(self) -> bytes:
        if self.address is None:
            raise LocalProtocolError("the peer is not running yet")
        return self.address.to_bytes()

    @property
    def dht(self) -> DhtNode:
        if self._node is None:
            raise LocalProtocolError("the peer is not running yet")
        return self._node

    async def run(
        self,
        contacts: list[tuple[str, int]] | None = None,
        *,
        task_status: trio.TaskStatus[PeerRuntime] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Listen, join through the first of ``contacts`` that answers (or start a new overlay
        if there are none), report started once the node routes, then serve until ``stop()``."""
        try:
            listeners = await trio.open_tcp_listeners(self.cfg.port, host=self.cfg.host)
        except OSError as exc:
            host = f"[{self.cfg.host}]" if ":" in self.cfg.host else self.cfg.host
            raise LocalProtocolError(
                f"cannot listen on {host}:{self.cfg.port}: {exc.strerror or exc}"
            ) from None
        port = listeners[0].socket.getsockname()[1]
        self.address = PeerAddress(self.identity.node_id, self.cfg.host, port)
        addr = self.address.to_bytes()
        self._fresh_core()
        self._gate = Gate(
            addr,
            self.rejections,
            wire=self._wire,
            rate_per_s=self.cfg.rate_per_s,
            burst=self.cfg.burst,
            id_difficulty=self.cfg.id_difficulty,
            # Envelopes sealed before this boot may have been accepted by an earlier one.
            not_before=self.epoch,
            swarm_key=self.cfg.swarm_key,
        )
        self._started = trio.current_time()
        try:
            await self._serve(listeners, contacts, task_status)
        finally:
            if self.kademlia is not None:
                with trio.CancelScope(shield=True):
                    await self.kademlia.stop()
            self.stopped.set()

    async def _serve(
        self,
        listeners: list[trio.SocketListener],
        contacts: list[tuple[str, int]] | None,
        task_status: trio.TaskStatus[PeerRuntime],
    ) -> None:
        assert self.address is not None
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for listener in listeners:
                nursery.start_soon(self._accept_loop, listener)
            self._alive_at = trio.current_time()
            nursery.start_soon(self._timer_loop)
            nursery.start_soon(self._heartbeat)
            nursery.start_soon(self.clients.probe_lag)
            nursery.start_soon(self._probe_loop)
            log.info("peer %s listening on %s", self.identity.node_id.hex(), self.address.endpoint)
            await self._enter(contacts or [])
            if substrate(self.cfg.dht).kademlia_ids and self.cfg.kademlia_rpc:
                self.kademlia = KademliaService(
                    self.identity.node_id, ksize=self.cfg.kademlia.k, alpha=self.cfg.kademlia.alpha
                )
                await self.kademlia.start(self.cfg.host, self.address.port, contacts or [])
            self._save_state()
            if self.state_dir is not None:
                nursery.start_soon(self._save_loop)
            task_status.started(self)
            await self._stopping.wait()
            await self._leave()
            nursery.cancel_scope.cancel()

    def _fresh_core(self) -> None:
        """A core in its initial state (at start, and before each new join attempt: a core
        whose join failed cannot join again)."""
        dht = make_dht(
            self.cfg.dht,
            self.identity.int_id,
            self.addr,
            self.rng,
            codec=self._codec,
            config=self.cfg.dht_config,
            proximity=self._rtt,
        )
        # Replica sets spread across /24s and /48s: one network's many ids cannot hold every
        # copy of a tree node (``dht.locality``).
        dht.locality = lambda peer: address_group(peer.addr)
        if self.cfg.signed_acks:
            # End-to-end acks signed by the root, so a hop cannot answer for it (dht.notary).
            dht.notary = Ed25519Notary(self.identity)
        self._node = dht
        self.core = OverlayPeer(
            dht,
            schemas=self.schemas,
            capacity=self.cfg.capacity,
            rng=self.rng,
            overlay=self.cfg.overlay,
        )

    def stop(self) -> None:
        """Leave gracefully: tell the neighbours, flush the links, return from ``run``."""
        self._stopping.set()

    def crash(self) -> None:
        """Stop at once without telling anyone (tests of failure detection)."""
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    @property
    def ready(self) -> bool:
        """The peer has joined (or started) an overlay and routes."""
        return self._ready.is_set()

    async def wait_ready(self) -> None:
        await self._ready.wait()

    async def _enter(self, contacts: list[tuple[str, int]]) -> None:
        """Join through ``contacts``; if none of them gets us in, retry with backoff
        (``join_retry_max_s``), start alone (``alone_if_unreachable``) or give up."""
        if not contacts:
            self._start_alone("started a new overlay")
            return
        delay = 1.0
        while True:
            errors = await self._join_round(contacts)
            if errors is None:
                return
            why = "could not join: " + "; ".join(errors or ["no contact given"])
            if self.cfg.alone_if_unreachable:
                self._fresh_core()
                self._start_alone(f"{why}; started a new overlay alone, as told")
                return
            if self.cfg.join_retry_max_s <= 0:
                raise LocalProtocolError(why)
            log.warning("%s; trying again in %.0f s", why, delay)
            await trio.sleep(delay)
            delay = min(2.0 * delay, self.cfg.join_retry_max_s)
            self._fresh_core()

    def _start_alone(self, message: str) -> None:
        self.dht.start_alone(trio.current_time())
        self._pump()
        log.info("%s", message)

    async def _join_round(self, contacts: list[tuple[str, int]]) -> list[str] | None:
        """One pass over the contacts; None once joined, else what went wrong with each."""
        errors: list[str] = []
        for host, port in contacts:
            try:
                hello = await hello_peer(host, port, self.cfg.connect_timeout_s)
            except (
                OSError,
                RemoteProtocolError,
                trio.TooSlowError,
                trio.BrokenResourceError,
                trio.ClosedResourceError,
            ) as exc:
                errors.append(f"{host}:{port}: {exc or type(exc).__name__}")
                continue
            if hello.addr == self.addr:
                continue
            dht = self.dht
            if dht.state is not State.IDLE:
                self._fresh_core()  # the previous contact's join failed: start over
                dht = self.dht
            log.info("joining through %s", PeerAddress.from_bytes(hello.addr))
            # A contact that refuses our link handshake (a swarm key we lack, or another) ends
            # the join at once, named, rather than after the join's timeout.
            self._joining, self._join_refused = hello.addr, None
            self._join_wakeup = trio.Event()
            dht.join(hello.addr, trio.current_time())
            self._pump()
            try:
                while True:
                    with trio.move_on_after(1.0):
                        await _first_of(self._ready, self._join_wakeup)
                    if dht.state is State.READY:
                        log.info(
                            "joined: %d neighbours, %d contacts",
                            len(dht.neighbours()),
                            len(dht.known_peers()),
                        )
                        return None
                    if self._join_refused is not None or dht.state is State.FAILED:
                        break
            finally:
                self._joining = None
            errors.append(f"{host}:{port}: {self._join_refused or 'join timed out'}")
        return errors

    async def _leave(self) -> None:
        if self.core is None:
            return
        self._save_state()
        self.core.dht.leave(trio.current_time())
        self._pump()
        # Flush: every link sends what it has queued (the Leave notices among it), bounded.
        with trio.move_on_after(2.0):
            while any(link.rx.statistics().current_buffer_used for link in self._links.values()):
                await trio.sleep(0.02)
        log.info("left the overlay")

    # ------------------------------------------------------------------------------ the pump

    def _pump(self) -> None:
        """Move the core's outputs out: messages to links, events to owners, the timer."""
        core = self.core
        assert core is not None
        while True:
            for dst, msg in core.take_messages():
                self._send(dst, msg)
            for ev in core.take_events():
                self._on_app_event(ev)
            if not self._local:
                break
            # Messages to ourselves (a leaf whose subscriber is this peer) skip the network.
            local, self._local = self._local, []
            now = trio.current_time()
            for msg in local:
                core.receive(msg, self.addr, now)
        deadline = core.get_timer()
        if deadline is not None and deadline < self._timer_scope.deadline:
            self._timer_scope.deadline = deadline
        if not self._ready.is_set() and core.dht.state is State.READY:
            self._ready.set()

    def _send(self, dst: bytes, msg: Message) -> None:
        if dst == self.addr:
            self._local.append(msg)
            return
        link = self._links.get(dst)
        now = trio.current_time()
        if link is None:
            try:
                where = PeerAddress.from_bytes(dst)
            except RemoteProtocolError:
                # An address some peer told us about that is not one: its fault, count it.
                self.rejections.add("unusable address learnt")
                return
            if not self._room_for_link(dst, now):
                self.transport.dropped_out += 1
                return
            link = _Link(where, self.cfg.send_queue)
            self._links[dst] = link
            assert self._nursery is not None
            self._nursery.start_soon(self._link_loop, link)
        link.used = now
        if now < link.down_until:
            self.transport.dropped_out += 1
            return
        item: QueueItem
        if type(msg) is HopAck:
            item = msg.uid  # the link coalesces acks (``runtime/batching.py``)
        elif type(msg) is RouteDone and not msg.proof:
            item = done_item(msg.uid)  # unsigned: as compact as a hop ack
        else:
            try:
                item = self._codec.encode(msg)
            except LocalProtocolError:
                log.exception("cannot encode %s", type(msg).__name__)
                return
        try:
            # Authenticated in the link's task, which holds the session key.
            link.tx.send_nowait(item)
        except trio.WouldBlock:
            self.transport.dropped_out += 1
            self.transport.dropped_queue_full += 1

    def _room_for_link(self, dst: bytes, now: float) -> bool:
        """Whether a new link to ``dst`` may open: its endpoint is not backed off, and the
        link table has room (made by closing the least recently used idle link)."""
        caps = self._caps
        if caps.backed_off(dst, now):
            caps.refuse("endpoint backed off")
            return False
        if len(self._links) < self.cfg.trust.max_links:
            return True
        idle = (
            (a, lk.used)
            for a, lk in self._links.items()
            if not lk.rx.statistics().current_buffer_used
        )
        victim = caps.victim(idle)
        if victim is None:
            return False
        self._links.pop(victim).scope.cancel()
        return True

    def _on_app_event(self, ev: Any) -> None:
        if isinstance(ev, EventDelivered):
            for sid in ev.sids:
                owner = self._owners.get(sid)
                if owner is not None:
                    owner.deliver(sid, ev)
        elif isinstance(ev, SubscriptionInstalled):
            owner = self._owners.get(ev.sid)
            if owner is not None:
                owner.installed(ev.sid)
        elif isinstance(ev, SubscriptionRefused):
            owner = self._owners.get(ev.sid)
            if owner is not None:
                owner.refused(ev.sid, ev.reason)
        elif isinstance(ev, SubscriptionRemoved):
            owner = self._owners.pop(ev.sid, None)
            if owner is not None:
                owner.removed(ev.sid)
        elif isinstance(ev, PieceStored):
            pass

    # ------------------------------------------------------------------------------ API calls

    @contextlib.contextmanager
    def _api_barrier(self, what: str) -> Iterator[None]:
        """The caller's mistakes (``LocalProtocolError``, ``SchemaError``) reach the caller;
        anything else is our bug: logged and counted, and the caller gets a one-line error
        while the peer serves on."""
        try:
            yield
        except (LocalProtocolError, SchemaError):
            raise
        except Exception as exc:
            self._internal_error("in %s", what, exc=exc)
            raise LocalProtocolError(f"internal error in {what} (see the peer's log)") from None

    def subscribe(self, sub: Subscription, owner: Owner) -> int:
        """Install ``sub`` for ``owner``; its ``installed`` is called once every piece is
        acknowledged, its ``deliver`` for each matching event."""
        with self._api_barrier("subscribe"):
            core = self._running()
            sid = core.overlay.subscribe(sub, trio.current_time())
            self._owners[sid] = owner
            self._pump()
            return sid

    def unsubscribe(self, sid: int) -> None:
        with self._api_barrier("unsubscribe"):
            core = self._running()
            if sid not in self._owners:
                raise LocalProtocolError(f"no subscription {sid} here")
            core.overlay.unsubscribe(sid, trio.current_time())
            self._pump()

    def subscription(self, sid: int) -> Subscription | None:
        """Our subscription ``sid`` as installed (None: not here, or the peer is stopped)."""
        return self.core.overlay.subscriptions().get(sid) if self.core is not None else None

    def forget(self, sid: int) -> None:
        """Unsubscribe without telling the owner (it went away)."""
        if self._owners.pop(sid, None) is not None and self.core is not None:
            try:
                with self._api_barrier("unsubscribe"):
                    self.core.overlay.unsubscribe(sid, trio.current_time())
                    self._pump()
            except LocalProtocolError:
                return

    def backlog(self) -> int:
        """Messages queued on the outgoing links, not yet written (the admission's measure)."""
        return sum(link.tx.statistics().current_buffer_used for link in self._links.values())

    def publish(self, schema: str, values: dict[str, float | None]) -> int:
        """Validate ``values`` against the schema and publish; returns the event id."""
        with self._api_barrier("publish"):
            core = self._running()
            sch: Schema = self.schemas.get(schema)
            eid = core.overlay.publish(sch.name, sch.event(values), trio.current_time())
            self._pump()
            return eid

    async def store(self, key: str | bytes, value: bytes | str | int | float) -> bool:
        """Kademlia mode: store ``value`` under ``key`` in the Kademlia network's key/value
        store (the package's ``set``: on the k nodes closest to SHA-1(key))."""
        return await self._kademlia_service().store(key, value)

    async def fetch(self, key: str | bytes) -> bytes | str | int | float | None:
        """Kademlia mode: the value under ``key`` (the package's ``get``), or None."""
        return await self._kademlia_service().fetch(key)

    def _kademlia_service(self) -> KademliaService:
        if self.kademlia is None:
            raise LocalProtocolError(
                "no Kademlia key/value store: the peer runs with --dht pastry (or without "
                "kademlia_rpc)"
            )
        return self.kademlia

    def _running(self) -> OverlayPeer:
        if self.core is None or self.core.dht.state is not State.READY:
            raise LocalProtocolError("the peer is not part of an overlay (not joined yet, or left)")
        return self.core

    # ------------------------------------------------------------------------------ timers

    async def _timer_loop(self) -> None:
        while True:
            core = self.core  # replaced when a failed join starts over
            assert core is not None
            deadline = core.get_timer()
            self._timer_scope = trio.CancelScope(
                deadline=deadline if deadline is not None else math.inf
            )
            with self._timer_scope:
                await trio.sleep_forever()
            core = self.core
            assert core is not None
            now = trio.current_time()
            self._check_pause(now)
            if now < self._drain_until:
                # Just resumed: read what queued up on the connections before any deadline
                # (a keep-alive's verdict, a hop ack's timeout) is judged.
                await trio.sleep_until(self._drain_until)
                now = trio.current_time()
            try:
                core.handle_timer(now)
                self._pump()
            except Exception as exc:
                self._internal_error("in a timer", exc=exc)

    async def _heartbeat(self) -> None:
        """Notice a pause even while no core deadline is near (see ``_check_pause``)."""
        while True:
            await trio.sleep(self.cfg.tick_s)
            self._check_pause(trio.current_time())
            if self._fault is not None:
                self._stall()

    def _check_pause(self, now: float) -> None:
        """A jump of the clock between two of our own wake-ups means the process could not run
        (SIGSTOP, a suspended machine, starvation): tell the core, which moves its deadlines on
        by the gap, and hold the timers for ``drain_s`` while the readers catch up."""
        gap = now - self._alive_at
        self._alive_at = now
        if gap <= self.cfg.pause_s or self.core is None:
            return
        self.pauses += 1
        log.warning("the peer could not run for %.1f s (paused?): deadlines move on", gap)
        self.core.dht.resumed(gap)
        self._drain_until = now + self.cfg.drain_s

    async def _save_loop(self) -> None:
        while True:
            await trio.sleep(self.cfg.save_every_s)
            self._save_state()

    def _save_state(self) -> None:
        """Remember where we listened and whom we knew, to rejoin after a restart. A save
        that fails (a full disk, no descriptor left, a read-only directory) is logged and
        tried again at the next period: it never ends the peer."""
        if self.state_dir is None or self.core is None or self.address is None:
            return
        try:
            peers = [PeerAddress.from_bytes(p.addr) for p in self.core.dht.neighbours()]
            data = self.state_dir.read()
            data["address"] = self.address.endpoint
            data["known_peers"] = sorted({p.endpoint for p in peers})
            self.state_dir.write(data)
        except (OSError, RangecastError) as exc:
            self.save_failures += 1
            log.warning("cannot save the peer's state in %s: %s", self.state_dir.path, exc)

    # ------------------------------------------------------------------------------ outgoing

    def _rtt(self, peer: Peer) -> float:
        link = self._links.get(peer.addr)
        return link.rtt_ms if link is not None else 1.0

    async def _link_loop(self, link: _Link) -> None:
        try:
            with link.scope:  # cancelled when the link is evicted to make room
                async with trio.open_nursery() as watchers:
                    await self._link_send(link, watchers)
                    watchers.cancel_scope.cancel()
        except Exception as exc:
            # A link is one destination's business: whatever breaks it (a transport error we
            # did not foresee, a bug) closes that link only, never the peer.
            self._internal_error("link to %s", link.addr, exc=exc)
            if self._links.get(link.addr.to_bytes()) is link:
                del self._links[link.addr.to_bytes()]

    async def _link_send(self, link: _Link, watchers: trio.Nursery) -> None:
        stream: trio.SocketStream | None = None
        session: OutSession = _NO_SESSION
        stats = self.transport
        bcfg = self.cfg.batching
        # An ack delayed by a tenth of the deadline it is awaited by is never what misses it.
        ack_delay = min(bcfg.ack_delay_s, self.cfg.dht_config.ack_floor_s / 10)
        try:
            while True:
                with trio.move_on_after(self.cfg.idle_close_s):
                    first = await link.rx.receive()
                    batch = [first]
                    if bcfg.enabled:
                        # One tick: let the tasks already runnable queue theirs, to ride along.
                        await trio.sleep(0)
                    _drain(link, batch, bcfg.drain)
                    if bcfg.enabled and ack_delay > 0 and only_acks(batch):
                        # Hop acks only: wait a little for other traffic to the same peer.
                        with trio.move_on_after(ack_delay):
                            while len(batch) < bcfg.drain:
                                batch.append(await link.rx.receive())
                                if type(batch[-1]) is bytes:
                                    break  # company: send now
                        _drain(link, batch, bcfg.drain)
                    if stream is not None and link.broken:
                        await _aclose_quietly(stream)
                        stream = None
                    if stream is None:
                        t0 = trio.current_time()
                        if not self._caps.may_connect(link.addr.to_bytes(), t0):
                            stats.dropped_out += len(batch)
                            continue
                        try:
                            with (
                                self._caps.connecting(),
                                trio.fail_after(self.cfg.connect_timeout_s),
                            ):
                                stream = await trio.open_tcp_stream(link.addr.host, link.addr.port)
                                link.rtt_ms = max((trio.current_time() - t0) * 1000.0, 0.05)
                                session = await self._handshake(link, stream)
                        except UNREACHABLE as exc:
                            # Whatever the far end does (refuse, accept and close, reset,
                            # answer garbage) costs this batch and nothing else.
                            stats.connect_failures += 1
                            stats.dropped_out += len(batch)
                            link.down_until = self._caps.failed(
                                link.addr.to_bytes(), trio.current_time()
                            )
                            log.debug("cannot reach %s: %s", link.addr, exc)
                            if isinstance(exc, HandshakeRefused) and self._joining == (
                                link.addr.to_bytes()
                            ):
                                self._join_refused = str(exc)
                                self._join_wakeup.set()
                            if stream is not None:
                                await _aclose_quietly(stream)
                                stream = None
                            continue
                        stats.connects += 1
                        self._proved(link.addr.to_bytes())
                        link.broken = False
                        watchers.start_soon(self._watch_link, link, stream)
                    payloads = pack(batch, bcfg, self._wire)
                    data = b"".join([frame(session.wrap(body)) for body in payloads])
                    try:
                        await stream.send_all(data)
                    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                        stats.dropped_out += len(batch)
                        await _aclose_quietly(stream)
                        stream = None
                        continue
                    stats.frames_out += len(payloads)
                    stats.messages_out += len(batch)
                    stats.bytes_out += len(data)
                    link.sent += len(batch)
                    continue
                # Idle for idle_close_s: close, and let the next message open a fresh link.
                if self._links.get(link.addr.to_bytes()) is link:
                    del self._links[link.addr.to_bytes()]
                return
        finally:
            if stream is not None:
                await _aclose_quietly(stream)

    async def _handshake(self, link: _Link, stream: trio.SocketStream) -> OutSession:
        """Open an authenticated session on a fresh link (one round trip)."""
        key = self.cfg.swarm_key
        init = SessionInitiator(self.identity, self.addr, link.addr.to_bytes(), self._wire, key)
        await stream.send_all(frame(init.open_frame))
        try:
            raw = await read_frame(stream, FrameReader())
        except trio.BrokenResourceError:
            # Closed instead of answered: what a keyed peer does with an opening that does not
            # prove its key (or a peer with an opening it refuses for its rate).
            hint = "does it hold another --swarm-key?" if key else "does it need --swarm-key?"
            why = f"closed the connection at our link handshake ({hint})"
            raise HandshakeRefused(why) from None
        try:
            reply = self._wire.decode(raw)
        except WireError as exc:
            raise RemoteProtocolError(f"bad session answer: {exc}") from None
        try:
            return init.finish(reply, self.addr, self.cfg.id_difficulty)
        except IdPuzzleFailed:
            self.rejections.add(ID_PUZZLE)
            log.info("refused a link to %s: its key does not solve the id puzzle", link.addr)
            raise
        except SwarmKeyRefused as exc:
            self.rejections.add(exc.reason)
            log.info("refused a link to %s: it %s", link.addr, exc)
            raise

    async def _watch_link(self, link: _Link, stream: trio.SocketStream) -> None:
        """Peers never answer on a connection they accepted, so anything readable on ours is
        the far end closing it (or garbage, refused). Without this, frames written into a
        connection whose peer restarted would vanish until TCP noticed."""
        try:
            while True:
                data = await stream.receive_some(4096)
                if not data:
                    break
                self.rejections.add("data on an outgoing link")
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        link.broken = True

    # ------------------------------------------------------------------------------ incoming

    async def _accept_loop(self, listener: trio.SocketListener) -> None:
        """``trio.serve_listeners`` plus a cap: incoming connections beyond the descriptor
        limit (minus ``fd_reserve``) are accepted and closed at once, and counted, so that a
        crowd of idle clients cannot starve the links, the state saves or the old clients."""
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        cap = math.inf if soft == resource.RLIM_INFINITY else max(soft - self.cfg.fd_reserve, 8)
        async with trio.open_nursery() as handlers:
            while True:
                try:
                    stream = await listener.accept()
                except OSError as exc:
                    if exc.errno not in _OUT_OF_DESCRIPTORS:
                        raise
                    # Out of descriptors all the same (links, other files): the connection
                    # waits in the backlog; try again shortly rather than spin.
                    self.refused_in += 1
                    self.rejections.add("accept failed: out of descriptors")
                    await trio.sleep(0.1)
                    continue
                if self._open_in >= cap:
                    self.refused_in += 1
                    self.rejections.add("connection refused: descriptor limit")
                    await _aclose_quietly(stream)
                    continue
                handlers.start_soon(self._serve_connection, stream)

    async def _serve_connection(self, stream: trio.SocketStream) -> None:
        self._open_in += 1
        try:
            await self._serve_connection_inner(stream)
        finally:
            self._open_in -= 1

    async def _serve_connection_inner(self, stream: trio.SocketStream) -> None:
        stats = self.transport
        stats.connections_in += 1
        # Quotas per client address, and the idle and half-frame deadlines (runtime/quotas.py).
        conn = self.clients.admit(remote_host(stream), trio.current_time())
        if conn is None:
            await _aclose_quietly(stream)
            return
        reader = FrameReader()
        bucket = TokenBucket(self.cfg.rate_per_s, self.cfg.burst, trio.current_time())
        rate_limited = 0
        session: ClientSession | None = None
        link: InSession | None = None
        rej = self.rejections
        try:
            async with trio.open_nursery() as conn_nursery:
                conn_nursery.cancel_scope.deadline = conn.deadline
                async for data in stream:
                    stats.bytes_in += len(data)
                    try:
                        frames = reader.feed(data)
                    except FrameTooLarge:
                        rej.add("oversized frame")
                        break  # the stream cannot be resynchronised: close the connection
                    conn.fed(trio.current_time(), len(frames), reader.buffered)
                    for f in frames:
                        stats.frames_in += 1
                        if not bucket.allow(trio.current_time()):
                            rej.add("rate limited")
                            rate_limited += 1
                            if rate_limited >= self.cfg.flood_close_after:
                                rej.add("flooding connection closed")
                                return
                            continue
                        try:
                            msg = self._wire.decode(f)
                        except WireError:
                            rej.add("malformed frame")
                            continue
                        conn.greeted = True
                        # ``type(msg) is``: exact types, and what mypy narrows ``msg`` by.
                        if type(msg) is Authed:
                            if link is None:
                                rej.add("no session on this link")
                            elif not self._on_authed(link, msg):
                                return  # a bad tag: the link is out of step, drop it
                            continue
                        if type(msg) is Sealed:
                            self._on_sealed(msg)
                            continue
                        if isinstance(msg, SessionOpen):  # a KeyedOpen too
                            if link is not None or session is not None or self._gate is None:
                                rej.add("unexpected session opening")
                                continue
                            if not self._handshakes.allow(_peer_host(stream), trio.current_time()):
                                # Before any signature check or key exchange: close, count.
                                rej.add("handshake rate limited")
                                return
                            accepted = self._gate.accept_session(msg, self.identity)
                            if accepted is not None:
                                reply, link = accepted
                                conn.became_link()
                                await stream.send_all(frame(reply))
                            elif self.cfg.swarm_key is not None:
                                return  # keyed: close, so a refused opener learns it at once
                            continue
                        if link is not None:
                            rej.add("unexpected message")
                            continue
                        # Anything else is the client API; the connection becomes a session.
                        if session is None:
                            session = ClientSession(
                                self, stream, self._wire, conn, self.cfg.client_tokens
                            )
                            session.start(conn_nursery)
                        session.request(msg)
                        if conn_nursery.cancel_scope.cancel_called:
                            break  # closed by its session: the rest of the read is moot
                    conn_nursery.cancel_scope.deadline = conn.deadline
                conn_nursery.cancel_scope.cancel()
            if conn_nursery.cancel_scope.cancelled_caught and conn.deadline <= trio.current_time():
                conn.expired()  # idle, or stuck in the middle of a frame: closed
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        except Exception as exc:
            # One connection's input (or a bug it hits) closes that connection, not the peer.
            self._internal_error("on a connection", exc=exc)
        finally:
            if session is not None:
                session.closed()
            conn.close()
            await _aclose_quietly(stream)

    def _on_authed(self, link: InSession, msg: Authed) -> bool:
        if self.core is None or self._gate is None:
            return True
        now = trio.current_time()
        if not link.check(msg):
            self.rejections.add("bad link authentication tag")
            return False
        if is_batch(msg.body):
            self._on_batch(link, msg.body, now)
            return True
        self.transport.messages_in += 1
        opened = self._gate.admit_authed(link, msg, now)
        if opened is not None:
            self._feed(*opened, now)
        return True

    def _on_batch(self, link: InSession, body: bytes, now: float) -> None:
        """Several messages in one session frame (``runtime/batching.py``): each body passes
        the ``Gate`` as if it had come alone, the acks become ``HopAck``s again; a malformed
        batch, or one with a body the ``Gate`` refuses, is counted and dropped whole."""
        assert self._gate is not None
        batch = unpack(body, self._wire)
        if batch is None:
            self.rejections.add("malformed batch")
            return
        self.transport.messages_in += len(batch.bodies) + len(batch.acks) + len(batch.dones)
        opened: list[tuple[bytes, Message]] = []
        for inner in batch.bodies:
            one = self._gate.admit_body(link, inner, now)
            if one is None:
                self.rejections.add("batch dropped: a body refused")
                return
            opened.append(one)
        if batch.acks or batch.dones:
            acks = self._gate.admit_acks(link, expand_acks(batch), now)
            if acks is None:
                self.rejections.add("batch dropped: a body refused")
                return
            opened.extend(acks)
        for src, inner_msg in opened:
            self._feed(src, inner_msg, now)

    def _on_sealed(self, env: Sealed) -> None:
        if self.core is None or self._gate is None:
            return
        now = trio.current_time()
        opened = self._gate.open(env, now)
        if opened is not None:
            self._feed(*opened, now)

    def _feed(self, src: bytes, msg: Message, now: float) -> None:
        """One message into the core, behind the barrier: a bug its handling hits is logged
        with its traceback and counted, and the peer goes on with the next message."""
        assert self.core is not None
        try:
            if self._fault is not None:
                if src in self._fault.cut:
                    self.fault_dropped += 1
                    return
                if self._fault.drop_routes and isinstance(msg, Route):
                    self._send(src, HopAck(msg.uid))  # "received", and then dropped
                    self._misbehave(msg, src)
                    self.fault_dropped += 1
                    return
                if self._fault.drop_direct and isinstance(msg, (Direct, AckedDirect)):
                    self.fault_dropped += 1
                    return
                self._fault.check(msg)
            # ``src`` signed this message: it proved its id. What it says of others has not.
            self._proved(src)
            msg = self._second_hand.screen(src, msg, now, self._caps)
            if self._second_hand.waiting:
                self._probe_wakeup.set()
            self.core.receive(msg, src, now)
            self._pump()
        except Exception as exc:
            self._internal_error("handling %s", type(msg).__name__, exc=exc)

    def _misbehave(self, msg: Route, src: bytes) -> None:
        """Test-only: what a ``forge-done`` or ``stall`` fault does with a routed message it
        drops (``FAULT_ENV``)."""
        fault = self._fault
        node = self._node
        assert fault is not None and node is not None
        if fault.kind == FORGE_DONE and node.notary is not None:
            key = node.space.from_bytes(msg.key)
            self._send(src, RouteDone(msg.uid, node.me.handle.id, node.notary.sign(msg.uid, key)))
        elif fault.kind == STALL:
            fault.held[msg.uid] = src
            if len(fault.held) > STALL_HELD:
                del fault.held[next(iter(fault.held))]

    def _stall(self) -> None:
        """Test-only: a ``stall`` fault asks for more time for every message it holds."""
        fault = self._fault
        if fault is None or fault.kind != STALL or self._node is None:
            return
        me = self._node.me.handle.id
        for uid, src in fault.held.items():
            self._send(src, RouteWait(uid, me))

    def set_fault(self, spec: str | None) -> None:
        """Test-only: what ``RANGECAST_TEST_FAULT`` sets, for a peer in a test's process."""
        self._fault = _Fault(spec) if spec else None

    def cut_off(self, peers: Iterable[bytes]) -> None:
        """Test-only: lose every message these peers' addresses send us (they still connect
        and handshake, as across a partition that drops only the traffic); none: heal."""
        cut = frozenset(peers)
        self._fault = _Fault("cut", cut) if cut else None

    def _proved(self, addr: bytes) -> None:
        """``addr`` signed a message or answered our handshake: it is there, whatever an
        earlier failed connect said, and may be named to the core by others."""
        self._second_hand.prove(addr)
        self._caps.succeeded(addr)
        link = self._links.get(addr)
        if link is not None:
            link.down_until = -math.inf

    async def _probe_loop(self) -> None:
        """Probe second-hand candidates (a connect and a link handshake, at the rate and
        within the connect slots ``SecondHand.take_probes`` allows) and hand those that
        prove their id to the core."""
        while True:
            with trio.move_on_after(self.cfg.tick_s):
                await self._probe_wakeup.wait()
            self._probe_wakeup = trio.Event()
            if self._nursery is None or self.core is None:
                continue
            for addr in self._second_hand.take_probes(trio.current_time(), self._caps):
                self._nursery.start_soon(self._probe, addr)

    async def _probe(self, addr: bytes) -> None:
        where = PeerAddress.from_bytes(addr)  # screened: a valid address
        ok = False
        stream: trio.SocketStream | None = None
        try:
            with self._caps.connecting(), trio.fail_after(self.cfg.connect_timeout_s):
                stream = await trio.open_tcp_stream(where.host, where.port)
                self.transport.connects += 1
                await self._handshake(_Link(where, 1), stream)
                ok = True
        except UNREACHABLE as exc:
            log.debug("probe of %s failed: %s", where, exc)
        finally:
            if stream is not None:
                await _aclose_quietly(stream)
        now = trio.current_time()
        if ok:
            self._proved(addr)
        else:
            # Nothing listening: the endpoint backs off for links too; something listening
            # that is not the id named: for probes only (see ``LinkCaps``).
            self.transport.connect_failures += 1
            self._caps.failed(addr, now, probe=stream is not None)
        msg = self._second_hand.probed(addr, ok)
        if msg is not None and self.core is not None:
            self._feed(addr, msg, now)

    def _internal_error(self, what: str, *args: object, exc: BaseException) -> None:
        self.internal_errors += 1
        log.error("internal error " + what + " (the peer carries on)", *args, exc_info=exc)

    def hello_reply(self) -> HelloReply:
        state = self.core.dht.state.value if self.core is not None else "idle"
        return HelloReply(self.addr, self.identity.public_key, state, list(self.schemas.names()))

    # ------------------------------------------------------------------------------ status

    def status(self) -> dict[str, Any]:
        """What ``rangecast peer status`` shows (docs/runtime.md lists the fields)."""
        core = self.core
        if core is None or self.address is None:
            return {"state": "starting"}
        dht = self.dht

        def show(p: Peer) -> str:
            try:
                return str(PeerAddress.from_bytes(p.addr))
            except RemoteProtocolError:
                return repr(p.addr)

        if isinstance(dht, KademliaNode):  # the status shows each substrate's own tables
            buckets = dht.table.buckets
            per_bucket = {str(i): len(buckets[i]) for i in sorted(buckets)}
            routing: dict[str, Any] = {
                "entries": sum(per_bucket.values()),
                "buckets": len(per_bucket),
                "per_bucket": per_bucket,
            }
            leaf_set: dict[str, list[str]] = {"left": [], "right": []}
        else:
            rows = dht.table.rows
            filled = [sum(1 for e in row if e is not None) for row in rows]
            routing = {"entries": sum(filled), "rows": len(rows), "per_row": filled}
            leaf_set = {
                "left": [show(p) for p in dht.leaves.left],
                "right": [show(p) for p in dht.leaves.right],
            }
        hosted = []
        for schema, node in core.overlay.tree_nodes():
            tid = node.tid
            entry: dict[str, Any] = {
                "schema": schema,
                "attr": tid.attr,
                "depth": tid.depth,
                "path": tid.path,
                "leaf": node.is_leaf,
            }
            if node.index is not None:
                entry["subscriptions"] = len(node.index)
            hosted.append(entry)
        ostats = core.overlay.stats
        return {
            "id": self.identity.node_id.hex(),
            "address": self.address.endpoint,
            "state": dht.state.value,
            "uptime_s": round(trio.current_time() - self._started, 3),
            "dht_kind": self.cfg.dht,
            "neighbours": [show(p) for p in dht.neighbours()],
            "leaf_set": leaf_set,
            "routing_table": routing,
            "kademlia_rpc": (
                {
                    "port": self.kademlia.port,
                    "stored": len(self.kademlia.storage.data),
                    "refused_values": self.kademlia.storage.refused,
                    "malformed": self.kademlia.malformed,
                    **self.kademlia.counters(),
                }
                if self.kademlia is not None
                else None
            ),
            "tree_nodes": hosted,
            "subscriptions": len(core.overlay.subscriptions()),
            "links": len(self._links),
            "untrusted": {
                "second_hand": self._second_hand.status(),
                "links": self._caps.status(),
            },
            "rejected": {
                "total": self.rejections.total + dht.stats.malformed + ostats.malformed,
                "runtime": dict(sorted(self.rejections.by_reason.items())),
                "dht_malformed": dht.stats.malformed,
                "overlay_malformed": ostats.malformed,
            },
            "transport": {
                "frames_in": self.transport.frames_in,
                "frames_out": self.transport.frames_out,
                "bytes_in": self.transport.bytes_in,
                "bytes_out": self.transport.bytes_out,
                "connections_in": self.transport.connections_in,
                "connects": self.transport.connects,
                "connect_failures": self.transport.connect_failures,
                "dropped_out": self.transport.dropped_out,
                "dropped_queue_full": self.transport.dropped_queue_full,
                "messages_in": self.transport.messages_in,
                "messages_out": self.transport.messages_out,
                "connections_open": self._open_in,
                "refused_connections": self.refused_in,
            },
            "clients": {
                **self.clients.status(self.backlog()),
                "tokens_required": self.cfg.client_tokens is not None,
            },
            # Peer admission: the swarm key's fingerprint (null: any peer may link and join).
            "swarm_key": self.cfg.swarm_key.fingerprint if self.cfg.swarm_key else None,
            "internal_errors": self.internal_errors,
            "pauses": self.pauses,
            "save_failures": self.save_failures,
            "dht": {
                "delivered": dht.stats.delivered,
                "forwarded": dht.stats.forwarded,
                "reroutes": dht.stats.reroutes,
                "peers_failed": dht.stats.peers_failed,
                "dropped": dict(sorted(dht.stats.by_reason.items())),
                "end_to_end": _e2e_status(dht),
                "healing": _healing_status(dht),
            },
            "overlay": {
                "stored": ostats.stored,
                "splits": ostats.splits,
                "matched": ostats.matched,
                "lost": ostats.lost,
                "promoted": ostats.promoted,
                "handed_off": ostats.handed_off,
                "recreated": ostats.recreated,
                "retries": ostats.retries,
                "expired": ostats.expired,
                # Pieces a full leaf refused (``OverlayConfig.max_leaf_bytes``), and pieces
                # refused to a subscriber holding its share of a leaf (``max_leaf_share``).
                "refused": ostats.refused,
                "refused_share": ostats.refused_share,
                "replicas_released": ostats.replicas_released,
                "replicas_held": len(core.overlay.replicas),
                # Tree nodes hosted here whose every copy is in one /24 or /48 (dht.locality):
                # expected only where the neighbourhood has a single prefix (one host).
                "replica_sets_one_prefix": sum(
                    1
                    for holders in core.overlay.replica_sets().values()
                    if len(holders) > 1 and len({address_group(p.addr) for p in holders}) == 1
                ),
            },
        }


# ---------------------------------------------------------------------------------- helpers


def _e2e_status(dht: DhtNode) -> dict[str, Any] | None:
    """``dht.end_to_end`` of the status: end-to-end acknowledgements (``dht.e2e``), or None
    where they are off (Kademlia, or switched off)."""
    e2e = dht.end_to_end
    if e2e is None:
        return None
    st = dht.stats
    return {
        "confirmed": st.e2e_done,
        "losses": st.e2e_losses,
        "retries": st.e2e_retries,
        "demoted": st.demoted,
        "quarantined": sorted(i.to_bytes(dht.space.nbytes).hex() for i in e2e.quarantine),
        "quarantine_refused": st.quarantine_refused,
        "in_flight": len(e2e.tracks),
        "late": st.e2e_late,
        # Signed acks refused (a bad proof, or a root that cannot be the key's: dht.notary),
        # and requests for more time refused (the asker's budget spent: dht.e2e).
        "forged": st.e2e_forged,
        "waits_refused": st.e2e_waits_refused,
        "demotions_pending": len(e2e.pending),
        "suspected": st.suspected,
        "suspicions_cleared": st.suspicions_cleared,
        # Direct messages (dht.e2e): answered by their receiver, unanswered by the deadline,
        # charged as losses once the receiver proved alive, and awaiting that proof.
        "direct": {
            "confirmed": st.e2e_direct_done,
            "unanswered": st.e2e_direct_unanswered,
            "losses": st.e2e_direct_losses,
            "doubted": sum(n for _, n in e2e.doubted.values()),
            "in_flight": len(e2e.directs),
        },
    }


def _healing_status(dht: DhtNode) -> dict[str, int] | None:
    """``dht.healing`` of the status: peers declared failed that are asked again now and then
    (``dht.healing``), pings sent to them, and those heard from again; None where off."""
    graveyard = dht.healing
    if graveyard is None:
        return None
    return {
        "remembered": len(graveyard),
        "pings": dht.stats.heal_pings,
        "healed": dht.stats.healed,
    }


class _Unopened(OutSession):
    """A link's session before its handshake: it has no key and no codec, as it never sends."""

    __slots__ = ()

    def __init__(self) -> None:
        pass

    def wrap(self, body: bytes) -> bytes:
        raise AssertionError("a link sends only after its handshake")


_NO_SESSION: OutSession = _Unopened()


async def _first_of(*events: trio.Event) -> None:
    """Return once any of ``events`` is set."""
    async with trio.open_nursery() as nursery:

        async def wait(event: trio.Event) -> None:
            await event.wait()
            nursery.cancel_scope.cancel()

        for event in events:
            nursery.start_soon(wait, event)


def _drain(link: _Link, batch: list[QueueItem], limit: int) -> None:
    """Move what ``link`` has queued into ``batch``, up to ``limit`` items in all."""
    while len(batch) < limit:
        try:
            batch.append(link.rx.receive_nowait())
        except trio.WouldBlock:
            return


def _peer_host(stream: trio.SocketStream) -> str:
    """The source address of an accepted connection ("" if the socket cannot tell)."""
    try:
        return str(stream.socket.getpeername()[0])
    except (OSError, IndexError):
        return ""


async def _aclose_quietly(stream: trio.abc.AsyncResource) -> None:
    quiet = contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError)
    with trio.CancelScope(shield=True), trio.move_on_after(1.0), quiet:
        await stream.aclose()


async def _send_frame(stream: trio.abc.SendStream, payload: bytes) -> None:
    await stream.send_all(frame(payload))


async def read_frame(stream: trio.abc.ReceiveStream, reader: FrameReader) -> bytes:
    """The next frame from ``stream`` (a client or a joining peer waiting for one reply)."""
    while True:
        frames = reader.feed(b"")
        if frames:
            return frames[0]
        data = await stream.receive_some(65536)
        if not data:
            raise trio.BrokenResourceError("connection closed")
        frames = reader.feed(data)
        if frames:
            if len(frames) > 1:
                raise RemoteProtocolError("unexpected extra frames")
            return frames[0]


async def hello_peer(host: str, port: int, timeout_s: float = 3.0) -> HelloReply:
    """Ask the peer at ``host:port`` who it is; checks that its address embeds its key's id."""
    wire = wire_codec(*OverlayPeer.TABLES)
    with trio.fail_after(timeout_s):
        stream = await trio.open_tcp_stream(host, port)
        try:
            await _send_frame(stream, wire.encode(Hello()))
            raw = await read_frame(stream, FrameReader())
        finally:
            await _aclose_quietly(stream)
    try:
        reply = wire.decode(raw)
    except WireError as exc:
        raise RemoteProtocolError(f"bad hello reply: {exc}") from None
    if not isinstance(reply, HelloReply):
        raise RemoteProtocolError(f"expected HelloReply, got {type(reply).__name__}")
    if PeerAddress.from_bytes(reply.addr).node_id != node_id_of(reply.key):
        raise RemoteProtocolError("the peer's address does not carry its key's id")
    return reply


__all__ = ["RUNTIME_PASTRY", "Owner", "PeerConfig", "PeerRuntime", "SchemaError", "hello_peer"]
