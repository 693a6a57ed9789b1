"""Prefix-grouped multicast over real routing state: every target key is served exactly once, at
its root, with at most 2^b messages out of any hop, whatever the key set (random keys, keys
clustered under one prefix, keys beside node ids, repeated keys)."""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from rangecast.dht.ids import IdSpace
from rangecast.dht.messages import DHT_TABLE
from rangecast.dht.node import PastryConfig
from rangecast.dht.wire import codec_for
from rangecast.multicast.prefix import MAX_HOPS, split
from rangecast.sim.engine import Simulator
from rangecast.sim.latency import SyntheticLatency
from rangecast.sim.network import SimNetwork
from rangecast.sim.streams import stream

_BASE_EXAMPLES = settings().max_examples
SEEDS = st.integers(min_value=0, max_value=2**32 - 1)
CONFIGS = st.sampled_from(
    [
        PastryConfig(),
        PastryConfig(leaf_set_size=2),
        PastryConfig(leaf_set_size=4, space=IdSpace(bits=64, b=4)),
        PastryConfig(leaf_set_size=8, space=IdSpace(bits=32, b=2)),
        PastryConfig(leaf_set_size=6, space=IdSpace(bits=24, b=3)),
    ]
)


def build(n: int, seed: int, config: PastryConfig) -> SimNetwork:
    sim = Simulator(
        SyntheticLatency(seed, sites=64), stream(seed, "network"), codec=codec_for(DHT_TABLE)
    )
    net = SimNetwork(sim, seed, config=config)
    net.oracle_bootstrap(net.create(n))
    return net


def multicast(net: SimNetwork, src: int, keys: list[int]) -> tuple[Counter, int, int]:
    """Run the multicast hop by hop from ``src``: returns how often each (key index, node) was
    served, the largest fan-out seen and the deepest hop."""
    index_of = net.sim.index_of
    served: Counter[tuple[int, int]] = Counter()
    fan_out = depth = 0
    todo = [(src, list(range(len(keys))), 0)]
    while todo:
        node, members, hops = todo.pop()
        assert hops <= MAX_HOPS, "multicast did not converge"
        depth = max(depth, hops)
        plan = split(net.nodes[node], [keys[i] for i in members])
        fan_out = max(fan_out, len(plan.groups))
        seen = list(plan.local)
        for i in plan.local:
            served[(members[i], node)] += 1
        next_hops = set()
        for group in plan.groups:
            seen += group.members
            nxt = index_of[group.next_hop.addr]
            assert nxt != node, "a group sent to the node itself"
            assert nxt not in next_hops, "two groups for one next hop"
            next_hops.add(nxt)
            assert net.nodes[node].next_hop(group.route_key).id == group.next_hop.id
            todo.append((nxt, [members[i] for i in group.members], hops + 1))
        # Every key leaves a hop in exactly one place.
        assert sorted(seen) == list(range(len(members)))
    return served, fan_out, depth


@st.composite
def key_sets(draw: st.DrawFn, net: SimNetwork) -> list[int]:
    space = net.space
    rng = random.Random(draw(SEEDS, label="key_seed"))
    kind = draw(st.sampled_from(["random", "clustered", "near_nodes", "repeated"]))
    count = draw(st.integers(1, 120))
    if kind == "random":
        return [space.random_id(rng) for _ in range(count)]
    if kind == "clustered":
        # Many keys under one prefix: more next hops than 2^b at the hops inside the prefix.
        prefix_bits = draw(st.integers(0, space.bits - space.b))
        base = space.random_id(rng) >> (space.bits - prefix_bits) << (space.bits - prefix_bits)
        low = (1 << (space.bits - prefix_bits)) - 1
        return [base | (rng.getrandbits(space.bits) & low) for _ in range(count)]
    if kind == "near_nodes":
        ids = [net.nodes[rng.randrange(len(net.nodes))].id for _ in range(count)]
        return [(i + rng.choice((-1, 0, 1))) % space.size for i in ids]
    one = space.random_id(rng)
    return [one] * min(count, 5) + [space.random_id(rng) for _ in range(count // 2)]


@settings(max_examples=max(10, _BASE_EXAMPLES))
@given(n=st.integers(1, 300), seed=SEEDS, config=CONFIGS, data=st.data())
def test_every_key_is_served_once_at_its_root_with_bounded_fan_out(
    n: int, seed: int, config: PastryConfig, data: st.DataObject
) -> None:
    net = build(n, seed, config)
    oracle = net.oracle()
    keys = data.draw(key_sets(net), label="keys")
    src = data.draw(st.integers(0, n - 1), label="src")
    served, fan_out, depth = multicast(net, src, keys)
    assert sum(served.values()) == len(keys)
    for (i, node), times in served.items():
        assert times == 1
        assert node == oracle.root(keys[i]), "served away from the key's root"
    assert {i for i, _ in served} == set(range(len(keys)))
    assert fan_out <= net.space.radix
    assert depth <= MAX_HOPS


@settings(max_examples=max(5, _BASE_EXAMPLES // 3))
@given(seed=SEEDS, count=st.integers(2, 40))
def test_few_next_hops_follow_the_unicast_paths_exactly(seed: int, count: int) -> None:
    """With at most 2^b next hops per hop, every key travels its unicast path: the multicast's
    depth for a key equals the number of hops a lone message would take."""
    net = build(200, seed, PastryConfig())
    rng = random.Random(seed)
    keys = [net.space.random_id(rng) for _ in range(count)]
    index_of = net.sim.index_of
    for key in keys[:5]:
        path = [0]
        while (nh := net.nodes[path[-1]].next_hop(key)) is not None:
            path.append(index_of[nh.addr])
        todo = [(0, 0)]
        while todo:
            node, hops = todo.pop()
            plan = split(net.nodes[node], [key])
            if plan.local:
                assert node == path[-1] and hops == len(path) - 1
                break
            (group,) = plan.groups
            todo.append((index_of[group.next_hop.addr], hops + 1))
