"""The dissemination strategies (``pubsub.dissemination``): chosen once from the configuration
when a node is built, and what each sends for one leaf's matches."""

from __future__ import annotations

import dataclasses
import random

import pytest

from rangecast.dht.messages import Direct, Ping
from rangecast.dht.node import PastryConfig, PastryNode
from rangecast.dht.routing import Peer
from rangecast.dht.wire import Message, codec_for
from rangecast.pubsub.dissemination import (
    LbddNotifier,
    MulticastNotifier,
    MulticastProbes,
    UnicastNotifier,
    UnicastProbes,
)
from rangecast.pubsub.messages import (
    DeliveryMulticast,
    Event,
    EventDelivery,
    LbddDelivery,
    Pred,
    StoredSub,
)
from rangecast.pubsub.node import EventDelivered, OverlayConfig, PubSubNode
from rangecast.pubsub.peer import OverlayPeer
from rangecast.pubsub.schema import THESIS_SCHEMA, SchemaRegistry
from rangecast.pubsub.subscription import parse_subscription

ME = b"\x0a\x00\x00\x01\x0f\xa0"


def _node(config: OverlayConfig, neighbours: int = 0) -> tuple[PastryNode, PubSubNode]:
    registry = SchemaRegistry()
    registry.add(THESIS_SCHEMA)
    rng = random.Random(3)
    dht = PastryNode(1 << 100, ME, rng, config=PastryConfig(), codec=codec_for(*OverlayPeer.TABLES))
    overlay = PubSubNode(dht, registry, capacity=4, rng=rng, config=config)
    dht.start_alone(0.0)
    for i in range(neighbours):  # peers heard from: in the leaf set
        other = Peer.make(dht.space, (1 << 100) + (i + 1) * (1 << 90), bytes([10, 0, 1, i, 0, 1]))
        dht.receive(Ping(other.handle), other.addr, 0.0)
    dht.take_messages()
    return dht, overlay


def _matches(dht: PastryNode, n: int) -> dict[bytes, list[StoredSub]]:
    """One matched piece for each of ``n`` subscribers (the leaf set's peers)."""
    by_owner: dict[bytes, list[StoredSub]] = {}
    for k, peer in enumerate(dht.leaves.members()[:n]):
        piece = StoredSub(peer.handle, k + 1, 0, [Pred(0, 0.0, 1.0, 0)], 0, 0, 1, 0, 1, 0, 1)
        by_owner[peer.addr] = [piece]
    assert len(by_owner) == n
    return by_owner


def _sent(dht: PastryNode) -> list[tuple[bytes, Message]]:
    out = []
    for addr, msg in dht.take_messages():
        assert isinstance(msg, Direct)
        out.append((addr, dht.codec.decode(msg.payload)))
    return out


@pytest.mark.parametrize(
    ("probe", "delivery", "prober", "notifier"),
    [
        ("unicast", "unicast", UnicastProbes, UnicastNotifier),
        ("multicast", "multicast", MulticastProbes, MulticastNotifier),
        ("unicast", "lbdd", UnicastProbes, LbddNotifier),
    ],
)
def test_the_strategies_are_chosen_once_when_the_node_is_built(
    probe: str, delivery: str, prober: type, notifier: type
) -> None:
    _, ov = _node(OverlayConfig(probe=probe, delivery=delivery))
    assert type(ov._prober) is prober and type(ov._notifier) is notifier
    # The parts that send keep the strategies' bound methods.
    assert ov.publisher._probe_out.__self__ is ov._prober  # type: ignore[attr-defined]
    assert ov.host._probe_out.__self__ is ov._prober  # type: ignore[attr-defined]
    assert ov.host._notify.__self__ is ov._notifier  # type: ignore[attr-defined]
    # The configuration is not read again per event: the node keeps what it chose.
    ov.cfg = dataclasses.replace(ov.cfg, probe="multicast", delivery="multicast")
    assert type(ov._prober) is prober and ov.publisher._probe_out.__self__ is ov._prober  # type: ignore[attr-defined]


def test_unicast_sends_one_event_delivery_per_subscriber() -> None:
    dht, ov = _node(OverlayConfig(), neighbours=6)
    event = Event(7, THESIS_SCHEMA.name, [0.5] * len(THESIS_SCHEMA.attributes))
    ov.host._notify(event, _matches(dht, 6), 1.0)
    sent = _sent(dht)
    assert len(sent) == 6 and all(isinstance(m, EventDelivery) for _, m in sent)
    assert len({addr for addr, _ in sent}) == 6


def test_lbdd_relays_from_enough_subscribers_and_sends_directly_below() -> None:
    dht, ov = _node(OverlayConfig(delivery="lbdd", lbdd_min_subscribers=4), neighbours=8)
    event = Event(7, THESIS_SCHEMA.name, [0.5] * len(THESIS_SCHEMA.attributes))
    ov.host._notify(event, _matches(dht, 3), 1.0)
    few = _sent(dht)
    assert len(few) == 3 and all(isinstance(m, EventDelivery) for _, m in few)
    ov.host._notify(event, _matches(dht, 8), 1.0)
    relayed = _sent(dht)
    assert relayed and all(isinstance(m, LbddDelivery) for _, m in relayed)
    assert len(relayed) < 8  # the leaf sends to the tree's top only
    # Every subscriber is reached exactly once: a recipient, or listed below one.
    reached = [addr for addr, _ in relayed]
    for _, m in relayed:
        assert isinstance(m, LbddDelivery)
        reached += [r.subscriber.addr for r in m.below]
    assert sorted(reached) == sorted(_matches(dht, 8))


def test_multicast_groups_several_subscribers_per_next_hop() -> None:
    dht, ov = _node(OverlayConfig(delivery="multicast"), neighbours=5)
    event = Event(7, THESIS_SCHEMA.name, [0.5] * len(THESIS_SCHEMA.attributes))
    ov.host._notify(event, _matches(dht, 1), 1.0)
    one = _sent(dht)
    assert len(one) == 1 and isinstance(one[0][1], EventDelivery)
    ov.host._notify(event, _matches(dht, 5), 1.0)
    grouped = _sent(dht)
    assert grouped and all(isinstance(m, DeliveryMulticast) for _, m in grouped)
    notes = [n.subscriber.addr for _, m in grouped for n in m.targets]  # type: ignore[attr-defined]
    assert sorted(notes) == sorted(_matches(dht, 5))


@pytest.mark.parametrize("probe", ["unicast", "multicast"])
def test_both_probe_strategies_find_the_same_subscriptions(probe: str) -> None:
    """Alone, a peer is the root of every tree node: either way each probe is served here."""
    dht, ov = _node(OverlayConfig(probe=probe))
    lo = [a.min for a in THESIS_SCHEMA.attributes]
    hi = [a.max for a in THESIS_SCHEMA.attributes]
    a = THESIS_SCHEMA.attributes[0]
    text = f"{a.name} between {a.min + 0.25 * (a.max - a.min)} and {a.max}"
    sid = ov.subscribe(parse_subscription(text, THESIS_SCHEMA), 0.0)
    while out := dht.take_messages():
        for _, msg in out:
            dht.receive(msg, ME, 0.0)
    ov.take_events()
    ov.publish(THESIS_SCHEMA.name, [(a + b) / 2 for a, b in zip(lo, hi, strict=True)], 1.0)
    while out := dht.take_messages():
        for _, msg in out:
            dht.receive(msg, ME, 1.0)
    delivered = [e for e in ov.take_events() if isinstance(e, EventDelivered)]
    assert [e.sids for e in delivered] == [(sid,)]
