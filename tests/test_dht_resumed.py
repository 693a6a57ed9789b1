"""A node told it was paused (issue 14, item 17): suspicion counts only time in which the node
itself could listen, so input queued during the pause is read before anyone is declared
failed; a neighbour that stays silent afterwards is still declared failed."""

from __future__ import annotations

import random

import pytest

from rangecast.dht.kademlia import KademliaConfig, KademliaNode
from rangecast.dht.messages import DHT_TABLE, Ping
from rangecast.dht.node import PastryConfig, PastryNode
from rangecast.dht.routing import Peer
from rangecast.dht.wire import codec_for

A, B = b"\x0a\x00\x00\x01\x0f\xa0", b"\x0a\x00\x00\x02\x0f\xa0"


def _pair() -> tuple[PastryNode, Peer]:
    node = PastryNode(
        1 << 100, A, random.Random(1), config=PastryConfig(), codec=codec_for(DHT_TABLE)
    )
    node.start_alone(0.0)
    other = Peer.make(node.space, 1 << 101, B)
    node.receive(Ping(other.handle), B, 0.0)  # a neighbour, heard at t = 0
    assert other.id in node.leaves
    return node, other


def _run_timers(node: PastryNode | KademliaNode, until: float) -> None:
    while (t := node.get_timer()) is not None and t <= until:
        node.handle_timer(t)
    node.handle_timer(until)


def test_a_paused_node_reads_its_queued_input_before_judging_its_neighbours() -> None:
    node, other = _pair()
    # Frozen from t = 1 to t = 21: the neighbour's pings queued up meanwhile. The driver
    # notices the jump and says so before anything else.
    node.resumed(20.0)
    node.receive(Ping(other.handle), B, 21.0)  # the queued input, read first
    _run_timers(node, 25.0)
    assert other.id in node.leaves and node.stats.peers_failed == 0


def test_without_being_told_the_node_condemns_its_neighbours() -> None:
    """What happened before: every deadline fell due at once on resuming."""
    node, other = _pair()
    _run_timers(node, 21.0)
    assert other.id not in node.leaves and node.stats.peers_failed == 1


def test_a_neighbour_silent_after_the_pause_is_still_declared_failed() -> None:
    node, other = _pair()
    node.resumed(20.0)
    _run_timers(node, 20.0 + node.cfg.fail_after_s + 2 * node.cfg.keepalive_s)
    assert other.id not in node.leaves and node.stats.peers_failed == 1


@pytest.mark.parametrize("gap", [0.0, -1.0, float("inf"), float("nan")])
def test_no_gap_changes_nothing(gap: float) -> None:
    node, _ = _pair()
    timers = list(node._timers.heap)
    node.resumed(gap)
    assert node._timers.heap == timers


def test_kademlia_moves_its_deadlines_on_too() -> None:
    node = KademliaNode(
        1 << 100, A, random.Random(1), config=KademliaConfig(), codec=codec_for(DHT_TABLE)
    )
    node.start_alone(0.0)
    before = node.get_timer()
    assert before is not None
    node.resumed(20.0)
    assert node.get_timer() == before + 20.0
