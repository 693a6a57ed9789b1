"""The Kademlia substrate: its k-bucket table against brute force, routing to the XOR root in
both lookup modes (oracle and join bootstrap, with crashes), strict input handling, and the
overlay running on it with every delivery checked by the oracle."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rangecast.dht.errors import LocalProtocolError
from rangecast.dht.ids import IdSpace
from rangecast.dht.kademlia import BucketTable, KademliaConfig, KademliaNode
from rangecast.dht.messages import DHT_TABLE, FindNode, FoundNodes
from rangecast.dht.node import Application, State
from rangecast.dht.routing import Peer
from rangecast.dht.wire import Handle, codec_for
from rangecast.sim.network import RootOracle, dht_config
from rangecast.sim.route_experiment import WALL_FIELDS, RouteParams, run_route
from rangecast.sim.thesis_experiment import ThesisParams, run_thesis

SPACE = IdSpace(bits=32, b=4)
ids32 = st.integers(min_value=0, max_value=(1 << 32) - 1)

CODEC = codec_for(DHT_TABLE)


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
    oracle = RootOracle(SPACE, [(m, m) for m in members], xor=True)
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
    node = KademliaNode(5, b"me", random.Random(1), app=Application(), codec=CODEC)
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
    frame = CODEC.encode(FoundNodes(4, good, [good] * 3))
    assert isinstance(CODEC.decode(frame), FoundNodes)


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
    from rangecast.pubsub.node import OverlayConfig

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
        # The overlay routes to its tree nodes again and again: most messages skip the lookup.
        assert r["dht_totals"]["root_cache_hits"] > r["dht_totals"]["lookups"]


class _Net:
    """A few ``KademliaNode``s wired by hand: messages are handed over in order, timers fire
    when ``expire`` moves the clock past them; a crashed node's messages vanish."""

    def __init__(self, ids: list[int], cfg: KademliaConfig) -> None:
        self.cfg = cfg
        self.now = 0.0
        self.nodes: dict[bytes, KademliaNode] = {}
        self.got: list[tuple[int, int]] = []  # (key, id of the node that delivered it)
        peers = [_peer(i) for i in ids]
        for p in peers:
            self.nodes[p.addr] = self._make(p)
        for p in peers:
            self.nodes[p.addr].install_state([q for q in peers if q.id != p.id], 0.0)

    def _make(self, p: Peer) -> KademliaNode:
        net = self

        class App(Application):
            def deliver(
                self, key: int, payload: bytes, origin: Peer, hops: int, now: float
            ) -> None:
                net.got.append((key, p.id))

        return KademliaNode(
            p.id, p.addr, random.Random(p.id), config=self.cfg, app=App(), codec=CODEC
        )

    def pump(self) -> int:
        """Deliver every message until the network is quiet; how many ``FindNode`` were sent."""
        queries = 0
        moved = True
        while moved:
            moved = False
            for addr, node in list(self.nodes.items()):
                for dst, msg in node.take_messages():
                    moved = True
                    queries += isinstance(msg, FindNode)
                    if dst in self.nodes:
                        self.nodes[dst].receive(msg, addr, self.now)
        return queries

    def expire(self) -> None:
        self.now += 100.0
        for node in self.nodes.values():
            node.handle_timer(self.now)

    def live_root(self, key: int) -> int:
        return min((n.id for n in self.nodes.values()), key=lambda i: i ^ key)


def test_a_cached_root_is_used_and_dropped_when_a_closer_node_joins_or_it_crashes() -> None:
    rng = random.Random(3)
    ids = rng.sample(range(1, 1 << 32), 40)
    key = rng.getrandbits(32)
    net = _Net(ids, KademliaConfig(space=SPACE, keepalive_s=math.inf))
    origin = next(n for n in net.nodes.values() if n.next_hop(key) is not None)
    root = net.live_root(key)
    origin.route(key, b"1", net.now)
    assert net.pump() > 0  # the first message needs a lookup
    origin.route(key, b"2", net.now)
    assert net.pump() == 0  # the second goes straight to the root found
    assert origin.stats.root_cache_hits == 1
    assert net.got == [(key, root), (key, root)]

    # A node closer to the key joins: the cached root knows it and sends the message on.
    newcomer = _peer(key ^ 1 if key ^ 1 != root else key)
    net.nodes[newcomer.addr] = node = net._make(newcomer)
    node.join(next(iter(net.nodes)), net.now)
    net.pump()
    origin.route(key, b"3", net.now)
    net.pump()
    assert net.got[-1] == (key, newcomer.id) and net.live_root(key) == newcomer.id

    # It crashes: the missed hop ack drops the entry; the message is re-routed to the old root.
    del net.nodes[newcomer.addr]
    origin.route(key, b"4", net.now)
    net.pump()
    for _ in range(3):
        net.expire()
        net.pump()
    assert net.got[-1] == (key, root)
    assert all(p.id != newcomer.id for p, _ in origin._roots.values())


def test_without_the_root_cache_every_routed_message_runs_a_lookup() -> None:
    rng = random.Random(3)
    net = _Net(rng.sample(range(1, 1 << 32), 40), KademliaConfig(space=SPACE, root_cache=0))
    key = rng.getrandbits(32)
    origin = next(n for n in net.nodes.values() if n.next_hop(key) is not None)
    for i in range(3):
        origin.route(key, bytes([i]), net.now)
        assert net.pump() > 0
    assert origin.stats.root_cache_hits == 0 and origin.stats.lookups == 3
    assert net.got == [(key, net.live_root(key))] * 3
    with pytest.raises(LocalProtocolError, match="root_cache"):
        KademliaConfig(root_cache=-1)


def test_the_root_cache_is_a_command_line_switch() -> None:
    cmd = [
        sys.executable,
        "-m",
        "rangecast.cli.main",
        "sim",
        "route",
        "--nodes",
        "60",
        "--lookups",
        "60",
    ]
    cmd += ["--dht", "kademlia", "--json", "--quiet"]
    for n in ("0", "16"):
        run = subprocess.run([*cmd, "--root-cache", n], capture_output=True, text=True, check=False)
        assert run.returncode == 0, run.stderr
        r = json.loads(run.stdout)
        assert (r["root_cache"], r["correct_root_fraction"]) == (int(n), 1.0)
    bad = subprocess.run([*cmd, "--root-cache", "-1"], capture_output=True, text=True, check=False)
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and "--root-cache must be >= 0" in bad.stderr
