"""Issue 18, acceptance item 2: attacks against separate ``rangecast peer start`` processes on
loopback, bounded in count and time. One swarm of six peers serves the client and peer attacks
in turn (mass subscribe, publish flood, slowloris and half frames, a client that never reads,
replayed handshake openings, made-up routing entries); a second one, with a peer that acks hops
and drops the messages, serves the last. After each attack: every peer process alive, every
peer's resident memory (peak over the attack, sampled) under ``RSS_BOUND_MIB``, the abuse
counted in ``rangecast peer status --json`` of the peer attacked, and a subscribe/publish round
equal to the brute-force oracle. Each attack has its own target peer and its own source address
(127.0.0.x), and compares counters with their values just before it, so none can make a later
one pass or fail. Figures measured: docs/runtime.md, "Attack suite"."""

from __future__ import annotations

import random
import socket
from collections.abc import Iterator
from contextlib import AsyncExitStack, suppress
from pathlib import Path
from typing import Any

import pytest
import trio
from live_swarm import (
    WIRE,
    LiveSwarm,
    cli_status,
    drain_until_closed,
    exchange,
    leaf_sets_full,
    open_from,
    sample_rss,
    status,
    stop_processes,
    wait_for,
)
from runtime_harness import oracle_round

from rangecast.dht.messages import JoinRows, LeafSetReply, RowReply
from rangecast.dht.wire import Handle, codec_for
from rangecast.pubsub.peer import OverlayPeer
from rangecast.runtime import quotas as q
from rangecast.runtime.client import connect
from rangecast.runtime.guard import FrameReader, SessionInitiator, frame
from rangecast.runtime.identity import PeerAddress
from rangecast.runtime.messages import (
    PublishReply,
    PublishRequest,
    StatusRequest,
    SubscribeReply,
    SubscribeRequest,
    TreeRequest,
)
from rangecast.runtime.peer import read_frame

pytestmark = pytest.mark.slow

CORE = codec_for(*OverlayPeer.TABLES)
N = 6
#: Resident memory any peer process may reach during any attack (MiB): 1.5 times the largest
#: peak measured, 127 MiB, of which 121 MiB is a peer at rest (docs/runtime.md, "Attack suite").
RSS_BOUND_MIB = 192.0
#: How much any peer process may grow during any one attack (MiB): measured at most 4.4 (20
#: half frames of 190 KB held at once among them); 1.5 times that is allocator noise, so 16,
#: still far below what the issue measured before the limits (+89 MB under a flood, +250 MB
#: under made-up routing entries).
GROWTH_BOUND_MIB = 16.0
#: Short client timeouts, so that the slowloris and never-reading attacks end in seconds, and
#: subscription quotas a mass subscribe reaches in seconds; everything else at its default.
TUNING = ",".join(
    (
        "quotas.idle_timeout_s=5",
        "quotas.half_frame_timeout_s=4",
        "quotas.slow_reader_s=2",
        "quotas.subscriptions_per_connection=500",
        "quotas.subscriptions_per_address=1500",
    )
)
EVENT: dict[str, float | None] = {"Attr1": 50.0, "Attr2": 0.0, "Attr3": 1.0, "Attr4": 2.0}
#: What each attack measured (peak RSS per peer, counters), printed with ``-s``.
MEASURED: dict[str, dict[str, Any]] = {}


@pytest.fixture(scope="module")
def swarm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveSwarm]:
    env = {i: {"RANGECAST_TEST_TUNING": TUNING} for i in range(N)}
    s = LiveSwarm(tmp_path_factory.mktemp("live"), N, env, ["--id-difficulty", "0"])
    try:
        assert trio.run(wait_for, lambda: leaf_sets_full(s.ports), 120)
        yield s
    finally:
        s.stop()
        for name, m in MEASURED.items():
            print(f"{name}: {m}")


def _after(
    swarm: LiveSwarm, name: str, target: int, start: list[float], peaks: list[float], seed: int
) -> dict[str, Any]:
    """The checks every attack ends with (``start``, ``peaks``: each peer's RSS before the
    attack and its peak during it); returns the target's ``peer status --json``."""
    assert swarm.alive() == [True] * N, [swarm.log(i)[-2000:] for i in range(N)]
    growth = max(b - a for a, b in zip(start, peaks, strict=True))
    assert max(peaks) < RSS_BOUND_MIB, (name, peaks)
    assert growth < GROWTH_BOUND_MIB, (name, start, peaks)
    ports = swarm.ports
    other, third = ports[(target + 2) % N], ports[(target + 4) % N]

    async def round_and_states() -> tuple[tuple[int, int, int], list[dict[str, Any]]]:
        oracle = await oracle_round((ports[target], other), (ports[target], third), seed, 30, 40)
        return oracle, [await status(p) for p in ports]

    oracle, states = trio.run(round_and_states)
    assert oracle == (0, 0, 0), name
    for st in states:
        assert st["state"] == "ready" and st["internal_errors"] == 0
    MEASURED[name] = {"rss_peak_mib": round(max(peaks), 1), "growth_mib": round(growth, 1)}
    return cli_status(ports[target])


def _refused(st: dict[str, Any], reason: str) -> int:
    return int(st["clients"]["refused"].get(reason, 0))


# --------------------------------------------------------------------------- client attacks


def test_mass_subscribe(swarm: LiveSwarm) -> None:
    """From 127.0.0.2: 30 identical subscriptions, then three connections of 600 distinct ones
    each. The quotas (500 a connection, 1,500 the address, 16 identical) bound what is held."""
    target, src = 1, "127.0.0.2"
    port = swarm.ports[target]

    async def attack() -> dict[str, Any]:
        before = await status(port)
        accepted = refused = 0
        async with AsyncExitStack() as held:
            for c in range(4):
                stream = await held.enter_async_context(await open_from(src, port))
                if c == 0:
                    exprs = ["Attr4 >= 0"] * 30
                else:
                    exprs = [f"Attr1 >= {c * 1000 + k}" for k in range(600)]
                reqs = [SubscribeRequest(k + 1, "thesis", e) for k, e in enumerate(exprs)]
                for r in await exchange(stream, reqs):
                    assert isinstance(r, SubscribeReply)
                    accepted += not r.error
                    refused += bool(r.error)
            during = await status(port)
        await wait_for(lambda: _no_clients(port), 60)
        return {"before": before, "during": during, "accepted": accepted, "refused": refused}

    out, start, peaks = trio.run(sample_rss, swarm, attack)
    st = _after(swarm, "mass subscribe", target, start, peaks, seed=201)
    before = out["before"]
    assert out["accepted"] == 1500 and out["refused"] == 30 + 1800 - 1500
    assert out["during"]["clients"]["subscriptions"] == 1500
    assert _refused(st, q.SUBS_IDENTICAL) - _refused(before, q.SUBS_IDENTICAL) == 14
    assert _refused(st, q.SUBS_CONNECTION) - _refused(before, q.SUBS_CONNECTION) > 0
    assert _refused(st, q.SUBS_ADDRESS) - _refused(before, q.SUBS_ADDRESS) > 0
    assert st["clients"]["subscriptions"] == 0  # gone with their connections
    MEASURED["mass subscribe"]["refused"] = out["refused"]


async def _no_clients(port: int) -> bool:
    """Only our own status connection is open at the peer, holding nothing."""
    st = await status(port)
    return bool(st["clients"]["connections"] <= 1 and st["clients"]["subscriptions"] == 0)


def test_publish_flood(swarm: LiveSwarm) -> None:
    """From 127.0.0.3: two connections, each pipelining 1,500 publishes as fast as TCP takes
    them. Beyond each connection's burst (400) and rate (200/s), or while the peer is saturated
    (its loop lagging), they are refused with a reason, each refusal counted."""
    target, src = 2, "127.0.0.3"
    port = swarm.ports[target]
    per = 1500

    async def attack() -> dict[str, Any]:
        before = await status(port)
        counts = {"accepted": 0, "refused": 0}

        async def flood() -> None:
            async with await open_from(src, port) as stream:
                reqs = [PublishRequest(k + 1, "thesis", EVENT) for k in range(per)]
                for r in await exchange(stream, reqs):
                    assert isinstance(r, PublishReply)
                    counts["refused" if r.error else "accepted"] += 1

        async with trio.open_nursery() as nursery:
            nursery.start_soon(flood)
            nursery.start_soon(flood)
        await wait_for(lambda: _no_clients(port), 60)
        return {"before": before, **counts}

    out, start, peaks = trio.run(sample_rss, swarm, attack)
    st = _after(swarm, "publish flood", target, start, peaks, seed=202)
    before = out["before"]
    assert out["accepted"] + out["refused"] == 2 * per
    reasons = (q.PUBLISH_RATE, q.PUBLISH_ADDRESS, q.BUSY)
    counted = sum(_refused(st, r) - _refused(before, r) for r in reasons)
    # Every refusal the flood got is counted; the oracle round afterwards (in ``st``) may add
    # its own, for load, which its client waits out.
    assert counted >= out["refused"] > 0
    assert _refused(st, q.PUBLISH_RATE) > _refused(before, q.PUBLISH_RATE)
    accepted = st["clients"]["publishes_accepted"] - before["clients"]["publishes_accepted"]
    assert accepted >= out["accepted"]  # and the oracle round's own publishes
    # What was accepted went out: no frame dropped on a full link queue (the issue: 386,766).
    assert st["transport"]["dropped_queue_full"] == before["transport"]["dropped_queue_full"]
    failed = st["dht"]["peers_failed"] - before["dht"]["peers_failed"]
    MEASURED["publish flood"].update(
        accepted=out["accepted"], refused=out["refused"], peers_failed=failed
    )


def test_slowloris_and_half_frames(swarm: LiveSwarm) -> None:
    """From 127.0.0.4: 20 connections each holding 190 KB of a 200 KB frame, 20 dripping a
    frame one byte every 0.3 s, 24 saying nothing (64, the address's connection quota), then 6
    more, refused at once. The half frames go at their timeout, the silent ones at theirs."""
    target, src = 3, "127.0.0.4"
    port = swarm.ports[target]

    async def drip(stream: trio.SocketStream) -> None:
        try:
            await stream.send_all((1000).to_bytes(4, "big"))
            for _ in range(200):  # bounded: 60 s, far beyond the half-frame timeout
                await stream.send_all(b"\0")
                await trio.sleep(0.3)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    async def attack() -> dict[str, Any]:
        before = await status(port)
        half = (200_000).to_bytes(4, "big") + b"\0" * 190_000
        streams = []
        async with trio.open_nursery() as nursery:
            for k in range(70):
                s = await open_from(src, port)
                streams.append(s)
                if k < 20:
                    await s.send_all(half)
                elif k < 40:
                    nursery.start_soon(drip, s)
            async with trio.open_nursery() as readers:
                for s in streams:
                    readers.start_soon(drain_until_closed, s)
        for s in streams:
            await s.aclose()
        await wait_for(lambda: _no_clients(port), 60)
        return {"before": before}

    out, start, peaks = trio.run(sample_rss, swarm, attack)
    st = _after(swarm, "slowloris", target, start, peaks, seed=203)
    before = out["before"]
    delta = {
        r: _refused(st, r) - _refused(before, r) for r in (q.HALF_FRAME, q.IDLE, q.CONNECTIONS)
    }
    assert delta[q.HALF_FRAME] == 40
    # The last 6 find the address full (had a slot freed first, that one is closed as idle).
    assert delta[q.IDLE] + delta[q.CONNECTIONS] == 30 and delta[q.CONNECTIONS] > 0
    MEASURED["slowloris"]["refused"] = delta


def test_a_client_that_never_reads(swarm: LiveSwarm) -> None:
    """From 127.0.0.5, with a 4 KB receive window: 20 subscriptions matching every event, then
    never a read while an honest client publishes through another peer. The peer closes it
    (its writes stalled 2 s) and removes its subscriptions."""
    target, src = 4, "127.0.0.5"
    port = swarm.ports[target]

    async def attack() -> dict[str, Any]:
        before = await status(port)
        sock = trio.socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        await sock.bind((src, 0))
        await sock.connect(("127.0.0.1", port))
        lazy = trio.SocketStream(sock)
        subs = [SubscribeRequest(k + 1, "thesis", f"Attr1 >= {k}") for k in range(20)]
        await lazy.send_all(b"".join(frame(WIRE.encode(m)) for m in subs))
        await wait_for(lambda: _holds(port, 20), 30)
        published = 0
        async with connect("127.0.0.1", swarm.ports[(target + 1) % N]) as pub:
            for published in range(1, 3001):  # bounded: until the peer gives up on the reader
                await pub.publish(EVENT)
                if published % 25 == 0:
                    st = await status(port)
                    if _refused(st, q.SLOW_READER) > _refused(before, q.SLOW_READER):
                        break
        closed = False
        with trio.move_on_after(30):
            await drain_until_closed(lazy)
            closed = True
        await lazy.aclose()
        await wait_for(lambda: _no_clients(port), 60)
        return {"before": before, "published": published, "closed": closed}

    out, start, peaks = trio.run(sample_rss, swarm, attack)
    st = _after(swarm, "never-reading client", target, start, peaks, seed=204)
    before = out["before"]
    assert _refused(st, q.SLOW_READER) - _refused(before, q.SLOW_READER) == 1
    dropped = st["clients"]["notifications_dropped"] - before["clients"]["notifications_dropped"]
    assert dropped > 0
    assert out["closed"] and st["clients"]["subscriptions"] == 0
    MEASURED["never-reading client"].update(published=out["published"], dropped=dropped)


async def _holds(port: int, n: int) -> bool:
    return bool((await status(port))["clients"]["subscriptions"] == n)


# ------------------------------------------------------------------- read-only requests (29)

#: How long the status flood lasts, the honest publishing measured before it, and that
#: publisher's pace (well within its quotas, and few events: a peer's memory grows by some
#: MiB per thousand events it handles, which is not what is measured here).
FLOOD_S = 10.0
BASELINE_S = 3.0
PACE_PER_S = 50.0


def test_status_flood(swarm: LiveSwarm) -> None:
    """From 127.0.0.8: four connections pipelining status requests for 10 s (each reconnecting
    when closed, a harder flood than issue 29's four connections), while an honest client
    publishes 50 events a second through the target and another, subscribed at a third peer,
    receives. Issue 29 measured one event through the victim in 20 s. Beyond the read-only
    buckets the requests are refused and counted, a connection that goes on is closed, the
    statuses built stay within the peer's budget; every event accepted during the flood is
    delivered, at no less than half the pace before it."""
    target, src = 5, "127.0.0.8"
    port = swarm.ports[target]
    batch = b"".join(frame(WIRE.encode(StatusRequest(k + 1))) for k in range(500))

    async def flood_one(deadline: float, counts: dict[str, int]) -> None:
        while trio.current_time() < deadline:
            try:
                stream = await open_from(src, port)
            except OSError:
                await trio.sleep(0.01)
                continue
            counts["connections"] += 1
            async with stream, trio.open_nursery() as reading:
                reading.start_soon(drain_until_closed, stream)
                try:
                    while trio.current_time() < deadline:
                        await stream.send_all(batch)
                        counts["asked"] += 500
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    pass
                reading.cancel_scope.cancel()

    async def attack() -> dict[str, Any]:
        before = await status(port)
        eids: dict[str, set[int]] = {"base": set(), "flood": set()}
        got: set[int] = set()
        counts = {"connections": 0, "asked": 0}
        async with (
            connect("127.0.0.1", swarm.ports[(target + 3) % N]) as receiver,
            connect("127.0.0.1", port) as pub,
            trio.open_nursery() as nursery,
        ):
            sub = await receiver.subscribe("Attr1 >= 0")  # every EVENT

            async def receive() -> None:
                async for d in sub:
                    got.add(d.eid)

            async def publish_for(seconds: float, into: set[int]) -> None:
                end = trio.current_time() + seconds
                while trio.current_time() < end:
                    into.add(await pub.publish(EVENT))  # waits out refusals for load
                    await trio.sleep(1.0 / PACE_PER_S)

            nursery.start_soon(receive)
            await publish_for(BASELINE_S, eids["base"])
            deadline = trio.current_time() + FLOOD_S
            async with trio.open_nursery() as flooders:
                for _ in range(4):
                    flooders.start_soon(flood_one, deadline, counts)
                await publish_for(FLOOD_S, eids["flood"])
            during = await status(port)
            wanted = eids["base"] | eids["flood"]
            with trio.move_on_after(30):  # a guard; the assertions decide
                while not wanted <= got:
                    await trio.sleep(0.05)
            nursery.cancel_scope.cancel()
        await wait_for(lambda: _no_clients(port), 60)
        return {"before": before, "during": during, "eids": eids, "got": got, **counts}

    out, start, peaks = trio.run(sample_rss, swarm, attack)
    st = _after(swarm, "status flood", target, start, peaks, seed=207)
    before, eids, got = out["before"], out["eids"], out["got"]
    delta = {
        r: _refused(st, r) - _refused(before, r)
        for r in (q.READONLY_RATE, q.READONLY_ADDRESS, q.READONLY_FLOOD)
    }
    ro_before, ro = before["clients"]["read_only"], out["during"]["clients"]["read_only"]
    built = ro["statuses_built"] - ro_before["statuses_built"]
    cached = ro["statuses_cached"] - ro_before["statuses_cached"]
    base_rate = len(eids["base"]) / BASELINE_S
    flood_rate = len(eids["flood"]) / FLOOD_S
    MEASURED["status flood"].update(
        asked=out["asked"],
        connections=out["connections"],
        refused=delta,
        statuses_built=built,
        statuses_cached=cached,
        publishes_per_s_before=round(base_rate, 1),
        publishes_per_s_during=round(flood_rate, 1),
        delivered_during=len(eids["flood"] & got),
    )
    assert delta[q.READONLY_RATE] + delta[q.READONLY_ADDRESS] > 0
    assert delta[q.READONLY_FLOOD] > 0  # the connections that went on were closed
    # At most the peer's budget of statuses built: its burst and rate over the flood (and
    # the handful the test itself asks for).
    limits = q.DEFAULT_QUOTAS
    assert built <= limits.peer_readonly_burst + limits.peer_readonly_rate_per_s * (FLOOD_S + 5)
    # Honest publishes keep flowing: all delivered, at no less than half the pace before
    # (measured: 82-86% since a connection its session closed is no longer read; 38-57%
    # before that; docs/runtime.md, "Client limits").
    assert eids["flood"] and eids["flood"] <= got and eids["base"] <= got
    assert flood_rate >= base_rate / 2, (base_rate, flood_rate)


def test_tree_pages_never_read(swarm: LiveSwarm) -> None:
    """From 127.0.0.9, with 300 subscriptions held through the target: sixteen connections with
    4 KB receive windows, each sending 2,000 requests for a new tree picture (334 KB in all, as
    in issue 29, which measured the victim going from 114 to 935 MB) and never reading, held
    10 s. The read-only buckets refuse most of them, the connections are closed (for going on
    while refused, or at their read-only byte bound), and nothing they asked for stays queued."""
    target, src = 0, "127.0.0.9"
    port = swarm.ports[target]
    ask = b"".join(frame(WIRE.encode(TreeRequest(k + 1, 0))) for k in range(2_000))

    async def attack() -> dict[str, Any]:
        before = await status(port)
        async with connect("127.0.0.1", port) as holder:
            for k in range(300):  # a tree worth picturing
                await holder.subscribe(f"Attr1 >= {k % 100} and Attr2 <= {k}")
            await trio.sleep(1.0)
            page = len((await holder.tree())[0].nodes)
            streams = []
            for _ in range(16):
                sock = trio.socket.socket()
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                await sock.bind((src, 0))
                await sock.connect(("127.0.0.1", port))
                streams.append(trio.SocketStream(sock))
            for s in streams:
                with (
                    trio.move_on_after(5),
                    suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError),
                ):
                    await s.send_all(ask)
            await trio.sleep(10.0)
            during = await status(port)
            for s in streams:
                await s.aclose()
        await wait_for(lambda: _no_clients(port), 60)
        return {"before": before, "during": during, "page_items": page}

    out, start, peaks = trio.run(sample_rss, swarm, attack)
    st = _after(swarm, "tree pages never read", target, start, peaks, seed=208)
    before = out["before"]
    reasons = (q.READONLY_RATE, q.READONLY_ADDRESS, q.READONLY_FLOOD, q.READONLY_UNREAD)
    delta = {r: _refused(st, r) - _refused(before, r) for r in reasons}
    slow = _refused(st, q.SLOW_READER) - _refused(before, q.SLOW_READER)
    ro_before, ro = before["clients"]["read_only"], out["during"]["clients"]["read_only"]
    MEASURED["tree pages never read"].update(
        page_items=out["page_items"],
        refused=delta,
        slow_readers=slow,
        pictures_built=ro["pictures_built"] - ro_before["pictures_built"],
        queued_bytes_during=ro["queued_bytes"],
    )
    assert delta[q.READONLY_RATE] + delta[q.READONLY_ADDRESS] > 0
    # Every attacking connection was closed by the peer, whichever bound it reached first.
    assert delta[q.READONLY_FLOOD] + delta[q.READONLY_UNREAD] + slow == 16
    # Nothing left queued but, at most, the reply to the status request's own Hello.
    assert ro["queued_bytes"] < 1024 and ro["unread_connections"] <= 1
    assert st["clients"]["read_only"]["pictures_held"] == 0


# ----------------------------------------------------------------------------- peer attacks

OPENINGS = 600


def test_replayed_handshake_openings(swarm: LiveSwarm) -> None:
    """From 127.0.0.6: 600 replays of peer 1's valid link-handshake opening to peer 0, each
    on its own connection, 12 at a time. Beyond the address's allowance (burst 256, 64/s)
    they are closed before any signature check, and counted."""
    target, src = 0, "127.0.0.6"
    port = swarm.ports[target]
    opening = frame(
        SessionInitiator(
            swarm.identity(1), swarm.address(1), swarm.address(target), WIRE
        ).open_frame
    )

    async def attack() -> dict[str, Any]:
        before = await status(port)
        answered = closed = 0

        async def replay(n: int) -> None:
            nonlocal answered, closed
            for _ in range(n):
                async with await open_from(src, port) as stream:
                    got = b""
                    with trio.move_on_after(10):
                        try:
                            await stream.send_all(opening)
                            got = await stream.receive_some(4096)
                        except (trio.BrokenResourceError, trio.ClosedResourceError):
                            pass
                    answered += bool(got)
                    closed += not got

        async with trio.open_nursery() as nursery:
            for _ in range(12):
                nursery.start_soon(replay, OPENINGS // 12)
        return {"before": before, "answered": answered, "closed": closed}

    out, start, peaks = trio.run(sample_rss, swarm, attack)
    st = _after(swarm, "replayed handshakes", target, start, peaks, seed=205)
    limited = "handshake rate limited"
    delta = st["rejected"]["runtime"].get(limited, 0) - out["before"]["rejected"]["runtime"].get(
        limited, 0
    )
    assert out["answered"] + out["closed"] == OPENINGS
    assert delta == out["closed"] > 0
    MEASURED["replayed handshakes"].update(answered=out["answered"], limited=delta)


FAKE_ROUNDS = 5
FAKES_PER_MESSAGE = 2000


def test_fake_routing_entries(swarm: LiveSwarm) -> None:
    """An attacker holding peer 5's key opens links from 127.0.0.7 to peers 0-4 and sends each
    a leaf set, a routing row and join rows of 2,000 made-up ids every 0.3 s, five times: most
    at an address of its choice (a listener counting connects), a tenth at peer 0's port. No
    made-up id may reach a leaf set; the caps and failed probes are counted."""
    mallory, src = N - 1, "127.0.0.7"
    m_ident = swarm.identity(mallory)
    m_addr = swarm.address(mallory)
    m_handle = Handle(m_ident.node_id, m_addr)
    honest = list(range(N - 1))
    rng = random.Random(206)
    trap_hits = 0

    def fakes(trap_port: int) -> list[Handle]:
        out = []
        for i in range(FAKES_PER_MESSAGE):
            node_id = rng.randbytes(20)
            host, p = ("127.0.0.1", swarm.ports[0]) if i % 10 == 0 else ("127.0.0.3", trap_port)
            out.append(Handle(node_id, PeerAddress(node_id, host, p).to_bytes()))
        return out

    async def attack() -> dict[str, Any]:
        nonlocal trap_hits
        before = [await status(swarm.ports[i]) for i in honest]

        async def trap(stream: trio.SocketStream) -> None:
            nonlocal trap_hits
            trap_hits += 1
            await stream.aclose()

        async with trio.open_nursery() as nursery:
            listeners = await trio.open_tcp_listeners(0, host="127.0.0.3")
            trap_port = listeners[0].socket.getsockname()[1]
            nursery.start_soon(trio.serve_listeners, trap, listeners)
            async with AsyncExitStack() as held:
                links = []
                for i in honest:
                    stream = await held.enter_async_context(await open_from(src, swarm.ports[i]))
                    init = SessionInitiator(m_ident, m_addr, swarm.address(i), WIRE)
                    await stream.send_all(frame(init.open_frame))
                    reply = WIRE.decode(await read_frame(stream, FrameReader()))
                    links.append((stream, init.finish(reply, m_addr)))
                for _ in range(FAKE_ROUNDS):
                    for stream, session in links:
                        msgs = (
                            LeafSetReply(m_handle, fakes(trap_port)),
                            RowReply(m_handle, 0, fakes(trap_port)),
                            JoinRows(m_handle, fakes(trap_port)),
                        )
                        await stream.send_all(
                            b"".join(frame(session.wrap(CORE.encode(m))) for m in msgs)
                        )
                    await trio.sleep(0.3)
                await trio.sleep(4.0)  # probes run and fail (connect timeout 3 s)
            after = [await status(swarm.ports[i]) for i in honest]
            nursery.cancel_scope.cancel()
        return {"before": before, "after": after}

    out, start, peaks = trio.run(sample_rss, swarm, attack)
    st = _after(swarm, "fake routing entries", 0, start, peaks, seed=206)
    real = {f"127.0.0.1:{p}" for p in swarm.ports}
    cap = "second-hand entries over the per-message cap"
    for b, a in zip(out["before"], out["after"], strict=True):
        members = {m.split("@")[-1] for m in (*a["leaf_set"]["left"], *a["leaf_set"]["right"])}
        assert members <= real
        assert a["rejected"]["runtime"].get(cap, 0) > b["rejected"]["runtime"].get(cap, 0)
        assert (
            a["untrusted"]["second_hand"]["probes_failed"]
            > b["untrusted"]["second_hand"]["probes_failed"]
        )
        assert a["links"] < 64  # a handful in a swarm of six, not a link per made-up id
    # One probe at a time per endpoint, then backed off: a handful per peer, not thousands.
    assert 0 < trap_hits <= 6 * len(honest)
    assert st["rejected"]["runtime"][cap] > 0
    MEASURED["fake routing entries"]["trap_connects"] = trap_hits


# ------------------------------------------------------------------------ a dropping peer


def _demotions(st: Any) -> int:
    """How many next hops this peer demoted for dropping what they acknowledged."""
    return int(st["dht"]["end_to_end"]["demoted"])


def test_a_peer_that_drops_everything_is_detected(tmp_path: Path) -> None:
    """Eight peers, peer 5 acknowledging hops and dropping what it should handle or forward.
    Before detection a round loses deliveries (or the drop is already noticed); rounds repeat
    (at most 8) until an honest peer has demoted it (``dht.end_to_end.demoted``); then a round
    equals the oracle."""
    n, bad = 8, 5
    tuning = {i: {"RANGECAST_TEST_TUNING": TUNING} for i in range(n)}
    tuning[bad] = {**tuning[bad], "RANGECAST_TEST_FAULT": "drop-all"}
    s = LiveSwarm(tmp_path, n, tuning, ["--id-difficulty", "0"])
    honest = [p for i, p in enumerate(s.ports) if i != bad]
    try:

        async def main() -> tuple[tuple[int, int, int], int, int, tuple[int, int, int]]:
            with trio.fail_after(900):  # a guard against a hang: ten rounds at most
                return await rounds_until_demoted()

        async def rounds_until_demoted() -> tuple[
            tuple[int, int, int], int, int, tuple[int, int, int]
        ]:
            assert await wait_for(lambda: leaf_sets_full(s.ports), 120)
            subs, pubs = (honest[0], honest[3]), (honest[1], honest[5])
            first = await oracle_round(subs, pubs, 301, 30, 40)
            demoted = sum([_demotions(await status(p)) for p in honest])
            rounds = 1
            while not demoted and rounds < 8:
                await oracle_round(subs, pubs, 301 + rounds, 30, 40)
                demoted = sum([_demotions(await status(p)) for p in honest])
                rounds += 1
            return first, demoted, rounds, await oracle_round(subs, pubs, 399, 30, 40)

        first, demoted, rounds, last = trio.run(main)
        print(f"drop-all: first round {first}, demoted {demoted} after {rounds} rounds")
        assert s.alive() == [True] * n
        assert first[0] > 0 or demoted > 0  # the fault is real: losses, or noticed at once
        assert demoted > 0
        assert last == (0, 0, 0)
    finally:
        s.stop()


async def _leaf_sets_of(ports: list[int], size: int) -> bool:
    """Every peer's leaf set holds ``size`` peers (a swarm larger than one leaf set)."""
    for port in ports:
        st = await status(port)
        if len({*st["leaf_set"]["left"], *st["leaf_set"]["right"]}) < size:
            return False
    return True


#: What each fault's abuse is counted as, from ``dht.end_to_end`` of ``peer status --json``.
_COUNTED: dict[str, Any] = {
    "forge-done": lambda e: e["forged"],
    "stall": lambda e: e["waits_refused"],
    "drop-direct": lambda e: e["direct"]["losses"],
}


def _any_demoted(ports: list[int]) -> Any:
    async def check() -> bool:
        return any([_demotions(await status(p)) for p in ports])

    return check


@pytest.mark.parametrize("fault", ["forge-done", "stall", "drop-direct"])
def test_a_peer_that_forges_acks_or_stalls_harms_no_honest_peer(tmp_path: Path, fault: str) -> None:
    """Eight peer processes with leaf sets of 4 (so routes have hops in the middle), peer 5
    dropping what it should forward and either answering ``RouteDone`` itself, signed as the
    key's root (``forge-done``), or asking for more time every tick (``stall``); or routing
    honestly and dropping every direct message sent to it (``drop-direct``: hand-offs,
    replica copies, notifications). A staller's asks are refused and counted
    (``end_to_end.waits_refused``), a direct dropper's silences are charged to it
    (``end_to_end.direct.losses``) and it is demoted, no honest peer quarantines another,
    every peer stays up within the memory bound, and after it leaves a round equals the
    oracle within 30 s. (A forger among the 3 closest peers to a key, as the judging peer
    knows them, is believed, ``dht.notary``: in eight peers that is most of its keys, so its
    forgeries are measured, not asserted.)"""
    n, bad = 8, 5
    fast = (
        "signed_acks=true,pastry.leaf_set_size=4,pastry.ack_floor_s=0.5,pastry.e2e_rtt_s=0.05,"
        "pastry.e2e_hops=4"
    )
    tuning = {i: {"RANGECAST_TEST_TUNING": f"{TUNING},{fast}"} for i in range(n)}
    tuning[bad] = {**tuning[bad], "RANGECAST_TEST_FAULT": fault}
    s = LiveSwarm(tmp_path, n, tuning, ["--id-difficulty", "0"])
    honest = [p for i, p in enumerate(s.ports) if i != bad]
    bad_id = s.identity(bad).node_id.hex()
    try:

        async def main() -> tuple[tuple[int, int, int], tuple[int, int, int], list[Any]]:
            with trio.fail_after(600):  # a guard against a hang
                assert await wait_for(lambda: _leaf_sets_of(s.ports, 4), 120)
                subs, pubs = (honest[0], honest[3]), (honest[1], honest[5])
                during = (-1, -1, -1)  # a lost subscription is never acknowledged
                # Enough subscriptions for tree nodes (and their copies) on every peer.
                n_subs = 150 if fault == "drop-direct" else 30
                with trio.move_on_after(90):
                    during = await oracle_round(subs, pubs, 501, n_subs, 60)
                if fault == "drop-direct":  # demoted after ``demote_confirm_s`` (30 s)
                    await wait_for(_any_demoted(honest), 90)
                await trio.to_thread.run_sync(stop_processes, [s.procs[bad]])  # it stops
                after = (-1, -1, -1)  # not within 30 s
                with trio.move_on_after(30):
                    after = await oracle_round(subs, pubs, 502, 30, 60)
                return during, after, [await status(p) for p in honest]

        during, after, sts = trio.run(main)
        e2e = [st["dht"]["end_to_end"] for st in sts]
        counted = sum(_COUNTED[fault](e) for e in e2e)
        demoted = sum(e["demoted"] for e in e2e)
        peaks = [mib for i, mib in enumerate(s.rss_mib()) if i != bad]
        MEASURED[fault] = {
            "during": during,
            "after": after,
            "counted": counted,
            "demoted": demoted,
            "rss": peaks,
        }
        print(f"{fault}: during {during}, after {after}, counted {counted}, demoted {demoted}")
        assert [a for i, a in enumerate(s.alive()) if i != bad] == [True] * (n - 1)
        assert max(peaks) < RSS_BOUND_MIB
        assert all(set(e["quarantined"]) <= {bad_id} for e in e2e)
        if fault != "forge-done":
            assert counted > 0  # a forger near its keys is believed (dht.notary): measured only
        if fault == "drop-direct":
            assert demoted > 0
        assert after == (0, 0, 0)
    finally:
        s.stop()
