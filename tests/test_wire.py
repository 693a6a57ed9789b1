"""Tests for dht.wire: round trips of every registered message, and strict decoding (garbage of
any shape raises ``WireError`` and nothing else)."""

from __future__ import annotations

import types
from typing import Any

import msgspec
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import rangecast.dht.messages  # registers the DHT message types
import rangecast.runtime.messages  # registers the runtime's messages (envelope, client API)
from rangecast.dht import wire
from rangecast.dht.errors import LocalProtocolError, RemoteProtocolError, WireError
from rangecast.dht.messages import Ping, Route
from rangecast.dht.wire import (
    MAX_FRAME_BYTES,
    WIRE_VERSION,
    Codec,
    Handle,
    Message,
    codec,
    decode,
    encode,
    register,
    registered,
)

MESSAGE_TYPES = list(registered().values())
_BASE_EXAMPLES = settings().max_examples

# ------------------------------------------------------------------ strategies from type info

#: Byte fields with a fixed real-world length: ids are 160-bit, addresses IPv4 + port.
_REALISTIC_LENGTH = {"id": 20, "key": 20, "addr": 6}


def _strategy(t: Any, name: str, realistic: bool) -> st.SearchStrategy[Any]:
    """A strategy for one msgspec field type, honouring its constraints."""
    info = msgspec.inspect
    if isinstance(t, info.IntType):
        lo = t.ge if t.ge is not None else (t.gt + 1 if t.gt is not None else -(2**63))
        hi = t.le if t.le is not None else (t.lt - 1 if t.lt is not None else 2**64 - 1)
        return st.integers(min_value=lo, max_value=hi)
    if isinstance(t, info.BytesType):
        n = _REALISTIC_LENGTH.get(name, -1)
        if realistic and (t.min_length or 0) <= n <= (t.max_length or n):
            return st.binary(min_size=n, max_size=n)
        lo = t.min_length or 0
        hi = min(t.max_length if t.max_length is not None else 256, 256)
        return st.binary(min_size=lo, max_size=max(lo, hi))
    if isinstance(t, info.StrType):
        hi = min(t.max_length if t.max_length is not None else 64, 64)
        return st.text(min_size=t.min_length or 0, max_size=hi)
    if isinstance(t, info.BoolType):
        return st.booleans()
    if isinstance(t, info.FloatType):
        return st.floats(min_value=t.ge, max_value=t.le, allow_nan=False)
    if isinstance(t, info.NoneType):
        return st.none()
    if isinstance(t, info.UnionType):
        return st.one_of([_strategy(u, name, realistic) for u in t.types])
    if isinstance(t, info.ListType):
        hi = min(t.max_length if t.max_length is not None else 6, 6)
        lo = t.min_length or 0
        return st.lists(_strategy(t.item_type, name, realistic), min_size=lo, max_size=max(lo, hi))
    if isinstance(t, info.DictType):
        hi = min(t.max_length if t.max_length is not None else 6, 6)
        return st.dictionaries(
            _strategy(t.key_type, name, realistic),
            _strategy(t.value_type, name, realistic),
            min_size=t.min_length or 0,
            max_size=hi,
        )
    if isinstance(t, info.StructType):
        return _struct_strategy(t, realistic)
    raise NotImplementedError(f"no strategy for msgspec type {t!r}: extend tests/test_wire.py")


def _struct_strategy(t: Any, realistic: bool) -> st.SearchStrategy[Any]:
    fields = {f.name: _strategy(f.type, f.name, realistic) for f in t.fields}
    return st.builds(t.cls, **fields)


def messages_of(cls: type[Message], realistic: bool = True) -> st.SearchStrategy[Message]:
    """Valid instances of ``cls`` (ids 20 bytes and addresses 6 bytes when ``realistic``)."""
    return _struct_strategy(msgspec.inspect.type_info(cls), realistic)


def any_message(realistic: bool = True) -> st.SearchStrategy[Message]:
    return st.one_of([messages_of(cls, realistic) for cls in MESSAGE_TYPES])


#: Arbitrary MessagePack-able data, to build frames that are well-formed MessagePack but not
#: necessarily well-formed messages.
msgpack_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats()
    | st.text(max_size=8)
    | st.binary(max_size=24),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=20,
)


def assert_decodes_or_wire_error(frame: Any) -> Message | None:
    """``decode`` must either give a registered message (that round-trips) or raise exactly
    ``WireError``; any other exception fails the test."""
    try:
        msg = decode(frame)
    except Exception as exc:  # the point is to see every exception type
        assert isinstance(exc, WireError), f"{type(exc).__name__} escaped decode: {exc}"
        return None
    assert type(msg) in MESSAGE_TYPES
    assert decode(encode(msg)) == msg
    return msg


# ---------------------------------------------------------------------------- the registry


def test_dht_messages_are_registered_with_tags_in_the_dht_range() -> None:
    reg = registered()
    names = {cls.__name__ for cls in reg.values()}
    assert {"Route", "HopAck", "JoinRequest", "Ping", "Pong", "Leave", "Direct"} <= names
    for tag, cls in reg.items():
        assert cls.__struct_config__.tag == tag
        assert cls.kind == cls.__name__
        if cls.__module__ == "rangecast.dht.messages":
            assert 1 <= tag <= 31
    assert list(reg) == sorted(reg)


# ------------------------------------------------------------------------------ round trips


@pytest.mark.parametrize("cls", MESSAGE_TYPES, ids=lambda c: c.__name__)
@given(data=st.data())
def test_round_trip_every_registered_type(cls: type[Message], data: st.DataObject) -> None:
    msg = data.draw(messages_of(cls), label="msg")
    frame = encode(msg)
    assert frame[0] == WIRE_VERSION
    assert codec().size(msg) == len(frame)
    back = decode(frame)
    assert type(back) is cls
    assert back == msg
    # Accepts every bytes-like input.
    assert decode(bytearray(frame)) == msg
    assert decode(memoryview(frame)) == msg


@given(msg=any_message(realistic=False))
def test_round_trip_with_any_lengths_allowed_by_the_codec(msg: Message) -> None:
    assert decode(encode(msg)) == msg


def test_round_trip_of_a_frame_at_exactly_the_size_limit() -> None:
    h = Handle(b"\x01" * 20, b"\x02" * 6)
    small = Route(1, b"\x03" * 20, h, 1, b"")
    overhead = len(encode(small))
    # The payload's own length header grows with its size: search down for the exact fit
    # (``size`` does not enforce the limit, ``encode`` does).
    n = MAX_FRAME_BYTES - overhead + 8
    while codec().size(Route(1, b"\x03" * 20, h, 1, b"\x00" * n)) > MAX_FRAME_BYTES:
        n -= 1
    msg = Route(1, b"\x03" * 20, h, 1, b"\x00" * n)
    frame = encode(msg)
    assert len(frame) == MAX_FRAME_BYTES
    assert decode(frame) == msg
    too_big = Route(1, b"\x03" * 20, h, 1, b"\x00" * (n + 1))
    with pytest.raises(LocalProtocolError, match="limit"):
        encode(too_big)


# ------------------------------------------------------------------------- strict decoding


@given(frame=st.binary(max_size=512))
def test_garbage_bytes_raise_only_wire_error(frame: bytes) -> None:
    assert_decodes_or_wire_error(frame)


@given(body=st.binary(max_size=512))
def test_garbage_after_a_valid_version_byte_raises_only_wire_error(body: bytes) -> None:
    assert_decodes_or_wire_error(bytes([WIRE_VERSION]) + body)


@given(value=msgpack_values)
def test_well_formed_msgpack_that_is_not_a_message_raises_only_wire_error(value: Any) -> None:
    assert_decodes_or_wire_error(bytes([WIRE_VERSION]) + msgspec.msgpack.encode(value))


@given(data=st.data(), msg=any_message())
def test_a_valid_message_with_one_field_replaced_raises_only_wire_error(
    data: st.DataObject, msg: Message
) -> None:
    fields = msgspec.msgpack.decode(encode(msg)[1:])
    assert isinstance(fields, list)
    pos = data.draw(st.integers(min_value=0, max_value=len(fields) - 1), label="pos")
    fields[pos] = data.draw(msgpack_values, label="replacement")
    assert_decodes_or_wire_error(bytes([WIRE_VERSION]) + msgspec.msgpack.encode(fields))


@settings(max_examples=max(5, _BASE_EXAMPLES // 3))
@given(msg=any_message())
def test_every_strict_prefix_of_a_valid_frame_raises_wire_error(msg: Message) -> None:
    frame = encode(msg)
    for n in range(len(frame)):
        with pytest.raises(WireError):
            decode(frame[:n])


@given(msg=any_message(), extra=st.binary(min_size=1, max_size=16))
def test_trailing_bytes_raise_wire_error(msg: Message, extra: bytes) -> None:
    with pytest.raises(WireError):
        decode(encode(msg) + extra)


@given(data=st.data(), msg=any_message())
def test_flipped_byte_decodes_to_a_valid_message_or_raises_wire_error(
    data: st.DataObject, msg: Message
) -> None:
    frame = bytearray(encode(msg))
    pos = data.draw(st.integers(min_value=0, max_value=len(frame) - 1), label="pos")
    flip = data.draw(st.integers(min_value=1, max_value=255), label="xor")
    frame[pos] ^= flip
    assert_decodes_or_wire_error(bytes(frame))


@given(msg=any_message(), version=st.integers(min_value=0, max_value=255))
def test_wrong_version_byte_raises_wire_error(msg: Message, version: int) -> None:
    assume(version != WIRE_VERSION)
    frame = bytes([version]) + encode(msg)[1:]
    with pytest.raises(WireError, match="version"):
        decode(frame)


def test_oversized_frames_raise_wire_error() -> None:
    with pytest.raises(WireError, match="exceeds"):
        decode(bytes([WIRE_VERSION]) + b"\x00" * MAX_FRAME_BYTES)
    # A frame that would be a perfectly good message, were it not too big.
    h = Handle(b"\x01" * 20, b"\x02" * 6)
    big = Route(7, b"\x03" * 20, h, 1, b"\x00" * (MAX_FRAME_BYTES - 10))
    frame = Codec(registered(), max_bytes=2 * MAX_FRAME_BYTES).encode(big)
    assert len(frame) > MAX_FRAME_BYTES
    with pytest.raises(WireError):
        decode(frame)


@pytest.mark.parametrize("frame", [b"", b"\x01", bytes([WIRE_VERSION, 0x90]), b"\x01\xc1"])
def test_tiny_and_empty_frames_raise_wire_error(frame: bytes) -> None:
    with pytest.raises(WireError):
        decode(frame)


@pytest.mark.parametrize("frame", [None, 42, 1.5, "\x01abc", [1, 2], object()])
def test_non_bytes_input_raises_only_wire_error(frame: Any) -> None:
    with pytest.raises(WireError):
        decode(frame)


def test_unknown_tag_raises_wire_error() -> None:
    unused = next(t for t in range(1, 256) if t not in registered())
    with pytest.raises(WireError):
        decode(bytes([WIRE_VERSION]) + msgspec.msgpack.encode([unused, b"x"]))


def test_wire_error_is_a_remote_protocol_error() -> None:
    assert issubclass(WireError, RemoteProtocolError)
    assert not issubclass(WireError, LocalProtocolError)


# ---------------------------------------------------------------------------- local misuse


class _Unregistered(Message, tag=250):
    x: int


class _StringTagged(Message):  # tag=True inherited: the tag is the class name, a str
    x: int


@pytest.mark.parametrize("msg", [_Unregistered(1), _StringTagged(1)], ids=["int-tag", "str-tag"])
def test_encoding_an_unregistered_message_raises_local_protocol_error(msg: Message) -> None:
    with pytest.raises(LocalProtocolError, match="not a registered"):
        encode(msg)


def test_encoding_an_unregistered_class_that_reuses_a_registered_tag_raises() -> None:
    class Impostor(Message, tag=Ping.__struct_config__.tag):
        sender: Handle

    with pytest.raises(LocalProtocolError):
        encode(Impostor(Handle(b"\x00" * 20, b"\x00" * 6)))


def test_encoding_values_the_wire_cannot_carry_raises_local_protocol_error() -> None:
    with pytest.raises(LocalProtocolError, match="cannot encode"):
        encode(rangecast.dht.messages.HopAck(2**64))  # beyond MessagePack's integer range


def test_codec_needs_at_least_one_type() -> None:
    with pytest.raises(LocalProtocolError):
        Codec({})


def _registry_snapshot() -> dict[int, type[Message]]:
    return registered()


def test_register_rejects_unknown_layer() -> None:
    before = _registry_snapshot()

    class InLayer(Message, tag=100):
        x: int

    with pytest.raises(LocalProtocolError, match="unknown layer"):
        register("no-such-layer", InLayer)
    assert registered() == before


@pytest.mark.parametrize(
    ("layer", "tag"),
    [
        ("dht", 0),
        ("dht", 32),
        ("dht", 64),
        ("multicast", 31),
        ("multicast", 64),
        ("pubsub", 63),
        ("pubsub", 128),
        ("runtime", 127),
        ("runtime", 256),
        ("runtime", 1000),
    ],
)
def test_register_rejects_tags_outside_the_layer_range(layer: str, tag: int) -> None:
    before = _registry_snapshot()
    cls = types.new_class(
        f"OutOfRange{tag}",
        (Message,),
        {"tag": tag},
        lambda ns: ns.update(__annotations__={"x": int}),
    )
    with pytest.raises(LocalProtocolError, match="outside"):
        register(layer, cls)
    assert registered() == before
    with pytest.raises(LocalProtocolError):
        encode(cls(1))


def test_register_rejects_string_tags() -> None:
    before = _registry_snapshot()
    with pytest.raises(LocalProtocolError, match="outside"):
        register("pubsub", _StringTagged)
    assert registered() == before


def test_register_rejects_a_duplicate_tag() -> None:
    before = _registry_snapshot()

    class PingTwin(Message, tag=Ping.__struct_config__.tag):
        sender: Handle

    with pytest.raises(LocalProtocolError, match="used by both"):
        register("dht", PingTwin)
    assert registered() == before
    assert decode(encode(Ping(Handle(b"\x00" * 20, b"\x00" * 6)))).__class__ is Ping


def test_registering_the_same_class_again_is_harmless() -> None:
    before = _registry_snapshot()
    register("dht", Ping)
    assert registered() == before


def test_a_failed_register_call_changes_nothing() -> None:
    class Fine(Message, tag=101):
        x: int

    class Wrong(Message, tag=5):  # outside the pubsub range
        x: int

    before = _registry_snapshot()
    encode(Ping(Handle(b"\x00" * 20, b"\x00" * 6)))  # make sure a codec is cached
    try:
        with pytest.raises(LocalProtocolError):
            register("pubsub", Fine, Wrong)
        assert registered() == before
    finally:
        # Undo the partial registration the bug leaves behind, for the tests that follow.
        if wire._registry.get(101) is Fine:
            del wire._registry[101]
            wire._codec = None
