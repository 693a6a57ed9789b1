"""The DHTs' wire messages (tags 1-31): Pastry's (with its end-to-end acknowledgements), and
Kademlia's lookup steps (Kademlia reuses
``Route``, ``HopAck``, ``Ping``, ``Pong``, ``Direct`` and ``Leave``). Field order is the wire
order; append, never reorder."""

from __future__ import annotations

from typing import Annotated

import msgspec

from rangecast.dht.wire import U8, U63, Handle, Message, MessageTable, Payload, WireBytes

#: A routing-table row number, or -1 for "none yet".
Row = Annotated[int, msgspec.Meta(ge=-1, le=255)]
#: A root's proof on its ``RouteDone`` (``dht.notary``): a real peer's is its Ed25519 public key
#: and signature, 96 bytes.
Proof = Annotated[bytes, msgspec.Meta(max_length=128)]


class Route(Message, tag=1, frozen=True):
    """An application message travelling hop by hop towards the root of ``key``."""

    uid: U63
    key: WireBytes
    origin: Handle
    hops: U8
    payload: Payload


class HopAck(Message, tag=2, frozen=True):
    """Next hop's receipt for a ``Route``; a missing ack marks the next hop failed."""

    uid: U63


class JoinRequest(Message, tag=3, frozen=True):
    """Routed to the joiner's own id; every node on the way sends the joiner routing rows."""

    joiner: Handle
    #: Shared-prefix length at the previous hop; -1 at the first hop. Rows up to it were sent.
    prev_row: Row
    hops: U8
    #: For hop acknowledgements, as a ``Route``'s uid.
    uid: U63


class JoinRows(Message, tag=4, frozen=True):
    """Routing-table rows (flattened) from a node on the join path, the sender included."""

    sender: Handle
    entries: list[Handle]


class JoinReply(Message, tag=5, frozen=True):
    """From the joiner's root: its leaf set, from which the joiner builds its own."""

    root: Handle
    leaves: list[Handle]


class Announce(Message, tag=6, frozen=True):
    """A node tells others it exists (after joining, or to a newly learnt leaf)."""

    node: Handle


class LeafSetRequest(Message, tag=7, frozen=True):
    sender: Handle


class LeafSetReply(Message, tag=8, frozen=True):
    sender: Handle
    leaves: list[Handle]


class Ping(Message, tag=9, frozen=True):
    """Leaf-set keep-alive."""

    sender: Handle


class Pong(Message, tag=10, frozen=True):
    sender: Handle


class RowRequest(Message, tag=11, frozen=True):
    """Lazy routing-table repair: ask a peer for its row ``row``."""

    sender: Handle
    row: U8


class RowReply(Message, tag=12, frozen=True):
    sender: Handle
    row: U8
    entries: list[Handle]


class Direct(Message, tag=13, frozen=True):
    """A point-to-point application message (no routing)."""

    sender: Handle
    payload: Payload


class Leave(Message, tag=14, frozen=True):
    """Graceful departure: the receiver drops the sender now instead of after a timeout."""

    sender: Handle


class FindNode(Message, tag=15, frozen=True):
    """Kademlia: "the ``k`` nodes you know closest to ``target``", one step of a lookup."""

    lid: U63
    sender: Handle
    target: WireBytes


class FoundNodes(Message, tag=16, frozen=True):
    """Kademlia: the answer to ``FindNode`` (the sender's closest contacts, closest first)."""

    lid: U63
    sender: Handle
    nodes: list[Handle]


class RouteDone(Message, tag=17, frozen=True):
    """End-to-end acknowledgement of a ``Route`` (``e2e_acks``): sent by the key's root to the
    hop it came from, and passed back hop by hop along the reverse path to the origin. With a
    notary (``dht.notary``) the root names itself (``root``, its node id) and signs (``proof``);
    without one both are empty. It also answers an ``AckedDirect``, from its receiver (never
    signed: the receiver is the end)."""

    uid: U63
    root: WireBytes = b""
    proof: Proof = b""


class RouteWait(Message, tag=18, frozen=True):
    """From a hop that is re-routing a ``Route`` (a loss further on): its upstream hops extend
    their deadline instead of blaming it, and pass the word on towards the origin. ``by`` is
    the node id of the hop that re-routed (relays keep it): each hop's budget of waits is
    counted per ``by`` (``dht.e2e``)."""

    uid: U63
    by: WireBytes


class AckedDirect(Message, tag=19, frozen=True):
    """A ``Direct`` whose receiver answers ``RouteDone(uid)`` (``e2e_acks``, ``dht.e2e``): a
    type of its own so that a plain ``Direct`` keeps its bytes (msgspec writes every field of
    an array-like struct, defaults included)."""

    uid: U63
    sender: Handle
    payload: Payload


#: The messages that carry an application payload (``payload``): the simulator charges their
#: bytes to the payload's type, and its run log names them by it.
CARRIERS: frozenset[type[Message]] = frozenset({Route, Direct, AckedDirect})

#: The DHTs' message table: every stack's codec includes it (``codec_for(DHT_TABLE, ...)``).
DHT_TABLE = MessageTable(
    "dht",
    range(1, 32),
    (
        Route,
        HopAck,
        JoinRequest,
        JoinRows,
        JoinReply,
        Announce,
        LeafSetRequest,
        LeafSetReply,
        Ping,
        Pong,
        RowRequest,
        RowReply,
        Direct,
        Leave,
        FindNode,
        FoundNodes,
        RouteDone,
        RouteWait,
        AckedDirect,
    ),
)

__all__ = [
    "CARRIERS",
    "DHT_TABLE",
    "AckedDirect",
    "Announce",
    "Direct",
    "FindNode",
    "FoundNodes",
    "Handle",
    "HopAck",
    "JoinReply",
    "JoinRequest",
    "JoinRows",
    "LeafSetReply",
    "LeafSetRequest",
    "Leave",
    "Ping",
    "Pong",
    "Route",
    "RouteDone",
    "RouteWait",
    "RowReply",
    "RowRequest",
]
