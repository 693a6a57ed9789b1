"""The ``kademlia`` package's server inside a trio peer: Kademlia's own RPCs (ping, store,
find_node, find_value over UDP, the package's wire format) next to the overlay.

Why a thread: the package is written for asyncio (its ``Server`` opens a datagram endpoint and
schedules its table refresh on the running asyncio loop), the peer runs on trio. The server gets
an asyncio loop of its own on a daemon thread; nothing else runs on that loop, and nothing of the
package is touched from the trio side except through ``_call``, which submits a coroutine with
``asyncio.run_coroutine_threadsafe`` and wakes the waiting trio task through the trio token when
the future completes (no worker thread blocks on it). Cancelling the trio side cancels the
asyncio future. Values cross as plain bytes/str/int/float, so no object is shared between the
two loops.

The server listens on the peer's port number over UDP (the overlay's links are TCP on the same
number), uses the peer's id as its Kademlia node id, and bootstraps from the peers the overlay
joined through, so an unmodified ``kademlia.network.Server`` can bootstrap from any Kademlia-mode
peer and ``get``/``set`` values that Rangecast peers ``store``/``fetch``.

Input from the network (``_GuardedProtocol``; the bounds are ``UdpLimits``, each refusal
counted, see ``KademliaService.counters``). UDP source addresses can be forged and the package
trusts them: a PING claiming a fresh node id made it STORE every key it holds closer to that id
toward the named address (20 PINGs, 1 KB, drew 25.7 MB), and keys had no size limit. So:

* a datagram that does not decode, or a request of the wrong shape (a node id that is not 20
  bytes), is counted as malformed and dropped; a STORE/FIND key that is not the 20-byte SHA-1
  digest the package's ``set``/``get`` send is refused (``refused_keys``), never stored;
* an address is *verified* once it answered a request of ours (the answer carries our random
  160-bit message id, so only whoever receives datagrams at that address can give it). Until
  then an answer larger than ``answer_ratio`` (3x) the request is held until the address
  answers a PING of ours, and dropped if it does not; a STORE is applied only once its sender
  is verified. A sender is welcomed (routing-table entry, and the package's transfer of the
  keys closer to it) only under the id its address answered our PING with, the transfer capped
  per node and by a byte budget shared by all welcomes;
* STOREs are rate-limited per source address and in total (token buckets on the asyncio
  loop's clock); the storage is capped in items and bytes, the oldest item going first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

import trio
import umsgpack
from kademlia.network import Server
from kademlia.node import Node
from kademlia.protocol import KademliaProtocol
from kademlia.storage import ForgetfulStorage
from rpcudp.exceptions import MalformedMessage
from rpcudp.protocol import RPCProtocol

from rangecast.dht.errors import LocalProtocolError
from rangecast.runtime.guard import TokenBucket

log = logging.getLogger("rangecast.kademlia")

Value = bytes | str | int | float
Address = tuple[str, int]

#: A value larger than this is refused by ``store`` and by the storage (a UDP datagram carries
#: one value; the package does not fragment): rpcudp refuses to send a request over 8 KB, and
#: a STORE's name, node id and key take 55 bytes of it (so 8 KB values could not be sent on).
MAX_VALUE_BYTES = 8 * 1024 - 64
MAX_STORED = 10_000
#: Keys plus values held at most (the oldest go first): about 2,000 values of the largest size,
#: or all ``MAX_STORED`` of up to 1.6 KB. With ``MAX_STORED`` alone a full store was 80 MB.
MAX_STORED_BYTES = 16 * 1024 * 1024
#: A key on the wire is the SHA-1 digest of the user's key (``kademlia.utils.digest``), as is a
#: node id: anything else comes from no honest implementation of the package's protocol.
KEY_BYTES = 20
#: Bytes a stored item costs beyond its key and value (the storage's tuple and dict slot),
#: so that a budget of tiny values is not a budget of millions of objects.
_ITEM_OVERHEAD = 64


@dataclass(frozen=True)
class UdpLimits:
    """Ours, not the package's: what one peer's Kademlia UDP port grants the network."""

    #: An answer to a not yet verified address is at most this many times its request's size
    #: (QUIC's anti-amplification factor, RFC 9000 section 8). A PING answer is 0.9x, a STUN
    #: 1.3x; a FIND_NODE answer of k = 20 IPv4 contacts 9.7x and a FIND_VALUE answer up to about
    #: 100x: those wait for the verification.
    answer_ratio: float = 3.0
    #: Verifications (our PINGs) in flight at once; another address is not verified meanwhile.
    verify_pending: int = 256
    #: An address is not pinged again within this long of our last PING to it (so a flood
    #: naming one address draws at most one PING to it per interval).
    reverify_s: float = 5.0
    #: How long a verification lasts (after that the next request re-verifies it).
    verified_s: float = 600.0
    #: Answers and STOREs held for a verification at once (a STORE holds its value: 8 KB each).
    held: int = 512
    #: Addresses remembered (verified, per-source buckets, last PING), least recently used out.
    sources: int = 4096
    #: Incoming STOREs per verified source address: sustained per second, and burst. The burst
    #: covers one welcome's key transfer from another peer (``welcome_stores``).
    store_rate: float = 100.0
    store_burst: float = 400.0
    #: Incoming STOREs from all sources together.
    store_rate_all: float = 1_000.0
    store_burst_all: float = 4_000.0
    #: Keys sent to one welcomed node at most (the package sent every closer key).
    welcome_stores: int = 256
    #: Bytes of key transfers to all welcomed nodes: per second, and burst.
    welcome_rate_bytes: float = 1024 * 1024
    welcome_burst_bytes: float = 4 * 1024 * 1024
    #: Key transfers per second, and burst: each scans the whole storage (a full one, 10,000
    #: keys, took 0.08 s of a core here), so at most about a sixth of a core goes to them.
    welcome_scan_rate: float = 2.0
    welcome_scan_burst: float = 20.0


class _Bucket(TokenBucket):
    """The runtime's token bucket, on the asyncio loop's clock, taking costs of any size."""

    __slots__ = ()

    def take(self, now: float, cost: float = 1.0) -> bool:
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if self.tokens < cost:
            return False
        self.tokens -= cost
        return True


class BoundedStorage(ForgetfulStorage):
    """The package's storage (values expire after a week) with a cap on value size, key size,
    item count and bytes held; the oldest item goes first."""

    def __init__(
        self, ttl: int = 604800, max_items: int = MAX_STORED, max_bytes: int = MAX_STORED_BYTES
    ) -> None:
        super().__init__(ttl)  # keeps ``data`` in insertion order: the oldest goes first
        self.max_items = max_items
        self.max_bytes = max_bytes
        self.bytes = 0
        self.refused = 0
        self.evicted = 0

    def __setitem__(self, key: bytes, value: Any) -> None:
        if (
            not isinstance(key, bytes)
            or len(key) != KEY_BYTES
            or not isinstance(value, bytes | str | int | float)
            or _size(value) > MAX_VALUE_BYTES
        ):
            self.refused += 1
            return
        old = self.data.pop(key, None)
        if old is not None:
            self.bytes -= _cost(key, old[1])
        # The package's own stamps (``iter_older_than`` compares them with time.monotonic).
        self.data[key] = (time.monotonic(), value)
        self.bytes += _cost(key, value)
        self.cull()
        while self.data and (len(self.data) > self.max_items or self.bytes > self.max_bytes):
            self._pop_oldest()
            self.evicted += 1

    def cull(self) -> None:
        for _ in self.iter_older_than(self.ttl):
            self._pop_oldest()

    def _pop_oldest(self) -> None:
        key, (_, value) = self.data.popitem(last=False)
        self.bytes -= _cost(key, value)


#: The RPCs answered and their number of arguments (the first is the sender's node id, except
#: for ``stun``); other requests are counted as malformed.
_ARITY = {"ping": 1, "stun": 0, "store": 3, "find_node": 2, "find_value": 2}
_KEYED = frozenset({"store", "find_node", "find_value"})
#: Counters of ``_GuardedProtocol``, as ``KademliaService.counters`` reports them.
COUNTERS = (
    "malformed",
    "refused_keys",
    "refused_stores",
    "welcome_deferred",
    "unverified_held",
    "unverified_dropped",
    "welcome_truncated",
)


class _GuardedProtocol(KademliaProtocol):
    """The package's protocol, with what a remote datagram can make it raise (undecodable
    MessagePack, wrong argument shapes) counted and dropped rather than left to asyncio, keys
    bounded, STOREs rate-limited, and nothing larger than a small multiple of a request sent to
    an address that has not answered a PING of ours (see the module's docstring)."""

    def __init__(self, source_node: Any, storage: Any, ksize: int, limits: UdpLimits) -> None:
        super().__init__(source_node, storage, ksize)
        self.limits = limits
        self.malformed = 0
        self.refused_keys = 0  # STORE/FIND keys that are not a 20-byte digest
        self.refused_stores = 0  # STOREs over the rate limits (answered False)
        self.welcome_deferred = 0  # new senders not welcomed until their address answers
        self.unverified_held = 0  # answers/STOREs held for a verification
        self.unverified_dropped = 0  # of those, dropped: no answer, or too many held
        self.welcome_truncated = 0  # key transfers cut short (per-node cap, byte/scan budget)
        # address -> (node id it answered our PING with, or None: it answered another request
        # of ours; when)
        self._verified: OrderedDict[Address, tuple[bytes | None, float]] = OrderedDict()
        self._verifying: dict[Address, asyncio.Task[bytes | None]] = {}
        self._last_ping: OrderedDict[Address, float] = OrderedDict()
        self._store_buckets: OrderedDict[Address, _Bucket] = OrderedDict()
        self._held = 0
        self._buckets: dict[str, _Bucket] = {}
        self._transfers: set[asyncio.Future[Any]] = set()
        self._welcomed: OrderedDict[bytes, float] = OrderedDict()  # node id -> keys sent when

    # -------------------------------------------------------------------- datagrams in

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    def _bucket(self, name: str, rate: float, burst: float) -> _Bucket:
        bucket = self._buckets.get(name)
        if bucket is None:
            bucket = self._buckets[name] = _Bucket(rate, burst, self._now())
        return bucket

    async def _solve_datagram(self, datagram: bytes, address: Any) -> None:
        # rpcudp's own, with the request's size passed on (for the answer bound) and every
        # failure counted.
        try:
            if len(datagram) < 22:
                raise MalformedMessage(f"a datagram of {len(datagram)} bytes")
            msg_id = datagram[1:21]
            data = umsgpack.unpackb(datagram[21:])
            if datagram[:1] == b"\x00":
                await self._accept_request(msg_id, data, address, len(datagram))
            elif datagram[:1] == b"\x01":
                self._accept_response(msg_id, data, address)
            else:
                raise MalformedMessage("neither a request nor an answer")
        except Exception as exc:  # anything a remote datagram can provoke
            self._refuse(address, exc)

    async def _accept_request(self, msg_id: bytes, data: Any, address: Any, size: int) -> None:
        if not (isinstance(data, list) and len(data) == 2 and isinstance(data[0], str)):
            raise MalformedMessage("a request is [name, arguments]")
        name, args = data
        if not isinstance(args, list | tuple) or name not in _ARITY:
            raise MalformedMessage(f"no RPC {name!r}")
        if len(args) != _ARITY[name] or (args and not _is_id(args[0])):
            raise MalformedMessage(f"{name}: wrong arguments")
        if name in _KEYED and not _is_id(args[1]):
            self.refused_keys += 1
            log.debug("refused a Kademlia %s with a %r key from %s", name, type(args[1]), address)
            return
        addr = _addr(address)
        response: Any
        if name == "store":
            # Stored only for a sender that can receive (so it cannot name someone else),
            # at the rates we grant.
            if not self._is_verified(addr) and not await self._await_verification(addr):
                return
            if self._take_store(addr):
                response = self.rpc_store(address, *args)
            else:
                self.refused_stores += 1
                response = False
        else:
            response = getattr(self, f"rpc_{name}")(address, *args)
        answer = b"\x01" + msg_id + umsgpack.packb(response)
        if (
            len(answer) > self.limits.answer_ratio * size
            and not self._is_verified(addr)
            and not await self._await_verification(addr)
        ):
            return
        if self.transport is not None:
            self.transport.sendto(answer, address)

    def _refuse(self, address: Any, exc: Exception) -> None:
        self.malformed += 1
        log.debug("dropped a malformed Kademlia datagram from %s: %r", address, exc)

    def _take_store(self, addr: Address) -> bool:
        lim, now = self.limits, self._now()
        bucket = self._store_buckets.pop(addr, None) or _Bucket(
            lim.store_rate, lim.store_burst, now
        )
        self._store_buckets[addr] = bucket
        _trim(self._store_buckets, lim.sources)
        # The total only pays for what the source's own bucket let through.
        return bucket.take(now) and self._bucket(
            "stores", lim.store_rate_all, lim.store_burst_all
        ).take(now)

    # -------------------------------------------------------------------- verification

    def _is_verified(self, addr: Address) -> bool:
        entry = self._verified.get(addr)
        return entry is not None and self._now() - entry[1] < self.limits.verified_s

    def _verified_id(self, addr: Address) -> bytes | None:
        entry = self._verified.get(addr)
        if entry is None or self._now() - entry[1] >= self.limits.verified_s:
            return None
        return entry[0]

    def _mark_verified(self, addr: Address, node_id: bytes | None) -> None:
        old = self._verified.pop(addr, None)
        if node_id is None and old is not None:
            node_id = old[0]  # an answer to a find/store does not name its sender
        self._verified[addr] = (node_id, self._now())
        _trim(self._verified, self.limits.sources)

    def _start_verification(self, addr: Address) -> asyncio.Task[bytes | None] | None:
        """Our PING to ``addr`` (one at a time per address, not again within ``reverify_s``,
        at most ``verify_pending`` at once), or None if none may be sent now."""
        task = self._verifying.get(addr)
        if task is not None:
            return task
        now, lim = self._now(), self.limits
        last = self._last_ping.get(addr)
        if len(self._verifying) >= lim.verify_pending or (
            last is not None and now - last < lim.reverify_s
        ):
            return None
        self._last_ping.pop(addr, None)
        self._last_ping[addr] = now
        _trim(self._last_ping, lim.sources)
        task = asyncio.ensure_future(self._verify(addr))
        self._verifying[addr] = task
        task.add_done_callback(lambda t: self._verification_done(addr, t))
        return task

    async def _verify(self, addr: Address) -> bytes | None:
        try:
            ok, node_id = await self.ping(addr, self.source_node.id)
        except Exception as exc:  # the transport closed under us, ...
            log.debug("could not ping %s: %r", addr, exc)
            return None
        return node_id if ok else None

    def _verification_done(self, addr: Address, task: asyncio.Task[bytes | None]) -> None:
        self._verifying.pop(addr, None)
        node_id = None if task.cancelled() else task.result()  # _verify raises nothing
        if node_id is not None:
            # Welcomed under the id the address answered with, whatever id it claimed.
            self.welcome_if_new(Node(node_id, addr[0], addr[1]))

    async def _await_verification(self, addr: Address) -> bool:
        """Hold a request from ``addr`` until our PING to it is answered: True if it was."""
        task = self._start_verification(addr)
        if task is None or self._held >= self.limits.held:
            self.unverified_dropped += 1
            return False
        self.unverified_held += 1
        self._held += 1
        try:
            node_id = await asyncio.shield(task)
        finally:
            self._held -= 1
        if node_id is None:
            self.unverified_dropped += 1
            return False
        return True

    async def ping(self, address: Any, nodeid: bytes) -> tuple[bool, Any]:
        """The package's remote ``ping`` (``RPCProtocol.__getattr__``), recording who answered:
        an answer that is not a node id counts as none (the package would fail on it)."""
        send = RPCProtocol.__getattr__(self, "ping")  # rpcudp's remote-call closure
        ok, answer = await send(address, nodeid)
        if not ok:
            return False, None
        if not _is_id(answer):
            self._refuse(address, MalformedMessage("a PING answered with no node id"))
            return False, None
        self._mark_verified(_addr(address), answer)
        return True, answer

    def handle_call_response(self, result: Any, node: Any) -> Any:
        if result[0]:
            # It answered a request we sent to that address: the address is verified, its id
            # is not (a find's or store's answer does not carry it).
            self._mark_verified(_addr((node.ip, node.port)), None)
        return super().handle_call_response(result, node)

    # ------------------------------------------------------------------------ welcome

    def welcome_if_new(self, node: Any) -> None:
        """The package's welcome (routing-table entry, transfer of the keys closer to the new
        node), but only for a node whose address answered our PING with its id; any other
        sender is pinged first and welcomed on the answer (``_verification_done``)."""
        if (
            not _is_id(node.id)
            or node.id == self.source_node.id
            or not self.router.is_new_node(node)
        ):
            return
        addr = _addr((node.ip, node.port))
        if self._verified_id(addr) != node.id:
            self.welcome_deferred += 1
            self._start_verification(addr)
            return
        # A node left in a full bucket's replacement list stays "new" at every request: its
        # keys were sent the first time.
        now = self._now()
        last = self._welcomed.pop(node.id, None)
        if last is None or now - last >= self.limits.verified_s:
            last = now
            self._transfer_keys(node)
        self._welcomed[node.id] = last
        _trim(self._welcomed, self.limits.sources)
        self.router.add_contact(node)

    def _transfer_keys(self, node: Any) -> None:
        """The package's choice of keys for a new node (section 2.5 of the paper: those it is
        closer to than our farthest neighbour while we are the closest), within budgets."""
        lim, now = self.limits, self._now()
        if not self.storage.data:
            return
        if not self._bucket("scans", lim.welcome_scan_rate, lim.welcome_scan_burst).take(now):
            self.welcome_truncated += 1
            return
        transfer = self._bucket("transfer", lim.welcome_rate_bytes, lim.welcome_burst_bytes)
        sent = 0
        for key, value in self.storage:
            # Stored keys are digests already: the package digested them again here.
            keynode = Node(key)
            neighbors = self.router.find_neighbors(keynode)
            if neighbors:
                last = neighbors[-1].distance_to(keynode)
                first = neighbors[0].distance_to(keynode)
                if not (
                    node.distance_to(keynode) < last
                    and self.source_node.distance_to(keynode) < first
                ):
                    continue
            if sent >= lim.welcome_stores or not transfer.take(now, _cost(key, value)):
                self.welcome_truncated += 1
                return
            store = asyncio.ensure_future(self.call_store(node, key, value))
            self._transfers.add(store)  # held until done (the loop keeps weak references)
            store.add_done_callback(self._transferred)
            sent += 1

    def _transferred(self, store: asyncio.Future[Any]) -> None:
        self._transfers.discard(store)
        if not store.cancelled() and store.exception() is not None:
            log.debug("a key transfer failed: %r", store.exception())


class _Server(Server):
    protocol_class = _GuardedProtocol

    def __init__(self, *args: Any, limits: UdpLimits, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits

    def _create_protocol(self) -> _GuardedProtocol:
        return _GuardedProtocol(self.node, self.storage, self.ksize, self.limits)


def _is_id(value: Any) -> bool:
    return isinstance(value, bytes) and len(value) == KEY_BYTES


def _addr(address: Any) -> Address:
    """(host, port) of a datagram address (IPv6 ones carry flow info and scope too)."""
    return (str(address[0]), int(address[1]))


def _trim(table: OrderedDict[Any, Any], size: int) -> None:
    while len(table) > size:
        table.popitem(last=False)


class KademliaService:
    """One peer's kademlia ``Server``, run on its own asyncio loop and thread."""

    def __init__(
        self,
        node_id: bytes,
        *,
        ksize: int = 20,
        alpha: int = 3,
        limits: UdpLimits | None = None,
    ) -> None:
        if len(node_id) != 20:
            raise LocalProtocolError("a Kademlia node id is 20 bytes (160 bits)")
        self.node_id = node_id
        self.storage = BoundedStorage()
        self.limits = limits or UdpLimits()
        self._server = _Server(
            ksize=ksize, alpha=alpha, node_id=node_id, storage=self.storage, limits=self.limits
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.port: int | None = None

    # ------------------------------------------------------------------------ lifecycle

    async def start(self, host: str, port: int, bootstrap: list[tuple[str, int]]) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(
            target=loop.run_forever, name=f"kademlia-{self.node_id.hex()[:8]}", daemon=True
        )
        self._thread.start()
        await self._call(self._server.listen(port, interface=host))
        self.port = self._server.transport.get_extra_info("sockname")[1]  # port 0: the one taken
        if bootstrap:
            await self._call(self._server.bootstrap(bootstrap))

    async def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        self._loop = None

        def halt() -> None:
            self._server.stop()
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()

            async def drain() -> None:  # let the cancelled tasks finish before the loop stops
                if tasks:
                    await asyncio.wait(tasks, timeout=1.0)
                loop.stop()

            loop.create_task(drain())

        loop.call_soon_threadsafe(halt)
        await trio.to_thread.run_sync(thread.join)
        loop.close()

    # ------------------------------------------------------------------------------- API

    async def store(self, key: str | bytes, value: Value) -> bool:
        """Store ``value`` under ``key`` on the ``k`` nodes closest to SHA-1(key)."""
        if not isinstance(value, bytes | str | int | float) or isinstance(value, bool):
            raise LocalProtocolError("a Kademlia value is bytes, str, int or float")
        if _size(value) > MAX_VALUE_BYTES:
            raise LocalProtocolError(f"a Kademlia value is at most {MAX_VALUE_BYTES} bytes")
        return bool(await self._call(self._server.set(key, value)))

    async def fetch(self, key: str | bytes) -> Value | None:
        """The value stored under ``key``, from here or from the network (None: not found)."""
        return await self._call(self._server.get(key))

    @property
    def malformed(self) -> int:
        return self._count("malformed")

    @property
    def refused_keys(self) -> int:
        return self._count("refused_keys")

    @property
    def refused_stores(self) -> int:
        return self._count("refused_stores")

    @property
    def welcome_deferred(self) -> int:
        return self._count("welcome_deferred")

    def counters(self) -> dict[str, int]:
        """The UDP port's refusals, for ``peer status``: keys not a 20-byte digest; STOREs over
        the rate limits; senders not welcomed until their address answered our PING; answers
        and STOREs held for such a verification, and of those dropped; key transfers to
        welcomed nodes cut short; stored items evicted for room, and the bytes held."""
        out = {name: self._count(name) for name in COUNTERS if name != "malformed"}
        out["evicted"] = self.storage.evicted
        out["stored_bytes"] = self.storage.bytes
        return out

    def _count(self, name: str) -> int:
        protocol = self._server.protocol
        return int(getattr(protocol, name)) if protocol is not None else 0

    # ---------------------------------------------------------------------------- bridge

    async def _call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run ``coro`` on the server's asyncio loop; wait for it from trio."""
        loop = self._loop
        if loop is None:
            coro.close()
            raise LocalProtocolError("the Kademlia service is not running")
        token = trio.lowlevel.current_trio_token()
        done = trio.Event()
        fut = asyncio.run_coroutine_threadsafe(coro, loop)

        def wake(_f: object) -> None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(done.set)

        fut.add_done_callback(wake)
        try:
            await done.wait()
        except trio.Cancelled:
            fut.cancel()
            raise
        return fut.result()


def _size(value: Value) -> int:
    if isinstance(value, bytes):
        return len(value)
    if isinstance(value, str):
        return len(value.encode())
    return 8


def _cost(key: bytes, value: Value) -> int:
    return len(key) + _size(value) + _ITEM_OVERHEAD


__all__ = ["MAX_VALUE_BYTES", "KademliaService", "UdpLimits"]
