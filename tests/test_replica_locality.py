"""Replica sets spread across address groups (``dht.locality``): one group holding the ids
closest to a key does not hold every copy of its tree node, and what it takes with it when its
peers all crash is nothing; without a locality function the replica sets are the k closest."""

from __future__ import annotations

import math
import random
from collections.abc import Hashable

import pytest

from rangecast.dht.ids import DEFAULT_SPACE
from rangecast.dht.locality import spread
from rangecast.dht.messages import DHT_TABLE
from rangecast.dht.routing import Peer
from rangecast.dht.wire import codec_for
from rangecast.pubsub.base import OverlayConfig
from rangecast.runtime.identity import ID_BYTES, PeerAddress, address_group
from rangecast.sim.churn_experiment import Churn, ChurnParams
from rangecast.sim.engine import Simulator
from rangecast.sim.latency import SyntheticLatency
from rangecast.sim.network import SimNetwork
from rangecast.sim.prefix_attack import run_prefix_attack
from rangecast.sim.streams import stream


def _peers(n: int) -> list[Peer]:
    return [Peer.make(DEFAULT_SPACE, i + 1, bytes([i + 1])) for i in range(n)]


# ------------------------------------------------------------------------------ the rule


def test_spread_keeps_root_and_heir_then_one_per_new_group_then_the_closest() -> None:
    ranked = _peers(8)
    group = {1: "a", 2: "a", 3: "a", 4: "b", 5: "a", 6: "c", 7: "b", 8: "a"}

    def of(p: Peer) -> Hashable:
        return group[p.id]

    # Root and heir whatever their groups, then b and c (the closest of each), in rank order.
    assert [p.id for p in spread(ranked, 4, of)] == [1, 2, 4, 6]
    # The groups run out: the closest of the others fill the set.
    assert [p.id for p in spread(ranked, 6, of)] == [1, 2, 3, 4, 5, 6]
    # Nothing to choose: the k closest.
    assert [p.id for p in spread(ranked, 2, of)] == [1, 2]
    assert [p.id for p in spread(ranked[:3], 5, of)] == [1, 2, 3]
    assert spread(ranked, 0, of) == []
    # One group only: the k closest, as without a locality function.
    assert [p.id for p in spread(ranked, 5, lambda p: "x")] == [1, 2, 3, 4, 5]


def test_the_runtime_groups_ipv4_by_24_and_ipv6_by_48() -> None:
    nid = bytes(ID_BYTES)

    def g(host: str, port: int = 4000) -> bytes:
        return address_group(PeerAddress(nid, host, port).to_bytes())

    assert g("10.1.2.3") == g("10.1.2.200", 5000)
    assert g("10.1.2.3") != g("10.1.3.3")
    assert g("127.0.1.1") != g("127.0.2.1")
    assert g("2001:db8:1:ffff::1") == g("2001:db8:1:0::2")
    assert g("2001:db8:1::1") != g("2001:db8:2::1")
    # Never raises: an address of another shape is a group of its own.
    assert address_group(b"odd") == b"odd"


# ------------------------------------------------------------------- on a Pastry overlay


def _net(n: int, seed: int) -> SimNetwork:
    sim = Simulator(
        SyntheticLatency(seed, sites=64), stream(seed, "network"), codec=codec_for(DHT_TABLE)
    )
    net = SimNetwork(sim, seed)
    net.oracle_bootstrap(net.create(n))
    return net


@pytest.mark.parametrize("k", [3, 9])
def test_a_group_holding_the_k_closest_ids_does_not_hold_the_whole_replica_set(k: int) -> None:
    net = _net(120, 3)
    space = net.space
    rng = random.Random(5)
    oracle = net.oracle()
    for _ in range(20):
        key = rng.getrandbits(space.bits)
        root = net.nodes[oracle.root(key)]
        closest = sorted(net.nodes, key=lambda nd: (space.distance(nd.id, key), nd.id))
        attacker = {nd.id for nd in closest[:k]}  # the attacker's ids: the k closest to key

        def group(p: Peer, attacker: set[int] = attacker) -> Hashable:
            return "attacker" if p.id in attacker else p.id

        # Without a locality function: the k closest, every one the attacker's.
        assert root.locality is None
        plain = root.replica_set(key, k)
        assert [p.id for p in plain] == [nd.id for nd in closest[:k]]
        root.locality = group
        rs = root.replica_set(key, k)
        root.locality = None
        assert len(rs) == k
        assert [p.id for p in rs[:2]] == [closest[0].id, closest[1].id]  # root, heir
        honest = [p for p in rs if p.id not in attacker]
        assert len(honest) == k - 2  # one per group: every other copy is honest


# ------------------------------------------------------- the attacker's prefix crashes whole


def test_without_spread_the_attackers_prefix_holds_whole_tree_nodes_and_takes_them_along() -> None:
    # Refresh off: what replication alone keeps (the subscribers' refresh would re-install).
    r = run_prefix_attack(
        nodes=120, spread=False, events=60, seed=4, overlay=OverlayConfig(refresh_s=math.inf)
    )
    assert r["captured"] > 0
    assert r["subscriptions_lost"] > 0
    assert r["missed"] > 0


@pytest.mark.parametrize("seed", [1, 4])
def test_with_spread_no_tree_node_is_the_attackers_alone_and_its_crash_loses_nothing(
    seed: int,
) -> None:
    r = run_prefix_attack(
        nodes=120,
        spread=True,
        events=60,
        seed=seed,
        repair_s=120.0,
        overlay=OverlayConfig(refresh_s=math.inf),
    )
    assert r["attackers"] >= 0.15 * 120
    assert r["captured"] == 0
    assert r["promoted"] > 0  # honest copies took over
    assert r["subscriptions_lost"] == 0
    assert (r["missed"], r["duplicates"], r["false_positives"]) == (0, 0, 0)
    assert r["deliveries"] > 0


def test_kademlia_spreads_too() -> None:
    r = run_prefix_attack(
        nodes=100,
        dht="kademlia",
        spread=True,
        events=40,
        seed=2,
        repair_s=120.0,
        overlay=OverlayConfig(refresh_s=math.inf),
    )
    assert r["captured"] == 0
    assert r["subscriptions_lost"] == 0


# ------------------------------------------- the usual churn, with replica sets spread


class _SpreadChurn(Churn):
    """``rangecast sim churn`` with every peer (joiners too) in one of five address groups."""

    def bootstrap(self) -> None:
        super().bootstrap()
        for peer in self.peers:
            peer.dht.locality = _five_groups


def _five_groups(peer: Peer) -> Hashable:
    return peer.id % 5


@pytest.mark.parametrize(
    ("fail", "joins", "dht"), [(0.2, 0, "pastry"), (0.0, 50, "pastry"), (0.2, 0, "kademlia")]
)
def test_spread_replica_sets_survive_a_mass_crash_and_hand_off_to_joiners(
    fail: float, joins: int, dht: str
) -> None:
    r = _SpreadChurn.run_json(
        ChurnParams(nodes=200, events=200, fail_fraction=fail, joins=joins, replicas=3, seed=5,
                    dht=dht)
    )  # fmt: skip
    assert r["subscriptions_lost"] == 0
    assert r["delivery_recall"] == 1.0
    assert r["duplicates"] == r["false_positives"] == 0
    if joins:
        assert r["joins_completed"] == joins
        assert r["overlay"]["handed_off"] > 0
    else:
        assert r["overlay"]["promoted"] > 0
