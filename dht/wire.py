"""The wire format: every message of every layer is a ``Message`` struct, encoded and decoded by
a ``Codec`` over the message tables of one stack, in the simulator (to charge each message its
real size) and in the real runtime alike.

Theory of operation
-------------------
A frame is one version byte followed by a MessagePack array ``[tag, field1, field2, ...]``.
Messages are ``msgspec`` structs: frozen, slotted, array-encoded (no field names on the wire) and
tagged with a small integer, so a message costs a few bytes of framing on top of its fields.

msgspec was chosen because it validates while it decodes (types, lengths, no trailing bytes) in C,
so strict decoding costs nothing extra, and because encoding a small struct takes well under a
microsecond, which matters when the simulator encodes every one of millions of messages.

Each layer declares its messages as one immutable ``MessageTable`` (its name, the tag range it
owns and its message types) in its own ``messages`` module: ``dht.messages.DHT_TABLE``,
``multicast.messages.MULTICAST_TABLE``, ``pubsub.messages.PUBSUB_TABLE`` and
``runtime.messages.RUNTIME_TABLE``. This module knows none of them. Whoever builds a stack (the
simulator's experiment, a real peer, a test) builds one ``Codec`` from the tables that stack
speaks (``codec_for(DHT_TABLE, PUBSUB_TABLE)``) and hands it to the cores it builds, which keep
it. Nothing is registered at import time and there is no process-wide codec: what a core accepts
is what its builder gave it, whatever else the process has imported, and two stacks with
different codecs can live side by side. ``codec_for`` checks the tables against each other
(tags unique, ranges disjoint) and raises ``LocalProtocolError`` when they clash.

The layers' ranges, as their tables declare them:

====== ==========================
tags   layer
====== ==========================
1-31   dht (Pastry, Kademlia)
32-63  multicast and LBDD
64-95  pubsub
96-127 brokers
128+   runtime (sessions, client API)
====== ==========================

Decoding is strict: anything that is not exactly one well-formed message of the codec's tables
and of the current version, within the size limit, raises ``WireError`` and nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Annotated, Any, ClassVar, Union

import msgspec

from rangecast.dht.errors import LocalProtocolError, WireError

WIRE_VERSION = 1
#: Largest frame a peer accepts. Big enough for an LBDD data slice (64 KiB) plus headers.
MAX_FRAME_BYTES = 256 * 1024

#: An id or address on the wire. The codec bounds the length; the receiving core checks that an
#: id has exactly its id space's length.
WireBytes = Annotated[bytes, msgspec.Meta(max_length=64)]
#: Payloads nest another encoded frame (the app message of a routed DHT message).
Payload = Annotated[bytes, msgspec.Meta(max_length=MAX_FRAME_BYTES)]
U8 = Annotated[int, msgspec.Meta(ge=0, le=255)]
U16 = Annotated[int, msgspec.Meta(ge=0, le=0xFFFF)]
U32 = Annotated[int, msgspec.Meta(ge=0, le=0xFFFFFFFF)]
#: A finite float: NaN and infinities from the network are refused by the decoder, so no core
#: ever compares against NaN or turns an infinity into a zone number.
Finite = Annotated[float, msgspec.Meta(ge=-1.7976931348623157e308, le=1.7976931348623157e308)]
#: Unique ids drawn by cores are 63-bit so they fit MessagePack's signed range.
U63 = Annotated[int, msgspec.Meta(ge=0, le=(1 << 63) - 1)]
#: Every tag a table may use: one MessagePack byte (``payload_tag`` reads it without decoding).
TAGS = range(1, 256)


class Message(msgspec.Struct, frozen=True, array_like=True, gc=False, tag=True):
    """Base of every wire message. Subclasses pass ``tag=<int>`` and are listed in their
    layer's ``MessageTable``."""

    #: Human name used in counters (class name unless overridden).
    kind: ClassVar[str] = "Message"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # Set where the class is defined, so the name never depends on what was imported.
        if "kind" not in cls.__dict__:
            cls.kind = cls.__name__


class Handle(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A node as other nodes know it: its id and its transport address."""

    id: WireBytes
    addr: WireBytes


def _tag_of(cls: type[Message]) -> Any:
    return cls.__struct_config__.tag


@dataclass(frozen=True, slots=True)
class MessageTable:
    """One layer's messages: its ``layer`` name, the ``tags`` it owns and its ``types``.

    A plain value, checked when it is made (every type a ``Message`` with an integer tag inside
    ``tags``, no tag twice; ``LocalProtocolError`` otherwise); building it changes nothing else.
    """

    layer: str
    tags: range
    types: tuple[type[Message], ...]

    def __post_init__(self) -> None:
        tags = self.tags
        if tags.step != 1 or not tags or tags.start < TAGS.start or tags.stop > TAGS.stop:
            raise LocalProtocolError(
                f"{self.layer}: tag range {tags} is not a non-empty part of {TAGS}"
            )
        if not self.types:
            raise LocalProtocolError(f"{self.layer}: a table needs at least one message type")
        seen: dict[int, type[Message]] = {}
        for cls in self.types:
            if not (isinstance(cls, type) and issubclass(cls, Message)):
                raise LocalProtocolError(f"{self.layer}: {cls!r} is not a wire Message")
            tag = _tag_of(cls)
            if not isinstance(tag, int) or tag not in tags:
                raise LocalProtocolError(
                    f"{cls.__name__}: tag {tag!r} outside {self.layer} range {tags}"
                )
            other = seen.get(tag)
            if other is not None:
                raise LocalProtocolError(
                    f"tag {tag} used by both {other.__name__} and {cls.__name__}"
                )
            seen[tag] = cls


def _merge(
    tables: Iterable[MessageTable],
) -> tuple[tuple[MessageTable, ...], dict[int, type[Message]]]:
    """The distinct tables (a table given twice counts once) and their types by tag; raises
    ``LocalProtocolError`` if two tables share a layer name, a tag range or a tag."""
    kept: list[MessageTable] = []
    types: dict[int, type[Message]] = {}
    for table in tables:
        if not isinstance(table, MessageTable):
            raise LocalProtocolError(f"not a MessageTable: {table!r}")
        if table in kept:
            continue
        for other in kept:
            if other.layer == table.layer:
                raise LocalProtocolError(f"two tables for layer {table.layer!r}")
            if other.tags.start < table.tags.stop and table.tags.start < other.tags.stop:
                raise LocalProtocolError(
                    f"tag ranges overlap: {other.layer} {other.tags} and {table.layer} {table.tags}"
                )
        # Disjoint ranges and a table's own unique tags make every tag unique.
        types.update((_tag_of(cls), cls) for cls in table.types)
        kept.append(table)
    if not kept:
        raise LocalProtocolError("a codec needs at least one message table")
    return tuple(kept), dict(sorted(types.items()))


class Codec:
    """Encoder and strict decoder over the messages of a fixed set of ``MessageTable``s.

    Built once by whoever builds a stack (``codec_for``) and passed to the cores; it holds no
    state that changes after construction."""

    __slots__ = ("_classes", "_decoder", "_encode", "max_bytes", "raw_encode", "tables", "types")

    def __init__(self, tables: Iterable[MessageTable], max_bytes: int = MAX_FRAME_BYTES) -> None:
        merged, types = _merge(tables)
        #: The tables this codec speaks, in the order given.
        self.tables: tuple[MessageTable, ...] = merged
        #: Message type by tag (read-only): also how counters name a payload by its tag.
        self.types: Mapping[int, type[Message]] = MappingProxyType(types)
        self._classes = frozenset(types.values())
        self.max_bytes = max_bytes
        union: Any = Union[tuple(types.values())]  # noqa: UP007 - built at run time
        self._decoder = msgspec.msgpack.Decoder(union)
        self._encode = msgspec.msgpack.Encoder().encode
        #: The bare encoder (no version byte, no checks): a frame is ``1 + len(raw_encode(m))``
        #: bytes, which is how the simulator charges every message without building the frame.
        self.raw_encode = self._encode

    def __repr__(self) -> str:
        return f"Codec({', '.join(t.layer for t in self.tables)})"

    def speaks(self, table: MessageTable) -> bool:
        """Whether ``table`` is one of this codec's tables."""
        return table in self.tables

    def require(self, table: MessageTable, who: str) -> None:
        """``LocalProtocolError`` unless this codec speaks ``table``: a layer built on a stack
        whose codec lacks its messages could neither send nor receive them."""
        if table not in self.tables:
            raise LocalProtocolError(
                f"{who} needs a codec with the {table.layer} table; this one is {self!r}"
            )

    def encode(self, msg: Message) -> bytes:
        if type(msg) not in self._classes:
            raise LocalProtocolError(f"{type(msg).__name__} is not a message of {self!r}")
        try:
            frame = b"\x01" + self._encode(msg)
        except (OverflowError, TypeError, ValueError) as exc:
            raise LocalProtocolError(f"cannot encode {type(msg).__name__}: {exc}") from exc
        if len(frame) > self.max_bytes:
            raise LocalProtocolError(
                f"{type(msg).__name__} encodes to {len(frame)} bytes, "
                f"over the {self.max_bytes} byte limit"
            )
        return frame

    def size(self, msg: Message) -> int:
        """Encoded size in bytes, for the simulator's accounting (messages are built by our own
        cores from the codec's types, so the checks of ``encode`` are skipped on this hot path)."""
        return len(self.raw_encode(msg)) + 1

    def decode(self, frame: bytes | bytearray | memoryview) -> Message:
        """Decode one frame or raise ``WireError`` (never anything else)."""
        try:
            n = len(frame)
            if n > self.max_bytes:
                raise WireError(f"frame of {n} bytes exceeds the {self.max_bytes} byte limit")
            if n < 2:
                raise WireError(f"frame of {n} bytes is too short")
            if frame[0] != WIRE_VERSION:
                raise WireError(f"wire version {frame[0]}, this peer speaks {WIRE_VERSION}")
            return self._decoder.decode(memoryview(frame)[1:])
        except WireError:
            raise
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise WireError(str(exc)) from None
        except Exception as exc:  # the contract: garbage never raises anything but WireError
            raise WireError(f"undecodable frame: {type(exc).__name__}: {exc}") from None


def payload_tag(payload: bytes) -> int | None:
    """The tag of the message a payload frame holds, read without decoding it (for accounting:
    the simulator charges a routed message to the type it carries). None if it is no frame."""
    if len(payload) < 3 or payload[0] != WIRE_VERSION or not 0x90 <= payload[1] <= 0x9F:
        return None
    tag = payload[2]
    if tag < 0x80:
        return tag
    return payload[3] if tag == 0xCC and len(payload) > 3 else None


def codec_for(*tables: MessageTable, max_bytes: int = MAX_FRAME_BYTES) -> Codec:
    """The codec of a stack that speaks ``tables`` (``LocalProtocolError`` if they clash)."""
    return Codec(tables, max_bytes)


__all__ = [
    "MAX_FRAME_BYTES",
    "TAGS",
    "U8",
    "U16",
    "U32",
    "U63",
    "WIRE_VERSION",
    "Codec",
    "Finite",
    "Handle",
    "Message",
    "MessageTable",
    "Payload",
    "WireBytes",
    "codec_for",
    "payload_tag",
]
