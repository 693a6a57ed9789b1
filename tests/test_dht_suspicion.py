"""Overload is not failure (``dht.suspicion``, ``dht.e2e``'s late answers): a peer that stalls
for a while (a burst of work, a paused host) is suspected and routed around, never declared
failed or demoted, and comes back by its own word; a crashed peer is still declared failed,
``suspect_s`` later; a dropper is still demoted, ``demote_confirm_s`` later."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from test_dht_e2e import Dropper, Recorder

from rangecast.dht.e2e import EndToEnd
from rangecast.dht.messages import DHT_TABLE, HopAck, Route
from rangecast.dht.node import PastryConfig, PastryNode
from rangecast.dht.routing import Peer
from rangecast.dht.wire import Handle, Message, codec_for
from rangecast.sim.engine import Simulator
from rangecast.sim.latency import SyntheticLatency
from rangecast.sim.network import SimNetwork
from rangecast.sim.streams import stream

CFG = PastryConfig(e2e_acks=True, suspect_s=30.0, demote_confirm_s=30.0)


class Staller:
    """A node that stops working from ``start`` to ``end`` (inputs queued, timers held), then
    works through what queued up: a peer busy with something else, not dead. ``acks``: it
    still acknowledges routed hops at once (its transport does), so only the end-to-end
    answers come late."""

    def __init__(self, node: PastryNode, start: float, end: float, acks: bool = False) -> None:
        self.node, self.start, self.end, self.acks = node, start, end, acks
        self.queued: list[tuple[Message, bytes]] = []
        self.out: list[tuple[bytes, Message]] = []
        self.done = False

    def receive(self, msg: Message, src: bytes, now: float) -> None:
        if not self.done and now >= self.start:
            self.queued.append((msg, src))
            if self.acks and isinstance(msg, Route):
                self.out.append((src, HopAck(msg.uid)))
            return
        self.node.receive(msg, src, now)

    def handle_timer(self, now: float) -> None:
        if now < self.start:
            self.node.handle_timer(now)
        elif now >= self.end and not self.done:
            self.done = True
            for msg, src in self.queued:
                self.node.receive(msg, src, now)
            self.node.handle_timer(now)
        elif self.done:
            self.node.handle_timer(now)

    def get_timer(self) -> float | None:
        t = self.node.get_timer()
        if self.done or (t is not None and t < self.start):
            return t
        return self.end

    def take_messages(self) -> list[tuple[bytes, Message]]:
        out, self.out = self.node.take_messages() + self.out, []
        return out


def build(n: int, seed: int, wrap: Any) -> tuple[Simulator, SimNetwork, list[tuple[int, int]]]:
    sim = Simulator(
        SyntheticLatency(seed, sites=64), stream(seed, "network"), codec=codec_for(DHT_TABLE)
    )
    log: list[tuple[int, int]] = []
    net = SimNetwork(
        sim, seed, config=CFG, app_factory=lambda i: Recorder(i, log), core_factory=wrap
    )
    net.oracle_bootstrap(net.create(n))
    return sim, net, log


def route_some(
    sim: Simulator, net: SimNetwork, rng: random.Random, lids: range, near: int
) -> set[int]:
    """A message per lid from a random other node, half to keys beside node ``near``; the lids
    sent."""
    space = net.space
    sent = set()
    for k in lids:
        key = (net.nodes[near].id + k) % space.size if k % 2 else space.random_id(rng)
        src = rng.randrange(len(net.nodes))
        if src == near:
            continue
        net.nodes[src].route(key, k.to_bytes(4, "big"), sim.now)
        sim.poke(src)
        sent.add(k)
    return sent


@pytest.mark.parametrize("acks", [False, True])
def test_a_stalled_peer_is_suspected_and_comes_back_not_failed(acks: bool) -> None:
    n, slow = 24, 5
    stalls: list[Staller] = []

    def wrap(i: int, node: Any) -> Any:
        if i != slow:
            return node
        stalls.append(Staller(node, 40.0, 60.0, acks))  # 20 s of nothing: past fail_after_s
        return stalls[0]

    sim, net, log = build(n, 11, wrap)
    rng = random.Random(11)
    sim.run(until=39.0)
    sent = route_some(sim, net, rng, range(0, 60), slow)  # in flight when the stall begins
    sim.run(until=45.0)
    sent |= route_some(sim, net, rng, range(100, 160), slow)  # during it
    sim.run(until=120.0)
    honest = [node for i, node in enumerate(net.nodes) if i != slow]
    slow_id = net.nodes[slow].id
    if acks:
        # Hops acknowledged, answers late: losses charged, then forgiven by the late answers.
        assert sum(s.stats.e2e_losses for s in honest) > 0
        assert sum(s.stats.e2e_late for s in honest) > 0
    else:
        assert sum(s.stats.suspected for s in honest) > 0
        assert sum(s.stats.suspicions_cleared for s in honest) > 0
    # Nobody declared it failed or demoted it, and it is back in its neighbours' leaf sets.
    assert sum(s.stats.peers_failed for s in honest) == 0
    assert sum(s.stats.demoted for s in honest) == 0
    assert all(not node._suspects for node in honest)  # type: ignore[attr-defined]
    assert sum(slow_id in {p.id for p in node.neighbours()} for node in honest) >= 8
    # Every message reached a root: at least once (a hop that re-routed around the staller
    # while it still held the message may see it delivered twice, as any re-route may).
    assert {lid for lid, _ in log} >= sent


def test_a_crashed_peer_is_declared_failed_after_the_suspicion() -> None:
    n, dead = 24, 7
    sim, net, _ = build(n, 3, lambda i, node: node)
    rng = random.Random(3)
    sim.run(until=20.0)
    sim.crash(dead)
    route_some(sim, net, rng, range(30), dead)
    sim.run(until=30.0)
    others = [node for i, node in enumerate(net.nodes) if i != dead]
    dead_id = net.nodes[dead].id
    # Suspected, not yet declared: still in the leaf sets, routed around.
    assert sum(s.stats.suspected for s in others) > 0
    assert any(dead_id in {p.id for p in node.neighbours()} for node in others)
    sim.run(until=90.0)  # 12 s to notice + 30 s of suspicion + a keep-alive round
    assert all(dead_id not in {p.id for p in node.known_peers()} for node in others)
    assert sum(s.stats.peers_failed for s in others) > 0


def test_a_dropper_is_still_demoted_after_the_confirmation() -> None:
    n, bad = 24, 4
    wrapped: list[Dropper] = []

    def wrap(i: int, node: Any) -> Any:
        if i != bad:
            return node
        wrapped.append(Dropper(node))
        return wrapped[0]

    sim, net, _ = build(n, 5, wrap)
    rng = random.Random(5)
    sim.run(until=10.0)
    for _ in range(6):
        route_some(sim, net, rng, range(30), bad)
        sim.run(until=sim.now + 10.0)
    sim.run(until=sim.now + 60.0)
    honest = [node for i, node in enumerate(net.nodes) if i != bad]
    bad_id = net.nodes[bad].id
    assert sum(s.stats.demoted for s in honest) > 0
    assert sum(s.stats.e2e_late for s in honest) == 0  # a dropper never answers late
    for node in honest:
        e2e = node.end_to_end
        assert e2e is not None and set(e2e.quarantine) <= {bad_id}


def test_suspicion_is_off_by_default_and_checked() -> None:
    assert PastryConfig().suspect_s == 0.0 and PastryConfig().demote_confirm_s == 0.0
    for bad in ({"suspect_s": -1.0}, {"demote_confirm_s": math.inf}):
        try:
            PastryConfig(**bad)  # type: ignore[arg-type]
        except Exception as exc:
            assert "suspect_s" in str(exc)
        else:
            raise AssertionError(bad)


def test_a_late_answer_forgives_the_losses_and_the_pending_demotion() -> None:
    e2e = EndToEnd(demote_after=2, quarantine_s=600.0)
    hop = Peer(7, b"hop", Handle(bytes(20), b"hop"))
    for uid in (1, 2):
        e2e.timed_out(uid, hop, 1000 + uid)
        demote = e2e.lost(hop.id)
    assert demote
    e2e.pending[hop.id] = (hop, 30.0)
    assert e2e.late_from(1, b"someone else") is None  # only the hop charged can answer
    assert e2e.late_from(1, b"hop") == (hop.id, 1001)
    e2e.late_answer(1)
    assert not e2e.pending and not e2e.losses and e2e.due(100.0) == []
    assert e2e.late_from(1, b"hop") is None  # once
