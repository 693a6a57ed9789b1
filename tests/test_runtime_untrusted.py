"""Untrusted peers: second-hand routing entries wait for their peer's proof, the links and
connects they could cost are capped, and link-handshake openings are rate-limited per source
address. The gate's rules on their own (sans-IO), then two attacks on real peers on loopback:
a peer feeding made-up routing entries, and a flood of replayed handshake openings."""

from __future__ import annotations

import random
import resource

import trio
from runtime_harness import oracle_round

from rangecast.dht.messages import JoinRows, LeafSetReply, Ping, RowReply
from rangecast.dht.wire import Handle, codec_for
from rangecast.pubsub.peer import OverlayPeer
from rangecast.runtime.candidates import LinkCaps, SecondHand, TrustConfig, endpoint_of
from rangecast.runtime.client import connect
from rangecast.runtime.guard import (
    AddressLimiter,
    FrameReader,
    Rejections,
    SessionInitiator,
    frame,
    wire_codec,
)
from rangecast.runtime.identity import PeerAddress
from rangecast.runtime.inprocess import start_local_swarm
from rangecast.runtime.peer import PeerRuntime, read_frame

CORE = codec_for(*OverlayPeer.TABLES)
WIRE = wire_codec(*OverlayPeer.TABLES)


def _handle(rng: random.Random, host: str = "127.0.0.3", port: int = 9) -> Handle:
    node_id = rng.randbytes(20)
    return Handle(node_id, PeerAddress(node_id, host, port).to_bytes())


# ------------------------------------------------------------------------------ the rules


def test_unproven_entries_are_held_back_and_proven_ones_pass() -> None:
    rng = random.Random(1)
    rej = Rejections()
    gate = SecondHand(TrustConfig(), rej, 0.0)
    teller, known, fake = _handle(rng), _handle(rng, port=10), _handle(rng, port=11)
    gate.prove(known.addr)
    out = gate.screen(teller.addr, LeafSetReply(teller, [known, fake]), 0.0)
    assert isinstance(out, LeafSetReply) and out.leaves == [known]
    assert gate.status()["candidates"] == 1
    caps = LinkCaps(TrustConfig(), 1.0)
    assert gate.take_probes(0.0, caps) == [fake.addr]
    assert gate.take_probes(0.0, caps) == []  # under way: not probed twice
    fed = gate.probed(fake.addr, True)
    assert fed == JoinRows(fake, [fake]) and gate.is_proven(fake.addr)
    # Messages without peer lists, and entries whose id is not their address's.
    ping = Ping(teller)
    assert gate.screen(teller.addr, ping, 0.0) is ping
    liar = Handle(rng.randbytes(20), known.addr)
    assert gate.screen(teller.addr, RowReply(teller, 0, [liar]), 0.0) == RowReply(teller, 0, [])
    assert rej.by_reason["second-hand entry whose id is not its address's"] == 1


def test_caps_per_message_per_sender_and_on_candidates() -> None:
    rng = random.Random(2)
    rej = Rejections()
    cfg = TrustConfig(per_message=10, per_sender_per_s=1.0, per_sender_burst=15, max_candidates=20)
    gate = SecondHand(cfg, rej, 0.0)
    a, b = _handle(rng), _handle(rng)
    gate.screen(a.addr, JoinRows(a, [_handle(rng) for _ in range(30)]), 0.0)
    assert rej.by_reason["second-hand entries over the per-message cap"] == 20
    gate.screen(a.addr, JoinRows(a, [_handle(rng) for _ in range(10)]), 0.0)
    assert rej.by_reason["second-hand entries over the sender's rate"] == 5  # 15 in all
    gate.screen(b.addr, JoinRows(b, [_handle(rng) for _ in range(10)]), 0.0)
    assert rej.by_reason["candidates over the cap"] == 5
    assert gate.status()["candidates"] == 20
    gate.screen(a.addr, JoinRows(a, [_handle(rng) for _ in range(3)]), 2.0)  # 2 s: 2 tokens
    assert rej.by_reason["second-hand entries over the sender's rate"] == 6


def test_probes_are_rate_limited_one_per_endpoint_and_back_off() -> None:
    rng = random.Random(3)
    cfg = TrustConfig(probes_per_s=2.0, probe_burst=3.0)
    rej = Rejections()
    gate = SecondHand(cfg, rej, 0.0)
    caps = LinkCaps(cfg, 2.0)
    teller = _handle(rng)
    same = [_handle(rng, port=7) for _ in range(5)]  # made-up ids, one endpoint
    other = [_handle(rng, port=100 + i) for i in range(5)]
    gate.screen(teller.addr, JoinRows(teller, same + other), 0.0)
    first = gate.take_probes(0.0, caps)
    assert first == [same[0].addr, other[0].addr, other[1].addr]  # burst of 3, one per endpoint
    assert gate.take_probes(0.0, caps) == []  # no tokens left
    # The endpoint's handshake failed: its other candidates are dropped, not probed.
    gate.probed(same[0].addr, False)
    caps.failed(same[0].addr, 0.0, probe=True)
    assert gate.take_probes(1.0, caps) == [other[2].addr, other[3].addr]
    assert rej.by_reason["second-hand entry at a backed-off address"] == 4
    # A failed probe backs off probes only; links to that endpoint are not cut off.
    assert caps.backed_off(same[1].addr, 1.0, probe=True)
    assert not caps.backed_off(same[1].addr, 1.0)


def test_connect_backoff_doubles_and_a_signed_message_ends_it() -> None:
    caps = LinkCaps(TrustConfig(backoff_max_s=5.0), 1.0)
    addr = _handle(random.Random(4)).addr
    assert [caps.failed(addr, 0.0) for _ in range(5)] == [1.0, 2.0, 4.0, 5.0, 5.0]
    assert caps.backed_off(addr, 4.9) and not caps.may_connect(addr, 4.9)
    # Another id at the same endpoint is the same endpoint.
    assert caps.backed_off(endpoint_of(addr).rjust(len(addr), b"\0"), 4.9)
    caps.succeeded(addr)
    assert caps.may_connect(addr, 4.9)
    assert caps.refused == {"endpoint backed off": 1}


def test_the_least_recently_used_idle_link_makes_room() -> None:
    caps = LinkCaps(TrustConfig(), 1.0)
    assert caps.victim(iter([(b"a", 5.0), (b"b", 2.0), (b"c", 9.0)])) == b"b"
    assert caps.victim(iter([])) is None
    assert caps.evicted == 1 and caps.refused == {"link table full": 1}


def test_handshake_openings_are_limited_per_address() -> None:
    lim = AddressLimiter(rate=1.0, burst=2.0)
    assert [lim.allow("10.0.0.1", 0.0) for _ in range(3)] == [True, True, False]
    assert lim.allow("10.0.0.2", 0.0)  # another address has its own bucket
    assert lim.allow("10.0.0.1", 1.0)
    # IPv6: one bucket per /64.
    assert lim.allow("2001:db8::1", 0.0) and lim.allow("2001:db8::2", 0.0)
    assert not lim.allow("2001:db8::3", 0.0)
    assert lim.allow("2001:db8:0:1::1", 0.0)


# ------------------------------------------------------------------------------ attacks


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _table_ids(peer: PeerRuntime) -> set[bytes]:
    dht = peer.dht
    return {p.handle.id for p in dht.known_peers()} | {p.handle.id for p in dht.neighbours()}


ROUNDS = 10
FAKES_PER_MESSAGE = 2000


def test_fake_routing_entries_never_reach_honest_tables() -> None:
    """A swarm member (Mallory, through extra links of her own key) sends every honest peer
    leaf sets, routing rows and join rows of 2,000 made-up ids each, every 0.3 s: most at an
    address of her choice (a listener that counts connects), some at an honest peer's port.
    Honest tables must hold none of them, connects to her address stay few, every peer
    answers its status, and a subscribe/publish round afterwards equals the oracle."""
    report: dict[str, object] = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            peers = await start_local_swarm(nursery, 5, seed=18)
            honest, mallory = peers[:-1], peers[-1]
            m_handle = Handle(mallory.identity.node_id, mallory.addr)
            trap_hits = 0

            async def trap(stream: trio.SocketStream) -> None:
                nonlocal trap_hits
                trap_hits += 1
                await stream.aclose()

            listeners = await trio.open_tcp_listeners(0, host="127.0.0.3")
            trap_port = listeners[0].socket.getsockname()[1]
            nursery.start_soon(trio.serve_listeners, trap, listeners)
            rng = random.Random(18)
            assert honest[0].address is not None
            honest_port = honest[0].address.port
            fake_ids: set[bytes] = set()

            def fakes() -> list[Handle]:
                out = [
                    _handle(rng, "127.0.0.1", honest_port)
                    if i % 10 == 0
                    else _handle(rng, "127.0.0.3", trap_port)
                    for i in range(FAKES_PER_MESSAGE)
                ]
                fake_ids.update(h.id for h in out)
                return out

            links = []
            for p in honest:
                stream = await trio.open_tcp_stream("127.0.0.1", p.address.port)  # type: ignore[union-attr]
                init = SessionInitiator(mallory.identity, mallory.addr, p.addr, WIRE)
                await stream.send_all(frame(init.open_frame))
                reply = WIRE.decode(await read_frame(stream, FrameReader()))
                links.append((stream, init.finish(reply, mallory.addr)))
            rss_before = _rss_mib()
            for _ in range(ROUNDS):
                for stream, session in links:
                    msgs = (
                        LeafSetReply(m_handle, fakes()),
                        RowReply(m_handle, 0, fakes()),
                        JoinRows(m_handle, fakes()),
                    )
                    await stream.send_all(
                        b"".join(frame(session.wrap(CORE.encode(m))) for m in msgs)
                    )
                await trio.sleep(0.3)
            await trio.sleep(4.0)  # let probes run and fail (connect timeout 3 s)
            report["rss_growth_mib"] = _rss_mib() - rss_before
            report["fakes_in_tables"] = sum(len(_table_ids(p) & fake_ids) for p in honest)
            report["trap_hits"] = trap_hits
            statuses = []
            for p in peers:
                async with connect("127.0.0.1", p.address.port) as client:  # type: ignore[union-attr]
                    statuses.append(await client.status())
            report["statuses"] = statuses
            for stream, _ in links:
                await stream.aclose()
            ports = (honest[0].address.port, honest[1].address.port)  # type: ignore[union-attr]
            report["oracle"] = await oracle_round(ports, ports, 180, n_subs=30, n_events=40)
            report["fakes_in_tables_after"] = sum(len(_table_ids(p) & fake_ids) for p in honest)
            for p in peers:
                p.stop()
            for p in peers:
                await p.stopped.wait()
            nursery.cancel_scope.cancel()  # the trap listener

    trio.run(main)
    assert report["fakes_in_tables"] == 0 and report["fakes_in_tables_after"] == 0
    # One probe at a time per endpoint, then backed off (1, 2, 4 s ...): a handful per peer
    # over the attack's ~7 s, against thousands of made-up ids at that address.
    trap_hits = report["trap_hits"]
    assert isinstance(trap_hits, int) and 0 < trap_hits <= 4 * 6
    statuses = report["statuses"]
    assert isinstance(statuses, list)
    for st in statuses[:-1]:
        assert st["state"] == "ready"
        runtime = st["rejected"]["runtime"]
        assert runtime["second-hand entries over the per-message cap"] > 0
        assert runtime["second-hand entries over the sender's rate"] > 0
        second = st["untrusted"]["second_hand"]
        assert second["probes_failed"] > 0
        assert second["candidates"] <= TrustConfig().max_candidates
        assert st["links"] <= TrustConfig().max_links
    # A generous bound (the whole 5-peer process): without the gate it grew by hundreds of MB.
    growth = report["rss_growth_mib"]
    assert isinstance(growth, float) and growth < 150.0
    assert report["oracle"] == (0, 0, 0)


OPENINGS = 1500


def test_replayed_handshake_openings_are_rate_limited_per_address() -> None:
    """1,500 replays of one valid link-handshake opening, each on its own connection from
    127.0.0.2: beyond the source address's allowance they are closed before any crypto work
    and counted; honest peers (127.0.0.1) are served all along."""
    report: dict[str, object] = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            peers = await start_local_swarm(nursery, 3, seed=19)
            target, other = peers[0], peers[1]
            assert target.address is not None
            opening = frame(
                SessionInitiator(other.identity, other.addr, target.addr, WIRE).open_frame
            )
            answered = closed = 0
            port = target.address.port
            t0 = trio.current_time()

            async def replay(n: int) -> None:
                nonlocal answered, closed
                for _ in range(n):
                    stream = await trio.open_tcp_stream(
                        "127.0.0.1", port, local_address="127.0.0.2"
                    )
                    async with stream:
                        await stream.send_all(opening)
                        with trio.move_on_after(10):
                            try:
                                got = await stream.receive_some(4096)
                            except trio.BrokenResourceError:
                                got = b""
                        if got:
                            answered += 1
                        else:
                            closed += 1

            async with trio.open_nursery() as flood:
                for _ in range(15):
                    flood.start_soon(replay, OPENINGS // 15)
                # Honest traffic meanwhile: a client's status.
                async with connect("127.0.0.1", target.address.port) as client:
                    report["status_during"] = (await client.status())["state"]
            report["elapsed"] = trio.current_time() - t0
            report["answered"], report["closed"] = answered, closed
            report["limited"] = target.rejections.by_reason.get("handshake rate limited", 0)
            ports = (target.address.port, other.address.port)  # type: ignore[union-attr]
            report["oracle"] = await oracle_round(ports, ports, 190, n_subs=30, n_events=40)
            report["state"] = target.status()["state"]
            for p in peers:
                p.stop()

    trio.run(main)
    cfg = TrustConfig()
    answered, closed, limited = report["answered"], report["closed"], report["limited"]
    assert isinstance(answered, int) and isinstance(closed, int)
    assert answered + closed == OPENINGS
    assert limited == closed > 0
    # The bucket's arithmetic: the burst, then the rate over the flood's duration.
    elapsed = report["elapsed"]
    assert isinstance(elapsed, float)
    assert (
        cfg.handshake_burst <= answered <= cfg.handshake_burst + cfg.handshake_per_s * elapsed + 1
    )
    assert report["status_during"] == "ready" and report["state"] == "ready"
    assert report["oracle"] == (0, 0, 0)
