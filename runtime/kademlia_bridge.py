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

Input from the network: the package decodes datagrams in the protocol's
``datagram_received``; a datagram it cannot decode is counted here and dropped instead of
surfacing as an asyncio callback error, and stored values are bounded in size and number.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Coroutine
from typing import Any

import trio
from kademlia.network import Server
from kademlia.protocol import KademliaProtocol
from kademlia.storage import ForgetfulStorage

from rangecast.dht.errors import LocalProtocolError

log = logging.getLogger("rangecast.kademlia")

Value = bytes | str | int | float

#: A value larger than this is refused by ``store`` and by the storage (a UDP datagram carries
#: one value; the package does not fragment).
MAX_VALUE_BYTES = 8 * 1024
MAX_STORED = 10_000


class BoundedStorage(ForgetfulStorage):
    """The package's storage (values expire after a week) with a cap on value size and count."""

    def __init__(self, ttl: int = 604800, max_items: int = MAX_STORED) -> None:
        super().__init__(ttl)  # keeps ``data`` in insertion order: the oldest goes first
        self.max_items = max_items
        self.refused = 0

    def __setitem__(self, key: bytes, value: Any) -> None:
        if not isinstance(value, bytes | str | int | float) or _size(value) > MAX_VALUE_BYTES:
            self.refused += 1
            return
        super().__setitem__(key, value)
        while len(self.data) > self.max_items:
            self.data.popitem(last=False)


class _GuardedProtocol(KademliaProtocol):
    """The package's protocol, with what a remote datagram can make it raise (undecodable
    MessagePack, wrong argument shapes) counted and dropped rather than left to asyncio."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.malformed = 0

    async def _solve_datagram(self, datagram: bytes, address: Any) -> None:
        try:
            await super()._solve_datagram(datagram, address)
        except Exception as exc:  # anything a remote datagram can provoke
            self._refuse(address, exc)

    async def _accept_request(self, msg_id: bytes, data: Any, address: Any) -> None:
        try:
            await super()._accept_request(msg_id, data, address)
        except Exception as exc:
            self._refuse(address, exc)

    def _refuse(self, address: Any, exc: Exception) -> None:
        self.malformed += 1
        log.debug("dropped a malformed Kademlia datagram from %s: %r", address, exc)


class _Server(Server):
    protocol_class = _GuardedProtocol


class KademliaService:
    """One peer's kademlia ``Server``, run on its own asyncio loop and thread."""

    def __init__(self, node_id: bytes, *, ksize: int = 20, alpha: int = 3) -> None:
        if len(node_id) != 20:
            raise LocalProtocolError("a Kademlia node id is 20 bytes (160 bits)")
        self.node_id = node_id
        self.storage = BoundedStorage()
        self._server = _Server(ksize=ksize, alpha=alpha, node_id=node_id, storage=self.storage)
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
        self.port = port
        if bootstrap:
            await self._call(self._server.bootstrap(bootstrap))

    async def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        self._loop = None

        def halt() -> None:
            self._server.stop()
            for task in asyncio.all_tasks(loop):
                task.cancel()
            loop.stop()

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
        protocol = self._server.protocol
        return protocol.malformed if protocol is not None else 0

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


__all__ = ["MAX_VALUE_BYTES", "KademliaService"]
