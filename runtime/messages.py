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

from rangecast.dht.wire import U32, U63, Finite, Message, MessageTable, Payload, WireBytes
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
    ),
)
