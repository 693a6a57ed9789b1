"""Soft state on real peers (issue 18): a whole entry peer vanishes with its subscriptions, and
the pieces it stored across the swarm expire (primaries and replicas), counted in ``peer
status``; a live client's subscriptions stay and still deliver. On a virtual clock."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import trio
import trio.testing

from rangecast.pubsub.node import OverlayConfig
from rangecast.pubsub.schema import THESIS_SCHEMA
from rangecast.pubsub.subscription import parse_subscription
from rangecast.runtime.client import connect
from rangecast.runtime.inprocess import start_local_swarm
from rangecast.runtime.peer import RUNTIME_OVERLAY, PeerConfig, PeerRuntime
from rangecast.runtime.service import Owner

EVENT = {"Attr1": 50.0, "Attr2": 0.0, "Attr3": 1.0, "Attr4": 2.0}
OVERLAY = OverlayConfig(refresh_s=5.0, expire_after_s=15.0)


def _pieces(peers: list[PeerRuntime], owner: bytes, replicas: bool = True) -> int:
    """Pieces of ``owner`` stored at the live peers, primaries (and replicas)."""
    n = 0
    for p in peers:
        assert p.core is not None
        ov = p.core.overlay
        for node in [*ov.nodes.values(), *(ov.replicas.values() if replicas else ())]:
            if node.index is not None:
                n += sum(1 for s in node.index if s.subscriber.id == owner)
    return n


def test_real_peers_expire_pieces_after_three_refresh_periods_by_default() -> None:
    assert RUNTIME_OVERLAY.expire_after_s == 3 * RUNTIME_OVERLAY.refresh_s
    assert PeerConfig().overlay is RUNTIME_OVERLAY
    assert OverlayConfig().expire_after_s == float("inf")  # the simulator's stays off


def test_the_pieces_of_a_vanished_entry_peer_expire_everywhere() -> None:
    async def main() -> dict[str, Any]:
        cfg = PeerConfig(id_difficulty=0, overlay=OVERLAY)
        async with trio.open_nursery() as nursery:
            peers = await start_local_swarm(nursery, 4, seed=21, config=cfg)
            gone, live = peers[3], peers[:3]
            for k in range(6):
                expr = f"Attr1 >= {k * 10} and Attr2 <= {90 - k}"
                gone.subscribe(parse_subscription(expr, THESIS_SCHEMA), Owner())
            assert live[0].address is not None
            async with connect("127.0.0.1", live[0].address.port) as c:
                sub = await c.subscribe("Attr1 >= 40")
                await trio.sleep(10.0)
                out: dict[str, Any] = {
                    "before": _pieces(live, gone.identity.node_id),
                    "mine_before": _pieces(peers, live[0].identity.node_id, False),
                }
                gone.crash()
                await trio.sleep(60.0)  # failure detection, promotion, expiry, ReplicaOps
                out["after"] = _pieces(live, gone.identity.node_id)
                out["mine_after"] = _pieces(live, live[0].identity.node_id, False)
                out["expired"] = sum(p.status()["overlay"]["expired"] for p in live)
                eid = await c.publish(EVENT)
                async for d in sub:
                    out["delivered"] = d.eid == eid
                    break
            for p in live:
                p.stop()
            return out

    out = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert out["before"] >= 6  # stored, with their replicas
    assert out["after"] == 0
    assert out["expired"] >= 6
    # The live client's one piece: at one primary before (maybe the one that vanished), at
    # one live primary after (a replica promoted, its age restarted), never expired.
    assert out["mine_after"] == out["mine_before"] == 1
    assert out["delivered"]


@pytest.mark.parametrize("expire", [9.0, 1.0])
def test_a_peer_config_with_expiry_shorter_than_two_refreshes_is_refused(expire: float) -> None:
    with pytest.raises(Exception, match="expire_after_s"):
        PeerConfig(overlay=replace(RUNTIME_OVERLAY, refresh_s=5.0, expire_after_s=expire))
