"""The content-based overlay's wire messages (tags 64-95).

The seven message types of the thesis (section 4.2.1) map onto these: ProbeSubMessage and
InsertSubMessage are one ``ProbeSub`` (the home stores the subscription as soon as the probe finds
it, then acknowledges with ``InstallAck``), LeafUpdateMessage is ``LeafUpdate``,
TransferSubMessage is ``TransferSub``, ProbePubMessage is ``ProbePub``, EventDeliveryMessage is
``EventDelivery``; ProbePubMulticastMessage is ``ProbePubMulticast`` (its targets grouped by the
multicast layer's ``split``). ``LbddDelivery`` carries an event down an LBDD tree of subscribers.

Routed messages travel as the payload of a DHT ``Route`` to the key of their ``target`` tree
node; ``InstallAck`` and ``EventDelivery`` go point-to-point to the subscriber's address.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from rangecast.dht.errors import LocalProtocolError
from rangecast.dht.wire import U8, U63, Finite, Handle, Message, MessageTable

U16 = Annotated[int, msgspec.Meta(ge=0, le=0xFFFF)]
U32 = Annotated[int, msgspec.Meta(ge=0, le=0xFFFFFFFF)]
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
Depth = Annotated[int, msgspec.Meta(ge=0, le=62)]

#: ProbeSub operations.
OP_INSERT, OP_REMOVE = 0, 1


class Ref(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A tree node on the wire: schema, attribute index, depth and path bits."""

    schema: Name
    attr: U8
    depth: Depth
    path: U63


class Pred(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """One predicate: attribute index, bounds, and openness (bit 0: lower open, bit 1: upper)."""

    attr: U8
    lo: Finite
    hi: Finite
    flags: U8


class StoredSub(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A stored subscription object (thesis 3.3.1: subscriber handle, sid, subscription) and
    where it is placed: the base attribute, which load-balancing piece of it this is, the piece's
    range, and the (widened) point it is stored at."""

    subscriber: Handle
    sid: U32
    gen: U16
    preds: list[Pred]
    base: U8
    piece: U16
    pieces: U16
    piece_lo: Finite
    piece_hi: Finite
    x: Finite
    y: Finite


class Event(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """An event: one value per schema attribute, None where it is absent (a partial event)."""

    eid: U63
    schema: Name
    values: list[Finite | None]


class ProbeSub(Message, tag=64, frozen=True):
    """RndLeafProbe: look for the leaf holding ``sub``'s point, starting at ``target``.
    ``via_lrt``: an internal node's leaf table named ``target``, so it exists or is being
    created; ``jumps`` bounds the jump-ups."""

    op: U8
    target: Ref
    via_lrt: bool
    jumps: U8
    sub: StoredSub


class InstallAck(Message, tag=65, frozen=True):
    """To the subscriber: a piece was stored (op insert) or removed (op remove); ``found``
    false on an insert: the leaf refused it (full, ``OverlayConfig.max_leaf_bytes``)."""

    op: U8
    sid: U32
    gen: U16
    piece: U16
    found: bool


class LeafUpdate(Message, tag=66, frozen=True):
    """To the parent (and on to the root): ``split`` became internal with two leaf children."""

    split: Ref
    #: Depth of the ancestor this copy is for (the message climbs one level per hop).
    at_depth: Depth


class TransferSub(Message, tag=67, frozen=True):
    """Creates leaf ``target`` with the subscriptions its parent's split gave it. ``seen``: events
    the parent matched recently, so that no subscription matches an event twice."""

    target: Ref
    subs: list[StoredSub]
    seen: list[U63]


class ProbePub(Message, tag=68, frozen=True):
    """RndRegionProbe: match ``event`` on attribute ``target.attr`` in the part of the target
    region inside zone ``scope`` (a node at or below ``target`` in the tree)."""

    event: Event
    target: Ref
    scope_depth: Depth
    scope_path: U63
    via_lrt: bool
    jumps: U8


class EventDelivery(Message, tag=69, frozen=True):
    """To the subscriber: ``event`` matched its subscriptions ``sids``."""

    event: Event
    sids: list[U32]


class ProbeTarget(msgspec.Struct, frozen=True, array_like=True, gc=False, omit_defaults=True):
    """One target of a ``ProbePubMulticast``: what a ``ProbePub`` would carry besides the event
    (the schema is the event's). The scope is stored relative to the target (``below`` more
    levels, ``below_path`` their bits), and trailing fields at their defaults are left off the
    wire: a target whose scope is itself costs three or four small integers."""

    attr: U8
    depth: Depth
    path: U63
    via_lrt: bool = False
    jumps: U8 = 0
    below: Depth = 0
    below_path: U63 = 0

    @classmethod
    def make(
        cls,
        attr: int,
        depth: int,
        path: int,
        scope_depth: int,
        scope_path: int,
        via_lrt: bool,
        jumps: int,
    ) -> ProbeTarget:
        below = scope_depth - depth
        if below < 0 or scope_path >> below != path:
            raise LocalProtocolError("a probe's scope must lie at or below its target")
        return cls(attr, depth, path, via_lrt, jumps, below, scope_path & ((1 << below) - 1))

    @property
    def scope_depth(self) -> int:
        return self.depth + self.below

    @property
    def scope_path(self) -> int:
        return (self.path << self.below) | self.below_path


class ProbePubMulticast(Message, tag=70, frozen=True):
    """RndRegionProbe targets that share the next hop: one event, several tree nodes. Each hop
    serves the targets it is root of and regroups the rest (``multicast.prefix.split``)."""

    event: Event
    #: Multicast hops so far (bounded by ``multicast.prefix.MAX_HOPS``).
    hops: U8
    targets: Annotated[list[ProbeTarget], msgspec.Meta(min_length=1, max_length=4096)]


class Relay(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A subscriber below the recipient of an ``LbddDelivery``: its matched subscriptions and
    its parent, an earlier index in the list, or -1 for the recipient itself."""

    subscriber: Handle
    sids: list[U32]
    parent: Annotated[int, msgspec.Meta(ge=-1, le=0xFFFF)]


class LbddDelivery(Message, tag=71, frozen=True):
    """To a subscriber: ``event`` matched its subscriptions ``sids``; pass it on to the
    subscribers in ``below`` (its subtree of the leaf's LBDD tree, parents listed first)."""

    event: Event
    sids: list[U32]
    below: Annotated[list[Relay], msgspec.Meta(max_length=65535)]


class Notify(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """One subscriber of a ``DeliveryMulticast`` and its matched subscriptions."""

    subscriber: Handle
    sids: list[U32]


class DeliveryMulticast(Message, tag=72, frozen=True):
    """Notifications of one event grouped per next hop towards the subscribers' ids (the
    prefix-grouped multicast used for delivery); each hop regroups."""

    event: Event
    hops: U8
    targets: Annotated[list[Notify], msgspec.Meta(min_length=1, max_length=65535)]


class ReplicaPut(Message, tag=73, frozen=True):
    """The whole state of tree node ``target`` (whether it is a leaf, its subscription pieces,
    the events it matched recently), from its primary to a member of its replica set; with
    ``handoff``, from a peer that is no longer the node's root to the one that now is, which
    takes the node over. The LeafNodeRoutingTable of an internal node is not replicated."""

    target: Ref
    leaf: bool
    subs: list[StoredSub]
    seen: list[U63]
    handoff: bool


class ReplicaOp(Message, tag=74, frozen=True):
    """One change to a replicated leaf: ``op`` (insert or remove) of piece ``sub``."""

    target: Ref
    op: U8
    sub: StoredSub


class ReplicaDrop(Message, tag=75, frozen=True):
    """The sender no longer counts on the receiver as a replica of ``target``."""

    target: Ref


#: Direct messages whose receiver keeps or passes on what they carry for others (a tree node's
#: copy or hand-off, a relay of probes or notifications): confirmed end to end where the DHT
#: does (``send_direct(..., confirm=True)``, ``dht.e2e``). The rest end at their receiver (a
#: notification to the subscriber's peer, an install's answer, a release): an answer would be
#: only the word of the one party they concern.
CUSTODY: frozenset[type[Message]] = frozenset(
    {ReplicaPut, ReplicaOp, ProbePubMulticast, LbddDelivery, DeliveryMulticast}
)

#: The content-based overlay's message table.
PUBSUB_TABLE = MessageTable(
    "pubsub",
    range(64, 96),
    (
        ProbeSub,
        InstallAck,
        LeafUpdate,
        TransferSub,
        ProbePub,
        EventDelivery,
        ProbePubMulticast,
        LbddDelivery,
        DeliveryMulticast,
        ReplicaPut,
        ReplicaOp,
        ReplicaDrop,
    ),
)
