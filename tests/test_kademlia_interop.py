"""Kademlia-mode peers speak the kademlia package's own protocol: an unmodified
``kademlia.network.Server`` bootstraps into a Rangecast swarm and the two share one key/value
store, in both directions; garbage datagrams on the Kademlia port are counted and dropped."""

from __future__ import annotations

import asyncio
import os
import socket

import pytest
import trio
from kademlia.network import Server

from rangecast.dht.errors import LocalProtocolError
from rangecast.runtime.inprocess import start_local_swarm
from rangecast.runtime.peer import PeerConfig


def _plain_node(contact_port: int, want_key: str, put: tuple[str, str]) -> object:
    """Run an unmodified kademlia Server on its own asyncio loop (this worker thread): join
    through ``contact_port``, get ``want_key``, set ``put``, stop."""

    async def go() -> object:
        server = Server()
        await server.listen(0, interface="127.0.0.1")
        try:
            await server.bootstrap([("127.0.0.1", contact_port)])
            got = await server.get(want_key)
            stored = await server.set(*put)
            assert stored
            return got
        finally:
            server.stop()

    return asyncio.run(go())


def test_a_plain_kademlia_server_and_rangecast_peers_share_values_both_ways() -> None:
    async def main() -> tuple[object, object, dict]:
        async with trio.open_nursery() as nursery:
            peers = await start_local_swarm(
                nursery, 6, seed=8, config=PeerConfig(dht="kademlia", id_difficulty=0)
            )
            assert await peers[1].store("stored-by-rangecast", b"from a Rangecast peer")
            got = await trio.to_thread.run_sync(
                _plain_node,
                peers[4].address.port,  # type: ignore[union-attr]
                "stored-by-rangecast",
                ("stored-by-plain", "from an unmodified kademlia Server"),
            )
            fetched = await peers[2].fetch("stored-by-plain")
            status = peers[4].status()
            for p in peers:
                p.stop()
            return got, fetched, status

    got, fetched, status = trio.run(main)
    assert got == b"from a Rangecast peer"
    assert fetched == "from an unmodified kademlia Server"
    assert status["kademlia_rpc"]["port"] == int(status["address"].rsplit(":", 1)[1])


def test_garbage_on_the_kademlia_port_is_counted_and_the_store_still_works() -> None:
    async def main() -> tuple[int, object]:
        async with trio.open_nursery() as nursery:
            peers = await start_local_swarm(
                nursery, 3, seed=3, config=PeerConfig(dht="kademlia", id_difficulty=0)
            )
            target = peers[0]
            port = target.address.port  # type: ignore[union-attr]
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                for i in range(300):
                    # Too short, undecodable MessagePack, a request of the wrong shape.
                    junk = [os.urandom(i % 30), b"\x00" + os.urandom(20) + b"\xc1", b"\x00" * 40]
                    s.sendto(junk[i % 3], ("127.0.0.1", port))
            await trio.sleep(1.0)
            assert await peers[1].store("after-garbage", 42)
            value = await target.fetch("after-garbage")
            malformed = target.status()["kademlia_rpc"]["malformed"]
            for p in peers:
                p.stop()
            return malformed, value

    malformed, value = trio.run(main)
    assert malformed >= 100
    assert value == 42


def test_store_needs_kademlia_mode_and_a_small_plain_value() -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            (pastry,) = await start_local_swarm(nursery, 1, seed=1)
            with pytest.raises(LocalProtocolError, match="no Kademlia key/value store"):
                await pastry.store("k", "v")
            pastry.stop()
            (kad,) = await start_local_swarm(nursery, 1, seed=2, config=PeerConfig(dht="kademlia"))
            with pytest.raises(LocalProtocolError, match="at most"):
                await kad.store("k", b"x" * 100_000)
            with pytest.raises(LocalProtocolError, match="bytes, str, int or float"):
                await kad.store("k", [1, 2])  # type: ignore[arg-type]
            kad.stop()

    trio.run(main)
