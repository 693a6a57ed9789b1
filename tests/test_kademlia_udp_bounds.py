"""The Kademlia-mode UDP port (runtime/kademlia_bridge.py) against the red team's abuse of
issue 29: oversized keys are refused, a forged sender draws no more than a small multiple of
what it sent (no key transfer toward an address that never answered us), STORE floods hit a
rate limit, and an honest node is still welcomed with the keys closer to it. Real UDP sockets
on 127.0.0.1, datagrams crafted in the package's own format (rpcudp: a kind byte, a 20-byte
message id, MessagePack ``[name, args]``)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import trio
import umsgpack
from kademlia.network import Server
from kademlia.utils import digest

from rangecast.runtime.kademlia_bridge import (
    MAX_VALUE_BYTES,
    BoundedStorage,
    KademliaService,
    UdpLimits,
)

HOST = "127.0.0.1"


def _request(name: str, *args: Any, msg_id: bytes | None = None) -> bytes:
    return b"\x00" + (msg_id or os.urandom(20)) + umsgpack.packb([name, list(args)])


def _answer(msg_id: bytes, value: Any) -> bytes:
    return b"\x01" + msg_id + umsgpack.packb(value)


def _decode(datagram: bytes) -> tuple[str, bytes, Any]:
    """("request" or "answer", message id, body)."""
    kind = "request" if datagram[:1] == b"\x00" else "answer"
    return kind, datagram[1:21], umsgpack.unpackb(datagram[21:])


def _is_request(datagram: bytes, name: str) -> bool:
    kind, _, body = _decode(datagram)
    return kind == "request" and body[0] == name


class _Raw:
    """A bare UDP socket speaking the wire format by hand, counting bytes both ways."""

    def __init__(self, sock: trio.socket.SocketType, target: tuple[str, int]) -> None:
        self.sock, self.target = sock, target
        self.sent = self.received = 0

    async def send(self, datagram: bytes) -> None:
        self.sent += len(datagram)
        await self.sock.sendto(datagram, self.target)

    async def take(self, quiet: float = 0.5, until: int | None = None) -> list[bytes]:
        """What arrives until nothing has for ``quiet`` seconds (or ``until`` datagrams)."""
        got: list[bytes] = []
        while until is None or len(got) < until:
            with trio.move_on_after(quiet):
                data, _ = await self.sock.recvfrom(65536)
                self.received += len(data)
                got.append(data)
                continue
            break
        return got

    async def prove(self, node_id: bytes) -> list[bytes]:
        """Make the service verify this socket's address: ping it, answer its PING."""
        await self.send(_request("ping", node_id))
        seen: list[bytes] = []
        while len(seen) < 2:  # its answer, and its own PING
            more = await self.take(quiet=2.0, until=1)
            assert more, "the service never pinged back"
            seen += more
        ping = next(d for d in seen if _is_request(d, "ping"))
        await self.send(_answer(_decode(ping)[1], node_id))
        return seen


@asynccontextmanager
async def _service(limits: UdpLimits | None = None) -> AsyncIterator[KademliaService]:
    svc = KademliaService(os.urandom(20), limits=limits)
    await svc.start(HOST, 0, [])
    try:
        yield svc
    finally:
        await svc.stop()


@asynccontextmanager
async def _raw(svc: KademliaService) -> AsyncIterator[_Raw]:
    with trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM) as sock:
        await sock.bind((HOST, 0))
        assert svc.port
        yield _Raw(sock, (HOST, svc.port))


async def _fill(svc: KademliaService, n: int, size: int = 100) -> None:
    """``n`` values stored at ``svc`` directly (on its loop), as if ``set`` had put them there."""

    async def put() -> None:
        for i in range(n):
            svc.storage[digest(f"key-{i}")] = bytes([i % 256]) * size

    await svc._call(put())


async def _until(check: Callable[[], bool], timeout: float = 5.0) -> bool:
    with trio.move_on_after(timeout):
        while not check():
            await trio.sleep(0.01)
    return check()


def test_oversized_keys_and_node_ids_are_refused_counted_and_not_stored() -> None:
    async def main() -> None:
        async with _service() as svc, _raw(svc) as raw:
            me, big = os.urandom(20), os.urandom(60_000)  # the red team's 60 KB keys
            await raw.send(_request("store", me, big, b"v"))
            await raw.send(_request("find_value", me, big))
            await raw.send(_request("store", me, os.urandom(21), b"v"))
            await raw.send(_request("find_node", me, "not-a-digest"))
            await raw.send(_request("ping", os.urandom(60_000)))  # a node id: malformed
            assert await _until(lambda: svc.refused_keys == 4 and svc.malformed == 1)
            assert await raw.take(quiet=0.3) == []  # nothing answered
            assert not svc.storage.data and svc.storage.bytes == 0
            assert svc.counters()["refused_keys"] == 4

    trio.run(main)


def test_forged_pings_draw_no_key_transfer_and_at_most_3x_their_bytes() -> None:
    async def main() -> None:
        async with _service() as svc, _raw(svc) as raw:
            await _fill(svc, 200, size=1000)
            for _ in range(20):  # fresh node ids, as from a spoofed source address
                await raw.send(_request("ping", os.urandom(20)))
            got = await raw.take()
            # Unmodified, the package sent all 200 keys at the first fresh id and more after:
            # 275-320 STOREs, about 300,000 bytes (x300). Now: 20 PING answers and our one
            # PING, 910 bytes.
            assert not any(_is_request(d, "store") for d in got)
            assert sum(_is_request(d, "ping") for d in got) == 1  # one verification, not 20
            assert raw.sent == 1000 and raw.received <= 3 * raw.sent
            assert svc.welcome_deferred == 20

    trio.run(main)


def test_a_large_answer_waits_until_the_requester_answers_our_ping() -> None:
    async def main() -> None:
        async with _service() as svc, _raw(svc) as raw:
            await _fill(svc, 3, size=MAX_VALUE_BYTES)
            me = os.urandom(20)
            ask = _request("find_value", me, digest("key-1"))
            await raw.send(ask)  # an 8 KB answer to a 69-byte request: held
            got = await raw.take(quiet=0.3)
            assert [_decode(d)[2][0] for d in got] == ["ping"]
            assert raw.received <= 3 * raw.sent
            assert svc.counters()["unverified_held"] == 1

            await raw.send(_answer(_decode(got[0])[1], me))  # the address is real: released
            got = await raw.take(quiet=2.0, until=4)
            answers = [_decode(d) for d in got if d[:1] == b"\x01"]
            assert [(i, body) for _, i, body in answers] == [
                (ask[1:21], {"value": bytes([1]) * MAX_VALUE_BYTES})
            ]
            # Then welcomed under the id it answered with: the keys closer to it (all three,
            # the service knowing nobody else).
            stores = [_decode(d)[2][1] for d in got if _is_request(d, "store")]
            stores += [_decode(d)[2][1] for d in await raw.take() if _is_request(d, "store")]
            assert sorted(s[1] for s in stores) == sorted(digest(f"key-{i}") for i in range(3))
            assert all(s[0] == svc.node_id for s in stores)

    trio.run(main)


def test_a_store_flood_from_one_address_is_rate_limited_and_counted() -> None:
    async def main() -> None:
        limits = UdpLimits(store_rate=1.0, store_burst=50.0)
        async with _service(limits) as svc, _raw(svc) as raw:
            me = os.urandom(20)
            await raw.prove(me)  # a STORE is applied only for an address that answered us
            for i in range(200):
                await raw.send(_request("store", me, digest(f"flood-{i}"), b"x" * 100))
            got = await raw.take(quiet=2.0, until=200)
            answers = [_decode(d)[2] for d in got if d[:1] == b"\x01"]
            refused = answers.count(False)
            assert len(answers) == 200
            # 50 at once, then one a second: the rest are answered False and counted.
            assert refused >= 100 and svc.refused_stores == refused
            assert len(svc.storage.data) == 200 - refused

    trio.run(main)


def test_a_store_from_an_address_that_never_answers_is_not_applied() -> None:
    async def main() -> None:
        async with _service() as svc, _raw(svc) as raw:
            await raw.send(_request("store", os.urandom(20), digest("k"), b"v"))
            got = await raw.take(quiet=0.3)
            assert [_decode(d)[2][0] for d in got] == ["ping"]  # held for the verification
            assert not svc.storage.data and svc.counters()["unverified_held"] == 1

    trio.run(main)


def _plain_node_joins(contact_port: int, expect: int) -> set[bytes]:
    """An unmodified kademlia Server on its own asyncio loop (this worker thread): bootstrap
    through ``contact_port``, wait until ``expect`` keys were handed over; the keys it holds."""

    async def go() -> set[bytes]:
        server = Server()
        await server.listen(0, interface=HOST)
        try:
            await server.bootstrap([(HOST, contact_port)])
            for _ in range(500):
                if len(server.storage.data) >= expect:
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)  # and no more than that
            return set(server.storage.data)
        finally:
            server.stop()

    return asyncio.run(go())


def test_an_honest_node_is_welcomed_with_the_keys_closer_to_it_up_to_the_cap() -> None:
    async def main() -> tuple[set[bytes], dict[str, int]]:
        async with _service() as svc:
            await _fill(svc, 300)
            assert svc.port
            got = await trio.to_thread.run_sync(_plain_node_joins, svc.port, 256)
            return got, svc.counters()

    got, counters = trio.run(main)
    # Nobody else known: every key is closer to the newcomer, 256 (the per-node cap) sent.
    assert len(got) == 256 and got <= {digest(f"key-{i}") for i in range(300)}
    assert counters["welcome_truncated"] == 1
    assert counters["unverified_dropped"] == 0


def test_the_storage_is_bounded_in_bytes_and_refuses_keys_that_are_not_digests() -> None:
    storage = BoundedStorage(max_bytes=10 * (20 + 1000 + 64))
    for i in range(25):
        storage[digest(i)] = b"v" * 1000
    assert len(storage.data) == 10 and storage.evicted == 15
    assert set(storage.data) == {digest(i) for i in range(15, 25)}  # the oldest went first
    storage[digest(24)] = b"w"  # replacing a value gives its bytes back
    assert storage.bytes == 9 * 1084 + 85
    storage[b"x" * 60_000] = b"v"
    storage[digest(99)] = b"v" * (MAX_VALUE_BYTES + 1)
    assert storage.refused == 2 and len(storage.data) == 10
