"""The broker overlay's wire messages (tags 96-127).

Six types: the four routing-table messages (``Advertise``, ``Unadvertise``, ``Subscribe``,
``Unsubscribe``), ``Publish``, and ``Control``, a generic typed control message (``op`` says
which) that the systems built on the substrate use for their own protocols (OctopiA's CIB_SET,
POP's TRM/RRM/RAM, GRAPE's TIR/TIA, the migration's MUM/MCM, Kyra's proxy-to-origin forward).

Tags 96-127 (one-byte tags on the wire; ``pubsub`` owns 64-95). The layer's wire table is
``BROKER_TABLE``; whoever builds a broker stack builds its codec from it (``broker_codec``: the
the broker messages alone).

Sizes follow the substrate's cost model (BASELINES.md 4.6) through the real encoding: a box is its
2 x d bounds as float64 (64 B for 4 attributes, plus one MessagePack marker per float and the
three small masks: 78 B), an event is d float64 values (4 x 9 B + 1). Every message ends with
``hdr``, a list of small ints the systems' hooks fill (a CIV, a trace flag, a trace id); trailing
fields at their defaults are left off the wire (``omit_defaults``), so an empty header is free.
"""

from __future__ import annotations

from typing import Annotated, ClassVar

import msgspec

from rangecast.brokers.filters import Box, Dim
from rangecast.dht.errors import RemoteProtocolError
from rangecast.dht.wire import U63, Codec, Finite, Message, MessageTable, codec_for

__all__ = [
    "BROKER_MESSAGES",
    "BROKER_TABLE",
    "BROKER_TAGS",
    "Advertise",
    "Control",
    "Publish",
    "Subscribe",
    "Unadvertise",
    "Unsubscribe",
    "WireBox",
    "box_from_wire",
    "box_to_wire",
    "broker_codec",
]

U16 = Annotated[int, msgspec.Meta(ge=0, le=0xFFFF)]
U32 = Annotated[int, msgspec.Meta(ge=0, le=0xFFFFFFFF)]
I64 = Annotated[int, msgspec.Meta(ge=-(1 << 63), le=(1 << 63) - 1)]
#: At most 63 attributes: a box's masks are one U63 each.
Bounds = Annotated[list[Finite], msgspec.Meta(max_length=63)]
Values = Annotated[list[Finite | None], msgspec.Meta(max_length=63)]
Header = Annotated[list[I64], msgspec.Meta(max_length=4096)]
Ids = Annotated[list[U63], msgspec.Meta(max_length=65535)]

#: The tag range of the broker messages.
BROKER_TAGS = range(96, 128)


class WireBox(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A ``Box`` on the wire: per-attribute bounds, and bit masks of the open lower ends, the
    open upper ends and the free (unconstrained) attributes."""

    lo: Bounds
    hi: Bounds
    lo_open: U63
    hi_open: U63
    free: U63


def box_to_wire(box: Box) -> WireBox:
    lo_open = hi_open = 0
    for i, (_, _, lo_o, hi_o) in enumerate(box.dims):
        lo_open |= lo_o << i
        hi_open |= hi_o << i
    return WireBox([d[0] for d in box.dims], [d[1] for d in box.dims], lo_open, hi_open, box.free)


def box_from_wire(w: WireBox, arity: int) -> Box:
    """The box ``w`` carries, checked against the receiver's schema arity (a
    ``RemoteProtocolError`` for a box of another shape or with an empty interval)."""
    n = len(w.lo)
    if n != arity or len(w.hi) != n or (w.lo_open | w.hi_open | w.free) >> n:
        raise RemoteProtocolError(f"a box of {n} attributes, the schema has {arity}")
    dims: list[Dim] = []
    for i in range(n):
        lo, hi = w.lo[i], w.hi[i]
        lo_o, hi_o = bool(w.lo_open >> i & 1), bool(w.hi_open >> i & 1)
        if lo > hi or (lo == hi and (lo_o or hi_o)):
            raise RemoteProtocolError(f"attribute {i} of a box is empty")
        dims.append((lo, hi, lo_o, hi_o))
    return Box(tuple(dims), w.free)


class _BrokerMessage(Message, frozen=True, omit_defaults=True):
    """Base of the broker messages: every one names the overlay it travels on."""

    kind: ClassVar[str] = "BrokerMessage"


class Advertise(_BrokerMessage, tag=96, frozen=True, omit_defaults=True):
    """Advertisement ``ad`` (its id is also its tree id, TID) covering the events in ``box``."""

    kind: ClassVar[str] = "Advertise"
    overlay: U16
    ad: U63
    box: WireBox
    hdr: Header = []


class Unadvertise(_BrokerMessage, tag=97, frozen=True, omit_defaults=True):
    kind: ClassVar[str] = "Unadvertise"
    overlay: U16
    ad: U63
    hdr: Header = []


class Subscribe(_BrokerMessage, tag=98, frozen=True, omit_defaults=True):
    """Subscription ``sub`` of broker ``origin``; ``tids``: the advertisement trees it is bound
    to (tree-ID routing on a cyclic graph only)."""

    kind: ClassVar[str] = "Subscribe"
    overlay: U16
    sub: U63
    box: WireBox
    origin: U32
    tids: Ids = []
    hdr: Header = []


class Unsubscribe(_BrokerMessage, tag=99, frozen=True, omit_defaults=True):
    kind: ClassVar[str] = "Unsubscribe"
    overlay: U16
    sub: U63
    tids: Ids = []
    hdr: Header = []


class Publish(_BrokerMessage, tag=100, frozen=True, omit_defaults=True):
    """Publication ``eid`` with its attribute values; ``tid``: the advertisement tree it travels
    (tree-ID routing only)."""

    kind: ClassVar[str] = "Publish"
    overlay: U16
    eid: U63
    values: Values
    tid: U63 | None = None
    hdr: Header = []


class Control(_BrokerMessage, tag=101, frozen=True, omit_defaults=True):
    """A system's own control message: ``op`` names it (the system's table of op codes),
    ``ref`` the ad, subscription, publisher or session it is about; ``ints``, ``blob`` (bit
    vectors), ``box`` and ``values`` carry its content."""

    kind: ClassVar[str] = "Control"
    overlay: U16
    op: U16
    ref: U63 = 0
    ints: Header = []
    blob: Annotated[bytes, msgspec.Meta(max_length=65536)] = b""
    box: WireBox | None = None
    values: Values | None = None
    hdr: Header = []


#: Every broker message type, for the layer's wire table.
BROKER_MESSAGES: tuple[type[Message], ...] = (
    Advertise,
    Unadvertise,
    Subscribe,
    Unsubscribe,
    Publish,
    Control,
)


BROKER_TABLE = MessageTable("brokers", BROKER_TAGS, BROKER_MESSAGES)


def broker_codec() -> Codec:
    """The codec of a broker stack: the broker messages alone."""
    return codec_for(BROKER_TABLE)
