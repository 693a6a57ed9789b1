"""The overlay core under re-entrant upcalls (issue 14, item 15): a leaf-set change promotes
replicas, and a promotion releases parked probes whose handling, routed through this very peer,
promotes other replicas in turn. The reconcile that started it all must cope with the set of
replicas changing under it (it used to raise ``KeyError`` in ``_promote`` and crash the peer),
and subscriptions whose install never completes must not leave pieces behind."""

from __future__ import annotations

import random

from rangecast.dht.core import Application
from rangecast.dht.node import PastryConfig, PastryNode
from rangecast.dht.wire import Handle, codec_for
from rangecast.pubsub.messages import OP_INSERT, Pred, ProbeSub, Ref, StoredSub
from rangecast.pubsub.node import PubSubNode
from rangecast.pubsub.peer import OverlayPeer
from rangecast.pubsub.schema import THESIS_SCHEMA, SchemaRegistry
from rangecast.pubsub.tree import TreeNode

ADDR = b"\x0a\x00\x00\x01\x0f\xa0"


def _alone() -> tuple[PastryNode, PubSubNode]:
    registry = SchemaRegistry()
    registry.add(THESIS_SCHEMA)
    rng = random.Random(3)
    dht = PastryNode(12345, ADDR, rng, config=PastryConfig(), codec=codec_for(*OverlayPeer.TABLES))
    overlay = PubSubNode(dht, registry, capacity=4, rng=rng)
    dht.start_alone(0.0)  # alone: this peer is the root of every key
    return dht, overlay


def _loop_back(dht: PastryNode, now: float) -> None:
    """Deliver what the peer sent itself (acknowledgements to its own subscriptions), as a
    driver does."""
    while out := dht.take_messages():
        for dst, msg in out:
            assert dst == ADDR
            dht.receive(msg, ADDR, now)


def test_reconcile_survives_promotions_made_by_the_probes_it_releases() -> None:
    dht, ov = _alone()
    schema = THESIS_SCHEMA.name
    space = ov._space(schema, 0)
    root = space.root
    x, y = space.min + 1.0, space.min + 2.0  # a narrow range near the bottom
    child = space.child_for(root, x, y)
    # Replicas of an internal node and of the leaf below it, whose primary (another peer)
    # has just failed; a probe for the internal node waits here for it (it was parked).
    parent = TreeNode(root)
    parent.become_internal()
    ov.replicas[(schema, root)] = parent
    ov.replicas[(schema, child)] = TreeNode(child)
    piece = StoredSub(dht.me.handle, 7, 0, [Pred(0, x, y, 0)], 0, 0, 1, x, y, x, y)
    probe = ProbeSub(OP_INSERT, Ref(schema, 0, root.depth, root.path), True, 0, piece)
    ov._parked[(schema, root)] = [(probe, 10.0)]

    # The leaf-set change (an ack timeout declared the primary failed).
    ov.replication._reconcile(1.0)

    assert not ov.replicas
    assert set(ov.nodes) == {(schema, root), (schema, child)}
    leaf = ov.nodes[(schema, child)]
    assert leaf.index is not None and [s.sid for s in leaf.index] == [7]
    assert ov.stats.promoted == 2


def test_an_install_whose_probe_was_lost_and_then_abandoned_leaves_no_piece() -> None:
    """A subscription of several pieces loses one probe on the way; its client goes away
    (unsubscribe while installing). The periodic refresh re-sends the missing piece, the
    install completes, the removal asked for meanwhile follows, and nothing stays stored.
    Before, only active subscriptions were refreshed: the stored pieces stayed for ever."""
    from rangecast.pubsub.messages import ProbeSub as _Probe
    from rangecast.pubsub.node import OverlayConfig, SubscriptionRemoved
    from rangecast.pubsub.subscription import parse_subscription

    registry = SchemaRegistry()
    registry.add(THESIS_SCHEMA)
    rng = random.Random(5)
    dht = PastryNode(12345, ADDR, rng, config=PastryConfig(), codec=codec_for(*OverlayPeer.TABLES))
    ov = PubSubNode(dht, registry, capacity=100, rng=rng, config=OverlayConfig(load_balancing=True))
    dht.start_alone(0.0)
    lost: list[object] = []

    class Lossy(Application):
        """Between the DHT node and the overlay: the first probe never arrives."""

        def deliver(self, key: int, payload: bytes, origin: Handle, hops: int, now: float) -> None:
            if not lost and isinstance(msg := dht.codec.decode(payload), _Probe):
                lost.append(msg)
                return
            ov.deliver(key, payload, origin, hops, now)

        def receive_direct(self, payload: bytes, sender: Handle, now: float) -> None:
            ov.receive_direct(payload, sender, now)

    dht.app = Lossy()
    a = THESIS_SCHEMA.attributes[0]
    wide = f"{a.name} between {a.min} and {a.max}"  # wider than the cut-off: several pieces
    sid = ov.subscribe(parse_subscription(wide, THESIS_SCHEMA), 0.0)
    _loop_back(dht, 0.0)
    assert lost and len(ov._subs[sid].pieces) > 1
    stored = [s for _, n in ov.tree_nodes() if n.index is not None for s in n.index]
    assert stored  # the other pieces arrived
    assert ov._subs[sid].state == "installing"
    ov.unsubscribe(sid, 1.0)  # the client went away before the install completed

    t = 1.0
    while ov.get_timer() is not None and t < 200.0:
        t = max(t, ov.get_timer() or t)
        ov.handle_timer(t)
        _loop_back(dht, t)
        if sid not in ov._subs:
            break
    assert sid not in ov._subs
    assert any(isinstance(e, SubscriptionRemoved) and e.sid == sid for e in ov.take_events())
    left = [s for _, n in ov.tree_nodes() if n.index is not None for s in n.index]
    assert left == []
    assert ov.stats.retries >= 1
