"""Routing properties of oracle-bootstrapped overlays: every key is delivered at the live node
numerically closest to it, both by following ``next_hop`` synchronously and through the
simulator with hop acknowledgements."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rangecast.dht.errors import LocalProtocolError
from rangecast.dht.ids import DEFAULT_SPACE, IdSpace
from rangecast.dht.messages import DHT_TABLE
from rangecast.dht.node import Application, PastryConfig, PastryNode
from rangecast.dht.wire import Handle, codec_for
from rangecast.sim.engine import Simulator
from rangecast.sim.latency import SyntheticLatency
from rangecast.sim.network import SimNetwork
from rangecast.sim.streams import stream

_BASE_EXAMPLES = settings().max_examples
SEEDS = st.integers(min_value=0, max_value=2**32 - 1)
SIZES = st.integers(min_value=1, max_value=200)
CONFIGS = st.sampled_from(
    [
        PastryConfig(),
        PastryConfig(leaf_set_size=2),
        PastryConfig(leaf_set_size=4, space=IdSpace(bits=64, b=4)),
        PastryConfig(leaf_set_size=8, space=IdSpace(bits=32, b=2)),
        PastryConfig(leaf_set_size=6, space=IdSpace(bits=24, b=3)),
    ]
)


@dataclass
class DeliveryLog:
    sim: Simulator | None = None
    expected: int = 0
    deliveries: list[tuple[int, int, int, int]] = field(default_factory=list)

    def add(self, lid: int, index: int, key: int, hops: int) -> None:
        self.deliveries.append((lid, index, key, hops))
        if self.sim is not None and len(self.deliveries) >= self.expected:
            self.sim.stop()


class Recorder(Application):
    def __init__(self, index: int, log: DeliveryLog) -> None:
        self.index = index
        self.log = log

    def deliver(self, key: int, payload: bytes, origin: Handle, hops: int, now: float) -> None:
        self.log.add(int.from_bytes(payload, "big"), self.index, key, hops)


def build(
    n: int, seed: int, config: PastryConfig | None = None, log: DeliveryLog | None = None
) -> tuple[Simulator, SimNetwork]:
    sim = Simulator(
        SyntheticLatency(seed, sites=64), stream(seed, "network"), codec=codec_for(DHT_TABLE)
    )
    factory = (lambda i: Recorder(i, log)) if log is not None else None
    net = SimNetwork(sim, seed, config=config, app_factory=factory)
    net.oracle_bootstrap(net.create(n))
    if log is not None:
        log.sim = sim
    return sim, net


def walk(net: SimNetwork, src: int, key: int) -> list[int]:
    """Follow ``next_hop`` from node to node; returns the path of node indices."""
    space = net.space
    index_of = net.sim.index_of
    path = [src]
    while True:
        here = net.nodes[path[-1]]
        nh = here.next_hop(key)
        if nh is None:
            return path
        nxt = index_of[nh.addr]
        assert net.nodes[nxt].id == nh.id
        # Every hop makes progress: a longer shared prefix, or numerically closer.
        gained_prefix = space.shared_prefix(nh.id, key) > space.shared_prefix(here.id, key)
        closer = space.distance(nh.id, key) < space.distance(here.id, key)
        assert gained_prefix or closer, f"hop {here!r} -> {nh!r} makes no progress"
        assert nxt not in path, f"routing loop {[*path, nxt]}"
        path.append(nxt)


def brute_root(net: SimNetwork, key: int) -> int:
    space = net.space
    live = net.live()
    return min(live, key=lambda i: (space.distance(net.nodes[i].id, key), net.nodes[i].id))


def keys_for(space: IdSpace) -> st.SearchStrategy[int]:
    return st.integers(min_value=0, max_value=space.size - 1)


# ------------------------------------------------------------------------- synchronous walk


@settings(max_examples=max(10, _BASE_EXAMPLES))
@given(n=SIZES, seed=SEEDS, config=CONFIGS, data=st.data())
def test_next_hop_walk_ends_at_the_oracle_root(
    n: int, seed: int, config: PastryConfig, data: st.DataObject
) -> None:
    _, net = build(n, seed, config)
    oracle = net.oracle()
    space = net.space
    rng = random.Random(data.draw(SEEDS, label="lookup_seed"))
    keys = [space.random_id(rng) for _ in range(20)]
    # Keys on and right beside node ids, where off-by-one mistakes live.
    for i in data.draw(st.lists(st.integers(0, n - 1), max_size=5), label="near_nodes"):
        ident = net.nodes[i].id
        keys += [ident, (ident + 1) % space.size, (ident - 1) % space.size]
    for key in keys:
        src = rng.randrange(n)
        path = walk(net, src, key)
        assert path[-1] == oracle.root(key) == brute_root(net, key)
        assert len(path) - 1 <= space.digits + 2


@given(n=SIZES, seed=SEEDS)
def test_every_node_is_the_root_of_its_own_id(n: int, seed: int) -> None:
    _, net = build(n, seed)
    oracle = net.oracle()
    for i, node in enumerate(net.nodes):
        assert node.next_hop(node.id) is None
        assert oracle.root(node.id) == i


# ------------------------------------------------------------------ state after the bootstrap


@settings(max_examples=max(10, _BASE_EXAMPLES // 2))
@given(n=SIZES, seed=SEEDS, config=CONFIGS)
def test_oracle_bootstrap_state_equals_brute_force(n: int, seed: int, config: PastryConfig):
    _, net = build(n, seed, config)
    space = net.space
    half = config.leaf_set_size // 2
    all_ids = [node.id for node in net.nodes]
    assert net.leafset_mismatches() == []
    for node in net.nodes:
        others = [i for i in all_ids if i != node.id]
        right = sorted(others, key=lambda i, own=node.id: space.cw(own, i))[:half]
        left = sorted(others, key=lambda i, own=node.id: space.ccw(own, i))[:half]
        assert [p.id for p in node.leaves.right] == right
        assert [p.id for p in node.leaves.left] == left
        # Routing table: entries sit in their slot, and every slot that some node could fill
        # is filled (the bootstrap knows the whole membership).
        table = node.table
        for r, row in enumerate(table.rows):
            for c, p in enumerate(row):
                if p is not None:
                    assert space.shared_prefix(node.id, p.id) == r
                    assert space.digit(p.id, r) == c
        for other in others:
            r = space.shared_prefix(node.id, other)
            assert table.get(r, space.digit(other, r)) is not None


# -------------------------------------------------------------- replica_set and local_lookup


@given(n=SIZES, seed=SEEDS, config=CONFIGS, data=st.data())
def test_replica_set_and_local_lookup(
    n: int, seed: int, config: PastryConfig, data: st.DataObject
) -> None:
    _, net = build(n, seed, config)
    space = net.space
    half = config.leaf_set_size // 2
    oracle = net.oracle()
    keys = data.draw(st.lists(keys_for(space), min_size=1, max_size=5), label="keys")
    all_ids = sorted(node.id for node in net.nodes)
    for key in keys:
        root = net.nodes[oracle.root(key)]
        assert [p.id for p in root.replica_set(key, 1)] == [root.id]
        assert root.replica_set(key, 1)[0] is root.me
        # The k closest nodes of the whole net all sit in the root's leaf set (k <= half+1).
        by_distance = sorted(all_ids, key=lambda i, key=key: (space.distance(i, key), i))
        for k in range(half + 2):
            assert [p.id for p in root.replica_set(key, k)] == by_distance[:k]
        # From any node: closest first, never more than it knows.
        node = net.nodes[data.draw(st.integers(0, n - 1), label="node")]
        known = {node.id, *(p.id for p in node.leaves.members())}
        rs = node.replica_set(key, 100)
        assert [p.id for p in rs] == sorted(
            known, key=lambda i, key=key: (space.distance(i, key), i)
        )
        assert node.replica_set(key, 0) == []
        # local_lookup lists exactly the known peers that make progress, best first.
        own_shl = space.shared_prefix(node.id, key)
        own_d = space.distance(node.id, key)
        progress = {
            p.id
            for p in node.known_peers()
            if space.shared_prefix(p.id, key) > own_shl
            or (space.shared_prefix(p.id, key) == own_shl and space.distance(p.id, key) < own_d)
        }
        ranked = sorted(
            progress,
            key=lambda i, key=key: (-space.shared_prefix(i, key), space.distance(i, key), i),
        )
        for limit in (0, 1, 3, len(ranked) + 1):
            assert [p.id for p in node.local_lookup(key, limit)] == ranked[:limit]
        # The next hop, when there is one, is a known node.
        nh = node.next_hop(key)
        if nh is not None:
            assert nh.id in {p.id for p in node.known_peers()}


def test_replica_set_rejects_negative_k() -> None:
    node = PastryNode(1, b"\x00" * 6, random.Random(0), codec=codec_for(DHT_TABLE))
    node.start_alone(0.0)
    with pytest.raises(LocalProtocolError):
        node.replica_set(5, -1)
    assert node.replica_set(5, 3) == [node.me]


# ------------------------------------------------------------------------ through the engine


def route_through_engine(
    sim: Simulator, net: SimNetwork, log: DeliveryLog, lookups: list[tuple[int, int]]
) -> None:
    """Inject ``(src, key)`` lookups at staggered times and run until all are delivered."""
    log.expected = len(lookups)

    def inject(lid: int, src: int, key: int) -> None:
        net.nodes[src].route(key, lid.to_bytes(4, "big"), sim.now)
        sim.poke(src)

    t = sim.now
    for lid, (src, key) in enumerate(lookups):
        t += 0.01
        sim.call_at(t, inject, lid, src, key)
    sim.run(until=t + 60.0)


@settings(max_examples=max(10, _BASE_EXAMPLES // 2))
@given(n=SIZES, seed=SEEDS, hop_acks=st.booleans(), data=st.data())
def test_engine_delivers_every_lookup_once_at_the_oracle_root(
    n: int, seed: int, hop_acks: bool, data: st.DataObject
) -> None:
    log = DeliveryLog()
    sim, net = build(n, seed, PastryConfig(hop_acks=hop_acks), log)
    space = net.space
    rng = random.Random(data.draw(SEEDS, label="lookup_seed"))
    lookups = [(rng.randrange(n), space.random_id(rng)) for _ in range(25)]
    oracle = net.oracle()
    route_through_engine(sim, net, log, lookups)
    assert sorted(lid for lid, *_ in log.deliveries) == list(range(len(lookups)))
    for lid, index, key, hops in log.deliveries:
        src, expected_key = lookups[lid]
        assert key == expected_key
        assert index == oracle.root(key)
        # Nothing changed in the net, so the message took exactly the synchronous path.
        assert hops == len(walk(net, src, key)) - 1
    assert sum(node.stats.reroutes for node in net.nodes) == 0
    assert sum(node.stats.malformed for node in net.nodes) == 0
    by_type = sim.stats.by_type
    routed = by_type["Route"].messages if "Route" in by_type else 0
    acks = by_type["HopAck"].messages if "HopAck" in by_type else 0
    assert acks == (routed if hop_acks else 0)


@settings(max_examples=max(5, _BASE_EXAMPLES // 3))
@given(seed=SEEDS, n=st.integers(min_value=20, max_value=200), fail=st.sampled_from([0.1, 0.2]))
def test_hop_acks_route_around_fresh_crashes(n: int, seed: int, fail: float) -> None:
    """Crash nodes and route at once, before any keep-alive noticed: missing hop acks mark the
    dead next hops failed and the messages are re-routed to the closest *live* node."""
    log = DeliveryLog()
    sim, net = build(n, seed, PastryConfig(), log)
    net.crash_fraction(fail, stream(seed, "failures"))
    live = net.live()
    oracle = net.oracle()
    rng = random.Random(seed)
    lookups = [(live[rng.randrange(len(live))], DEFAULT_SPACE.random_id(rng)) for _ in range(30)]
    route_through_engine(sim, net, log, lookups)
    assert sorted(lid for lid, *_ in log.deliveries) == list(range(len(lookups)))
    for _, index, key, _ in log.deliveries:
        assert index == oracle.root(key)
