"""Client abuse against real peers on loopback (issue 18): mass subscribe, a publish flood,
slowloris half frames and idle connections, a client that never reads. For each: the peer stays
up, what the abuse could make it hold stays bounded, every refusal is counted by reason in
``peer status`` (its ``clients`` block), and an honest subscribe/publish round afterwards
delivers exactly what the brute-force oracle says."""

from __future__ import annotations

import socket
from dataclasses import replace
from typing import Any

import pytest
import trio
import trio.testing
from runtime_harness import oracle_round

from rangecast.cli.peer import _format_status
from rangecast.pubsub.peer import OverlayPeer
from rangecast.runtime import quotas as q
from rangecast.runtime.admission import AdmissionConfig, AdmissionRate
from rangecast.runtime.client import Overloaded, RequestError, connect
from rangecast.runtime.guard import Rejections, frame, wire_codec
from rangecast.runtime.inprocess import start_local_swarm
from rangecast.runtime.messages import Hello, SubscribeRequest
from rangecast.runtime.peer import PeerConfig, PeerRuntime
from rangecast.runtime.quotas import ClientLedger, Quotas

WIRE = wire_codec(*OverlayPeer.TABLES)
EVENT = {"Attr1": 50.0, "Attr2": 0.0, "Attr3": 1.0, "Attr4": 2.0}


def _port(peer: PeerRuntime) -> int:
    assert peer.address is not None
    return peer.address.port


def _clients(peer: PeerRuntime) -> dict[str, Any]:
    status = peer.status()
    assert status["state"] == "ready"
    clients: dict[str, Any] = status["clients"]
    # ``peer status`` without --json shows the same block in one line.
    refused = sum(clients["refused"].values())
    line = next(t for t in _format_status(status).splitlines() if t.startswith("clients"))
    assert f"{clients['publishes_accepted']} publishes accepted, {refused} requests" in line
    return clients


async def _until(cond: Any, guard_s: float = 30.0) -> None:
    """Wait for ``cond()`` (a guard against a hang, not a timing assertion: the test's
    assertions afterwards fail if it never held)."""
    with trio.move_on_after(guard_s):
        while not cond():
            await trio.sleep(0.02)


async def _drain_until_closed(stream: trio.SocketStream) -> None:
    """Read until the peer closes the connection."""
    try:
        while await stream.receive_some(65536):
            pass
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass


def _swarm_config(quotas: Quotas) -> PeerConfig:
    return PeerConfig(quotas=quotas)


def test_quotas_refuse_nonsense_and_default_once() -> None:
    assert PeerConfig().quotas is q.DEFAULT_QUOTAS
    with pytest.raises(ValueError, match=r"quotas\.publish_rate_per_s"):
        Quotas(publish_rate_per_s=0)
    ledger = ClientLedger(Quotas(saturation_backlog=10, saturation_lag_s=0.5), Rejections())
    assert ledger.saturation(10, 0.0) is None
    assert "frames queued" in (ledger.saturation(11, 0.0) or "")
    ledger.lag_s = 0.6
    assert "lags" in (ledger.saturation(0, 0.0) or "")
    with pytest.raises(ValueError, match=r"quotas\.admission\.decrease"):
        AdmissionConfig(decrease=1.5)


def _offer(rate: AdmissionRate, per_s: float, start: float, seconds: float) -> int:
    """Offer ``per_s`` publishes a second for ``seconds`` from ``start``; how many fit."""
    n = round(per_s * seconds)
    return sum(rate.allow(start + i / per_s) for i in range(n))


def test_the_admission_rate_backs_off_while_the_loop_lags_and_recovers_after() -> None:
    cfg = AdmissionConfig(target_lag_s=0.02, decrease=0.5, increase_per_s=100.0,
                          min_rate_per_s=5.0, max_rate_per_s=1_000.0, burst_s=0.2)  # fmt: skip
    rate = AdmissionRate(cfg)
    rate.observe(0.0, 0.0)  # the first probe only starts the first period
    # Idle and on time: the ceiling, nothing refused.
    assert _offer(rate, 400.0, 0.0, 0.1) == 40
    rate.observe(0.0, 0.1)
    assert rate.rate == 1_000.0
    # The loop lags: the rate drops to half of what was accepted (400/s), not of the ceiling,
    # and keeps halving while the lag lasts, down to the floor.
    t = 0.1
    accepted = _offer(rate, 400.0, t, 0.1)
    t += 0.1
    rate.observe(0.05, t)
    assert rate.rate == pytest.approx(accepted / 0.1 * 0.5)
    for _ in range(20):
        _offer(rate, 400.0, t, 0.1)
        t += 0.1
        rate.observe(0.05, t)
    assert rate.rate == cfg.min_rate_per_s
    # While the rate is low, most of the offered load is refused (the queue stays outside).
    assert _offer(rate, 400.0, t, 1.0) < 400 * 0.1
    t += 1.0
    # On time again: additive growth, 100/s per second, back to the ceiling.
    rate.observe(0.0, t + 0.1)
    assert rate.rate == pytest.approx(cfg.min_rate_per_s + 100.0 * 1.1)
    rate.observe(0.0, t + 20.0)
    assert rate.rate == cfg.max_rate_per_s
    assert rate.status()["cuts"] == 21


def test_mass_subscribe_is_refused_beyond_the_quotas_and_counted() -> None:
    quotas = Quotas(
        subscriptions_per_connection=20,
        subscriptions_per_address=50,
        identical_subscriptions_per_address=5,
    )

    async def main() -> tuple[dict[str, Any], dict[str, Any], tuple[int, int, int], int]:
        async with trio.open_nursery() as nursery:
            peers = await start_local_swarm(nursery, 3, seed=11, config=_swarm_config(quotas))
            target = peers[0]
            port = _port(target)
            refused = 0
            async with (
                connect("127.0.0.1", port) as a,
                connect("127.0.0.1", port) as b,
                connect("127.0.0.1", port) as c,
            ):
                # Per connection: 20 distinct subscriptions, then refusals.
                mine = (await a.subscribe("Attr1 >= 100")).sid
                for k in range(29):
                    try:
                        await a.subscribe(f"Attr1 >= {k}")
                    except RequestError as exc:
                        assert "per connection" in str(exc)
                        refused += 1
                # Per address: b takes 20, c stops at the address's 50.
                for k in range(20):
                    await b.subscribe(f"Attr2 >= {k}")
                for k in range(15):
                    try:
                        await c.subscribe(f"Attr3 >= {k}")
                    except RequestError as exc:
                        assert "per address" in str(exc)
                        refused += 1
                during = _clients(target)
                # Another client's subscription id cannot be removed, and the attempt counts.
                with pytest.raises(RequestError):
                    await c.unsubscribe(mine)
                after_unsub = _clients(target)
            # Gone with their connections: the address holds nothing; identical ones next,
            # near-identical ones in fact (a bound nudged by 0.001: the same kind, ``similar``).
            await _until(lambda: _clients(target)["subscriptions"] == 0)
            async with connect("127.0.0.1", port) as d:
                for k in range(8):
                    try:
                        await d.subscribe(f"Attr4 >= {k * 0.001:.3f}")
                    except RequestError as exc:
                        assert "identical" in str(exc)
                        refused += 1
                identical = _clients(target)
            await _until(lambda: _clients(target)["connections"] == 0)
            oracle = await oracle_round((_port(peers[1]), port), (port, _port(peers[2])), 5, 16, 20)
            final = _clients(target)
            for p in peers:
                p.stop()
            return (
                {"during": during, "unsub": after_unsub, "identical": identical},
                final,
                oracle,
                refused,
            )

    seen, final, oracle, refused = trio.run(main)
    during = seen["during"]
    assert during["subscriptions"] == 50  # bounded by the address quota
    assert during["connections"] == 3
    assert during["refused"][q.SUBS_CONNECTION] == 10
    assert during["refused"][q.SUBS_ADDRESS] == 5
    assert seen["unsub"]["refused"][q.NOT_OWNED] == 1
    assert seen["identical"]["subscriptions"] == 5
    assert seen["identical"]["refused"][q.SUBS_IDENTICAL] == 3
    assert refused == 10 + 5 + 3
    assert oracle == (0, 0, 0)
    assert final["subscriptions"] == 0 and final["connections"] == 0


def test_a_publish_flood_is_refused_counted_and_honest_traffic_still_exact() -> None:
    # A bucket that refills about never: exactly its burst is accepted, however fast the
    # flood comes, so the counts below do not depend on the machine's speed.
    quotas = Quotas(publish_rate_per_s=0.001, publish_burst=40.0, lag_probe_s=1e6)

    async def main() -> dict[str, Any]:
        async with trio.open_nursery() as nursery:
            peers = await start_local_swarm(nursery, 3, seed=12, config=_swarm_config(quotas))
            target = peers[0]
            port = _port(target)
            out: dict[str, Any] = {"accepted": 0, "overloaded": 0, "retry": set()}

            async def flood(client: Any) -> None:
                for _ in range(100):
                    try:
                        await client.publish(EVENT, busy_wait_s=0)
                        out["accepted"] += 1
                    except Overloaded as exc:
                        out["overloaded"] += 1
                        out["retry"].add(exc.retry_after_s > 0)

            async with connect("127.0.0.1", port) as c1, connect("127.0.0.1", port) as c2:
                async with trio.open_nursery() as flooders:
                    for client in (c1, c1, c2, c2):  # two tasks per connection
                        flooders.start_soon(flood, client)
                out["flood"] = _clients(target)
                # Saturated (its loop lagging): a fresh connection's publish is refused too.
                target.clients.lag_s = 5.0
                async with connect("127.0.0.1", port) as c3:
                    with pytest.raises(Overloaded, match="saturated") as busy:
                        await c3.publish(EVENT, busy_wait_s=0)
                    out["busy_retry"] = busy.value.retry_after_s
                target.clients.lag_s = 0.0
            out["busy"] = _clients(target)
            out["oracle"] = await oracle_round(
                (_port(peers[1]), _port(peers[2])), (port, port), 6, 12, 30
            )
            for p in peers:
                p.stop()
            return out

    out = trio.run(main)
    assert out["accepted"] == 80  # the burst of each of the two connections
    assert out["overloaded"] == 320
    assert out["retry"] == {True}
    assert out["flood"]["refused"][q.PUBLISH_RATE] == 320
    assert out["flood"]["publishes_accepted"] == 80
    assert out["busy_retry"] == pytest.approx(Quotas().busy_retry_s)
    assert out["busy"]["refused"][q.BUSY] == 1
    assert out["oracle"] == (0, 0, 0)


def test_half_frames_and_idle_connections_are_closed_after_their_timeouts() -> None:
    """Default quotas on a virtual clock: connections sending nothing, a half frame, or a
    half frame after a complete request, are all closed and counted; the peer serves on."""

    async def main() -> tuple[dict[str, Any], dict[str, Any], float]:
        async with trio.open_nursery() as nursery:
            peers = await start_local_swarm(nursery, 1, seed=13)
            target = peers[0]
            port = _port(target)
            half = (200_000).to_bytes(4, "big") + b"\0" * 5_000
            streams = []
            t0 = trio.current_time()
            for k in range(30):
                s = await trio.open_tcp_stream("127.0.0.1", port)
                if k % 3 == 1:
                    await s.send_all(half)
                elif k % 3 == 2:
                    await s.send_all(frame(WIRE.encode(Hello())) + half)
                streams.append(s)
            await _until(lambda: _clients(target)["connections"] == 30, guard_s=5)
            during = _clients(target)
            async with trio.open_nursery() as readers:
                for s in streams:
                    readers.start_soon(_drain_until_closed, s)
            elapsed = trio.current_time() - t0
            for s in streams:
                await s.aclose()
            await _until(lambda: _clients(target)["connections"] == 0)
            async with connect("127.0.0.1", port) as c:
                sub = await c.subscribe("Attr1 >= 0")
                eid = await c.publish(EVENT)
                async for d in sub:
                    assert d.eid == eid
                    break
            after = _clients(target)
            target.stop()
            return during, after, elapsed

    during, after, elapsed = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert during["connections"] == 30
    assert after["refused"][q.IDLE] == 10
    assert after["refused"][q.HALF_FRAME] == 20
    # Virtual time: the last to go are the idle ones, at the idle timeout.
    assert elapsed == pytest.approx(Quotas().idle_timeout_s, abs=1.0)


def test_connections_beyond_the_per_address_quota_are_refused_at_once() -> None:
    quotas = Quotas(connections_per_address=10)

    async def main() -> tuple[int, dict[str, Any]]:
        async with trio.open_nursery() as nursery:
            peers = await start_local_swarm(nursery, 1, seed=14, config=_swarm_config(quotas))
            target = peers[0]
            port = _port(target)
            streams = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(15)]
            await _until(lambda: sum(target.clients.refused.values()) >= 5, guard_s=5)
            closed = 0
            for s in streams:
                # The refused ones are closed by the peer; the admitted ones answer a Hello.
                try:
                    await s.send_all(frame(WIRE.encode(Hello())))
                    with trio.move_on_after(5):
                        closed += not await s.receive_some(65536)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    closed += 1
                await s.aclose()
            await _until(lambda: _clients(target)["connections"] == 0, guard_s=5)
            info = _clients(target)
            target.stop()
            return closed, info

    closed, info = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert closed == 5
    assert info["refused"][q.CONNECTIONS] == 5


def test_a_client_that_never_reads_is_closed_and_its_subscriptions_removed() -> None:
    quotas = Quotas(client_queue_frames=64, slow_reader_s=1.0)

    async def main() -> dict[str, Any]:
        async with trio.open_nursery() as nursery:
            peers = await start_local_swarm(nursery, 3, seed=15, config=_swarm_config(quotas))
            target = peers[0]
            port = _port(target)
            out: dict[str, Any] = {}
            sock = trio.socket.socket()
            # A small receive window, so the peer's writes stall after a few kilobytes.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            await sock.connect(("127.0.0.1", port))
            lazy = trio.SocketStream(sock)
            subs = [
                frame(WIRE.encode(SubscribeRequest(k + 1, "thesis", f"Attr1 >= {k}")))
                for k in range(20)
            ]
            await lazy.send_all(b"".join(subs))
            await _until(lambda: len(target.core.overlay.subscriptions()) == 20)  # type: ignore[union-attr]
            out["held"] = len(target.core.overlay.subscriptions())  # type: ignore[union-attr]
            async with connect("127.0.0.1", _port(peers[1])) as pub:
                for _ in range(2_000):  # until the peer gives up on the reader
                    if target.clients.refused.get(q.SLOW_READER):
                        break
                    await pub.publish(EVENT)  # waits out rate refusals (backpressure)
            # The ledger lets go at once; the overlay's records go when the leaves acknowledge
            # the removals (later on a busy machine).
            await _until(
                lambda: (
                    _clients(target)["subscriptions"] == 0 and target.status()["subscriptions"] == 0
                )
            )
            out["clients"] = _clients(target)
            out["subscriptions"] = target.status()["subscriptions"]
            with trio.move_on_after(30):
                await _drain_until_closed(lazy)
                out["closed"] = True
            await lazy.aclose()
            out["oracle"] = await oracle_round((port, port), (_port(peers[1]), port), 7, 12, 20)
            for p in peers:
                p.stop()
            return out

    out = trio.run(main)
    assert out["held"] == 20
    assert out["clients"]["refused"][q.SLOW_READER] == 1
    assert out["clients"]["notifications_dropped"] > 0
    assert out["subscriptions"] == 0  # the reader's 20 subscriptions went with it
    assert out["closed"] is True
    assert out["oracle"] == (0, 0, 0)


def test_quotas_are_tunable_for_test_processes() -> None:
    from rangecast.runtime.peer import tuned

    cfg = tuned(PeerConfig(), "quotas.idle_timeout_s=2.5,quotas.subscriptions_per_address=7")
    assert cfg.quotas == replace(q.DEFAULT_QUOTAS, idle_timeout_s=2.5, subscriptions_per_address=7)


def test_similar_subscriptions_are_one_kind() -> None:
    """Bounds within one 1/4096 of the domain: one kind; a cell apart: another."""
    from rangecast.pubsub.schema import THESIS_SCHEMA
    from rangecast.pubsub.subscription import parse_subscription

    def kind(expr: str) -> object:
        return q.similar(parse_subscription(expr, THESIS_SCHEMA), THESIS_SCHEMA)

    base = kind("Attr1 between 10 and 20 and Attr4 >= 1")
    assert kind("Attr1 between 10 and 20 and Attr4 >= 1.001") == base
    assert kind("Attr1 between 10.0001 and 19.9999 and Attr4 >= 1") == base
    assert kind("Attr1 between 10 and 20 and Attr4 >= 1.2") != base  # 200 / 4096 = 0.049
    assert kind("Attr1 between 10 and 20") != base
