"""The runtime's wire messages (tags 128+): the signed envelope peers wrap every core message
in, and the client API. Field order is the wire order; append, never reorder.

Peer-to-peer frames are ``Sealed``: one core message (``body``, an encoded frame of the dht,
multicast or pubsub layer) signed by the sender's Ed25519 key over everything before ``sig``.
Client frames are plain requests and replies on a connection the client opened; they carry no
signature because a client is not a peer: it can do through the peer only what the peer's public
API allows (subscribe, publish, look at its status).
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from rangecast.dht.wire import U8, U16, U32, U63, Finite, Message, MessageTable, Payload, WireBytes
from rangecast.runtime.tokens import MAX_TOKEN_CHARS

Key = Annotated[bytes, msgspec.Meta(min_length=32, max_length=32)]
Signature = Annotated[bytes, msgspec.Meta(max_length=64)]
Text = Annotated[str, msgspec.Meta(max_length=4096)]
Name = Annotated[str, msgspec.Meta(max_length=128)]


class Sealed(Message, tag=128, frozen=True):
    """One core message from peer to peer, signed. ``src`` must embed the id of ``key``
    (SHA-1), ``dst`` must be the receiver's own address, and (``epoch``, ``seq``) must be new
    for this sender: a frame failing any of these is refused."""

    key: Key
    src: WireBytes
    dst: WireBytes
    #: The sender's boot epoch (µs) and per-boot frame counter: the anti-replay window's input.
    epoch: U63
    seq: U63
    body: Payload
    sig: Signature = b""


# ------------------------------------------------------------------------------- client API


class Hello(Message, tag=129, frozen=True):
    """Who are you? (a joining peer asks its contact; a client asks the peer it talks to).
    ``token``: the client's token, for a peer that requires one (``runtime/tokens.py``)."""

    token: Annotated[str, msgspec.Meta(max_length=MAX_TOKEN_CHARS)] = ""


class HelloReply(Message, tag=130, frozen=True):
    """``error`` set: the peer requires a client token and the hello had none, or a wrong
    one; the connection may say hello again, but its requests are refused meanwhile."""

    addr: WireBytes
    key: Key
    state: Name
    schemas: list[Name]
    error: Text = ""


class SubscribeRequest(Message, tag=131, frozen=True):
    req: U32
    schema: Name
    expr: Text


class SubscribeReply(Message, tag=132, frozen=True):
    """Sent once every piece of the subscription is stored and acknowledged (or at once, with
    ``error`` set). ``attributes`` names the schema's attributes in event order."""

    req: U32
    sid: U32
    attributes: list[Name]
    error: Text = ""


class Notification(Message, tag=133, frozen=True):
    """An event delivered for the client's subscription ``sid``."""

    sid: U32
    eid: U63
    schema: Name
    values: list[Finite | None]


class UnsubscribeRequest(Message, tag=134, frozen=True):
    req: U32
    sid: U32


class PublishRequest(Message, tag=135, frozen=True):
    """``values`` by attribute name; the peer validates them against the schema."""

    req: U32
    schema: Name
    values: dict[Name, Finite | None]


class PublishReply(Message, tag=136, frozen=True):
    """``eid`` of the accepted event, or ``error``; ``retry_after_ms`` > 0 says the refusal
    is for load (a publish rate, or the peer saturated) and may succeed after that long."""

    req: U32
    eid: U63
    error: Text = ""
    retry_after_ms: U32 = 0


class StatusRequest(Message, tag=137, frozen=True):
    req: U32


class StatusReply(Message, tag=138, frozen=True):
    """The peer's status as JSON text (its fields are documented in docs/runtime.md)."""

    req: U32
    json: Annotated[str, msgspec.Meta(max_length=1 << 20)]


class Done(Message, tag=139, frozen=True):
    """A request that returns nothing succeeded (``error`` empty) or failed."""

    req: U32
    error: Text = ""


# ------------------------------------------------------------------------- link sessions


class SessionOpen(Message, tag=140, frozen=True):
    """First frame on a link: the initiator's identity and an ephemeral X25519 key, signed
    (Ed25519) over everything before ``sig``. ``dst`` is the address the initiator means to
    reach, so only that peer accepts."""

    key: Key
    src: WireBytes
    dst: WireBytes
    eph: Key
    sig: Signature = b""


class SessionAccept(Message, tag=141, frozen=True):
    """The responder's answer (the only frame ever written back on a link): its identity and
    ephemeral key, signed over both ephemeral keys and the opening frame, which binds the two
    halves of the handshake together."""

    key: Key
    src: WireBytes
    dst: WireBytes
    eph: Key
    sig: Signature = b""


class Authed(Message, tag=142, frozen=True):
    """A core message on an established link. ``tag`` is HMAC-SHA256 (truncated to 16 bytes)
    under the session key over the frame's number on the link and ``body``: the number is
    implicit, as TCP keeps frames in order, so a replayed, dropped or reordered frame fails."""

    body: Payload
    tag: Annotated[bytes, msgspec.Meta(min_length=16, max_length=16)]


#: Most core bodies and hop acks one ``Batch`` may carry (the decoder refuses more).
MAX_BATCH_BODIES = 256
MAX_BATCH_ACKS = 1024


class Batch(Message, tag=143, frozen=True):
    """Several core messages in one ``Authed`` frame of a link (``runtime/batching.py``):
    ``bodies`` are encoded core frames, each checked by the ``Gate`` as if it had come alone;
    ``acks`` are the uids of ``HopAck``s for this destination, each expanded back into its own
    ``HopAck`` on receipt. Never nested, never empty, never outside a session frame."""

    bodies: Annotated[list[Payload], msgspec.Meta(max_length=MAX_BATCH_BODIES)]
    acks: Annotated[list[U63], msgspec.Meta(max_length=MAX_BATCH_ACKS)]
    #: The uids of ``RouteDone``s (end-to-end acks) for this destination, likewise; last and
    #: optional, so a batch without them is the same bytes as before they existed.
    dones: Annotated[list[U63], msgspec.Meta(max_length=MAX_BATCH_ACKS)] = msgspec.field(
        default_factory=list
    )


# ------------------------------------------------------------------- peer admission
# The handshake of a peer holding a swarm key (``--swarm-key``; ``SwarmKey`` in
# runtime/identity.py, the checks in runtime/guard.py). Tags 190+: away from the client API's
# (144 up) and the tree state's (200+). A peer without a key never sends them, so its
# handshake is the same bytes as before they existed.

#: An HMAC-SHA256 under the swarm key (32 bytes; anything else is a wrong proof).
Proof = Annotated[bytes, msgspec.Meta(max_length=32)]


class KeyedOpen(SessionOpen, tag=190, frozen=True):
    """A ``SessionOpen`` from a peer holding a swarm key: ``proof`` is HMAC-SHA256 under the
    key over the signed opening (both node ids and addresses, the initiator's ephemeral key).
    A peer without a key takes it for a plain opening, and its plain answer tells the opener
    so."""

    proof: Proof = b""


class KeyedAccept(SessionAccept, tag=191, frozen=True):
    """A keyed responder's ``SessionAccept``: ``proof`` is HMAC-SHA256 under the swarm key over
    the signed answer (both ephemeral keys, both ids, a hash of the opening)."""

    proof: Proof = b""


# ---------------------------------------------------------------------------- tree state
# ``rangecast swarm check`` reads every peer's part of the distributed 2d-tree
# (runtime/treestate.py builds it; testkit/live.py checks it). Tags 200+: well away from
# the client API's, which grows from 144 up.

#: Most items (nodes, rows, pieces) one ``TreeReply`` page carries: a piece encodes to under
#: 100 bytes, so a page stays far below the frame limit (runtime/treestate.py pages by it).
TREE_PAGE_ITEMS = 1000


class WireTid(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A tree node's id (``TreeId``): attribute tree, depth, path bits."""

    attr: U8
    depth: U8
    path: U63


class WirePiece(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """One stored subscription piece, without its predicates (``StoredSub``'s placement)."""

    subscriber: WireBytes
    sid: U32
    gen: U16
    base: U8
    piece: U16
    pieces: U16
    piece_lo: Finite
    piece_hi: Finite
    x: Finite
    y: Finite


class WireHosted(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """One copy of a tree node on the replying peer: the primary or a replica. A node with
    many pieces is cut over several pages: each part repeats the header with the next pieces."""

    schema: Name
    tid: WireTid
    primary: bool
    leaf: bool
    rows: Annotated[list[WireTid], msgspec.Meta(max_length=TREE_PAGE_ITEMS)]
    pieces: Annotated[list[WirePiece], msgspec.Meta(max_length=TREE_PAGE_ITEMS)]


class WireDomain(msgspec.Struct, frozen=True, array_like=True, gc=False):
    name: Name
    lo: Finite
    hi: Finite


class WireSchema(msgspec.Struct, frozen=True, array_like=True, gc=False):
    name: Name
    attributes: Annotated[list[WireDomain], msgspec.Meta(max_length=255)]


class WireTreeConfig(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """The overlay configuration the tree follows (``OverlayConfig``'s checked fields)."""

    replicas: U16
    internal_replicas: U16
    max_depth: U8
    load_balancing: bool
    cutoff: Finite


class TreeRequest(Message, tag=200, frozen=True):
    """Page ``page`` of the peer's tree state. Page 0 takes a fresh picture of it; the later
    pages come from that same picture (kept per connection), so the pages agree."""

    req: U32
    page: U32


class TreeReply(Message, tag=201, frozen=True):
    """One page of the peer's tree state; ``more``: ask for the next page. ``schemas`` and
    ``config`` are sent on page 0 only; ``error`` set: no state (the peer is not part of an
    overlay, or a page was asked for out of order)."""

    req: U32
    page: U32
    more: bool
    state: Name
    nodes: Annotated[list[WireHosted], msgspec.Meta(max_length=TREE_PAGE_ITEMS)]
    schemas: Annotated[list[WireSchema], msgspec.Meta(max_length=256)]
    config: WireTreeConfig | None = None
    error: Text = ""


#: The runtime's message table: sessions, envelopes and the client API.
RUNTIME_TABLE = MessageTable(
    "runtime",
    range(128, 256),
    (
        Sealed,
        Hello,
        HelloReply,
        SubscribeRequest,
        SubscribeReply,
        Notification,
        UnsubscribeRequest,
        PublishRequest,
        PublishReply,
        StatusRequest,
        StatusReply,
        Done,
        SessionOpen,
        SessionAccept,
        Authed,
        Batch,
        KeyedOpen,
        KeyedAccept,
        TreeRequest,
        TreeReply,
    ),
)
