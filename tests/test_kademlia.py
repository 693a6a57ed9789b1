"""The Kademlia substrate: its k-bucket table against brute force, routing to the XOR root in
both lookup modes (oracle and join bootstrap, with crashes), strict input handling, and the
overlay running on it with every delivery checked by the oracle."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dht.errors import LocalProtocolError
from dht.ids import IdSpace
from dht.kademlia import BucketTable, KademliaConfig, KademliaNode
from dht.messages import FindNode, FoundNodes
from dht.node import Application, State
from dht.routing import Peer
from dht.wire import Handle, codec
from sim.overlay import Oracle, dht_config
from sim.route_experiment import WALL_FIELDS, RouteParams, run_route
from sim.thesis_experiment import ThesisParams, run_thesis

SPACE = IdSpace(bits=32, b=4)
ids32 = st.integers(min_value=0, max_value=(1 << 32) - 1)


def _peer(i: int) -> Peer:
    return Peer.make(SPACE, i, i.to_bytes(4, "big") + b"a")


@given(own=ids32, others=st.sets(ids32, max_size=60), key=ids32, n=st.integers(1, 30))
@settings(max_examples=300, deadline=None)
def test_bucket_table_closest_and_nearest_agree_with_brute_force(
    own: int, others: set[int], key: int, n: int
) -> None:
    others.discard(own)
    table = BucketTable(SPACE, own, k=64)  # no bucket overflows: every contact is kept
    for x in others:
        assert table.add(_peer(x))
    want = sorted(others, key=lambda x: x ^ key)
    assert [p.id for p in table.closest(key, n)] == want[:n]
    best = want[0] if want and (want[0] ^ key) < (own ^ key) else None
    got = table.nearest(key)
    assert (got.id if got else None) == best


@given(own=ids32, others=st.lists(ids32, min_size=1, max_size=80, unique=True))
@settings(max_examples=100, deadline=None)
def test_a_full_bucket_keeps_k_and_promotes_a_replacement_when_one_goes(
    own: int, others: list[int]
) -> None:
    others = [x for x in others if x != own]
    table = BucketTable(SPACE, own, k=3)
    for x in others:
        table.add(_peer(x))
    per_bucket: dict[int, list[int]] = {}
    for x in others:
        per_bucket.setdefault(table.index(x), []).append(x)
    for i, members in per_bucket.items():
        assert len(table.buckets[i]) == min(3, len(members))
        if len(members) > 3:
            gone = next(iter(table.buckets[i].nodes.values())).long_id
            assert table.remove(gone)
            assert len(table.buckets[i]) == 3  # the newest replacement took its place
            assert gone not in table


@given(members=st.sets(ids32, min_size=1, max_size=50), key=ids32)
@settings(max_examples=300, deadline=None)
def test_the_xor_oracle_finds_the_xor_closest_member(members: set[int], key: int) -> None:
    oracle = Oracle(SPACE, [(m, m) for m in members], xor=True)
    assert oracle.root(key) == min(members, key=lambda m: m ^ key)


@pytest.mark.parametrize("lookup", ["iterative", "recursive"])
def test_every_lookup_reaches_the_xor_root(lookup: str) -> None:
    r = run_route(RouteParams(nodes=400, lookups=600, dht="kademlia", lookup=lookup))
    assert r["correct_root_fraction"] == 1.0
    assert r["duplicate_deliveries"] == 0
    assert 1.0 <= r["mean_hops"] <= 4.0


def test_joins_build_buckets_that_route_correctly_and_know_their_siblings() -> None:
    r = run_route(
        RouteParams(nodes=150, lookups=300, bootstrap="join", dht="kademlia", lookup="recursive")
    )
    assert r["join"]["completed"] == 150
    assert r["join"]["leafset_mismatches"] == 0  # every sibling list equals the oracle's
    assert r["correct_root_fraction"] == 1.0


@pytest.mark.parametrize("lookup", ["iterative", "recursive"])
def test_lookups_route_around_crashed_nodes(lookup: str) -> None:
    r = run_route(
        RouteParams(nodes=300, lookups=400, fail=0.2, repair_s=30.0, dht="kademlia", lookup=lookup)
    )
    assert r["failed_nodes"] == 60
    assert r["correct_root_fraction"] == 1.0


def test_the_same_seed_gives_the_same_run() -> None:
    params = RouteParams(nodes=200, lookups=200, dht="kademlia", fail=0.1, repair_s=20.0)
    a, b = run_route(params), run_route(params)
    for f in WALL_FIELDS:
        a.pop(f)
        b.pop(f)
    assert a == b


def test_bad_options_are_refused_with_a_clear_error() -> None:
    with pytest.raises(LocalProtocolError, match="--dht must be one of"):
        dht_config("chord")
    with pytest.raises(LocalProtocolError, match="kademlia only"):
        dht_config("pastry", lookup="recursive")
    with pytest.raises(LocalProtocolError, match="lookup must be one of"):
        KademliaConfig(lookup="flood")
    with pytest.raises(LocalProtocolError, match="k, alpha and siblings"):
        KademliaConfig(alpha=0)


def test_forged_and_malformed_lookup_messages_are_counted_not_raised() -> None:
    space = IdSpace()
    node = KademliaNode(5, b"me", random.Random(1), app=Application())
    node.start_alone(0.0)
    good = Handle(space.to_bytes(7), b"there")
    # Wrong id length, a sender field naming another address, an unknown lookup.
    node.receive(FindNode(1, Handle(b"short", b"x"), space.to_bytes(9)), b"x", 0.0)
    node.receive(FindNode(1, good, space.to_bytes(9)), b"elsewhere", 0.0)
    node.receive(FoundNodes(2, good, [Handle(b"bad", b"y")]), b"there", 0.0)
    node.receive_frame(b"\xff\x00garbage", b"there", 0.0)
    assert node.stats.malformed == 3
    node.receive(FoundNodes(3, good, []), b"there", 0.0)  # an answer to nothing: ignored
    assert node.state is State.READY
    assert [p.id for p in node.known_peers()] == [7]  # the one genuine sender
    frame = codec().encode(FoundNodes(4, good, [good] * 3))
    assert isinstance(codec().decode(frame), FoundNodes)


@pytest.mark.parametrize(
    ("lookup", "probe", "delivery"),
    [
        ("iterative", "unicast", "unicast"),
        ("recursive", "multicast", "multicast"),
        ("iterative", "multicast", "lbdd"),
    ],
)
def test_the_overlay_on_kademlia_delivers_exactly_what_the_oracle_expects(
    lookup: str, probe: str, delivery: str
) -> None:
    from pubsub.node import OverlayConfig

    r = run_thesis(
        ThesisParams(
            nodes=120,
            subs_per_node=3.0,
            events=150,
            seed=4,
            dht="kademlia",
            lookup=lookup,
            overlay=OverlayConfig(probe=probe, delivery=delivery),
        )
    )
    assert r["expected_deliveries"] > 500
    assert (r["missed"], r["duplicates"], r["false_positives"]) == (0, 0, 0)
    assert r["dht"] == "kademlia"
    if lookup == "iterative":
        assert r["dht_totals"]["queries"] > 0
