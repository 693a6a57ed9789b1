"""End-to-end acknowledgements of direct messages (``dht.e2e``): with ``e2e_acks`` a direct
message sent with ``confirm`` (its receiver keeps or relays it for others) carries a uid and
its receiver answers it. Through the simulator: an honest overlay
confirms every one and blames nobody; a live receiver that drops them is charged once it
proves alive, and demoted; a crashed receiver is a silence (declared failed, charged nothing);
a late answer forgives; and without ``e2e_acks`` a ``Direct`` is the bytes it always was."""

from __future__ import annotations

import math
import random
from dataclasses import replace
from typing import Any

import msgspec
import pytest
from test_dht_e2e import Dropper
from test_dht_suspicion import Staller

from rangecast.dht.messages import DHT_TABLE, AckedDirect, Direct, RouteDone
from rangecast.dht.node import Application, PastryConfig
from rangecast.dht.routing import Peer
from rangecast.dht.wire import Handle, codec_for
from rangecast.sim.engine import Simulator
from rangecast.sim.latency import SyntheticLatency
from rangecast.sim.network import SimNetwork
from rangecast.sim.streams import stream

#: The runtime's choices: suspicion before declaration, demotion at once (no confirmation
#: wait, so that a test needs no 30 s of quiet).
CFG = PastryConfig(e2e_acks=True, suspect_s=30.0)


class Inbox(Application):
    """Records every direct payload received, as (lid, receiver index)."""

    def __init__(self, index: int, log: list[tuple[int, int]]) -> None:
        self.index = index
        self.log = log

    def receive_direct(self, payload: bytes, sender: Handle, now: float) -> None:
        self.log.append((int.from_bytes(payload, "big"), self.index))


def build(
    n: int, seed: int, wrap: Any = None, config: PastryConfig = CFG
) -> tuple[Simulator, SimNetwork, list[tuple[int, int]]]:
    sim = Simulator(
        SyntheticLatency(seed, sites=64), stream(seed, "network"), codec=codec_for(DHT_TABLE)
    )
    log: list[tuple[int, int]] = []
    net = SimNetwork(
        sim,
        seed,
        config=config,
        app_factory=lambda i: Inbox(i, log),
        core_factory=wrap or (lambda i, node: node),
    )
    net.oracle_bootstrap(net.create(n))
    return sim, net, log


def peer_of(net: SimNetwork, i: int) -> Peer:
    return net.nodes[i].me


def send(sim: Simulator, net: SimNetwork, src: int, dst: int, lid: int) -> None:
    net.nodes[src].send_direct(peer_of(net, dst), lid.to_bytes(4, "big"), sim.now, confirm=True)
    sim.poke(src)


def test_an_honest_overlay_confirms_every_direct_and_blames_nobody() -> None:
    n = 30
    sim, net, log = build(n, 1)
    rng = random.Random(1)
    sim.run(until=5.0)
    sent = []
    for lid in range(300):
        src, dst = rng.sample(range(n), 2)
        send(sim, net, src, dst, lid)
        sent.append((lid, dst))
    sim.run(until=sim.now + 20.0)
    assert sorted(log) == sorted(sent)  # each exactly once, where it was sent
    stats = [node.stats for node in net.nodes]
    assert sum(s.e2e_direct_done for s in stats) == len(sent)
    assert sum(s.e2e_direct_unanswered + s.e2e_direct_losses + s.demoted for s in stats) == 0
    assert all(not node.end_to_end.directs for node in net.nodes)  # type: ignore[union-attr]


def test_a_live_receiver_that_drops_directs_is_charged_and_demoted() -> None:
    n, bad = 24, 5
    sim, net, log = build(n, 2, lambda i, node: Dropper(node) if i == bad else node)
    sim.run(until=5.0)
    senders = [1, 9, 17]
    for lid in range(12):
        send(sim, net, senders[lid % 3], bad, lid)
    sim.run(until=sim.now + 60.0)
    assert log == []
    bad_id = net.nodes[bad].id
    for i in senders:
        st = net.nodes[i].stats
        # It answered the ping its first silence drew: alive, so each silence was a drop.
        assert st.e2e_direct_unanswered == 4 and st.e2e_direct_losses == 4
        assert st.demoted == 1
        assert set(net.nodes[i].end_to_end.quarantine) == {bad_id}  # type: ignore[union-attr]
    for i in range(n):
        if i not in senders and i != bad:
            assert net.nodes[i].stats.demoted == 0  # no one is blamed on another's word


def test_a_crashed_receiver_is_a_silence_not_a_loss() -> None:
    n, dead = 24, 7
    sim, net, _ = build(n, 3)
    sim.run(until=5.0)
    sim.crash(dead)
    for lid in range(6):
        send(sim, net, 2, dead, lid)
    sim.run(until=sim.now + 90.0)  # the deadline, 30 s of suspicion, then declared failed
    st = net.nodes[2].stats
    assert st.e2e_direct_unanswered == 6
    assert st.e2e_direct_losses == 0 and st.demoted == 0
    e2e = net.nodes[2].end_to_end
    assert e2e is not None and not e2e.doubted and not e2e.quarantine
    assert net.nodes[dead].id not in {p.id for p in net.nodes[2].known_peers()}


def test_without_suspicion_an_unanswered_direct_is_a_loss_at_once() -> None:
    n, bad = 16, 3
    config = replace(CFG, suspect_s=0.0, keepalive_s=math.inf)
    sim, net, _ = build(n, 4, lambda i, node: Dropper(node) if i == bad else node, config)
    sim.run(until=1.0)
    for lid in range(config.demote_after):
        send(sim, net, 0, bad, lid)
    sim.run(until=sim.now + 30.0)
    st = net.nodes[0].stats
    assert st.e2e_direct_losses == config.demote_after and st.demoted == 1


def test_a_late_answer_forgives_a_busy_receiver() -> None:
    n, busy = 24, 6
    # Busy from 5 s to 12 s: its answers come after the deadline (2 s + 4 x 50 ms).
    sim, net, log = build(n, 5, lambda i, node: Staller(node, 5.0, 12.0) if i == busy else node)
    sim.run(until=5.0)
    for lid in range(8):
        send(sim, net, lid % 2, busy, lid)
    sim.run(until=sim.now + 60.0)
    assert sorted(lid for lid, _ in log) == list(range(8))
    stats = [net.nodes[i].stats for i in (0, 1)]
    assert sum(s.e2e_direct_unanswered for s in stats) > 0
    assert sum(s.e2e_late for s in stats) > 0
    assert sum(s.demoted for s in stats) == 0
    for i in (0, 1):
        e2e = net.nodes[i].end_to_end
        assert e2e is not None and not e2e.doubted and not e2e.quarantine


def test_only_its_receiver_answers_for_a_direct() -> None:
    sim, net, _ = build(8, 6, lambda i, node: Dropper(node) if i == 3 else node)
    sim.run(until=1.0)
    send(sim, net, 0, 3, 1)
    node = net.nodes[0]
    e2e = node.end_to_end
    assert e2e is not None
    (uid,) = e2e.directs
    node.receive(RouteDone(uid), peer_of(net, 4).addr, sim.now)  # a third party's word
    assert uid in e2e.directs and node.stats.e2e_direct_done == 0


@pytest.mark.parametrize("acks", [False, True])
@pytest.mark.parametrize("confirm", [False, True])
def test_a_direct_costs_its_old_bytes_unless_acknowledged(acks: bool, confirm: bool) -> None:
    sim, net, _ = build(4, 7, config=PastryConfig(e2e_acks=acks))
    node = net.nodes[0]
    node.send_direct(peer_of(net, 1), b"xyz", sim.now, confirm=confirm)
    ((_, msg),) = node.take_messages()
    # A plain ``Direct`` (tag, sender, payload) unless an answer is asked for and possible.
    asked = acks and confirm
    assert type(msg) is (AckedDirect if asked else Direct)
    assert len(msgspec.msgpack.decode(msgspec.msgpack.encode(msg))) == (4 if asked else 3)
