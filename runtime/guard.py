"""What stands between the network and a peer's cores: framing, the signed envelope, the
anti-replay window and the rate limit. Everything here is sans-IO (the caller passes ``now``),
so it is tested without sockets.

A frame that fails a check is refused with a reason that goes into ``Rejections``; nothing here
raises at the network's input. Checks run cheapest first, and the signature before anything
that changes state, so a forger cannot even advance a replay window.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import ipaddress
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from rangecast.dht.errors import RemoteProtocolError, WireError
from rangecast.dht.messages import (
    AckedDirect,
    Announce,
    Direct,
    HopAck,
    JoinReply,
    JoinRequest,
    JoinRows,
    LeafSetReply,
    LeafSetRequest,
    Leave,
    Ping,
    Pong,
    RouteDone,
    RowReply,
    RowRequest,
)
from rangecast.dht.wire import MAX_FRAME_BYTES, Codec, Message, MessageTable, codec_for
from rangecast.runtime.identity import (
    Identity,
    PeerAddress,
    PublicKeys,
    SwarmKey,
    meets_puzzle,
)
from rangecast.runtime.messages import (
    RUNTIME_TABLE,
    Authed,
    KeyedAccept,
    KeyedOpen,
    Sealed,
    SessionAccept,
    SessionOpen,
)

#: Largest frame on a connection: a core frame at the codec's limit plus the envelope.
MAX_WIRE_FRAME = MAX_FRAME_BYTES + 1024
LENGTH_BYTES = 4
_DOMAIN = b"rangecast/sealed/1\x00"
#: The reason counted (``rejected.runtime``) for a peer whose key does not solve the id puzzle
#: at the receiver's own difficulty.
ID_PUZZLE = "id puzzle not solved"
#: Peer admission (``--swarm-key``): the reasons counted for a handshake (either end) or an
#: envelope without a proof of the swarm key, and for one whose proof is not under our key.
SWARM_KEY_MISSING = "swarm key missing"
SWARM_KEY_WRONG = "swarm key wrong"


class FrameTooLarge(Exception):
    """A length prefix over the limit: the connection cannot be resynchronised, close it."""


class FrameReader:
    """Splits a byte stream into frames, each preceded by a 4-byte big-endian length."""

    __slots__ = ("_buf", "limit")

    def __init__(self, limit: int = MAX_WIRE_FRAME) -> None:
        self._buf = bytearray()
        self.limit = limit

    def feed(self, data: bytes | bytearray) -> list[bytes]:
        buf = self._buf
        buf += data
        out: list[bytes] = []
        pos = 0
        n = len(buf)
        while n - pos >= LENGTH_BYTES:
            size = int.from_bytes(buf[pos : pos + LENGTH_BYTES], "big")
            if size > self.limit:
                raise FrameTooLarge(f"frame of {size} bytes announced, limit {self.limit}")
            end = pos + LENGTH_BYTES + size
            if end > n:
                break
            out.append(bytes(buf[pos + LENGTH_BYTES : end]))
            pos = end
        if pos:
            del buf[:pos]
        return out

    @property
    def buffered(self) -> int:
        return len(self._buf)


def wire_codec(*core_tables: MessageTable) -> Codec:
    """The codec for whole frames on a connection: the runtime's messages and those of the
    cores' ``core_tables`` (the stack a peer runs), with room for the envelope around a core
    frame at the core codec's limit. A peer or client builds it once and passes it to what
    encodes or decodes its frames (``Gate``, sessions, client sessions)."""
    return codec_for(*core_tables, RUNTIME_TABLE, max_bytes=MAX_WIRE_FRAME)


def frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(LENGTH_BYTES, "big") + payload


@dataclass(slots=True)
class Rejections:
    """Input refused, by reason. Every refusal is counted; the peer keeps serving."""

    total: int = 0
    by_reason: dict[str, int] = field(default_factory=dict)

    def add(self, reason: str, n: int = 1) -> None:
        self.total += n
        self.by_reason[reason] = self.by_reason.get(reason, 0) + n


class TokenBucket:
    """``rate`` frames per second with bursts up to ``burst``."""

    __slots__ = ("burst", "last", "rate", "tokens")

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = burst
        self.last = now

    def allow(self, now: float) -> bool:
        tokens = self.tokens + (now - self.last) * self.rate
        self.last = now
        if tokens >= 1.0:
            self.tokens = min(tokens, self.burst) - 1.0
            return True
        self.tokens = tokens
        return False


K = TypeVar("K", str, bytes)


class KeyedBuckets(Generic[K]):
    """A token bucket per key (a source address, a sender's address) for the ``capacity`` most
    recently seen keys: the oldest is forgotten (its next message starts a full bucket)."""

    __slots__ = ("_buckets", "burst", "capacity", "rate")

    def __init__(self, rate: float, burst: float, capacity: int) -> None:
        self.rate = rate
        self.burst = burst
        self.capacity = capacity
        self._buckets: OrderedDict[K, TokenBucket] = OrderedDict()

    def bucket(self, key: K, now: float) -> TokenBucket:
        buckets = self._buckets
        bucket = buckets.get(key)
        if bucket is None:
            bucket = buckets[key] = TokenBucket(self.rate, self.burst, now)
            if len(buckets) > self.capacity:
                buckets.popitem(last=False)
        else:
            buckets.move_to_end(key)
        return bucket


class AddressLimiter:
    """A token bucket per source address (IPv6: per /64, which one host can fill), for the
    most recent ``capacity`` addresses: bounds the link-handshake openings (a signature check
    and a key exchange each) that one address can make a peer do. Checked before any crypto."""

    __slots__ = ("_buckets",)

    def __init__(self, rate: float, burst: float, capacity: int = 4096) -> None:
        self._buckets = KeyedBuckets[str](rate, burst, capacity)

    def allow(self, host: str, now: float) -> bool:
        if ":" in host:  # IPv6: the first four groups
            with contextlib.suppress(ValueError):
                host = ":".join(ipaddress.ip_address(host).exploded.split(":")[:4])
        return self._buckets.bucket(host, now).allow(now)


class ReplayWindow:
    """Per sender: the boot epoch and a sliding window of the last ``size`` sequence numbers
    (RFC 4303's anti-replay scheme). A frame of an older epoch, a sequence number seen before,
    or one that fell out of the window is a replay. The table keeps the ``capacity`` most recent
    senders; a forgotten sender's next frame starts a fresh window (documented limit)."""

    __slots__ = ("_senders", "capacity", "size")

    def __init__(self, size: int = 1024, capacity: int = 65536) -> None:
        self.size = size
        self.capacity = capacity
        self._senders: OrderedDict[bytes, list[int]] = OrderedDict()

    def accept(self, sender: bytes, epoch: int, seq: int) -> bool:
        st = self._senders.get(sender)
        if st is None or epoch > st[0]:
            self._senders[sender] = [epoch, seq, 1]
            self._senders.move_to_end(sender)
            if len(self._senders) > self.capacity:
                self._senders.popitem(last=False)
            return True
        if epoch < st[0]:
            return False
        top, bits = st[1], st[2]
        if seq > top:
            shift = seq - top
            bits = ((bits << shift) | 1) & ((1 << self.size) - 1) if shift < self.size else 1
            st[1], st[2] = seq, bits
        else:
            back = top - seq
            if back >= self.size or bits >> back & 1:
                return False
            st[2] = bits | (1 << back)
        self._senders.move_to_end(sender)
        return True


def signed_bytes(key: bytes, src: bytes, dst: bytes, epoch: int, seq: int, body: bytes) -> bytes:
    """What an envelope's signature covers: every field but the signature, unambiguously."""
    return b"".join(
        (
            _DOMAIN,
            key,
            len(src).to_bytes(1, "big"),
            src,
            len(dst).to_bytes(1, "big"),
            dst,
            epoch.to_bytes(8, "big"),
            seq.to_bytes(8, "big"),
            body,
        )
    )


class Sealer:
    """Signs this peer's outgoing core frames (``wire``: the peer's ``wire_codec``)."""

    __slots__ = ("_codec", "epoch", "identity", "seq", "src")

    def __init__(self, identity: Identity, src: bytes, epoch: int, wire: Codec) -> None:
        self.identity = identity
        self.src = src
        self.epoch = epoch
        self.seq = 0
        self._codec = wire

    def seal(self, dst: bytes, body: bytes) -> bytes:
        """One envelope frame (without the length prefix) carrying the encoded ``body``."""
        self.seq += 1
        key = self.identity.public_key
        sig = self.identity.sign(signed_bytes(key, self.src, dst, self.epoch, self.seq, body))
        return self._codec.encode(Sealed(key, self.src, dst, self.epoch, self.seq, body, sig))


#: For each core message that names its sender, the field holding the sender's handle: it must
#: be the signer itself (id and address), or a peer could speak for another.
_SENDER_FIELD: dict[type[Message], str] = {
    Announce: "node",
    JoinRows: "sender",
    JoinReply: "root",
    LeafSetRequest: "sender",
    LeafSetReply: "sender",
    Ping: "sender",
    Pong: "sender",
    RowRequest: "sender",
    RowReply: "sender",
    Direct: "sender",
    AckedDirect: "sender",
    Leave: "sender",
}


class Gate:
    """Checks incoming envelopes for one peer: destination, key-id binding, signature, the
    sender's rate, replay, body, and that the message's own sender field is the signer.

    The per-sender rate limit complements the per-connection one: a peer that spreads a flood
    over many connections is still one signer. It applies after the signature (so nobody can
    spend another peer's allowance) and before the replay window (so a dropped frame leaves no
    trace).

    ``wire``: the peer's ``wire_codec``. A body is decoded with it, so that an envelope inside
    an envelope is named for what it is; a core message is one of the cores' tables (any of the
    codec's but the runtime's).

    ``not_before``: this peer's own boot epoch (µs; ``StateDir.next_epoch``, strictly larger
    than every earlier boot's). The replay window lives in memory, so a restart forgets what
    the previous boot accepted, and an envelope captured then would pass again. An envelope
    carries its sender's boot epoch, and every envelope a sender seals comes after its boot:
    one whose sender's epoch is not below ours was sealed during this boot, so the window has
    seen it if it came before; one whose sender booted before we did may have been accepted by
    an earlier boot of ours, and is refused (``sealed before this boot``). The cost falls only
    on envelopes, which the runtime's own peers no longer send (their links are sessions, whose
    keys come from fresh ephemeral keys on both sides, so nothing recorded before a restart
    opens one after it); a sender that wants its envelopes read after our restart restarts
    too. Sound as far as the clocks agree: a sender whose clock runs ahead of ours by d gets
    the envelopes it sealed in the last d before our restart accepted once more
    (docs/runtime.md, "Threat model"). 0: no floor (unit tests, and a gate not bound to a
    boot).

    ``swarm_key``: peer admission (``SwarmKey``; None: off). A link opening must then be a
    ``KeyedOpen`` whose proof is the HMAC under the key of the signed opening, checked after
    the id puzzle's hash and before the signature (a few µs, against ~190 µs), and the answer
    proves the key back (``KeyedAccept``). An envelope has no room for a proof, and the
    runtime's peers send none (their links are sessions), so every envelope is refused."""

    __slots__ = (
        "_buckets",
        "_codec",
        "_keys",
        "addr",
        "burst",
        "core_types",
        "id_difficulty",
        "not_before",
        "rate",
        "rejections",
        "replay",
        "swarm_key",
    )

    def __init__(
        self,
        addr: bytes,
        rejections: Rejections,
        replay: ReplayWindow | None = None,
        *,
        wire: Codec,
        rate_per_s: float = 20_000.0,
        burst: float = 40_000.0,
        id_difficulty: int = 0,
        not_before: int = 0,
        swarm_key: SwarmKey | None = None,
    ):
        self.addr = addr
        #: Peer admission: links must prove this key (see the class); None: off.
        self.swarm_key = swarm_key
        #: Envelopes whose sender booted before this epoch are refused (see the class).
        self.not_before = not_before
        #: The id puzzle's difficulty this peer asks of every sender (``PeerConfig``'s).
        self.id_difficulty = id_difficulty
        self.rejections = rejections
        self.replay = replay or ReplayWindow()
        self.rate = rate_per_s
        self.burst = burst
        self._buckets: OrderedDict[bytes, TokenBucket] = OrderedDict()
        self._codec = wire
        self.core_types = frozenset(
            cls for table in wire.tables if table is not RUNTIME_TABLE for cls in table.types
        )
        self._keys = PublicKeys()

    def open(self, env: Sealed, now: float = 0.0) -> tuple[bytes, Message] | None:
        """The (sender address, core message) inside ``env``, or None (and a counted reason).
        ``now`` (seconds, the driver's clock) drives the per-sender rate limit."""
        rej = self.rejections
        if self.swarm_key is not None:
            rej.add(SWARM_KEY_MISSING)  # an envelope cannot prove the key: sessions only
            return None
        if env.dst != self.addr:
            rej.add("wrong destination")
            return None
        try:
            src = PeerAddress.from_bytes(env.src)
        except RemoteProtocolError:
            rej.add("bad sender address")
            return None
        if src.node_id != hashlib.sha1(env.key, usedforsecurity=False).digest():
            rej.add("id does not match key")
            return None
        # One hash, before the signature: a key below the puzzle costs us nearly nothing.
        if not meets_puzzle(src.node_id, self.id_difficulty):
            rej.add(ID_PUZZLE)
            return None
        if env.epoch < self.not_before:
            rej.add("sealed before this boot")
            return None
        if not self._verify(env):
            rej.add("bad signature")
            return None
        if not self._rate_ok(src.node_id, now):
            return None
        if not self.replay.accept(src.node_id, env.epoch, env.seq):
            rej.add("replayed")
            return None
        return self._admit(env.src, src.node_id, env.body)

    def _rate_ok(self, node_id: bytes, now: float) -> bool:
        bucket = self._buckets.get(node_id)
        if bucket is None:
            bucket = self._buckets[node_id] = TokenBucket(self.rate, self.burst, now)
            if len(self._buckets) > 4096:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(node_id)
        if bucket.allow(now):
            return True
        self.rejections.add("sender rate limited")
        return False

    def _admit(self, src: bytes, node_id: bytes, body: bytes) -> tuple[bytes, Message] | None:
        """The checks of an authenticated body: a core message whose own sender field, if it
        has one, is the authenticated peer."""
        rej = self.rejections
        try:
            msg = self._codec.decode(body)
        except WireError:
            rej.add("malformed body")
            return None
        if type(msg) not in self.core_types:
            rej.add("not a core message")
            return None
        name = _SENDER_FIELD.get(type(msg))
        if name is None and type(msg) is JoinRequest and msg.hops == 0:
            name = "joiner"  # the first hop comes from the joiner itself
        if name is not None:
            h: Any = getattr(msg, name)
            if h.id != node_id or h.addr != src:
                rej.add("sender field is not the signer")
                return None
        return src, msg

    # --------------------------------------------------------------------- link sessions

    def accept_session(
        self, msg: SessionOpen, identity: Identity
    ) -> tuple[bytes, InSession] | None:
        """Answer a ``SessionOpen``: the ``SessionAccept`` frame to write back and the
        session that authenticates the link's further frames; None if the opening is refused.
        A replayed opening gets an answer too, but its replayer cannot derive the session key
        (that needs the initiator's ephemeral private key), so it can do nothing with it.
        With a swarm key, an opening that does not prove it is refused before its signature is
        checked (``SWARM_KEY_MISSING``, ``SWARM_KEY_WRONG``); without one, a ``KeyedOpen`` is
        answered as a plain opening (our plain answer tells its sender we hold no key)."""
        rej = self.rejections
        if msg.dst != self.addr:
            rej.add("wrong destination")
            return None
        try:
            src = PeerAddress.from_bytes(msg.src)
        except RemoteProtocolError:
            rej.add("bad sender address")
            return None
        if src.node_id != hashlib.sha1(msg.key, usedforsecurity=False).digest():
            rej.add("id does not match key")
            return None
        if not meets_puzzle(src.node_id, self.id_difficulty):
            rej.add(ID_PUZZLE)
            return None
        opened = _open_bytes(msg.key, msg.src, msg.dst, msg.eph)
        key = self.swarm_key
        if key is not None:
            if type(msg) is not KeyedOpen:
                rej.add(SWARM_KEY_MISSING)
                return None
            if not hmac.compare_digest(msg.proof, key.mac(_OPEN_PROOF + opened)):
                rej.add(SWARM_KEY_WRONG)
                return None
        if not self._keys.verify(msg.key, msg.sig, opened):
            rej.add("bad signature")
            return None
        try:
            peer_eph = X25519PublicKey.from_public_bytes(msg.eph)
        except ValueError:
            rej.add("bad ephemeral key")
            return None
        eph = X25519PrivateKey.generate()
        mine = eph.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        accept = _accept_bytes(identity.public_key, self.addr, msg.src, mine, opened)
        sig = identity.sign(accept)
        answer = (
            SessionAccept(identity.public_key, self.addr, msg.src, mine, sig)
            if key is None
            else KeyedAccept(
                identity.public_key, self.addr, msg.src, mine, sig, key.mac(_ACCEPT_PROOF + accept)
            )
        )
        reply = self._codec.encode(answer)
        try:
            shared = eph.exchange(peer_eph)
        except ValueError:  # a low-order point: no shared secret
            rej.add("bad ephemeral key")
            return None
        session_key = _session_key(shared, opened, accept, key)
        return reply, InSession(msg.src, src.node_id, session_key)

    def admit_authed(
        self, session: InSession, msg: Authed, now: float
    ) -> tuple[bytes, Message] | None:
        """The (sender address, core message) of a frame on an established link whose tag
        ``session.check`` has accepted."""
        if not self._rate_ok(session.node_id, now):
            return None
        return self._admit(session.src, session.node_id, msg.body)

    def admit_body(
        self, session: InSession, body: bytes, now: float
    ) -> tuple[bytes, Message] | None:
        """One body of a ``Batch`` on an established link: the same checks and the same
        price (a token of the sender's rate) as a body in a frame of its own."""
        if not self._rate_ok(session.node_id, now):
            return None
        return self._admit(session.src, session.node_id, body)

    def admit_acks(
        self, session: InSession, acks: list[HopAck | RouteDone], now: float
    ) -> list[tuple[bytes, Message]] | None:
        """A ``Batch``'s hop and end-to-end acks (already expanded): one token of the sender's
        rate for the lot, as they travel as bounded lists; an ack names no sender to check."""
        if not self._rate_ok(session.node_id, now):
            return None
        return [(session.src, ack) for ack in acks]

    def _verify(self, env: Sealed) -> bool:
        data = signed_bytes(env.key, env.src, env.dst, env.epoch, env.seq, env.body)
        return self._keys.verify(env.key, env.sig, data)


# ------------------------------------------------------------------------------ link sessions
#
# A link (one TCP connection, one way) is authenticated once and then costs a MAC per frame
# instead of a signature: the initiator sends a signed SessionOpen with an ephemeral X25519
# key, the responder answers with a signed SessionAccept carrying its own, and both derive the
# session key from the X25519 secret and the two signed transcripts (HKDF-SHA256). Frames are
# then Authed: body plus HMAC-SHA256 (16 bytes) over the frame's number on the link and the
# body. Ed25519 costs ~80 µs to sign and ~190 µs to verify here; the MAC costs a few µs.

_OPEN_DOMAIN = b"rangecast/session-open/1\x00"
_ACCEPT_DOMAIN = b"rangecast/session-accept/1\x00"
# Peer admission (``--swarm-key``): the proofs are HMAC-SHA256 under the swarm key over these
# domains and the signed transcripts, so each proves the key for this one handshake (both ids,
# both addresses, the ephemeral keys) and cannot be moved to another. Checked before the
# signatures, so an outsider's opening costs a responder one HMAC. The key also salts the
# session key's HKDF: a session stands only between two holders of the same key.
_OPEN_PROOF = b"rangecast/swarm-key/open/1\x00"
_ACCEPT_PROOF = b"rangecast/swarm-key/accept/1\x00"


def _open_bytes(key: bytes, src: bytes, dst: bytes, eph: bytes) -> bytes:
    return b"".join(
        (_OPEN_DOMAIN, key, len(src).to_bytes(1, "big"), src, len(dst).to_bytes(1, "big"), dst, eph)
    )


def _accept_bytes(key: bytes, src: bytes, dst: bytes, eph: bytes, opened: bytes) -> bytes:
    return b"".join(
        (
            _ACCEPT_DOMAIN,
            key,
            len(src).to_bytes(1, "big"),
            src,
            len(dst).to_bytes(1, "big"),
            dst,
            eph,
            hashlib.sha256(opened).digest(),
        )
    )


def _session_key(
    shared: bytes, opened: bytes, accepted: bytes, swarm_key: SwarmKey | None = None
) -> bytes:
    info = b"rangecast/link/1" + hashlib.sha256(opened + accepted).digest()
    salt = None if swarm_key is None else swarm_key.secret
    return HKDF(algorithm=SHA256(), length=32, salt=salt, info=info).derive(shared)


def _tag(key: bytes, n: int, body: bytes) -> bytes:
    return hmac.digest(key, n.to_bytes(8, "big") + body, "sha256")[:16]


class InSession:
    """The receiving end of an authenticated link: who is on the other side, and the count of
    frames seen so far (the next frame's number is part of its MAC)."""

    __slots__ = ("_key", "_n", "node_id", "src")

    def __init__(self, src: bytes, node_id: bytes, key: bytes) -> None:
        self.src = src
        self.node_id = node_id
        self._key = key
        self._n = 0

    def check(self, msg: Authed) -> bool:
        n = self._n + 1
        if not hmac.compare_digest(_tag(self._key, n, msg.body), msg.tag):
            return False
        self._n = n
        return True


class OutSession:
    """The sending end of an authenticated link (``wire``: the peer's ``wire_codec``)."""

    __slots__ = ("_codec", "_key", "_n")

    def __init__(self, key: bytes, wire: Codec) -> None:
        self._key = key
        self._n = 0
        self._codec = wire

    def wrap(self, body: bytes) -> bytes:
        """One ``Authed`` frame (without the length prefix) carrying the encoded ``body``."""
        self._n += 1
        return self._codec.encode(Authed(body, _tag(self._key, self._n, body)))


class IdPuzzleFailed(RemoteProtocolError):
    """The far end proved its key, but the key's id does not solve our id puzzle."""


class HandshakeRefused(RemoteProtocolError):
    """The far end refused our link handshake: it closed the connection instead of answering
    (a keyed peer does so for an opening without its swarm key), or (``SwarmKeyRefused``)
    its answer did not prove our swarm key."""


class SwarmKeyRefused(HandshakeRefused):
    """The responder's answer does not prove our swarm key: ``reason`` is the count's
    (``SWARM_KEY_MISSING``: it holds none; ``SWARM_KEY_WRONG``: another key)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class SessionInitiator:
    """The opening side of a link's handshake: ``open_frame`` goes first; ``finish`` checks
    the answer and returns the session to send with (``wire``: the peer's ``wire_codec``)."""

    __slots__ = ("_eph", "_opened", "_wire", "dst", "open_frame", "swarm_key")

    def __init__(
        self,
        identity: Identity,
        src: bytes,
        dst: bytes,
        wire: Codec,
        swarm_key: SwarmKey | None = None,
    ) -> None:
        self._eph = X25519PrivateKey.generate()
        self._wire = wire
        self.dst = dst
        #: Peer admission: prove this key and require the answer to (None: a plain handshake).
        self.swarm_key = swarm_key
        eph = self._eph.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        opened = self._opened = _open_bytes(identity.public_key, src, dst, eph)
        sig = identity.sign(opened)
        self.open_frame = wire.encode(
            SessionOpen(identity.public_key, src, dst, eph, sig)
            if swarm_key is None
            else KeyedOpen(
                identity.public_key, src, dst, eph, sig, swarm_key.mac(_OPEN_PROOF + opened)
            )
        )

    def finish(self, msg: Message, src: bytes, id_difficulty: int = 0) -> OutSession:
        """Check the responder's ``SessionAccept``; ``RemoteProtocolError`` if it is not the
        peer we meant to reach, or not validly signed; ``IdPuzzleFailed`` (one) if its key does
        not solve the id puzzle at ``id_difficulty`` (ours, whatever the responder's is);
        ``SwarmKeyRefused`` (one) if we hold a swarm key and the answer does not prove it
        (checked before the signature)."""
        key = self.swarm_key
        if not isinstance(msg, SessionAccept) or (key is None and type(msg) is KeyedAccept):
            raise RemoteProtocolError(f"expected SessionAccept, got {type(msg).__name__}")
        if msg.src != self.dst or msg.dst != src:
            raise RemoteProtocolError("session answered by another peer")
        if (
            PeerAddress.from_bytes(msg.src).node_id
            != hashlib.sha1(msg.key, usedforsecurity=False).digest()
        ):
            raise RemoteProtocolError("responder's id does not match its key")
        if not meets_puzzle(PeerAddress.from_bytes(msg.src).node_id, id_difficulty):
            raise IdPuzzleFailed(f"responder's id does not solve the id puzzle ({ID_PUZZLE})")
        accepted = _accept_bytes(msg.key, msg.src, msg.dst, msg.eph, self._opened)
        if key is not None:
            if type(msg) is not KeyedAccept:
                raise SwarmKeyRefused(
                    SWARM_KEY_MISSING,
                    f"answered without a swarm key ({SWARM_KEY_MISSING}): it holds none, and "
                    "a peer started with --swarm-key links only to peers holding the same key",
                )
            if not hmac.compare_digest(msg.proof, key.mac(_ACCEPT_PROOF + accepted)):
                raise SwarmKeyRefused(
                    SWARM_KEY_WRONG, f"answered under another swarm key ({SWARM_KEY_WRONG})"
                )
        try:
            Ed25519PublicKey.from_public_bytes(msg.key).verify(msg.sig, accepted)
            shared = self._eph.exchange(X25519PublicKey.from_public_bytes(msg.eph))
        except (InvalidSignature, ValueError):
            raise RemoteProtocolError("bad session acceptance") from None
        return OutSession(_session_key(shared, self._opened, accepted, key), self._wire)


__all__ = [
    "ID_PUZZLE",
    "MAX_WIRE_FRAME",
    "SWARM_KEY_MISSING",
    "SWARM_KEY_WRONG",
    "AddressLimiter",
    "FrameReader",
    "FrameTooLarge",
    "Gate",
    "HandshakeRefused",
    "IdPuzzleFailed",
    "InSession",
    "OutSession",
    "Rejections",
    "ReplayWindow",
    "Sealer",
    "SessionInitiator",
    "SwarmKeyRefused",
    "TokenBucket",
    "frame",
    "signed_bytes",
    "wire_codec",
]
