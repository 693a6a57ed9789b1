"""A peer that acknowledges every routed hop and then drops what it should handle or forward
(``RANGECAST_TEST_FAULT=drop-all``), among 11 real peers in one process: the honest peers catch
it with end-to-end acknowledgements (``dht.e2e``), route around it and demote it, and a
subscribe/publish round afterwards equals the brute-force oracle."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import trio
from runtime_harness import oracle_round

from rangecast.runtime.inprocess import start_local_swarm
from rangecast.runtime.peer import (
    DROP_ALL,
    DROP_DIRECT,
    FORGE_DONE,
    RUNTIME_PASTRY,
    STALL,
    PeerConfig,
    PeerRuntime,
    _Fault,
)

# Shorter deadlines than the defaults, so that catching the dropper takes seconds: a hop ack
# within 0.5 s + 4 RTT, the end-to-end unit 0.7 s, nested over 4 hops.
CONFIG = PeerConfig(
    id_difficulty=0,
    pastry=replace(RUNTIME_PASTRY, ack_floor_s=0.5, e2e_rtt_s=0.05, e2e_hops=4),
)
PEERS = 11
DROPPER = 5


def _client_ports(peers: list[PeerRuntime]) -> tuple[tuple[int, int], tuple[int, int]]:
    """The ports rounds subscribe through (peers 0 and 8) and publish through (2 and 10)."""
    ports = []
    for i in (0, 8, 2, 10):
        addr = peers[i].address
        assert addr is not None
        ports.append(addr.port)
    return (ports[0], ports[1]), (ports[2], ports[3])


async def _until_demoted(honest: list[PeerRuntime], guard_s: float) -> None:
    """Until an honest peer has demoted someone (``demote_confirm_s``, 30 s, waits for a late
    answer that never comes), or ``guard_s``."""
    with trio.move_on_after(guard_s):
        while not any(p.dht.stats.demoted for p in honest):
            await trio.sleep(1.0)


@pytest.mark.slow  # about 60 s: the losses' deadlines, then the demotion's confirmation
def test_a_dropping_peer_is_caught_routed_around_and_demoted() -> None:
    report: dict[str, object] = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            peers = await start_local_swarm(nursery, PEERS, seed=18, config=CONFIG)
            bad = peers[DROPPER]
            bad.set_fault(DROP_ALL)
            honest = [p for i, p in enumerate(peers) if i != DROPPER]
            subs, pubs = _client_ports(peers)
            # While it is being caught: end-to-end acks re-route what it drops.
            report["during"] = await oracle_round(subs, pubs, 181, n_subs=30, n_events=60)
            await _until_demoted(honest, 120)
            report["demoted_by"] = sum(1 for p in honest if p.dht.stats.demoted)
            report["after"] = await oracle_round(subs, pubs, 182, n_subs=30, n_events=60)
            report["status"] = [p.status() for p in honest]
            report["dropped"] = bad.fault_dropped
            report["bad_id"] = bad.identity.node_id.hex()
            for p in peers:
                p.stop()

    trio.run(main)
    assert report["after"] == (0, 0, 0)
    assert report["during"] == (0, 0, 0)
    dropped = report["dropped"]
    assert isinstance(dropped, int) and dropped > 0
    statuses = report["status"]
    assert isinstance(statuses, list)
    e2e = [s["dht"]["end_to_end"] for s in statuses]
    # Caught by the peers that sent it messages, and by no one else blamed.
    assert sum(e["demoted"] for e in e2e) >= 1
    assert all(set(e["quarantined"]) <= {report["bad_id"]} for e in e2e)
    assert sum(e["demoted"] for e in e2e) == sum(len(e["quarantined"]) for e in e2e)
    assert sum(e["losses"] for e in e2e) >= 3
    assert sum(e["confirmed"] for e in e2e) > 0


def test_the_drop_all_fault_is_parsed_and_the_barrier_fault_still_is() -> None:
    assert _Fault(DROP_ALL).drop_routes and _Fault(DROP_ALL).drop_direct
    assert not _Fault(DROP_DIRECT).drop_routes and _Fault(DROP_DIRECT).drop_direct
    assert not _Fault(STALL).drop_direct and not _Fault(FORGE_DONE).drop_direct
    one = _Fault("Ping:2")
    assert not one.drop_routes and not one.drop_direct and (one.kind, one.left) == ("Ping", 2)


# A leaf set smaller than the swarm, so routes have hops in the middle: where a forger is a
# next hop for keys it is not the root of, the only place a signed ack can refute it.
SMALL_LEAVES = replace(CONFIG, pastry=replace(CONFIG.pastry, leaf_set_size=4), signed_acks=True)


@pytest.mark.slow  # about 60-150 s: deadlines, then a round after the attack stops
@pytest.mark.parametrize("fault", [FORGE_DONE, STALL])
def test_a_forging_or_stalling_peer_harms_no_honest_peer(fault: str) -> None:
    """A peer that drops what it should forward and answers ``RouteDone`` itself, signed as
    the root (``forge-done``), or keeps asking for time (``stall``): no honest peer is demoted
    by another, a staller's asks are refused and counted, and once it stops a round equals the
    oracle within 30 s. (A forger among the 3 closest peers to a key, as the judging peer knows
    them, is believed, ``dht.notary``: in a swarm this small that is most of its keys, so the
    round during the attack may lose subscriptions and is only measured.)"""
    report: dict[str, object] = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            peers = await start_local_swarm(nursery, PEERS, seed=19, config=SMALL_LEAVES)
            bad = peers[DROPPER]
            bad.set_fault(fault)
            subs, pubs = _client_ports(peers)
            report["during"] = None  # a lost subscription is never acknowledged
            with trio.move_on_after(90):
                report["during"] = await oracle_round(subs, pubs, 191, n_subs=30, n_events=60)
            await _end_attack(report, peers, bad, subs, pubs, 192)

    trio.run(main)
    statuses = report["status"]
    assert isinstance(statuses, list)
    e2e = [s["dht"]["end_to_end"] for s in statuses]
    forged, refused = sum(e["forged"] for e in e2e), sum(e["waits_refused"] for e in e2e)
    print(f"{fault}: during {report['during']}, after {report['after']}, forged {forged}")
    assert report["after"] == (0, 0, 0)
    dropped = report["dropped"]
    assert isinstance(dropped, int) and dropped > 0
    assert all(set(e["quarantined"]) <= {report["bad_id"]} for e in e2e)
    if fault == STALL:
        assert refused > 0


@pytest.mark.slow  # about 60-120 s: a warm-up, the attack, 30 s of confirmation, a round after
def test_a_peer_that_drops_direct_messages_is_charged_and_demoted() -> None:
    """A peer that routes honestly and drops every direct message sent to it (``drop-direct``):
    the replica copies its neighbours send it go unanswered, so once it proves alive each is a
    loss charged to it (``end_to_end.direct``), and it is demoted; no honest peer quarantines
    another, and rounds during and after the attack equal the oracle. The dropper is the peer
    holding the most replica copies after a warm-up round (the ring is random): the attack
    needs copies sent to it."""
    report: dict[str, Any] = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            peers = await start_local_swarm(nursery, PEERS, seed=20, config=SMALL_LEAVES)
            subs, pubs = _client_ports(peers)
            report["warm-up"] = await oracle_round(subs, pubs, 200, n_subs=60, n_events=20)
            spare = [i for i in range(PEERS) if i not in (0, 8, 2, 10)]
            bad_i = max(spare, key=lambda i: _copies(peers[i]))
            bad = peers[bad_i]
            bad.set_fault(DROP_DIRECT)
            honest = [p for i, p in enumerate(peers) if i != bad_i]
            report["during"] = await oracle_round(subs, pubs, 201, n_subs=150, n_events=60)
            await _until_demoted(honest, 90)
            await _end_attack(report, peers, bad, subs, pubs, 202)

    trio.run(main)
    e2e = [s["dht"]["end_to_end"] for s in report["status"]]
    direct = {k: sum(e["direct"][k] for e in e2e) for k in ("confirmed", "unanswered", "losses")}
    demoted = sum(e["demoted"] for e in e2e)
    print(f"drop-direct: {direct}, demoted by {demoted}, dropped {report['dropped']}")
    print(f"drop-direct: during {report['during']}, after {report['after']}")
    assert report["during"] == report["after"] == (0, 0, 0)
    assert report["dropped"] > 0 and direct["losses"] > 0 and demoted > 0
    assert all(set(e["quarantined"]) <= {report["bad_id"]} for e in e2e)


async def _end_attack(
    report: dict[str, Any],
    peers: list[PeerRuntime],
    bad: PeerRuntime,
    subs: tuple[int, int],
    pubs: tuple[int, int],
    seed: int,
) -> None:
    """The attack stops: what it dropped, then a round within 30 s (None if not done), the
    honest peers' status, and every peer stopped."""
    report["dropped"] = bad.fault_dropped
    bad.set_fault(None)
    report["after"] = None
    with trio.move_on_after(30):
        report["after"] = await oracle_round(subs, pubs, seed, n_subs=30, n_events=60)
    report["status"] = [p.status() for p in peers if p is not bad]
    report["bad_id"] = bad.identity.node_id.hex()
    for p in peers:
        p.stop()


def _copies(peer: PeerRuntime) -> int:
    """Replica copies the peer holds."""
    return int(peer.status()["overlay"]["replicas_held"])
