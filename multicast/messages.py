"""Wire messages of the LBDD topic mode (tags 40-63; 32-39 belong to prefix multicast).

Field order is the wire order; append, never reorder.

Three travel as the payload of a DHT ``Route`` to the topic's key (they must find the topic's
rendezvous, whoever that is now): ``TopicJoin``, ``TopicLeave`` (when the rendezvous is not yet
known) and ``TopicHandoff``. Everything else goes straight from one transport address to another
as a top-level frame, so that a 64 KiB slice is not copied into a ``Direct`` envelope on every hop;
the sender is the transport's source address.

A publication is named by (topic, publisher address, ``pid``): ``pid`` is a random 63-bit number
the publisher draws, so a restarted publisher cannot collide with its earlier publications.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Annotated

import msgspec

from rangecast.dht.wire import U8, U32, U63, Handle, Message, MessageTable, WireBytes

#: A topic name on the wire.
TopicName = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
#: Largest slice: a slice plus its header must fit the 256 KiB frame limit.
MAX_SLICE_BYTES = 192 * 1024
#: Largest publication, in slices (64 GiB in 64 KiB slices; the paper sent 8 GB).
MAX_SLICES = 1 << 20
#: Largest member list a rendezvous keeps: its push must fit one frame even with 64-byte
#: addresses (about 100 bytes a member on the wire).
MAX_MEMBERS = 2048
#: At most this many out-of-order slice indices are reported in a ``TopicPull``.
MAX_EXTRA = 4096

SliceBytes = Annotated[bytes, msgspec.Meta(max_length=MAX_SLICE_BYTES)]
SliceIndex = Annotated[int, msgspec.Meta(ge=0, lt=MAX_SLICES)]
SliceCount = Annotated[int, msgspec.Meta(ge=1, le=MAX_SLICES)]
Extra = Annotated[list[SliceIndex], msgspec.Meta(max_length=MAX_EXTRA)]

#: Dissemination modes, carried by every slice so that every node builds the same tree.
MODE_LBDD = 0  # LBDD tree with our near-bucket merge and widening (our variant)
MODE_LBDD_PAPER = 1  # LBDD tree, the paper's rule exactly (the default)
MODE_STAR = 2  # point-to-point: the publisher sends to every member (the paper's baseline)
MODES = (MODE_LBDD, MODE_LBDD_PAPER, MODE_STAR)


class TopicMember(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A member as the list names it: its handle and the nonce it drew when it joined. A node
    that leaves and joins again comes back with a new nonce, so that everyone sees a new member
    (one that has none of the publications under way) even if no list without it was pushed."""

    handle: Handle
    nonce: U63


Members = Annotated[list[TopicMember], msgspec.Meta(max_length=MAX_MEMBERS)]


def list_digest(members: Iterable[tuple[bytes, int]]) -> int:
    """63-bit digest of a member list: its (address, nonce) pairs, in any order."""
    h = hashlib.sha1(usedforsecurity=False)
    for addr, nonce in sorted(members):
        h.update(len(addr).to_bytes(1, "big") + addr + nonce.to_bytes(8, "big"))
    return int.from_bytes(h.digest()[:8], "big") >> 1


class TopicJoin(Message, tag=40, frozen=True):
    """Routed to the topic's key: ``member`` wants the member list. ``receiver``: it receives
    the topic's data (False: a publisher that only needs the list). ``version`` and ``digest``:
    the newest list it has seen, so that a rendezvous taking over never goes back in version.
    ``nonce``: drawn afresh at every join (see ``TopicMember``)."""

    topic: TopicName
    member: Handle
    nonce: U63
    receiver: bool
    version: U63
    #: Digest of the member's list (``list_digest``): two rendezvous incarnations may reuse a
    #: version number for different lists, and this tells them apart.
    digest: U63


class TopicLeave(Message, tag=41, frozen=True):
    """``member`` leaves the topic (direct to the rendezvous, or routed to the key)."""

    topic: TopicName
    member: Handle


class TopicMembers(Message, tag=42, frozen=True):
    """From the rendezvous: the full list of receivers, version ``version``."""

    topic: TopicName
    version: U63
    members: Members


class TopicHeartbeat(Message, tag=43, frozen=True):
    """Member to rendezvous, every ``heartbeat_s``: ``nonce`` is the member's (as in its join),
    ``version`` and ``digest`` its list."""

    topic: TopicName
    member: Handle
    nonce: U63
    receiver: bool
    version: U63
    #: Digest of the member's list (``list_digest``): two rendezvous incarnations may reuse a
    #: version number for different lists, and this tells them apart.
    digest: U63


class TopicBeat(Message, tag=44, frozen=True):
    """Rendezvous to member: the answer to a heartbeat from a member that is up to date."""

    topic: TopicName
    version: U63


class TopicData(Message, tag=45, frozen=True):
    """Slice ``index`` of ``total`` of publication (topic, publisher, pid); ``size`` is the
    publication's length in bytes, ``version`` the sender's member list."""

    topic: TopicName
    publisher: WireBytes
    pid: U63
    index: SliceIndex
    total: SliceCount
    size: U63
    mode: U8
    version: U63
    data: SliceBytes


class TopicAck(Message, tag=46, frozen=True):
    """Receiver to sender: slice ``index`` arrived (frees a slot of the sender's window)."""

    topic: TopicName
    publisher: WireBytes
    pid: U63
    index: SliceIndex


class TopicPull(Message, tag=47, frozen=True):
    """Receiver to the node it wants to be served by: "I have slices [0, have) and ``extra``;
    send me the rest". Replaces whatever the sender was doing for this receiver."""

    topic: TopicName
    publisher: WireBytes
    pid: U63
    #: The publication's mode, so that a node that has not seen a slice yet can pull its own
    #: parent in turn.
    mode: U8
    have: U32
    extra: Extra


class TopicStop(Message, tag=48, frozen=True):
    """Receiver to a node that is not (or no longer) its parent: stop sending me this
    publication."""

    topic: TopicName
    publisher: WireBytes
    pid: U63


class TopicHandoff(Message, tag=49, frozen=True):
    """Routed to the topic's key by a rendezvous that is no longer the key's root: the new root
    takes the lists over."""

    topic: TopicName
    version: U63
    members: Members
    publishers: Members


class TopicOffer(Message, tag=50, frozen=True):
    """Parent to a receiver that became its child in a path update: "I serve publication
    (topic, publisher, pid) now". A receiver that lacks slices of it pulls the parent."""

    topic: TopicName
    publisher: WireBytes
    pid: U63
    total: SliceCount
    size: U63
    mode: U8


TOPIC_MESSAGES: tuple[type[Message], ...] = (
    TopicJoin,
    TopicLeave,
    TopicMembers,
    TopicHeartbeat,
    TopicBeat,
    TopicData,
    TopicAck,
    TopicPull,
    TopicStop,
    TopicHandoff,
    TopicOffer,
)

#: The multicast layer's message table (tags 32-63; the LBDD topic mode's use 40-63).
MULTICAST_TABLE = MessageTable("multicast", range(32, 64), TOPIC_MESSAGES)

__all__ = [
    "MAX_EXTRA",
    "MAX_MEMBERS",
    "MAX_SLICES",
    "MAX_SLICE_BYTES",
    "MODES",
    "MODE_LBDD",
    "MODE_LBDD_PAPER",
    "MODE_STAR",
    "MULTICAST_TABLE",
    "TOPIC_MESSAGES",
    "TopicAck",
    "TopicBeat",
    "TopicData",
    "TopicHandoff",
    "TopicHeartbeat",
    "TopicJoin",
    "TopicLeave",
    "TopicMember",
    "TopicMembers",
    "TopicOffer",
    "TopicPull",
    "TopicStop",
    "list_digest",
]
