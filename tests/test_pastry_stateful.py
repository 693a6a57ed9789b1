"""Stateful test of the Pastry protocol over the simulator: nodes join through the real join
protocol, crash, and route lookups, in any order Hypothesis picks; whenever the overlay has had
time to settle, every leaf set must equal the oracle's and every lookup must be delivered at the
live node numerically closest to its key."""

from __future__ import annotations

import random

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from rangecast.dht.ids import DEFAULT_SPACE
from rangecast.dht.messages import DHT_TABLE
from rangecast.dht.node import Application, PastryConfig, PastryNode, State
from rangecast.dht.wire import Handle, codec_for
from rangecast.sim.engine import Simulator
from rangecast.sim.latency import SyntheticLatency
from rangecast.sim.network import SimNetwork
from rangecast.sim.streams import stream

#: Fast failure detection keeps simulated time (and so events) per example small.
CONFIG = PastryConfig(
    leaf_set_size=4,
    keepalive_s=0.5,
    fail_after_s=1.5,
    join_timeout_s=2.0,
    join_attempts=5,
)
#: Simulated time after the last join or crash by which the overlay must have converged:
#: failure detection (fail_after + a keep-alive period), the leaf-set repair round trip, and
#: the same again for stale information about the dead node that is still in flight.
SETTLE_S = 2 * (CONFIG.fail_after_s + 2 * CONFIG.keepalive_s) + 1.0
MAX_NODES = 25
#: Leaf sets of rings with at most ``leaf_set_size + 1`` nodes do not recover from a crash (see
#: ``test_leaf_sets_of_a_small_ring_recover_from_a_crash`` below), so crashes keep more alive.
MIN_LIVE_AFTER_CRASH = CONFIG.leaf_set_size + 1
SEEDS = st.integers(min_value=0, max_value=2**32 - 1)
_BASE_EXAMPLES = settings().max_examples


class _Recorder(Application):
    def __init__(self, index: int, machine: PastryMachine) -> None:
        self.index = index
        self.machine = machine

    def deliver(self, key: int, payload: bytes, origin: Handle, hops: int, now: float) -> None:
        self.machine.delivered(int.from_bytes(payload, "big"), self.index, key)


class PastryMachine(RuleBasedStateMachine):
    max_nodes = MAX_NODES
    #: Joins overlap in time (each starts before the previous one settled), but one node joins
    #: at a time: several nodes joining at once can leave their leaf sets inconsistent for good
    #: (see ``test_concurrent_joins_converge``).
    concurrent_joins = 1

    def __init__(self) -> None:
        super().__init__()
        self.deliveries: dict[int, list[tuple[int, int]]] = {}
        self.waiting_for: int | None = None
        self.next_lid = 0
        self.settle_at = 0.0
        self.crashed: set[int] = set()

    # ------------------------------------------------------------------------------ helpers

    def delivered(self, lid: int, index: int, key: int) -> None:
        self.deliveries.setdefault(lid, []).append((index, key))
        if lid == self.waiting_for:
            self.sim.stop()

    def live(self) -> list[int]:
        return self.overlay.live()

    def changed(self) -> None:
        """Membership changed now: nothing is checked until the overlay had time to settle."""
        self.settle_at = self.sim.now + SETTLE_S

    def settled(self) -> bool:
        return self.sim.now >= self.settle_at

    def run_for(self, seconds: float) -> None:
        self.sim.run(until=self.sim.now + seconds)

    def join_nodes(self, contacts: list[int | None]) -> list[int]:
        """Create one node per contact and run the real join protocol for all of them at once
        (``None``: start a new overlay), until every one is READY."""
        new = list(self.overlay.create(len(contacts)))
        for i, contact in zip(new, contacts, strict=True):
            node = self.overlay.nodes[i]
            if contact is None:
                node.start_alone(self.sim.now)
            else:
                node.join(self.sim.addrs[contact], self.sim.now)
            self.sim.poke(i)
        deadline = self.sim.now + CONFIG.join_timeout_s * (CONFIG.join_attempts + 1)
        joining = [self.overlay.nodes[i] for i in new]
        while any(n.state is State.JOINING for n in joining) and self.sim.now < deadline:
            self.run_for(0.25)
        for i, contact in zip(new, contacts, strict=True):
            state = self.overlay.nodes[i].state
            assert state is State.READY, f"join of node {i} through {contact} ended {state}"
        self.changed()
        return new

    # -------------------------------------------------------------------------------- rules

    @initialize(seed=SEEDS, n0=st.integers(min_value=1, max_value=5), oracle=st.booleans())
    def start(self, seed: int, n0: int, oracle: bool) -> None:
        self.sim = Simulator(
            SyntheticLatency(seed, sites=64), stream(seed, "network"), codec=codec_for(DHT_TABLE)
        )
        self.overlay = SimNetwork(
            self.sim, seed, config=CONFIG, app_factory=lambda i: _Recorder(i, self)
        )
        if oracle:
            self.overlay.oracle_bootstrap(self.overlay.create(n0))
        else:
            pick = stream(seed, "test-contacts")
            self.join_nodes([None])
            for _ in range(n0 - 1):
                live = self.live()
                self.join_nodes([live[pick.randrange(len(live))]])
        self.changed()
        self.run_for(SETTLE_S)

    # Joins run only before the first crash: a join whose path crosses a dead routing-table
    # entry never completes (see ``test_join_through_a_stale_routing_table_entry_completes``).
    @precondition(lambda self: not self.crashed and len(self.overlay.nodes) < self.max_nodes)
    @rule(picks=st.lists(st.integers(min_value=0, max_value=10**6), min_size=1, max_size=3))
    def join(self, picks: list[int]) -> None:
        """Nodes join (up to ``concurrent_joins`` at once), each through a random live contact,
        while earlier joins may still be settling."""
        live = self.live()
        room = min(self.max_nodes - len(self.overlay.nodes), self.concurrent_joins)
        self.join_nodes([live[p % len(live)] for p in picks[:room]])

    # Crashes only hit a settled overlay: a crash while a wave of join announcements is still
    # in flight can leave two live neighbours unaware of each other for good (see
    # ``test_leaf_sets_converge_after_a_crash_during_concurrent_joins``).
    @precondition(lambda self: self.settled() and len(self.live()) > MIN_LIVE_AFTER_CRASH)
    @rule(victim=st.integers(min_value=0, max_value=10**6))
    def crash(self, victim: int) -> None:
        live = self.live()
        i = live[victim % len(live)]
        self.sim.crash(i)
        self.crashed.add(i)
        self.changed()

    @rule(dt=st.floats(min_value=0.0, max_value=SETTLE_S))
    def advance(self, dt: float) -> None:
        self.run_for(dt)

    @rule()
    def settle(self) -> None:
        self.sim.run(until=max(self.sim.now, self.settle_at))
        assert self.settled()

    @rule(src=st.integers(min_value=0, max_value=10**6), key=st.integers(0, DEFAULT_SPACE.size - 1))
    def lookup(self, src: int, key: int) -> None:
        """Route a lookup on the settled overlay (settling first if needed)."""
        self.settle()
        live = self.live()
        origin = live[src % len(live)]
        expected = self.overlay.oracle().root(key)
        lid = self.next_lid
        self.next_lid += 1
        self.waiting_for = lid
        self.overlay.nodes[origin].route(key, lid.to_bytes(4, "big"), self.sim.now)
        self.sim.poke(origin)
        self.run_for(30.0)  # stops at the delivery
        self.waiting_for = None
        self.run_for(1.0)  # room for a duplicate to show up
        assert self.deliveries.get(lid) == [(expected, key)], (
            f"lookup {lid} for {key:#x} from node {origin}: expected at {expected}, "
            f"got {self.deliveries.get(lid)}"
        )

    # --------------------------------------------------------------------------- invariants

    @invariant()
    def settled_leaf_sets_equal_the_oracle(self) -> None:
        if not self.settled():
            return
        assert self.overlay.leafset_mismatches() == []

    @invariant()
    def every_node_not_crashed_is_ready_and_nothing_is_malformed(self) -> None:
        for i, node in enumerate(self.overlay.nodes):
            if i not in self.crashed:
                assert node.state is State.READY
            assert node.stats.malformed == 0


PastryMachine.TestCase.settings = settings(
    max_examples=max(10, _BASE_EXAMPLES),
    stateful_step_count=15,
    deadline=None,
)
TestPastryStateful = PastryMachine.TestCase


class LongPastryMachine(PastryMachine):
    """The same machine with bigger overlays and longer histories."""

    max_nodes = 60


LongPastryMachine.TestCase.settings = settings(
    max_examples=max(100, _BASE_EXAMPLES * 10),
    stateful_step_count=40,
    deadline=None,
)
TestPastryStatefulLong = pytest.mark.slow(LongPastryMachine.TestCase)


# ------------------------------------------------------------------- deterministic scenarios


def _small_ring(n: int, config: PastryConfig) -> tuple[Simulator, SimNetwork]:
    sim = Simulator(SyntheticLatency(1, sites=64), stream(1, "network"), codec=codec_for(DHT_TABLE))
    overlay = SimNetwork(sim, 1, config=config)
    overlay.oracle_bootstrap(overlay.create(n))
    return sim, overlay


def _join_with_id(sim: Simulator, ident: int, contact: bytes) -> PastryNode:
    (i,) = sim.add_nodes(1, random.Random(0))
    node = PastryNode(ident, sim.addrs[i], random.Random(i), codec=codec_for(DHT_TABLE))
    sim.attach(i, node)
    node.join(contact, sim.now)
    sim.poke(i)
    return node


def test_join_through_a_stale_routing_table_entry_completes() -> None:
    sim = Simulator(SyntheticLatency(1, sites=64), stream(1, "network"), codec=codec_for(DHT_TABLE))
    overlay = SimNetwork(sim, 1)
    overlay.oracle_bootstrap(overlay.create(50))
    contact = overlay.nodes[0]
    # A node the contact knows only from its routing table (so no keep-alive will notice).
    dead = next(p for p in contact.table.row(0) if p.id not in contact.leaves)
    sim.crash(sim.index_of[dead.addr])
    sim.run(until=sim.now + 60.0)  # leaf sets repair; the table entry stays
    assert overlay.leafset_mismatches() == []
    # The joiner's id shares the dead node's first digit: the contact forwards to it.
    joiner = _join_with_id(sim, dead.id + 1, contact.me.addr)
    sim.run(until=sim.now + 120.0)
    assert joiner.state is State.READY


def _join_batch(sim: Simulator, overlay: SimNetwork, contacts: list[int | None]) -> None:
    """Nodes join at the same moment (``None``: start the overlay); run until all are READY."""
    new = list(overlay.create(len(contacts)))
    for i, contact in zip(new, contacts, strict=True):
        if contact is None:
            overlay.nodes[i].start_alone(sim.now)
        else:
            overlay.nodes[i].join(sim.addrs[contact], sim.now)
        sim.poke(i)
    while any(overlay.nodes[i].state is State.JOINING for i in new):
        sim.run(until=sim.now + 0.25)


@pytest.mark.parametrize(
    ("seed", "leaf_set_size"), [(156162, 4), (7, 2)], ids=["leafset-4", "leafset-2"]
)
def test_concurrent_joins_converge(seed: int, leaf_set_size: int) -> None:
    config = PastryConfig(
        leaf_set_size=leaf_set_size, keepalive_s=0.5, fail_after_s=1.5, join_timeout_s=2.0
    )
    sim = Simulator(
        SyntheticLatency(seed, sites=64), stream(seed, "network"), codec=codec_for(DHT_TABLE)
    )
    overlay = SimNetwork(sim, seed, config=config)
    _join_batch(sim, overlay, [None])
    sim.run(until=sim.now + SETTLE_S)
    _join_batch(sim, overlay, [0, 0, 0])
    _join_batch(sim, overlay, [0, 0, 0])
    sim.run(until=sim.now + 120.0)
    assert overlay.leafset_mismatches() == []


def test_leaf_sets_converge_after_a_crash_during_concurrent_joins() -> None:
    seed = 482632349
    sim = Simulator(
        SyntheticLatency(seed, sites=64), stream(seed, "network"), codec=codec_for(DHT_TABLE)
    )
    overlay = SimNetwork(sim, seed, config=CONFIG)
    _join_batch(sim, overlay, [None])
    _join_batch(sim, overlay, [0])
    sim.run(until=sim.now + SETTLE_S)
    _join_batch(sim, overlay, [0, 0, 0])
    _join_batch(sim, overlay, [0, 0, 0])
    _join_batch(sim, overlay, [1, 4, 1])  # nodes 8, 9, 10: adjacent on the ring
    sim.crash(1)  # the joins have just completed; their announcements are still settling
    sim.run(until=sim.now + 120.0)
    assert overlay.leafset_mismatches() == []


def test_leaf_sets_recover_from_a_crash_in_a_ring_larger_than_the_leaf_set() -> None:
    sim, overlay = _small_ring(CONFIG.leaf_set_size + 3, CONFIG)
    sim.crash(0)
    sim.run(until=sim.now + SETTLE_S)
    assert overlay.leafset_mismatches() == []


@pytest.mark.parametrize(
    ("n", "config"),
    [(3, PastryConfig(leaf_set_size=2)), (17, PastryConfig())],
    ids=["3-nodes-leafset-2", "17-nodes-default-config"],
)
def test_leaf_sets_of_a_small_ring_recover_from_a_crash(n: int, config: PastryConfig) -> None:
    sim, overlay = _small_ring(n, config)
    sim.crash(0)
    sim.run(until=sim.now + 100.0)
    assert overlay.leafset_mismatches() == []
