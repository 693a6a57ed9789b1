"""The substrate registry: names, node construction and the converged neighbour sets."""

from __future__ import annotations

import random

import pytest

from rangecast.dht.errors import LocalProtocolError
from rangecast.dht.kademlia import KademliaConfig, KademliaNode
from rangecast.dht.messages import DHT_TABLE
from rangecast.dht.node import PastryConfig, PastryNode
from rangecast.dht.substrate import DHTS, SUBSTRATES, DhtConfig, make_dht, substrate, substrate_of
from rangecast.dht.wire import codec_for


def test_names_default_first() -> None:
    assert DHTS == ("pastry", "kademlia")
    assert [s.name for s in SUBSTRATES.values()] == list(DHTS)


@pytest.mark.parametrize(
    ("name", "node_type", "config"),
    [("pastry", PastryNode, PastryConfig()), ("kademlia", KademliaNode, KademliaConfig(k=4))],
)
def test_make_dht_builds_the_named_node(name: str, node_type: type, config: DhtConfig) -> None:
    node = make_dht(name, 5, b"addr", random.Random(1), config=config, codec=codec_for(DHT_TABLE))
    assert type(node) is node_type
    assert node.cfg is config
    assert substrate_of(node.cfg) is substrate(name)
    assert (
        type(make_dht(name, 5, b"addr", random.Random(1), codec=codec_for(DHT_TABLE))) is node_type
    )


def test_wrong_names_and_configs_are_refused() -> None:
    with pytest.raises(LocalProtocolError, match="dht must be one of pastry, kademlia"):
        substrate("chord")
    with pytest.raises(LocalProtocolError, match="needs a PastryConfig"):
        make_dht(
            "pastry",
            5,
            b"addr",
            random.Random(1),
            config=KademliaConfig(),
            codec=codec_for(DHT_TABLE),
        )


def test_lookup_modes_only_on_kademlia() -> None:
    assert not substrate("pastry").has_lookup and substrate("kademlia").has_lookup
    with pytest.raises(LocalProtocolError, match="--lookup applies to --dht kademlia only"):
        substrate("pastry").config(lookup="recursive")
    cfg = substrate("kademlia").config(lookup="recursive", root_cache=0, hop_acks=False)
    assert isinstance(cfg, KademliaConfig)
    assert (cfg.lookup, cfg.root_cache, cfg.hop_acks) == ("recursive", 0, False)


def test_pastry_neighbours_are_the_ring_neighbours() -> None:
    ids = [10, 20, 30, 40, 50, 60]
    spec, cfg = substrate("pastry"), PastryConfig(leaf_set_size=4)
    assert spec.expected_neighbours(ids, 10, cfg) == [20, 30, 60, 50]
    assert spec.neighbours_match([60, 50, 30, 20], ids, 10, cfg)  # order does not matter
    assert not spec.neighbours_match([20, 30, 60], ids, 10, cfg)
    # Fewer members than the leaf set holds: everyone else, once.
    assert sorted(spec.expected_neighbours([1, 2, 3], 2, cfg)) == [1, 1, 3, 3]
    assert spec.neighbours_match([1, 3], [1, 2, 3], 2, cfg)


def test_kademlia_neighbours_are_the_xor_closest_in_order() -> None:
    ids = [0b0001, 0b0010, 0b0100, 0b1000, 0b0011]
    spec, cfg = substrate("kademlia"), KademliaConfig(siblings=2, k=3)
    assert spec.expected_neighbours(ids, 0b0001, cfg) == [0b0011, 0b0010]
    assert spec.neighbours_match([0b0011, 0b0010], ids, 0b0001, cfg)
    assert not spec.neighbours_match([0b0010, 0b0011], ids, 0b0001, cfg)
    # With at most k other members, the k-buckets hold every one of them.
    assert not spec.table_settled(4, 2, cfg) and spec.table_settled(4, 3, cfg)
    assert spec.table_settled(5, 1, cfg)
    assert substrate("pastry").table_settled(4, 0, PastryConfig())
