"""The one wire codec: every message of every layer is defined as a ``Message`` struct and
encoded here, by the simulator (to charge each message its real size) and by the real runtime.

Theory of operation
-------------------
A frame is one version byte followed by a MessagePack array ``[tag, field1, field2, ...]``.
Messages are ``msgspec`` structs: frozen, slotted, array-encoded (no field names on the wire) and
tagged with a small integer, so a message costs a few bytes of framing on top of its fields.

msgspec was chosen because it validates while it decodes (types, lengths, no trailing bytes) in C,
so strict decoding costs nothing extra, and because encoding a small struct takes well under a
microsecond, which matters when the simulator encodes every one of millions of messages.

Layers register their own message types (``register``); tags are partitioned by layer so that
``dht`` never needs to know the upper layers' types:

====== ==========================
tags   layer
====== ==========================
1-31   dht (Pastry)
32-63  multicast and LBDD
64-127 pubsub
128+   runtime (sessions, client API)
====== ==========================

Decoding is strict: anything that is not exactly one well-formed registered message of the
current version, within the size limit, raises ``WireError`` and nothing else.
"""

from __future__ import annotations

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


class Message(msgspec.Struct, frozen=True, array_like=True, gc=False, tag=True):
    """Base of every wire message. Subclasses pass ``tag=<int>`` and are ``register``-ed."""

    #: Human name used in counters (class name unless overridden).
    kind: ClassVar[str] = "Message"


class Handle(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A node as other nodes know it: its id and its transport address."""

    id: WireBytes
    addr: WireBytes


_LAYER_RANGES: dict[str, range] = {
    "dht": range(1, 32),
    "multicast": range(32, 64),
    "pubsub": range(64, 128),
    "runtime": range(128, 256),
}

_registry: dict[int, type[Message]] = {}
_codec: Codec | None = None


def register(layer: str, *types: type[Message]) -> None:
    """Add message types to the wire table. Tags must be unique and inside the layer's range."""
    global _codec
    allowed = _LAYER_RANGES.get(layer)
    if allowed is None:
        raise LocalProtocolError(f"unknown layer {layer!r}; one of {sorted(_LAYER_RANGES)}")
    # Check everything before changing anything, so a refused call leaves the table as it was.
    staged: dict[int, type[Message]] = {}
    for cls in types:
        tag = cls.__struct_config__.tag
        if not isinstance(tag, int) or tag not in allowed:
            raise LocalProtocolError(f"{cls.__name__}: tag {tag!r} outside {layer} range {allowed}")
        other = staged.get(tag) or _registry.get(tag)
        if other is not None and other is not cls:
            raise LocalProtocolError(f"tag {tag} used by both {other.__name__} and {cls.__name__}")
        staged[tag] = cls
    for tag, cls in staged.items():
        _registry[tag] = cls
        cls.kind = cls.__name__
    _codec = None


def registered() -> dict[int, type[Message]]:
    return dict(sorted(_registry.items()))


class Codec:
    """Encoder and strict decoder over a fixed set of message types."""

    __slots__ = ("_classes", "_decoder", "_encode", "max_bytes", "raw_encode", "types")

    def __init__(self, types: dict[int, type[Message]], max_bytes: int = MAX_FRAME_BYTES) -> None:
        if not types:
            raise LocalProtocolError("a codec needs at least one message type")
        self.types = dict(types)
        self._classes = frozenset(self.types.values())
        self.max_bytes = max_bytes
        union: Any = Union[tuple(self.types.values())]  # noqa: UP007 - built at run time
        self._decoder = msgspec.msgpack.Decoder(union)
        self._encode = msgspec.msgpack.Encoder().encode
        #: The bare encoder (no version byte, no checks): a frame is ``1 + len(raw_encode(m))``
        #: bytes, which is how the simulator charges every message without building the frame.
        self.raw_encode = self._encode

    def encode(self, msg: Message) -> bytes:
        if type(msg) not in self._classes:
            raise LocalProtocolError(f"{type(msg).__name__} is not a registered wire message")
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
        cores from registered types, so the checks of ``encode`` are skipped on this hot path)."""
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


def codec() -> Codec:
    """The codec over every message registered so far (rebuilt when a layer registers more)."""
    global _codec
    if _codec is None:
        _codec = Codec(_registry)
    return _codec


def encode(msg: Message) -> bytes:
    return codec().encode(msg)


def decode(frame: bytes | bytearray | memoryview) -> Message:
    return codec().decode(frame)
