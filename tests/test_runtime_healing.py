"""Real peers split by a partition that outlasts failure detection merge again once it heals
(``dht.healing``): eight peers in one process, two halves whose messages to each other are
lost until each half has declared the other failed; then a subscribe/publish round across the
halves equals the brute-force oracle."""

from __future__ import annotations

from dataclasses import replace

import trio
from runtime_harness import oracle_round

from rangecast.cli.peer import _format_status
from rangecast.runtime.inprocess import leaf_sets_converged, start_local_swarm
from rangecast.runtime.peer import RUNTIME_PASTRY, PeerConfig, PeerRuntime

# Short timers, so that the split and the heal take seconds: failed after 1 s of silence,
# a peer declared failed asked again every 0.5 s.
CONFIG = PeerConfig(
    id_difficulty=0,
    pastry=replace(
        RUNTIME_PASTRY,
        keepalive_s=0.3,
        fail_after_s=1.0,
        dead_ttl_s=3.0,
        ack_floor_s=0.5,
        e2e_rtt_s=0.05,
        e2e_hops=4,
        heal_s=0.5,
    ),
)


def _port(peer: PeerRuntime) -> int:
    assert peer.address is not None
    return peer.address.port


def _split(a: list[PeerRuntime], b: list[PeerRuntime]) -> bool:
    """Whether every peer's neighbours are all on its own side."""
    for side, other in ((a, b), (b, a)):
        others = {p.identity.int_id for p in other}
        if any(q.id in others for p in side for q in p.dht.neighbours()):
            return False
    return True


async def _until(cond, timeout_s: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    with trio.fail_after(timeout_s):
        while not cond():
            await trio.sleep(0.05)


def test_a_swarm_split_by_a_partition_merges_when_it_heals() -> None:
    report: dict[str, object] = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            peers = await start_local_swarm(nursery, 8, seed=23, config=CONFIG)
            a, b = peers[:4], peers[4:]
            for side, other in ((a, b), (b, a)):
                for p in side:
                    p.cut_off(q.addr for q in other)
            await _until(lambda: _split(a, b))
            report["split"] = True
            for p in peers:
                p.cut_off(())
            await _until(lambda: leaf_sets_converged(peers))
            report["healed"] = sum(p.dht.stats.healed for p in peers)
            report["status"] = peers[0].status()["dht"]["healing"]
            report["text"] = _format_status(peers[0].status())
            # Subscribers on both sides, publishers on both sides.
            subs, pubs = (_port(a[0]), _port(b[1])), (_port(b[2]), _port(a[3]))
            report["round"] = await oracle_round(subs, pubs, 231, n_subs=30, n_events=60)
            for p in peers:
                p.stop()

    trio.run(main)
    assert report["split"] is True
    assert report["round"] == (0, 0, 0)
    assert isinstance(report["healed"], int) and report["healed"] > 0
    status = report["status"]
    assert isinstance(status, dict) and set(status) == {"remembered", "pings", "healed"}
    # ``peer status`` without --json: one line.
    line = next(t for t in str(report["text"]).splitlines() if t.startswith("healing"))
    assert f"{status['pings']} asked, {status['healed']} back" in line
