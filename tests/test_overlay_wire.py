"""The content-based overlay's wire messages (``pubsub.messages``, tags 64-95): round trips,
strict decoding of garbage, and the overlay core's handling of malformed or inconsistent payloads
from the network (counted in ``overlay.stats.malformed`` and dropped, never raised)."""

from __future__ import annotations

import math
from typing import Any

import msgspec
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from overlay_harness import Net

import rangecast.pubsub.messages
from rangecast.dht.errors import LocalProtocolError, WireError
from rangecast.dht.messages import Direct, Ping, Route
from rangecast.dht.wire import WIRE_VERSION, Handle, Message, codec_for
from rangecast.pubsub.messages import (
    OP_INSERT,
    OP_REMOVE,
    PUBSUB_TABLE,
    DeliveryMulticast,
    Event,
    EventDelivery,
    InstallAck,
    LbddDelivery,
    LeafUpdate,
    Notify,
    Pred,
    ProbePub,
    ProbePubMulticast,
    ProbeSub,
    ProbeTarget,
    Ref,
    Relay,
    StoredSub,
    TransferSub,
)
from rangecast.pubsub.peer import OverlayPeer
from rangecast.pubsub.schema import THESIS_SCHEMA
from rangecast.pubsub.space import TreeId
from rangecast.pubsub.subscription import where

#: The pub/sub stack's codec, as its builder makes it.
CODEC = codec_for(*OverlayPeer.TABLES)
encode = CODEC.encode
decode = CODEC.decode
_BASE_EXAMPLES = settings().max_examples
PUBSUB_TYPES = [
    ProbeSub,
    InstallAck,
    LeafUpdate,
    TransferSub,
    ProbePub,
    EventDelivery,
    ProbePubMulticast,
    LbddDelivery,
    DeliveryMulticast,
]

# ------------------------------------------------------------------------------ strategies

u8 = st.integers(0, 255)
u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFFFFFF)
u63 = st.integers(0, (1 << 63) - 1)
depths = st.integers(0, 62)
finite = st.floats(allow_nan=False, allow_infinity=False)
names = st.one_of(st.just("thesis"), st.text(min_size=1, max_size=64))
handles = st.builds(Handle, st.binary(min_size=20, max_size=20), st.binary(min_size=6, max_size=6))
refs = st.builds(Ref, names, u8, depths, u63)
preds = st.builds(Pred, u8, finite, finite, u8)
stored_subs = st.builds(
    StoredSub,
    handles,
    u32,
    u16,
    st.lists(preds, max_size=4),
    u8,
    u16,
    u16,
    finite,
    finite,
    finite,
    finite,
)
events = st.builds(Event, u63, names, st.lists(st.one_of(st.none(), finite), max_size=6))

STRATEGIES: dict[type[Message], st.SearchStrategy[Any]] = {
    ProbeSub: st.builds(
        ProbeSub, st.sampled_from([OP_INSERT, OP_REMOVE]), refs, st.booleans(), u8, stored_subs
    ),
    InstallAck: st.builds(InstallAck, u8, u32, u16, u16, st.booleans()),
    LeafUpdate: st.builds(LeafUpdate, refs, depths),
    TransferSub: st.builds(
        TransferSub, refs, st.lists(stored_subs, max_size=4), st.lists(u63, max_size=4)
    ),
    ProbePub: st.builds(ProbePub, events, refs, depths, u63, st.booleans(), u8),
    EventDelivery: st.builds(EventDelivery, events, st.lists(u32, max_size=6)),
    ProbePubMulticast: st.builds(
        ProbePubMulticast,
        events,
        u8,
        st.lists(
            st.builds(ProbeTarget, u8, depths, u63, st.booleans(), u8, depths, u63),
            min_size=1,
            max_size=4,
        ),
    ),
    DeliveryMulticast: st.builds(
        DeliveryMulticast,
        events,
        u8,
        st.lists(st.builds(Notify, handles, st.lists(u32, max_size=3)), min_size=1, max_size=4),
    ),
    LbddDelivery: st.builds(
        LbddDelivery,
        events,
        st.lists(u32, max_size=4),
        st.lists(
            st.builds(Relay, handles, st.lists(u32, max_size=3), st.integers(-1, 0xFFFF)),
            max_size=4,
        ),
    ),
}
any_pubsub = st.one_of(list(STRATEGIES.values()))


def decodes_or_wire_error(frame: bytes) -> Message | None:
    try:
        msg = decode(frame)
    except Exception as exc:  # every exception type must be a WireError
        assert isinstance(exc, WireError), f"{type(exc).__name__} escaped decode: {exc}"
        return None
    frame = encode(msg)  # (compared as bytes: a flipped bit can make a NaN)
    assert encode(decode(frame)) == frame
    return msg


# ------------------------------------------------------------------------------ the codec


def test_overlay_messages_are_in_the_pubsub_table_and_range() -> None:
    reg = CODEC.types
    assert PUBSUB_TABLE.tags == range(64, 96)
    assert set(PUBSUB_TYPES) <= set(PUBSUB_TABLE.types)
    for cls in PUBSUB_TYPES:
        tag = cls.__struct_config__.tag
        assert 64 <= tag <= 127
        assert reg[tag] is cls
        assert cls.kind == cls.__name__
    assert rangecast.pubsub.messages.OP_INSERT != rangecast.pubsub.messages.OP_REMOVE


@pytest.mark.parametrize("cls", PUBSUB_TYPES, ids=lambda c: c.__name__)
@given(data=st.data())
def test_round_trip_every_overlay_message(cls: type[Message], data: st.DataObject) -> None:
    msg = data.draw(STRATEGIES[cls], label="msg")
    frame = encode(msg)
    assert frame[0] == WIRE_VERSION
    assert CODEC.size(msg) == len(frame)
    back = decode(frame)
    assert type(back) is cls and back == msg
    # Carried as a routed or direct payload, as the overlay sends it.
    h = Handle(b"\x01" * 20, b"\x02" * 6)
    assert decode(decode(encode(Route(1, b"\x03" * 20, h, 1, frame))).payload) == msg
    assert decode(decode(encode(Direct(h, frame))).payload) == msg


@settings(max_examples=max(5, _BASE_EXAMPLES // 3))
@given(msg=any_pubsub)
def test_every_truncation_of_an_overlay_frame_raises_wire_error(msg: Message) -> None:
    frame = encode(msg)
    for n in range(len(frame)):
        with pytest.raises(WireError):
            decode(frame[:n])


@given(msg=any_pubsub, extra=st.binary(min_size=1, max_size=8))
def test_trailing_bytes_after_an_overlay_frame_raise_wire_error(msg: Message, extra: bytes) -> None:
    with pytest.raises(WireError):
        decode(encode(msg) + extra)


@given(data=st.data(), msg=any_pubsub)
def test_flipped_bytes_in_an_overlay_frame_decode_or_raise_wire_error(
    data: st.DataObject, msg: Message
) -> None:
    frame = bytearray(encode(msg))
    for _ in range(data.draw(st.integers(1, 3), label="flips")):
        pos = data.draw(st.integers(0, len(frame) - 1), label="pos")
        frame[pos] ^= data.draw(st.integers(1, 255), label="xor")
    decodes_or_wire_error(bytes(frame))


msgpack_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=8)
    | st.binary(max_size=24),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=20,
)


@given(data=st.data(), msg=any_pubsub)
def test_an_overlay_message_with_a_field_replaced_decodes_or_raises_wire_error(
    data: st.DataObject, msg: Message
) -> None:
    fields = msgspec.msgpack.decode(encode(msg)[1:])
    pos = data.draw(st.integers(0, len(fields) - 1), label="pos")
    fields[pos] = data.draw(msgpack_values, label="value")
    decodes_or_wire_error(bytes([WIRE_VERSION]) + msgspec.msgpack.encode(fields))


@given(body=st.binary(max_size=200), tag=st.sampled_from([64, 65, 66, 67, 68, 69]))
def test_garbage_behind_an_overlay_tag_raises_only_wire_error(body: bytes, tag: int) -> None:
    decodes_or_wire_error(bytes([WIRE_VERSION, 0x90 + min(15, len(body) % 16), tag]) + body)


@pytest.mark.parametrize(
    "msg",
    [
        [64, 2, ["thesis", 0, 0, 0], False, 0, None],  # sub missing
        [66, ["thesis", 0, 63, 0], 0],  # depth beyond 62
        [66, ["", 0, 1, 0], 0],  # empty schema name
        [66, ["x" * 65, 0, 1, 0], 0],  # schema name too long
        [65, 0, 2**32, 0, 0, True],  # sid beyond u32
        [69, [1, "thesis", ["a"]], []],  # a value that is no number
        [68, [-1, "thesis", []], ["thesis", 0, 0, 0], 0, 0, False, 0],  # negative eid
    ],
)
def test_out_of_range_fields_raise_wire_error(msg: list[Any]) -> None:
    with pytest.raises(WireError):
        decode(bytes([WIRE_VERSION]) + msgspec.msgpack.encode(msg))


# ------------------------------------------------------------- malformed input to a peer


def fresh_net() -> Net:
    """Eight peers with a few subscriptions installed (so that trees exist and have split)."""
    net = Net(8, 4, THESIS_SCHEMA, capacity=(2, 2))
    for k in range(12):
        sub = where(THESIS_SCHEMA).between("Attr1", 100.0 * k, 100.0 * k + 50).build()
        net.subscribe(k % net.n, sub)
    net.settle()
    assert net.stat("splits") > 0
    return net


@pytest.fixture(scope="module")
def base_net() -> Net:
    return fresh_net()


def deliver(net: Net, i: int, payload: bytes, *, routed: bool = True) -> None:
    """Hand ``payload`` to peer ``i`` as a Route for its own id (delivered there) or a Direct."""
    peer = net.peers[i]
    me = net.net.peers[i]
    src = net.net.peers[(i + 1) % net.n]
    msg: Message
    if routed:
        msg = Route(12345, net.net.space.to_bytes(me.id), src.handle, 1, payload)
    else:
        msg = Direct(src.handle, payload)
    peer.receive(msg, src.addr, net.sim.now)
    net.sim.poke(i)


def leaf_and_host(net: Net, internal: bool = False) -> tuple[int, TreeId]:
    for i, p in enumerate(net.peers):
        for _, node in p.overlay.tree_nodes():
            if node.is_leaf != internal and node.tid.depth > 0:
                return i, node.tid
    raise AssertionError("no such tree node")


def ref(tid: TreeId, schema: str = "thesis") -> Ref:
    return Ref(schema, tid.attr, tid.depth, tid.path)


def piece(
    net: Net, x: float, y: float, *, base: int = 0, owner: int = 0, sid: int = 999
) -> StoredSub:
    h = net.net.peers[owner].handle
    return StoredSub(h, sid, 0, [Pred(base, x, y, 0)], base, 0, 1, x, y, x, y)


def stored_count(net: Net) -> int:
    return len(net.stored())


def malformed_delta(net: Net, i: int, payload: bytes, *, routed: bool = True) -> int:
    before = net.peers[i].overlay.stats.malformed
    stored = stored_count(net)
    nodes = {(s, n.tid) for p in net.peers for s, n in p.overlay.tree_nodes()}
    deliver(net, i, payload, routed=routed)
    net.settle()
    assert stored_count(net) == stored, "a malformed message changed the stored pieces"
    assert {(s, n.tid) for p in net.peers for s, n in p.overlay.tree_nodes()} == nodes
    return net.peers[i].overlay.stats.malformed - before


@settings(max_examples=max(10, _BASE_EXAMPLES))
@given(payload=st.binary(max_size=64), routed=st.booleans())
def test_garbage_payloads_are_counted_and_dropped(
    base_net: Net, payload: bytes, routed: bool
) -> None:
    try:
        decode(payload)
    except WireError:
        pass
    else:
        assume(False)  # (vanishingly rare) a valid message: not garbage
    assert malformed_delta(base_net, 3, payload, routed=routed) == 1


def test_a_valid_frame_of_the_wrong_layer_or_channel_is_malformed(base_net: Net) -> None:
    net = base_net
    ping = encode(Ping(net.net.peers[0].handle))
    assert malformed_delta(net, 1, ping) == 1
    assert malformed_delta(net, 1, ping, routed=False) == 1
    ack = encode(InstallAck(OP_INSERT, 1, 0, 0, True))
    assert malformed_delta(net, 1, ack, routed=True) == 1  # direct-only type, routed
    i, tid = leaf_and_host(net)
    probe = encode(ProbeSub(OP_INSERT, ref(tid), False, 0, piece(net, 1.0, 2.0)))
    assert malformed_delta(net, i, probe, routed=False) == 1  # routed-only type, direct


def test_inconsistent_probe_pubs_are_malformed(base_net: Net) -> None:
    net = base_net
    i, tid = leaf_and_host(net, internal=True)
    good = Event(7, "thesis", [1.0, 2.0, 3.0, 4.0])
    cases = [
        ProbePub(Event(7, "nope", [1.0]), Ref("nope", 0, 0, 0), 0, 0, False, 0),
        ProbePub(good, Ref("thesis", 9, 0, 0), 0, 0, False, 0),  # no such attribute
        ProbePub(good, Ref("thesis", 0, 2, 0b111), 2, 0b111, False, 0),  # path too long
        ProbePub(Event(7, "other", [1.0] * 4), ref(tid), tid.depth, tid.path, False, 0),
        ProbePub(Event(7, "thesis", [1.0] * 5), ref(tid), tid.depth, tid.path, False, 0),
        ProbePub(Event(7, "thesis", []), ref(tid), tid.depth, tid.path, False, 0),
        ProbePub(Event(7, "thesis", [math.inf] * 4), ref(tid), tid.depth, tid.path, False, 0),
        ProbePub(Event(7, "thesis", [math.nan] * 4), ref(tid), tid.depth, tid.path, False, 0),
        ProbePub(good, ref(tid), tid.depth - 1, 0, False, 0),  # scope above target
        ProbePub(good, ref(tid), tid.depth + 1, (tid.path ^ 1) << 1, False, 0),  # outside
    ]
    for msg in cases:
        assert malformed_delta(net, i, encode(msg)) == 1, msg
    assert net.received == {} or all(k[2] != 7 for k in net.received)


def test_inconsistent_probe_subs_are_malformed(base_net: Net) -> None:
    net = base_net
    i, leaf = leaf_and_host(net)
    z = net.spaces[0].zone(leaf)
    outside_x = z.x_hi + 1.0 if z.x_hi + 1.0 <= 10_000 else z.x_lo - 1.0
    cases = [
        # The point lies outside the target leaf.
        ProbeSub(OP_INSERT, ref(leaf), True, 0, piece(net, outside_x, max(outside_x, z.y_lo))),
        ProbeSub(OP_REMOVE, ref(leaf), True, 0, piece(net, outside_x, max(outside_x, z.y_lo))),
        # The base attribute is not the target's.
        ProbeSub(OP_INSERT, ref(leaf), True, 0, piece(net, z.x_lo, z.y_lo, base=1)),
        # NaN point.
        ProbeSub(OP_INSERT, ref(leaf), True, 0, piece(net, math.nan, math.nan)),
        # A subscriber handle with a 3-byte id.
        ProbeSub(
            OP_INSERT,
            ref(leaf),
            True,
            0,
            StoredSub(Handle(b"abc", b"\x00" * 6), 1, 0, [], 0, 0, 1, 0, 0, z.x_lo, z.y_lo),
        ),
    ]
    for msg in cases:
        assert malformed_delta(net, i, encode(msg)) == 1, msg
    # At an internal node: a point outside the whole square is in no leaf of its table.
    j, internal = leaf_and_host(net, internal=True)
    msg = ProbeSub(OP_INSERT, ref(internal), False, 0, piece(net, -5.0, 20_000.0))
    assert malformed_delta(net, j, encode(msg)) == 1


def test_inconsistent_transfers_and_leaf_updates_are_malformed(base_net: Net) -> None:
    net = base_net
    i, leaf = leaf_and_host(net)
    child = leaf.child(0)
    cz = net.spaces[0].zone(child)
    far = cz.x_hi + 1.0 if cz.x_hi + 1.0 <= 10_000 else cz.x_lo - 1.0
    cases: list[Message] = [
        TransferSub(ref(child), [piece(net, far, max(far, cz.y_lo))], []),
        TransferSub(ref(child), [piece(net, cz.x_lo, cz.y_lo, base=2)], []),
        LeafUpdate(ref(leaf), leaf.depth),  # not below the receiver
        LeafUpdate(ref(leaf), leaf.depth + 3),
        LeafUpdate(Ref("thesis", 0, 0, 0), 0),  # the root is nobody's child
        LeafUpdate(Ref("nope", 0, 1, 0), 0),
    ]
    for msg in cases:
        assert malformed_delta(net, i, encode(msg)) == 1, msg


def test_deliveries_and_acks_for_unknown_subscriptions_do_no_harm() -> None:
    net = fresh_net()
    subs_before = [dict(p.overlay.subscriptions()) for p in net.peers]
    installed = dict(net.installed)
    for i in range(net.n):
        ev = Event(42, "thesis", [1.0, 2.0, 3.0, 4.0])
        deliver(net, i, encode(EventDelivery(ev, [424242, 0])), routed=False)
        deliver(net, i, encode(InstallAck(OP_INSERT, 424242, 0, 0, True)), routed=False)
        deliver(net, i, encode(InstallAck(OP_REMOVE, 1, 77, 0, True)), routed=False)
        deliver(net, i, encode(InstallAck(OP_INSERT, 1, 0, 999, True)), routed=False)
    net.settle()
    assert [dict(p.overlay.subscriptions()) for p in net.peers] == subs_before
    assert dict(net.installed) == installed
    assert net.stat("malformed") == 0


def test_a_probe_for_an_unknown_schema_never_raises() -> None:
    net = fresh_net()
    for i in range(net.n):
        for msg in (
            ProbeSub(OP_INSERT, Ref("nope", 0, 3, 1), False, 0, piece(net, 1.0, 2.0)),
            ProbePub(Event(1, "nope", [1.0]), Ref("nope", 0, 3, 1), 3, 1, False, 0),
            TransferSub(Ref("nope", 0, 1, 0), [], []),
        ):
            assert malformed_delta(net, i, encode(msg)) == 1


def _stored_keys(net: Net) -> set[tuple[int, int]]:
    return {(net.index_of_id[s.subscriber.id], s.sid) for _, s in net.stored()}


def test_a_malformed_parked_probe_does_not_take_legitimate_ones_with_it() -> None:
    net = Net(6, 2, THESIS_SCHEMA, capacity=(4, 4))
    host = 2
    target = TreeId(0, 2, 0b01)  # x in [0, 5000), y in [5000, 10000]
    z = net.spaces[0].zone(target)
    bad = piece(net, z.x_hi + 10, z.y_hi, owner=1, sid=5)  # outside the target
    good = piece(net, (z.x_lo + z.x_hi) / 2, (z.y_lo + z.y_hi) / 2, owner=1, sid=6)
    # A leaf table sent both probes to a node whose TransferSub has not arrived: parked.
    deliver(net, host, encode(ProbeSub(OP_INSERT, ref(target), True, 0, bad)))
    deliver(net, host, encode(ProbeSub(OP_INSERT, ref(target), True, 0, good)))
    assert net.peers[host].overlay.stats.parked == 2
    deliver(net, host, encode(TransferSub(ref(target), [], [])))
    net.settle()
    assert net.peers[host].overlay.stats.malformed == 1  # the bad one
    assert (1, 6) in _stored_keys(net), "the legitimate parked probe was lost"


def test_a_malformed_transferred_piece_does_not_block_deliveries_to_others() -> None:
    net = Net(6, 3, THESIS_SCHEMA, capacity=(50, 50))
    sub = where(THESIS_SCHEMA).between("Attr1", 10.0, 20.0).build()
    key = net.subscribe(4, sub)
    net.settle()
    ((tid, _),) = net.stored()
    assert tid.depth == 0  # the root leaf of Attr1
    host = next(i for i, p in enumerate(net.peers) if p.overlay.tree_nodes())
    # A transfer to the (existing) root leaf with a piece whose subscriber id is 3 bytes long,
    # stored before the legitimate one in x order.
    bad = StoredSub(Handle(b"abc", b"\x00" * 6), 9, 0, [], 0, 0, 1, 0.0, 10_000.0, 0.0, 10_000.0)
    deliver(net, host, encode(TransferSub(ref(tid), [bad], [])))
    net.settle()
    eid = net.publish(0, (15.0, 0.0, 1.0, 1.0))
    net.settle()
    assert net.peers[host].overlay.stats.malformed == 1  # the bad piece's handle, at match time
    assert net.received[(*key, eid)] == 1


@settings(max_examples=max(5, _BASE_EXAMPLES // 6))
@given(msgs=st.lists(st.tuples(any_pubsub, st.integers(0, 7), st.booleans()), max_size=25))
def test_a_peer_survives_a_storm_of_random_overlay_messages(
    msgs: list[tuple[Message, int, bool]],
) -> None:
    """Random well-formed overlay messages (schema "thesis" half the time) aimed at random
    peers, routed or direct: nothing raises out of any core, bad ones are counted."""
    net = fresh_net()
    for msg, i, routed in msgs:
        deliver(net, i % net.n, encode(msg), routed=routed)
        net.run_for(0.05)
    net.settle()
    net.publish(0, (125.0, 0.0, 1.0, 1.0))
    net.settle()
    assert all(isinstance(p, OverlayPeer) for p in net.peers)


def test_inconsistent_multicast_probes_are_malformed(base_net: Net) -> None:
    net = base_net
    i, tid = leaf_and_host(net, internal=True)
    good = Event(7, "thesis", [1.0, 2.0, 3.0, 4.0])
    target = ProbeTarget(tid.attr, tid.depth, tid.path)
    cases = [
        ProbePubMulticast(Event(7, "nope", [1.0]), 1, [target]),
        ProbePubMulticast(Event(7, "thesis", [math.nan] * 4), 1, [target]),
        ProbePubMulticast(good, 1, [ProbeTarget(9, 0, 0)]),  # no attribute
        ProbePubMulticast(good, 1, [ProbeTarget(0, 2, 0b111)]),  # path longer than depth
        ProbePubMulticast(good, 1, [ProbeTarget(0, 2, 0, False, 0, 1, 0b10)]),  # scope bits
        ProbePubMulticast(good, 1, [ProbeTarget(0, 40, 0, False, 0, 22, 0)]),  # too deep
    ]
    for msg in cases:
        assert malformed_delta(net, i, encode(msg), routed=False) == 1, msg
    # Routed instead of sent point to point: the wrong channel.
    assert malformed_delta(net, i, encode(ProbePubMulticast(good, 1, [target]))) == 1


def test_a_multicast_probe_out_of_hop_budget_is_dropped(base_net: Net) -> None:
    net = base_net
    i, tid = leaf_and_host(net, internal=True)
    target = ProbeTarget(tid.attr, tid.depth, tid.path)
    msg = ProbePubMulticast(Event(7, "thesis", [1.0, 2.0, 3.0, 4.0]), 255, [target])
    lost = net.peers[i].overlay.stats.lost
    assert malformed_delta(net, i, encode(msg), routed=False) == 0
    assert net.peers[i].overlay.stats.lost == lost + 1


def test_lbdd_relay_lists_that_point_forward_are_malformed(base_net: Net) -> None:
    net = base_net
    ev = Event(8, "thesis", [1.0, 2.0, 3.0, 4.0])
    h = net.net.peers[2].handle
    cases = [
        LbddDelivery(ev, [], [Relay(h, [1], 0)]),  # its own parent: a cycle
        LbddDelivery(ev, [], [Relay(h, [1], -1), Relay(h, [1], 5)]),  # a later parent
        LbddDelivery(ev, [], [Relay(Handle(b"abc", h.addr), [1], -1)]),  # 3-byte id
    ]
    for msg in cases:
        assert malformed_delta(net, 1, encode(msg), routed=False) == 1, msg


@given(
    depth=st.integers(0, 30),
    below=st.integers(0, 30),
    data=st.data(),
    via_lrt=st.booleans(),
    jumps=u8,
)
def test_a_multicast_target_keeps_its_scope_through_the_codec(
    depth: int, below: int, data: st.DataObject, via_lrt: bool, jumps: int
) -> None:
    path = data.draw(st.integers(0, (1 << depth) - 1))
    low = data.draw(st.integers(0, (1 << below) - 1))
    scope_path = (path << below) | low
    t = ProbeTarget.make(0, depth, path, depth + below, scope_path, via_lrt, jumps)
    back = decode(encode(ProbePubMulticast(Event(1, "thesis", [1.0]), 1, [t]))).targets[0]
    assert (back.scope_depth, back.scope_path, back.via_lrt, back.jumps) == (
        depth + below,
        scope_path,
        via_lrt,
        jumps,
    )
    with pytest.raises(LocalProtocolError):
        ProbeTarget.make(0, depth + 1, 0, depth, 0, False, 0)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_numbers_from_the_network_are_refused(bad: float) -> None:
    """A NaN or infinite event value or bound would poison comparisons and zone arithmetic in
    the cores: the decoder refuses it."""
    good = encode(EventDelivery(Event(1, "thesis", [1.0, 2.0, 3.0, 4.0]), [1]))
    fields = msgspec.msgpack.decode(good[1:])
    fields[1][2][3] = bad
    with pytest.raises(WireError):
        decode(bytes([WIRE_VERSION]) + msgspec.msgpack.encode(fields))
