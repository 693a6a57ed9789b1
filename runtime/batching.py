"""Fewer frames per event: several core messages per link frame, hop acks coalesced.

Theory of operation
-------------------
A peer's outgoing link (``runtime/peer.py``, ``_Link``) queues what the core sends to one
destination. Its task drains everything queued when it wakes (one scheduler tick's worth; under
load, many messages) and ``pack`` turns that into as few session frames as the bounds allow:

* a lone message goes as it always did: its encoded body in one ``Authed`` frame;
* two or more go as ``Batch`` messages (``runtime/messages.py``): the encoded core bodies in
  ``bodies`` and, instead of one ``HopAck`` body per acknowledged hop, just their uids in
  ``acks`` (9 bytes each instead of 12 plus a body header), and the end-to-end acks
  (``RouteDone``) likewise in ``dones``. Each ``Batch`` is one ``Authed`` frame, so one HMAC
  and one length prefix stand for all of them.

The link queue holds ``QueueItem``-s: an encoded body (``bytes``), the uid of a ``HopAck``
(an ``int`` >= 0) or the complement ``~uid`` of a ``RouteDone``'s uid (an ``int`` < 0), which
is how acks stay recognisable without decoding anything. A queue holding only acks may wait up
to ``BatchConfig.ack_delay_s`` for other traffic to the same peer to ride with
(``only_acks``); acks are off the delivery path (a hop ack only clears the previous hop's
pending entry, whose deadline is ``ack_floor_s``, 2 s at the runtime; an end-to-end ack's
deadline is seconds longer), so the delay costs no latency.

Receiving (``unpack``) is strict and never raises: a frame whose body is tagged ``Batch`` must
decode as exactly one ``Batch`` of the wire codec, with at least one message, within the
decoder's bounds (``MAX_BATCH_BODIES`` bodies, ``MAX_BATCH_ACKS`` acks, the session frame's
size); anything else is counted ("malformed batch") and dropped whole. Each body then passes the
``Gate``'s checks exactly as if it had come in a frame of its own, and a batch in which any body
fails them is dropped whole too (``runtime/peer.py``, ``_on_authed``): nothing of it reaches the
core, so a batch is never half-applied.

Everything here is sans-IO; the peer owns the queue, the clock and the socket.
"""

from __future__ import annotations

from dataclasses import dataclass

from rangecast.dht.errors import LocalProtocolError, WireError
from rangecast.dht.messages import HopAck, RouteDone
from rangecast.dht.wire import MAX_FRAME_BYTES, Codec, payload_tag
from rangecast.runtime.messages import MAX_BATCH_ACKS, MAX_BATCH_BODIES, Batch

#: What a link's queue holds: an encoded core body, the uid of a ``HopAck`` to send, or the
#: complement (``~uid``, negative) of a ``RouteDone``'s.
QueueItem = bytes | int


def done_item(uid: int) -> int:
    """The queue item standing for ``RouteDone(uid)``."""
    return ~uid


def _ack_message(item: int) -> HopAck | RouteDone:
    return HopAck(item) if item >= 0 else RouteDone(~item)


#: The wire tag of ``Batch`` (read from the body without decoding it).
BATCH_TAG: int = Batch.__struct_config__.tag  # type: ignore[assignment]

#: Bytes a ``Batch`` adds around its contents (version, array, tag and two list headers), and
#: per body (a MessagePack bin header) and per ack (a uint64), at most.
_BATCH_OVERHEAD = 16
_PER_BODY = 5
_PER_ACK = 9
#: An ack delay above this is refused: the runtime's hop-ack deadline is ``ack_floor_s`` (2 s),
#: and an ack must stay far inside it.
MAX_ACK_DELAY_S = 0.1


@dataclass(frozen=True, slots=True)
class BatchConfig:
    """How a link packs what it has queued (``PeerConfig.batching``)."""

    #: Off: one frame per message, as before batching (for comparisons).
    enabled: bool = True
    #: Messages drained from a link's queue per send (bodies and acks together).
    drain: int = 512
    #: Bodies per ``Batch`` (at most ``MAX_BATCH_BODIES``, which the receiver enforces).
    max_bodies: int = MAX_BATCH_BODIES
    #: Acks per ``Batch`` (at most ``MAX_BATCH_ACKS``).
    max_acks: int = MAX_BATCH_ACKS
    #: Encoded size a ``Batch`` aims to stay under; a body bigger than this goes alone.
    max_bytes: int = 64 * 1024
    #: How long a link holding only hop acks waits for other traffic to the same peer (the
    #: peer caps it at a tenth of its DHT's ``ack_floor_s``). Measured on 32 peers at 20
    #: events/s: 0 s -> 0.73 frames per message, 5 ms -> 0.67, 50 ms -> 0.57.
    ack_delay_s: float = 0.05

    def __post_init__(self) -> None:
        if self.drain < 1:
            raise LocalProtocolError(f"batching.drain must be positive, got {self.drain}")
        if not 1 <= self.max_bodies <= MAX_BATCH_BODIES:
            raise LocalProtocolError(f"batching.max_bodies must be in 1..{MAX_BATCH_BODIES}")
        if not 1 <= self.max_acks <= MAX_BATCH_ACKS:
            raise LocalProtocolError(f"batching.max_acks must be in 1..{MAX_BATCH_ACKS}")
        limit = MAX_FRAME_BYTES - 1024
        if not 1024 <= self.max_bytes <= limit:
            raise LocalProtocolError(f"batching.max_bytes must be in 1024..{limit}")
        if not 0.0 <= self.ack_delay_s <= MAX_ACK_DELAY_S:
            raise LocalProtocolError(f"batching.ack_delay_s must be in 0..{MAX_ACK_DELAY_S}")


def only_acks(items: list[QueueItem]) -> bool:
    """Whether everything drained so far is hop acks (then it may wait for company)."""
    return all(type(x) is int for x in items)


def pack(items: list[QueueItem], cfg: BatchConfig, wire: Codec) -> list[bytes]:
    """The payloads of the session frames that carry ``items`` (in order, bodies first within
    a batch): one per lone message, one per ``Batch`` otherwise. ``wire``: the peer's
    ``wire_codec``."""
    bodies = [x for x in items if type(x) is bytes]
    acks = [x for x in items if type(x) is int]
    if not cfg.enabled or len(items) == 1:
        return bodies + [wire.encode(_ack_message(item)) for item in acks]
    chunks = [acks[i : i + cfg.max_acks] for i in range(0, len(acks), cfg.max_acks)]
    out: list[bytes] = []
    group: list[bytes] = []
    # The first group also carries the first chunk of acks (at most 9 KiB of them).
    group_acks = chunks.pop(0) if chunks else []
    size = _BATCH_OVERHEAD + _PER_ACK * len(group_acks)

    def flush() -> None:
        nonlocal group, group_acks, size
        if len(group) + len(group_acks) == 1:
            out.append(group[0] if group else wire.encode(_ack_message(group_acks[0])))
        elif group or group_acks:
            hop = [x for x in group_acks if x >= 0]
            done = [~x for x in group_acks if x < 0]
            out.append(wire.encode(Batch(group, hop, done)))
        group, group_acks, size = [], [], _BATCH_OVERHEAD

    for body in bodies:
        cost = len(body) + _PER_BODY
        if _BATCH_OVERHEAD + cost > cfg.max_bytes:
            # Too big to share a frame: alone, as before batching, and after what was queued
            # before it (a link keeps its messages in order).
            flush()
            out.append(body)
            continue
        if group and (size + cost > cfg.max_bytes or len(group) >= cfg.max_bodies):
            flush()
        group.append(body)
        size += cost
    flush()
    for chunk in chunks:
        group_acks = chunk
        flush()
    return out


def is_batch(body: bytes) -> bool:
    """Whether a session frame's body is tagged ``Batch`` (read without decoding it)."""
    return payload_tag(body) == BATCH_TAG


def unpack(body: bytes, wire: Codec) -> Batch | None:
    """The ``Batch`` in a session frame's ``body`` (``is_batch``), or None if it is malformed:
    not exactly one well-formed ``Batch`` within the bounds, or empty. Never raises."""
    try:
        msg = wire.decode(body)
    except WireError:
        return None
    if type(msg) is not Batch or not (msg.bodies or msg.acks or msg.dones):
        return None
    return msg


def expand_acks(batch: Batch) -> list[HopAck | RouteDone]:
    """The ``HopAck``s and ``RouteDone``s a batch's ``acks`` and ``dones`` stand for: what the
    core would have received had each come in a frame of its own."""
    return [*(HopAck(uid) for uid in batch.acks), *(RouteDone(uid) for uid in batch.dones)]


__all__ = [
    "BATCH_TAG",
    "MAX_ACK_DELAY_S",
    "BatchConfig",
    "QueueItem",
    "done_item",
    "expand_acks",
    "is_batch",
    "only_acks",
    "pack",
    "unpack",
]
