"""A leaf that cannot split refuses pieces past what one frame can replicate
(``OverlayConfig.max_leaf_bytes``): the subscription is refused whole (its other pieces are
removed), the refusal is counted, every leaf stays within the bound, and events reach exactly
the subscriptions that were installed."""

from __future__ import annotations

import random

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rangecast.dht.errors import LocalProtocolError
from rangecast.dht.wire import MAX_FRAME_BYTES, Handle
from rangecast.pubsub.messages import Pred, StoredSub
from rangecast.pubsub.node import OverlayConfig
from rangecast.pubsub.schema import THESIS_SCHEMA
from rangecast.pubsub.subscription import Subscription, where
from rangecast.pubsub.tree import piece_bytes
from rangecast.testkit.simnet import Key, SimOverlay, brute_force

BOUND = 4096


def _near_identical(k: int) -> Subscription:
    """The same range on every attribute but Attr4, which differs a little each time (the
    identical-subscription check lets them all through)."""
    b = where(THESIS_SCHEMA).between("Attr1", 10.0, 20.0).between("Attr2", 10.0, 20.0)
    b = b.between("Attr3", 10.0, 20.0)
    return b.between("Attr4", 10.0 + k * 0.01, 190.0).build()


def test_a_full_leaf_refuses_and_the_rest_is_exact() -> None:
    # Leaves stop splitting at depth 3, so the near-identical pieces pile up in a few leaves.
    cfg = OverlayConfig(max_leaf_bytes=BOUND, max_depth=3)
    net = SimOverlay(10, 5, THESIS_SCHEMA, capacity=(2, 2), config=cfg)
    subs = {net.subscribe(k % 10, _near_identical(k)): _near_identical(k) for k in range(150)}
    net.settle()
    refused = set(net.refused)
    assert refused and net.stat("refused") > 0
    installed = {k for k in subs if net.last_event.get(k) == "installed"}
    assert installed and installed | refused == set(subs) and not installed & refused
    # Every leaf (and replica) fits the bound; nothing of a refused subscription is left.
    for p in net.peers:
        for _, node in p.overlay.tree_nodes():
            if node.index is not None:
                assert node.index.bytes <= BOUND
                assert node.index.bytes == sum(piece_bytes(s) for s in node.index)
    for key in refused:
        assert key not in net.pieces_by_key() and net.removed[key] == 1
    assert not net.leftovers
    # Events: exactly the installed subscriptions that match.
    active: dict[Key, Subscription] = {k: subs[k] for k in installed}
    rng = random.Random(1)
    published = []
    for _ in range(40):
        values = (*(rng.uniform(5.0, 25.0) for _ in range(3)), rng.uniform(0.0, 200.0))
        published.append((net.publish(rng.randrange(10), values), values))
    net.settle()
    for eid, values in published:
        want = brute_force(active, values, THESIS_SCHEMA.partial)
        got = {(i, sid) for (i, sid, e), c in net.received.items() if e == eid and c == 1}
        assert got == want
        assert all(c == 1 for (_, _, e), c in net.received.items() if e == eid)


def test_one_subscriber_cannot_crowd_a_leaf() -> None:
    """A peer (for all its clients) holds at most ``max_leaf_share`` of a leaf: after one peer
    has filled its share, another still gets in."""
    cfg = OverlayConfig(max_leaf_bytes=BOUND, max_depth=3, max_leaf_share=0.25)
    net = SimOverlay(10, 5, THESIS_SCHEMA, capacity=(2, 2), config=cfg)
    greedy = [net.subscribe(0, _near_identical(k)) for k in range(60)]
    net.settle()
    assert net.stat("refused_share") > 0 and net.stat("refused") == 0
    for p in net.peers:
        for _, node in p.overlay.tree_nodes():
            if node.index is not None:
                assert all(b <= BOUND // 4 for b in node.index.bytes_of.values())
    late = net.subscribe(1, _near_identical(1000))
    net.settle()
    assert net.last_event[late] == "installed"
    assert {net.last_event[k] for k in greedy} == {"installed", "removed"}


def test_the_default_bound_is_half_a_frame_and_checked() -> None:
    assert OverlayConfig().max_leaf_bytes == MAX_FRAME_BYTES // 2
    for bad in (0, 4095, MAX_FRAME_BYTES):
        with pytest.raises(LocalProtocolError, match="max_leaf_bytes"):
            OverlayConfig(max_leaf_bytes=bad)
    for share in (0.0, 1.5):
        with pytest.raises(LocalProtocolError, match="max_leaf_share"):
            OverlayConfig(max_leaf_share=share)


@settings(max_examples=200, deadline=None)
@given(
    addr=st.binary(min_size=0, max_size=64),
    preds=st.lists(
        st.tuples(
            st.integers(0, 255),
            st.floats(allow_nan=False, allow_infinity=False),
            st.floats(allow_nan=False, allow_infinity=False),
            st.integers(0, 3),
        ),
        max_size=12,
    ),
    ints=st.tuples(
        st.integers(0, 2**32 - 1),
        st.integers(0, 2**16 - 1),
        st.integers(0, 255),
        st.integers(0, 2**16 - 1),
        st.integers(0, 2**16 - 1),
    ),
    floats=st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=4, max_size=4),
)
def test_piece_bytes_bounds_the_encoded_size(
    addr: bytes,
    preds: list[tuple[int, float, float, int]],
    ints: tuple[int, int, int, int, int],
    floats: list[float],
) -> None:
    sid, gen, base, piece, pieces = ints
    s = StoredSub(
        Handle(bytes(20), addr), sid, gen, [Pred(*p) for p in preds], base, piece, pieces, *floats
    )
    assert len(msgspec.msgpack.encode(s)) <= piece_bytes(s)
