"""Tests for dht.wire: round trips of every message of every layer's table, strict decoding
(garbage of any shape raises ``WireError`` and nothing else), and the tables and codecs: checked
when built, independent of each other and of what the process has imported."""

from __future__ import annotations

import subprocess
import sys
import types
from typing import Any

import msgspec
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from rangecast.brokers.messages import BROKER_TABLE
from rangecast.dht import wire
from rangecast.dht.errors import LocalProtocolError, RemoteProtocolError, WireError
from rangecast.dht.messages import DHT_TABLE, HopAck, Ping, Route
from rangecast.dht.wire import (
    MAX_FRAME_BYTES,
    WIRE_VERSION,
    Codec,
    Handle,
    Message,
    MessageTable,
    codec_for,
)
from rangecast.multicast.messages import MULTICAST_TABLE
from rangecast.pubsub.messages import PUBSUB_TABLE, InstallAck
from rangecast.runtime.messages import RUNTIME_TABLE

#: Every layer's table, and a codec over all of them (no stack speaks them all; the tests of
#: the format want every message type).
TABLES = (DHT_TABLE, MULTICAST_TABLE, PUBSUB_TABLE, BROKER_TABLE, RUNTIME_TABLE)
CODEC = codec_for(*TABLES)
encode = CODEC.encode
decode = CODEC.decode
MESSAGE_TYPES = list(CODEC.types.values())
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
    """``decode`` must either give a message of the codec (that round-trips) or raise exactly
    ``WireError``; any other exception fails the test."""
    try:
        msg = decode(frame)
    except Exception as exc:  # the point is to see every exception type
        assert isinstance(exc, WireError), f"{type(exc).__name__} escaped decode: {exc}"
        return None
    assert type(msg) in MESSAGE_TYPES
    assert decode(encode(msg)) == msg
    return msg


# ------------------------------------------------------------------------------- the tables


def test_each_layer_declares_its_table_with_tags_in_its_own_range() -> None:
    ranges = {
        "dht": (1, 31),
        "multicast": (32, 63),
        "pubsub": (64, 95),
        "brokers": (96, 127),
        "runtime": (128, 255),
    }
    for table in TABLES:
        lo, hi = ranges[table.layer]
        assert (table.tags.start, table.tags.stop - 1) == (lo, hi)
        for cls in table.types:
            assert lo <= cls.__struct_config__.tag <= hi
            assert cls.kind == cls.__name__  # counters are keyed by the class name
    names = {cls.__name__ for cls in DHT_TABLE.types}
    assert {"Route", "HopAck", "JoinRequest", "Ping", "Pong", "Leave", "Direct"} <= names
    for tag, cls in CODEC.types.items():
        assert cls.__struct_config__.tag == tag
    assert list(CODEC.types) == sorted(CODEC.types)
    assert CODEC.tables == TABLES


def test_the_wire_module_keeps_no_registry_and_no_process_wide_codec() -> None:
    for gone in ("register", "registered", "codec", "encode", "decode", "_registry", "_codec"):
        assert not hasattr(wire, gone), gone
    with pytest.raises(TypeError):
        CODEC.types[250] = Ping  # type: ignore[index]  # read-only


# ------------------------------------------------------------------------------ round trips


@pytest.mark.parametrize("cls", MESSAGE_TYPES, ids=lambda c: c.__name__)
@given(data=st.data())
def test_round_trip_every_registered_type(cls: type[Message], data: st.DataObject) -> None:
    msg = data.draw(messages_of(cls), label="msg")
    frame = encode(msg)
    assert frame[0] == WIRE_VERSION
    assert CODEC.size(msg) == len(frame)
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
    while CODEC.size(Route(1, b"\x03" * 20, h, 1, b"\x00" * n)) > MAX_FRAME_BYTES:
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
    frame = Codec(TABLES, max_bytes=2 * MAX_FRAME_BYTES).encode(big)
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
    unused = next(t for t in range(1, 256) if t not in CODEC.types)
    with pytest.raises(WireError):
        decode(bytes([WIRE_VERSION]) + msgspec.msgpack.encode([unused, b"x"]))


def test_wire_error_is_a_remote_protocol_error() -> None:
    assert issubclass(WireError, RemoteProtocolError)
    assert not issubclass(WireError, LocalProtocolError)


# ---------------------------------------------------------------------------- local misuse


class _Unlisted(Message, tag=250):
    x: int


class _StringTagged(Message):  # tag=True inherited: the tag is the class name, a str
    x: int


def _message_class(name: str, tag: Any) -> type[Message]:
    return types.new_class(
        name, (Message,), {"tag": tag}, lambda ns: ns.update(__annotations__={"x": int})
    )


@pytest.mark.parametrize("msg", [_Unlisted(1), _StringTagged(1)], ids=["int-tag", "str-tag"])
def test_encoding_a_message_of_no_table_raises_local_protocol_error(msg: Message) -> None:
    with pytest.raises(LocalProtocolError, match="not a message of"):
        encode(msg)


def test_encoding_a_class_of_no_table_that_reuses_a_listed_tag_raises() -> None:
    class Impostor(Message, tag=Ping.__struct_config__.tag):
        sender: Handle

    with pytest.raises(LocalProtocolError):
        encode(Impostor(Handle(b"\x00" * 20, b"\x00" * 6)))


def test_encoding_values_the_wire_cannot_carry_raises_local_protocol_error() -> None:
    with pytest.raises(LocalProtocolError, match="cannot encode"):
        encode(HopAck(2**64))  # beyond MessagePack's integer range


def test_a_codec_needs_at_least_one_table() -> None:
    with pytest.raises(LocalProtocolError):
        codec_for()
    with pytest.raises(LocalProtocolError, match="not a MessageTable"):
        Codec([DHT_TABLE.types])  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("table", "tag"),
    [
        (DHT_TABLE, 0),
        (DHT_TABLE, 32),
        (DHT_TABLE, 64),
        (MULTICAST_TABLE, 31),
        (MULTICAST_TABLE, 64),
        (PUBSUB_TABLE, 63),
        (PUBSUB_TABLE, 128),
        (RUNTIME_TABLE, 127),
        (RUNTIME_TABLE, 256),
        (RUNTIME_TABLE, 1000),
    ],
    ids=lambda v: v.layer if isinstance(v, MessageTable) else str(v),
)
def test_a_table_refuses_a_tag_outside_its_range(table: MessageTable, tag: int) -> None:
    cls = _message_class(f"OutOfRange{tag}", tag)
    with pytest.raises(LocalProtocolError, match="outside"):
        MessageTable(table.layer, table.tags, (*table.types, cls))
    with pytest.raises(LocalProtocolError):
        encode(cls(1))


def test_a_table_refuses_string_tags_duplicates_and_what_is_no_message() -> None:
    with pytest.raises(LocalProtocolError, match="outside"):
        MessageTable("pubsub", range(64, 128), (_StringTagged,))

    class PingTwin(Message, tag=Ping.__struct_config__.tag):
        sender: Handle

    with pytest.raises(LocalProtocolError, match="used by both"):
        MessageTable("dht", DHT_TABLE.tags, (*DHT_TABLE.types, PingTwin))
    with pytest.raises(LocalProtocolError, match="not a wire Message"):
        MessageTable("dht", DHT_TABLE.tags, (Handle,))  # type: ignore[arg-type]
    with pytest.raises(LocalProtocolError, match="at least one"):
        MessageTable("dht", DHT_TABLE.tags, ())


@pytest.mark.parametrize("tags", [range(0, 10), range(200, 300), range(5, 5), range(1, 9, 2)])
def test_a_table_range_must_be_a_run_of_one_byte_tags(tags: range) -> None:
    with pytest.raises(LocalProtocolError, match="tag range"):
        MessageTable("x", tags, (Ping,))


def test_a_codec_refuses_tables_that_collide() -> None:
    # Another layer claiming tags inside the DHT's range: refused at build, whichever comes first.
    intruder = MessageTable("intruder", range(16, 40), (_message_class("Intruder", 20),))
    for tables in ((DHT_TABLE, intruder), (intruder, DHT_TABLE)):
        with pytest.raises(LocalProtocolError, match="overlap"):
            codec_for(*tables)
    # The same tag in two tables (which their ranges alone allow only by overlapping).
    twin = MessageTable("twin", range(1, 32), (Ping,))
    with pytest.raises(LocalProtocolError, match="overlap"):
        codec_for(DHT_TABLE, twin)
    # Two tables for one layer.
    other_dht = MessageTable("dht", range(200, 210), (_message_class("Other", 201),))
    with pytest.raises(LocalProtocolError, match="two tables"):
        codec_for(DHT_TABLE, other_dht)


def test_a_table_given_twice_counts_once() -> None:
    codec = codec_for(DHT_TABLE, PUBSUB_TABLE, DHT_TABLE)
    assert codec.tables == (DHT_TABLE, PUBSUB_TABLE)
    assert codec.speaks(PUBSUB_TABLE) and not codec.speaks(RUNTIME_TABLE)


def test_two_codecs_in_one_process_do_not_affect_each_other() -> None:
    dht_only = codec_for(DHT_TABLE)
    before = dict(dht_only.types)
    stack = codec_for(DHT_TABLE, PUBSUB_TABLE)
    frame = stack.encode(InstallAck(0, 7, 1, 3, True))
    assert stack.decode(frame) == InstallAck(0, 7, 1, 3, True)
    with pytest.raises(WireError):
        dht_only.decode(frame)  # not a message of its tables: strict decoding refuses it
    with pytest.raises(LocalProtocolError, match="not a message of"):
        dht_only.encode(InstallAck(0, 7, 1, 3, True))
    codec_for(*TABLES)  # building more codecs changes none built before
    assert dict(dht_only.types) == before
    ping = Ping(Handle(b"\x00" * 20, b"\x00" * 6))
    assert dht_only.decode(stack.encode(ping)) == ping  # both speak the DHT's messages
    with pytest.raises(LocalProtocolError, match="needs a codec with the pubsub table"):
        dht_only.require(PUBSUB_TABLE, "a PubSubNode")


def test_importing_a_module_never_changes_a_codec() -> None:
    """In a fresh interpreter, so the upper layers are imported only after the codec exists."""
    script = """
import importlib
from rangecast.dht.messages import DHT_TABLE
from rangecast.dht.wire import WireError, codec_for
codec = codec_for(DHT_TABLE)
before = dict(codec.types)
for name in ("rangecast.multicast.topic", "rangecast.pubsub.peer", "rangecast.runtime.peer",
             "rangecast.sim.network", "rangecast.cli.main"):
    importlib.import_module(name)
assert dict(codec.types) == before, "an import changed a codec"
from rangecast.pubsub.messages import PUBSUB_TABLE, InstallAck
frame = codec_for(DHT_TABLE, PUBSUB_TABLE).encode(InstallAck(0, 1, 2, 3, True))
try:
    codec.decode(frame)
except WireError:
    print("ok")
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "ok", out.stderr
