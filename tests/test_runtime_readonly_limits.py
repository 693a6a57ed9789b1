"""Read-only requests bounded (issue 29, build item 5): a status flood is answered up to the
read-only buckets and refused beyond, counted, closed when it goes on; a client that asks for
tree pages and never reads is closed at its read-only byte bound and its bytes released; the
peer's own bounds (status builds, bytes, pictures held) hold whatever the number of connections;
an honest ``swarm check`` of a many-page tree still works under the defaults. Fast: the buckets
refill about never where counts are asserted, so nothing depends on the machine's speed."""

from __future__ import annotations

import socket
from contextlib import suppress
from dataclasses import replace
from functools import partial
from typing import Any

import pytest
import trio
from runtime_harness import oracle_round

from rangecast.pubsub.peer import OverlayPeer
from rangecast.runtime import quotas as q
from rangecast.runtime import service
from rangecast.runtime.client import connect
from rangecast.runtime.guard import FrameReader, Rejections, frame, wire_codec
from rangecast.runtime.inprocess import start_local_swarm
from rangecast.runtime.messages import (
    Done,
    StatusReply,
    StatusRequest,
    SubscribeRequest,
    TreeReply,
    TreeRequest,
)
from rangecast.runtime.peer import PeerConfig, PeerRuntime
from rangecast.runtime.quotas import ClientLedger, CostBucket, Quotas
from rangecast.runtime.treestate import picture
from rangecast.testkit.live import check_live, collect

WIRE = wire_codec(*OverlayPeer.TABLES)
#: Refills about never: what a burst allows is exactly what is answered.
NEVER = 0.001


def _port(peer: PeerRuntime) -> int:
    assert peer.address is not None
    return peer.address.port


def _clients(peer: PeerRuntime) -> dict[str, Any]:
    clients: dict[str, Any] = peer.status()["clients"]
    return clients


async def _until(cond: Any, guard_s: float = 30.0) -> None:
    """Wait for ``cond()`` (a guard against a hang; the assertions after it decide)."""
    with trio.move_on_after(guard_s):
        while not cond():
            await trio.sleep(0.02)


async def _replies(stream: trio.SocketStream, n: int) -> list[Any]:
    """Read replies until ``n`` came or the peer closed the connection."""
    reader = FrameReader()
    out: list[Any] = []
    try:
        while len(out) < n:
            data = await stream.receive_some(65536)
            if not data:
                break
            out.extend(WIRE.decode(f) for f in reader.feed(data))
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    return out


def _statuses(n: int, first: int = 1) -> bytes:
    return b"".join(frame(WIRE.encode(StatusRequest(first + k))) for k in range(n))


# ------------------------------------------------------------------------------ the ledger


def test_cost_bucket_lets_one_request_through_and_charges_it_in_full() -> None:
    b = CostBucket(rate=10.0, burst=20.0, now=0.0)
    assert b.ready(0.0)
    b.charge(50.0)  # a big picture: allowed from a full bucket, then owed
    assert not b.ready(1.0) and b.tokens == pytest.approx(-20.0)
    assert b.wait_s == pytest.approx(2.1)
    assert b.ready(3.1)
    assert Quotas().readonly_rate_per_s > 0
    with pytest.raises(ValueError, match=r"quotas\.readonly_queue_bytes"):
        Quotas(readonly_queue_bytes=0)


def _ledger_of(n: int, quotas: Quotas) -> tuple[ClientLedger, list[Any], list[int]]:
    """A ledger with ``n`` connections of one address; closing one appends its index."""
    ledger = ClientLedger(quotas, Rejections())
    closed: list[int] = []
    conns = []
    for k in range(n):
        c = ledger.admit("10.0.0.1", 0.0)
        assert c is not None
        c.on_unread = partial(closed.append, k)
        conns.append(c)
    return ledger, conns, closed


def test_read_only_bytes_are_bounded_per_connection_and_per_peer() -> None:
    ledger, (a, b, c, d), closed = _ledger_of(
        4, Quotas(readonly_queue_bytes=100, peer_readonly_queue_bytes=250)
    )
    assert a.queue_readonly(400)  # one reply always fits an empty queue ...
    assert not a.queue_readonly(1)  # ... but nothing after it while it is unread
    a.sent_readonly(400)
    assert a.queue_readonly(60) and a.queue_readonly(40)
    assert b.queue_readonly(90) and c.queue_readonly(50)
    assert ledger.readonly_queued == 240 and closed == []
    # The peer's bound: room is made by closing the longest-waiting unread connection (a).
    assert d.queue_readonly(50)
    assert closed == [0] and ledger.readonly_queued == 190
    a.sent_readonly(100)  # its writer finishing after the release: nothing counted twice
    assert ledger.readonly_queued == 190
    # One that caught up goes to the back of the line.
    b.sent_readonly(90)
    assert b.queue_readonly(20) and d.queue_readonly(50) and c.queue_readonly(50)
    assert ledger.readonly_queued == 220
    assert b.queue_readonly(40)  # c is now the longest waiting
    assert closed == [0, 2] and ledger.readonly_queued == 160
    for conn in (a, b, c, d):
        conn.close()
    st = ledger.status(0)["read_only"]
    assert st["queued_bytes"] == 0 and st["unread_connections"] == 0  # type: ignore[index]


def test_the_longest_waiting_reader_asking_for_more_is_itself_refused() -> None:
    ledger, (x, y), closed = _ledger_of(
        2, Quotas(readonly_queue_bytes=200, peer_readonly_queue_bytes=250)
    )
    assert x.queue_readonly(150) and y.queue_readonly(90)
    assert not x.queue_readonly(20)  # within its own bound, but the peer's is full: x closes
    assert closed == [] and ledger.readonly_queued == 240  # the caller closes x


def test_tree_pictures_held_are_bounded_least_recently_used_first() -> None:
    ledger = ClientLedger(Quotas(tree_pictures_held=2), Rejections())
    conns = [ledger.admit("10.0.0.2", 0.0) for _ in range(3)]
    a, b, c = (x for x in conns if x is not None)
    ledger.hold_picture(a, "A")
    ledger.hold_picture(b, "B")
    assert ledger.picture(a) == "A"  # a used: b is now the least recent
    ledger.hold_picture(c, "C")
    assert ledger.picture(b) is None and ledger.picture(a) == "A"
    a.close()
    assert ledger.picture(a) is None
    st = ledger.status(0)["read_only"]
    assert st["pictures_held"] == 1 and st["pictures_dropped"] == 1  # type: ignore[index]


def test_read_only_limits_are_tunable_for_test_processes() -> None:
    from rangecast.runtime.peer import tuned

    cfg = tuned(PeerConfig(), "quotas.readonly_rate_per_s=2.5,quotas.tree_pictures_held=3")
    assert cfg.quotas == replace(q.DEFAULT_QUOTAS, readonly_rate_per_s=2.5, tree_pictures_held=3)


# ----------------------------------------------------------------------- against real peers


def test_a_status_flood_gets_its_allowance_and_refusals_then_honest_rounds_are_exact() -> None:
    quotas = Quotas(
        readonly_rate_per_s=NEVER,
        readonly_burst=20.0,
        address_readonly_rate_per_s=NEVER,
        address_readonly_burst=50.0,
        peer_readonly_rate_per_s=NEVER,
        peer_readonly_burst=5.0,
        readonly_close_after=5_000,
    )

    async def main() -> dict[str, Any]:
        async with trio.open_nursery() as nursery:
            peers = await start_local_swarm(nursery, 3, seed=21, config=PeerConfig(quotas=quotas))
            target = peers[0]
            port = _port(target)
            out: dict[str, Any] = {}
            # A connection held open throughout keeps the address's entry (and its buckets).
            async with connect("127.0.0.1", port):
                # One connection, 2,000 status requests back to back.
                async with await trio.open_tcp_stream("127.0.0.1", port) as s:
                    await s.send_all(_statuses(2_000))
                    replies = await _replies(s, 2_000)
                out["answered"] = sum(isinstance(r, StatusReply) for r in replies)
                out["refused"] = [r for r in replies if isinstance(r, Done)]
                out["one"] = _clients(target)
                # Two more connections of the same address: its bucket (50) bounds them now.
                answered = 0
                for _ in range(2):
                    async with await trio.open_tcp_stream("127.0.0.1", port) as s:
                        await s.send_all(_statuses(40))
                        answered += sum(isinstance(r, StatusReply) for r in await _replies(s, 40))
                out["address"] = answered
                out["two"] = _clients(target)
            # Honest traffic is untouched (no status asked: the address's budget is spent).
            out["oracle"] = await oracle_round(
                (port, _port(peers[1])), (port, _port(peers[2])), 21, 20, 30
            )
            for p in peers:
                p.stop()
            return out

    out = trio.run(main)
    assert out["answered"] == 20  # the connection's burst, refilling about never
    assert len(out["refused"]) == 1_980
    assert all("read-only requests" in r.error and "try again" in r.error for r in out["refused"])
    one = out["one"]
    assert one["refused"][q.READONLY_RATE] == 1_980
    # The peer built 5 statuses (its own budget); the other 15 were the last one built.
    assert one["read_only"]["statuses_built"] == 5
    assert one["read_only"]["statuses_cached"] == 15
    # 50 for the address, 20 taken by the first: the second connection gets its own burst of
    # 20 (then 20 refused for its own rate), the third the address's last 10 (then 30 refused
    # for the address's).
    assert out["address"] == 30
    two = out["two"]
    assert two["refused"][q.READONLY_RATE] == 1_980 + 20
    assert two["refused"][q.READONLY_ADDRESS] == 30
    assert two["read_only"]["queued_bytes"] == 0
    assert out["oracle"] == (0, 0, 0)


def test_a_connection_that_keeps_asking_while_refused_is_closed() -> None:
    quotas = Quotas(readonly_rate_per_s=NEVER, readonly_burst=10.0, readonly_close_after=100)

    async def main() -> tuple[list[Any], dict[str, Any], tuple[int, int, int]]:
        async with trio.open_nursery() as nursery:
            peers = await start_local_swarm(nursery, 2, seed=22, config=PeerConfig(quotas=quotas))
            target = peers[0]
            async with await trio.open_tcp_stream("127.0.0.1", _port(target)) as s:
                await s.send_all(_statuses(2_000))
                replies = await _replies(s, 2_000)  # ends when the peer closes it
            await _until(lambda: _clients(target)["connections"] == 0)
            info = _clients(target)
            port = _port(target)
            oracle = await oracle_round((port, port), (_port(peers[1]), port), 22, 12, 20)
            for p in peers:
                p.stop()
            return replies, info, oracle

    replies, info, oracle = trio.run(main)
    # What was queued when it was closed goes with it: at most the burst and 99 refusals
    # (the 100th closes it) arrive.
    assert sum(isinstance(r, StatusReply) for r in replies) <= 10
    assert sum(isinstance(r, Done) for r in replies) <= 99
    assert info["refused"][q.READONLY_RATE] == 100
    assert info["refused"][q.READONLY_FLOOD] == 1
    assert info["connections"] == 0
    assert oracle == (0, 0, 0)


def _rates_out_of_the_way(**bytes_bounds: int) -> Quotas:
    """Read-only rates huge at every scope, so that only the byte bounds given act."""
    huge = 1e9
    return Quotas(
        readonly_rate_per_s=huge,
        readonly_burst=huge,
        address_readonly_rate_per_s=huge,
        address_readonly_burst=huge,
        peer_readonly_rate_per_s=huge,
        peer_readonly_burst=huge,
        **bytes_bounds,  # type: ignore[arg-type]
    )


def test_a_client_that_never_reads_its_tree_pages_is_closed_at_its_byte_bound() -> None:
    """Rates out of the way (huge): only the bytes bound closes it."""
    bound = 256 << 10
    quotas = _rates_out_of_the_way(readonly_queue_bytes=bound)

    async def main() -> dict[str, Any]:
        async with trio.open_nursery() as nursery:
            peers = await start_local_swarm(nursery, 3, seed=23, config=PeerConfig(quotas=quotas))
            target = peers[0]
            port = _port(target)
            out: dict[str, Any] = {}
            async with connect("127.0.0.1", port) as c:  # a tree worth paging
                for k in range(60):
                    await c.subscribe(f"Attr1 >= {k} and Attr2 <= {k + 50}")
                await _until(lambda: len(target.core.overlay.nodes) > 0)  # type: ignore[union-attr]
                out["page_bytes"] = len(
                    frame(WIRE.encode(TreeReply(1, 0, False, "ready", *_first(target))))
                )
                sock = trio.socket.socket()
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                await sock.connect(("127.0.0.1", port))
                lazy = trio.SocketStream(sock)
                asks = b"".join(frame(WIRE.encode(TreeRequest(k + 1, 0))) for k in range(3_000))
                with (
                    trio.move_on_after(5),  # the peer stops reading once it closes us
                    suppress(trio.BrokenResourceError, trio.ClosedResourceError),
                ):
                    await lazy.send_all(asks)
                await _until(lambda: bool(_clients(target)["refused"].get(q.READONLY_UNREAD)))
                out["during"] = _clients(target)
                await lazy.aclose()
                await _until(lambda: _clients(target)["connections"] == 1)
                out["after"] = _clients(target)
            out["oracle"] = await oracle_round((port, port), (_port(peers[1]), port), 23, 12, 20)
            for p in peers:
                p.stop()
            return out

    out = trio.run(main)
    assert out["page_bytes"] * 3_000 > 4 * bound  # the asks would queue far beyond the bound
    assert out["during"]["refused"][q.READONLY_UNREAD] == 1
    assert q.SLOW_READER not in out["during"]["refused"]  # closed at the bytes, not a stall
    after = out["after"]
    assert after["read_only"]["queued_bytes"] == 0  # released with it
    assert after["read_only"]["unread_connections"] == 0
    assert after["read_only"]["pictures_held"] == 0
    assert after["subscriptions"] == 60  # the honest client's, untouched
    assert out["oracle"] == (0, 0, 0)


def _first(peer: PeerRuntime) -> tuple[Any, ...]:
    """Page 0 of ``peer``'s tree picture, as ``TreeReply`` fields after ``state``."""
    assert peer.core is not None
    pic = picture(peer.core, peer.schemas)
    return pic.pages[0], pic.schemas, pic.config


def test_honest_paging_of_a_many_page_tree_works_under_the_defaults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``swarm check``'s collection (every peer's pages, at once) twice in a row, then each
    peer's pages once more, with pages of 5 items so that a tree is many pages: never refused;
    a page asked out of order is answered with the reason."""
    monkeypatch.setattr(service, "picture", partial(picture, items=5))

    async def main() -> dict[str, Any]:
        async with trio.open_nursery() as nursery:
            peers = await start_local_swarm(nursery, 4, seed=24)
            ports = [_port(p) for p in peers]
            out: dict[str, Any] = {}
            async with connect("127.0.0.1", ports[0]) as c:
                for k in range(150):
                    await c.subscribe(f"Attr1 >= {k % 90} and Attr3 <= {k}")
                addresses = [f"127.0.0.1:{p}" for p in ports]
                await trio.sleep(1.0)  # installs settle (the check only needs them quiet)
                out["first"] = await collect(addresses)
                out["second"] = await collect(addresses)
                out["pages"] = len(await c.tree())
                out["status"] = await c.status()
            for port in ports[1:]:
                async with connect("127.0.0.1", port) as other:
                    out["pages"] = max(out["pages"], len(await other.tree()))
            async with connect("127.0.0.1", ports[0]) as c:
                out["out_of_order"] = await c._call(partial(TreeRequest, page=3))
            out["refused"] = sum(_clients(p)["refused"].get(q.READONLY_RATE, 0) for p in peers)
            for p in peers:
                p.stop()
            return out

    out = trio.run(main)
    for tree in (out["first"], out["second"]):
        assert not tree.unreachable and len(tree.states) == 4, tree.unreachable
        assert check_live(tree.snapshot) == []
    assert out["pages"] > 10  # many pages, one picture: one charge
    wrong = out["out_of_order"]
    assert isinstance(wrong, TreeReply) and "ask for page 0 first" in wrong.error
    assert out["refused"] == 0
    st = out["status"]["clients"]
    assert not any(r.startswith("read-only") for r in st["refused"])
    assert st["read_only"]["pictures_held"] == 0  # every picture paged to its end


def test_never_reading_connections_cannot_hold_more_than_the_peers_bound() -> None:
    """Eight never-reading connections each within its own bound: together they pass the
    peer's, and the longest waiting are closed to make room; the peer serves on."""
    quotas = _rates_out_of_the_way(
        readonly_queue_bytes=8 << 20, peer_readonly_queue_bytes=512 << 10
    )

    async def main() -> dict[str, Any]:
        async with trio.open_nursery() as nursery:
            peers = await start_local_swarm(nursery, 2, seed=25, config=PeerConfig(quotas=quotas))
            target = peers[0]
            port = _port(target)
            out: dict[str, Any] = {"peak": 0}
            lazies = []
            for _ in range(8):
                sock = trio.socket.socket()
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                await sock.connect(("127.0.0.1", port))
                lazies.append(trio.SocketStream(sock))

            async def ask(s: trio.SocketStream) -> None:
                with trio.move_on_after(20):
                    try:
                        for k in range(40):
                            await s.send_all(_statuses(100, 1 + 100 * k))
                            ro = _clients(target)["read_only"]
                            out["peak"] = max(out["peak"], ro["queued_bytes"])
                            await trio.sleep(0)
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        pass

            async with trio.open_nursery() as askers:
                for s in lazies:
                    askers.start_soon(ask, s)
            out["during"] = _clients(target)
            for s in lazies:
                await s.aclose()
            await _until(lambda: _clients(target)["connections"] == 0)
            out["after"] = _clients(target)
            async with connect("127.0.0.1", port) as c:
                out["status"] = (await c.status())["state"]
            for p in peers:
                p.stop()
            return out

    out = trio.run(main)
    assert out["peak"] <= 512 << 10
    assert out["during"]["refused"][q.READONLY_UNREAD] >= 1
    assert out["after"]["read_only"]["queued_bytes"] == 0
    assert out["status"] == "ready"


def test_subscribe_requests_are_not_read_only() -> None:
    """Only Hello, status and tree requests are weighed: a subscribe is not."""
    assert SubscribeRequest not in service._READ_ONLY
    assert {StatusRequest, TreeRequest} <= service._READ_ONLY
