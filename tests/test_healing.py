"""Healing a split overlay (``dht.healing``): a network partition that outlasts failure
detection splits the overlay into two; when the network heals, peers that ask the peers they
declared failed (``heal_s``) merge it again, on Pastry and on Kademlia, and a peer left alone
rejoins. Without it the split stays. The partition is the simulator's ``drop`` hook."""

from __future__ import annotations

import itertools
import math
import random
import subprocess
import sys
from collections import defaultdict
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rangecast.dht.healing import Graveyard
from rangecast.dht.ids import DEFAULT_SPACE
from rangecast.dht.kademlia import KademliaConfig
from rangecast.dht.messages import DHT_TABLE, Ping
from rangecast.dht.node import PastryConfig
from rangecast.dht.routing import Peer
from rangecast.dht.wire import codec_for
from rangecast.pubsub.node import OverlayConfig
from rangecast.pubsub.schema import THESIS_SCHEMA
from rangecast.pubsub.subscription import Subscription
from rangecast.sim.engine import Simulator
from rangecast.sim.latency import SyntheticLatency
from rangecast.sim.network import SimNetwork
from rangecast.sim.partition_experiment import Partition, PartitionParams
from rangecast.sim.streams import stream
from rangecast.sim.workload import THESIS_WORKLOAD, Workload
from rangecast.testkit.simnet import Key, Published, SimOverlay, brute_force

FAST = {"keepalive_s": 0.5, "fail_after_s": 1.5, "dead_ttl_s": 5.0, "join_timeout_s": 2.0}
CONFIGS = {
    "pastry": lambda heal_s: PastryConfig(leaf_set_size=8, heal_s=heal_s, **FAST),
    "kademlia": lambda heal_s: KademliaConfig(k=8, siblings=4, heal_s=heal_s, **FAST),
}


def _overlay(dht: str, heal_s: float, n: int = 24, seed: int = 3) -> tuple[Simulator, SimNetwork]:
    sim = Simulator(
        SyntheticLatency(seed, sites=64), stream(seed, "network"), codec=codec_for(DHT_TABLE)
    )
    net = SimNetwork(sim, seed, config=CONFIGS[dht](heal_s))
    net.oracle_bootstrap(net.create(n))
    sim.run(until=sim.now + 5.0)
    assert net.leafset_mismatches() == []
    return sim, net


def _split(sim: Simulator, side: set[int], seconds: float) -> None:
    """Cut every message between ``side`` and the rest for ``seconds``, then heal the network."""
    sim.drop = lambda src, dst, msg: (src in side) != (dst in side)
    sim.run(until=sim.now + seconds)
    sim.drop = None


def _neighbour_sides(net: SimNetwork, side: set[int]) -> set[tuple[bool, bool]]:
    """(node's side, neighbour's side) of every neighbour of every node."""
    index = {p.id: i for i, p in enumerate(net.peers)}
    return {
        (i in side, index[p.id] in side)
        for i, node in enumerate(net.nodes)
        for p in node.neighbours()
    }


@pytest.mark.parametrize("dht", sorted(CONFIGS))
def test_a_healed_partition_merges_the_overlay_again(dht: str) -> None:
    sim, net = _overlay(dht, heal_s=2.0)
    side = set(range(0, 24, 2))  # ids are random: both halves span the whole ring
    _split(sim, side, 20.0)
    # Split: every neighbour of every node is on its own side.
    assert _neighbour_sides(net, side) == {(True, True), (False, False)}
    sim.run(until=sim.now + 60.0)
    assert net.leafset_mismatches() == []
    healed = sum(node.stats.healed for node in net.nodes)
    pings = sum(node.stats.heal_pings for node in net.nodes)
    assert healed > 0 and pings > 0


@pytest.mark.parametrize("dht", sorted(CONFIGS))
def test_without_healing_the_split_stays(dht: str) -> None:
    sim, net = _overlay(dht, heal_s=math.inf)
    side = set(range(0, 24, 2))
    _split(sim, side, 20.0)
    sim.run(until=sim.now + 60.0)
    assert len(net.leafset_mismatches()) == 24
    assert _neighbour_sides(net, side) == {(True, True), (False, False)}


@pytest.mark.parametrize("dht", sorted(CONFIGS))
def test_a_peer_cut_off_alone_rejoins(dht: str) -> None:
    sim, net = _overlay(dht, heal_s=2.0)
    _split(sim, {5}, 20.0)
    assert list(net.nodes[5].neighbours()) == []
    sim.run(until=sim.now + 60.0)
    assert net.leafset_mismatches() == []


def test_a_peer_that_left_is_not_asked_again() -> None:
    sim, net = _overlay("pastry", heal_s=2.0)
    net.nodes[7].leave(sim.now)
    sim.poke(7)
    sim.crash(7)
    sim.run(until=sim.now + 60.0)
    assert net.leafset_mismatches() == []
    others = [node for i, node in enumerate(net.nodes) if i != 7]
    assert all(node.stats.heal_pings == 0 for node in others)
    assert all(net.peers[7] not in node.neighbours() for node in others)


def test_a_crashed_peer_is_asked_every_heal_s_then_forgotten() -> None:
    config = PastryConfig(leaf_set_size=8, heal_s=2.0, heal_keep_s=30.0, **FAST)
    sim = Simulator(SyntheticLatency(1, sites=64), stream(1, "network"), codec=codec_for(DHT_TABLE))
    net = SimNetwork(sim, 1, config=config)
    net.oracle_bootstrap(net.create(12))
    sim.run(until=sim.now + 5.0)
    asked: dict[int, list[float]] = defaultdict(list)
    sim.drop = lambda src, dst, msg: (
        dst == 4 and isinstance(msg, Ping) and bool(asked[src].append(sim.now))
    )
    sim.crash(4)
    # Declared failed within fail_after_s + a keep-alive period; its id's second-hand
    # mentions are ignored for dead_ttl_s, by when no leaf set names it any more.
    quiet = sim.now + FAST["fail_after_s"] + FAST["keepalive_s"] + FAST["dead_ttl_s"]
    buried_by = sim.now + FAST["fail_after_s"] + FAST["keepalive_s"]
    sim.run(until=sim.now + 120.0)
    assert net.leafset_mismatches() == []
    later = {src: [t for t in times if t > quiet] for src, times in asked.items()}
    assert sum(map(len, later.values())) > 0
    assert sum(net.nodes[i].stats.heal_pings for i in range(12)) >= sum(map(len, later.values()))
    for times in later.values():
        # The graveyard holds one peer: asked once per heal_s, until heal_keep_s is over.
        assert all(b - a >= 2.0 - 1e-9 for a, b in itertools.pairwise(times))
        assert not times or times[-1] <= buried_by + 30.0 + 2.0 + FAST["keepalive_s"]


def test_healing_is_off_in_the_simulator_by_default() -> None:
    assert PastryConfig().heal_s == math.inf and KademliaConfig().heal_s == math.inf
    assert Graveyard.of(PastryConfig()) is None


# --------------------------------------------------------------------------- the graveyard


def _peer(i: int) -> Peer:
    return Peer.make(DEFAULT_SPACE, i + 1, bytes([10, 0, 0, 1, 0, i]))


@settings(max_examples=200, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["bury", "revive", "next"]), st.integers(0, 9)), max_size=60
    ),
    limit=st.integers(1, 5),
)
def test_the_graveyard_asks_each_in_turn_and_keeps_the_newest(
    ops: list[tuple[str, int]], limit: int
) -> None:
    g = Graveyard(every_s=1.0, limit=limit, keep_s=math.inf)
    model: list[int] = []  # ids, asking order
    now = 0.0
    for op, i in ops:
        now += 1.0
        ident = _peer(i).id
        if op == "bury":
            if ident in model:
                model.remove(ident)
            model.append(ident)
            del model[:-limit]
            g.bury(_peer(i), now)
        elif op == "revive":
            if ident in model:
                model.remove(ident)
            g.revive(ident)
        else:
            assert g.due(now) == bool(model)
            got = g.next(now)
            want = model.pop(0) if model else None
            if want is not None:
                model.append(want)
            assert (got.id if got else None) == want
        assert len(g) == len(model) and all(x in g for x in model)


def test_the_graveyard_forgets_after_keep_s_and_skips_on_request() -> None:
    g = Graveyard(every_s=1.0, limit=8, keep_s=10.0)
    g.bury(_peer(1), 0.0)
    g.bury(_peer(2), 5.0)
    assert g.next(6.0, skip=lambda i: i == _peer(1).id) == _peer(2)
    assert not g.due(6.5) and g.due(7.0)
    assert g.next(12.0) == _peer(2)  # peer 1 buried 12 s ago: forgotten
    assert len(g) == 1
    assert g.next(16.0) is None and len(g) == 0


# ------------------------------------------------------------------ the pub/sub overlay on top


@pytest.mark.parametrize("dht", sorted(CONFIGS))
def test_after_a_healed_split_every_event_reaches_every_match_once(dht: str) -> None:
    """Subscriptions made before a split, on both sides, each get every matching event
    published from either side after the network heals, exactly once."""
    seed = 11
    net = SimOverlay(
        24, seed, THESIS_SCHEMA, dht=CONFIGS[dht](2.0), config=OverlayConfig(replicas=3), sites=32
    )
    workload = Workload(THESIS_SCHEMA, THESIS_WORKLOAD, stream(seed, "layout"))
    rng = random.Random(seed)
    subs: dict[Key, Subscription] = {}
    for i in range(24):
        for _ in range(2):
            sub = workload.subscription(rng)
            subs[net.subscribe(i, sub)] = sub
    net.run_for(10.0)
    _split(net.sim, set(range(0, 24, 2)), 20.0)
    net.run_for(120.0)  # heal, then subscriber refreshes (every refresh_s, 30 s) put back the rest
    assert net.net.leafset_mismatches() == []
    events = []
    for n in range(60):
        values = workload.event(rng)
        eid = net.publish(n % 24, values)
        events.append(
            Published(eid, values, n % 24, brute_force(subs, values, THESIS_SCHEMA.partial))
        )
        net.run_for(0.1)
    net.run_for(30.0)
    assert sum(len(e.expected) for e in events) > 0
    net.check_deliveries(events)


# ------------------------------------------------------------- rangecast sim run partition


@pytest.mark.parametrize("dht", sorted(CONFIGS))
def test_the_partition_scenario_merges_with_healing_and_not_without(dht: str) -> None:
    small = PartitionParams(
        dht=dht, nodes=40, subs_per_node=1.0, events=60, split_s=30.0, heal_s=5.0, after_s=60.0
    )
    healed = Partition().run(small)
    assert healed.unconverged_at_heal > 0 and healed.unconverged == 0
    assert healed.merged_after_s is not None and healed.heal_pings > 0
    assert healed.verdict.expected_deliveries > 0 and healed.succeeded()
    apart = Partition().run(replace(small, heal=False))
    assert apart.unconverged > 0 and apart.merged_after_s is None and apart.heal_pings == 0
    assert not apart.succeeded()


def test_the_partition_scenario_is_a_command_and_refuses_bad_input() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rangecast.cli.main", "sim", "run", "partition", "--side", "1.5"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "--side" in out.stderr


def test_the_partition_sweep_plan_is_shipped() -> None:
    from rangecast.analysis.sweep.plan import load_plan

    plan = load_plan("partition")
    assert len(plan.runs) == 2 * 2 * 3 * 5 and {r.scenario for r in plan.runs} == {"partition"}
    combos = {(r.params.dht, r.params.heal, r.params.split_s) for r in plan.runs}
    assert len(combos) == 12 and all(r.params.nodes == 200 for r in plan.runs)
