"""The runtime's input checks without sockets: framing, the signed envelope, anti-replay, the
rate limit, and the address format."""

from __future__ import annotations

import contextlib
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rangecast.dht.errors import LocalProtocolError, RemoteProtocolError, WireError
from rangecast.dht.messages import HopAck, Ping
from rangecast.dht.wire import Handle, codec_for
from rangecast.pubsub.peer import OverlayPeer
from rangecast.runtime.guard import (
    MAX_WIRE_FRAME,
    FrameReader,
    FrameTooLarge,
    Gate,
    InSession,
    OutSession,
    Rejections,
    ReplayWindow,
    Sealer,
    SessionInitiator,
    TokenBucket,
    frame,
    wire_codec,
)
from rangecast.runtime.identity import Identity, PeerAddress, StateDir, parse_endpoint
from rangecast.runtime.messages import Authed, Sealed, SessionAccept, SessionOpen

ALICE = Identity.generate()
BOB = Identity.generate()
MALLORY = Identity.generate()
A_ADDR = PeerAddress(ALICE.node_id, "127.0.0.1", 4001).to_bytes()
B_ADDR = PeerAddress(BOB.node_id, "127.0.0.1", 4002).to_bytes()
M_ADDR = PeerAddress(MALLORY.node_id, "127.0.0.1", 4003).to_bytes()

CORE = codec_for(*OverlayPeer.TABLES)
WIRE = wire_codec(*OverlayPeer.TABLES)


def _gate() -> tuple[Gate, Rejections]:
    rej = Rejections()
    return Gate(B_ADDR, rej, wire=WIRE), rej


def _sealed(frame_bytes: bytes) -> Sealed:
    msg = WIRE.decode(frame_bytes)
    assert isinstance(msg, Sealed)
    return msg


def test_a_sealed_message_opens_at_its_destination() -> None:
    gate, rej = _gate()
    ping = Ping(Handle(ALICE.node_id, A_ADDR))
    env = _sealed(Sealer(ALICE, A_ADDR, 1, WIRE).seal(B_ADDR, CORE.encode(ping)))
    assert gate.open(env) == (A_ADDR, ping)
    assert rej.total == 0


def test_a_bad_signature_is_refused() -> None:
    gate, rej = _gate()
    env = _sealed(Sealer(ALICE, A_ADDR, 1, WIRE).seal(B_ADDR, CORE.encode(HopAck(7))))
    sig = bytes([env.sig[0] ^ 1]) + env.sig[1:]
    forged = Sealed(env.key, env.src, env.dst, env.epoch, env.seq, env.body, sig)
    assert gate.open(forged) is None
    body = CORE.encode(HopAck(8))  # same signature, other content
    assert gate.open(Sealed(env.key, env.src, env.dst, env.epoch, env.seq, body, env.sig)) is None
    assert rej.by_reason == {"bad signature": 2}


def test_an_address_whose_id_is_not_the_keys_is_refused() -> None:
    gate, rej = _gate()
    # Mallory signs with her own key but claims Alice's address (which carries Alice's id).
    env = _sealed(Sealer(MALLORY, A_ADDR, 1, WIRE).seal(B_ADDR, CORE.encode(HopAck(1))))
    assert gate.open(env) is None
    assert rej.by_reason == {"id does not match key": 1}


def test_a_message_speaking_for_another_peer_is_refused() -> None:
    gate, rej = _gate()
    # Correctly signed by Mallory, but the Ping says it comes from Alice.
    ping = Ping(Handle(ALICE.node_id, A_ADDR))
    env = _sealed(Sealer(MALLORY, M_ADDR, 1, WIRE).seal(B_ADDR, CORE.encode(ping)))
    assert gate.open(env) is None
    assert rej.by_reason == {"sender field is not the signer": 1}


def test_replays_and_misdirected_frames_are_refused() -> None:
    gate, rej = _gate()
    sealer = Sealer(ALICE, A_ADDR, 5, WIRE)
    first = _sealed(sealer.seal(B_ADDR, CORE.encode(HopAck(1))))
    second = _sealed(sealer.seal(B_ADDR, CORE.encode(HopAck(2))))
    assert gate.open(second) is not None
    assert gate.open(first) is not None  # out of order within the window: fine
    assert gate.open(first) is None
    assert gate.open(second) is None
    # An earlier boot's frame (smaller epoch) is a replay too.
    old = _sealed(Sealer(ALICE, A_ADDR, 4, WIRE).seal(B_ADDR, CORE.encode(HopAck(3))))
    assert gate.open(old) is None
    # Frames for someone else (Mallory's address) are not ours to act on.
    other = _sealed(sealer.seal(M_ADDR, CORE.encode(HopAck(4))))
    assert gate.open(other) is None
    assert rej.by_reason == {"replayed": 3, "wrong destination": 1}


def test_envelopes_inside_envelopes_are_refused() -> None:
    gate, rej = _gate()
    inner = Sealer(ALICE, A_ADDR, 1, WIRE).seal(B_ADDR, CORE.encode(HopAck(1)))
    env = _sealed(Sealer(ALICE, A_ADDR, 2, WIRE).seal(B_ADDR, inner))
    assert gate.open(env) is None
    assert rej.by_reason == {"not a core message": 1}


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3000)), min_size=1, max_size=200))
def test_replay_window_accepts_each_frame_at_most_once(ops: list[tuple[int, int]]) -> None:
    """Against a model: a frame is accepted iff it is of the newest epoch seen (or newer), has
    not been accepted before, and is within the window of the highest sequence number."""
    win = ReplayWindow(size=64)
    epoch_now, top = -1, -1
    seen: set[tuple[int, int]] = set()
    for epoch, seq in ops:
        if epoch > epoch_now:
            want = True
        elif epoch < epoch_now:
            want = False
        else:
            want = (epoch, seq) not in seen and seq > top - 64
        assert win.accept(b"x", epoch, seq) is want
        if want:
            if epoch > epoch_now:
                epoch_now, top = epoch, seq
                seen = {(epoch, seq)}
            else:
                seen.add((epoch, seq))
                top = max(top, seq)


@settings(max_examples=200, deadline=None)
@given(
    frames=st.lists(st.binary(max_size=300), max_size=20),
    cuts=st.lists(st.integers(1, 50), max_size=40),
)
def test_frame_reader_reassembles_any_chunking(frames: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(frame(f) for f in frames)
    reader = FrameReader()
    out: list[bytes] = []
    pos = 0
    for c in cuts:
        out += reader.feed(stream[pos : pos + c])
        pos += c
    out += reader.feed(stream[pos:])
    assert out == frames
    assert reader.buffered == 0


def test_an_oversized_length_prefix_is_refused_before_buffering() -> None:
    reader = FrameReader()
    with pytest.raises(FrameTooLarge):
        reader.feed((MAX_WIRE_FRAME + 1).to_bytes(4, "big") + b"x")


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=400))
def test_the_wire_codec_refuses_garbage_only_with_wire_error(data: bytes) -> None:
    with contextlib.suppress(WireError):
        WIRE.decode(data)


def test_token_bucket_limits_a_flood_and_refills() -> None:
    bucket = TokenBucket(rate=10.0, burst=5.0, now=0.0)
    assert sum(bucket.allow(0.0) for _ in range(100)) == 5
    assert bucket.allow(0.1)  # one token back after 0.1 s at 10/s
    assert not bucket.allow(0.1)


def test_addresses_round_trip_and_bad_ones_are_remote_errors() -> None:
    for host in ("127.0.0.1", "::1"):
        a = PeerAddress(ALICE.node_id, host, 7400)
        assert PeerAddress.from_bytes(a.to_bytes()) == a
    rng = random.Random(1)
    for n in range(0, 64):
        raw = rng.randbytes(n)
        with contextlib.suppress(RemoteProtocolError):
            PeerAddress.from_bytes(raw)
    with pytest.raises(LocalProtocolError):
        parse_endpoint("nohost")
    with pytest.raises(LocalProtocolError):
        parse_endpoint("example.org:7000")
    assert parse_endpoint("localhost:7000") == ("127.0.0.1", 7000)
    assert parse_endpoint("[::1]:7000") == ("::1", 7000)


def test_a_state_directory_keeps_the_identity_and_epochs_grow(tmp_path) -> None:  # type: ignore[no-untyped-def]
    state = StateDir(tmp_path / "peer")
    first, created = state.load_identity()
    again, created_again = StateDir(tmp_path / "peer").load_identity()
    assert created and not created_again
    assert first.node_id == again.node_id
    assert (tmp_path / "peer" / "identity.pem").stat().st_mode & 0o077 == 0
    e1 = state.next_epoch()
    e2 = state.next_epoch()
    assert e2 > e1


def test_one_sender_over_many_connections_is_still_rate_limited() -> None:
    rej = Rejections()
    gate = Gate(B_ADDR, rej, rate_per_s=10.0, burst=20.0, wire=WIRE)
    sealer = Sealer(ALICE, A_ADDR, 1, WIRE)
    frames = [_sealed(sealer.seal(B_ADDR, CORE.encode(HopAck(i)))) for i in range(100)]
    opened = [gate.open(f, now=0.0) for f in frames]
    assert sum(o is not None for o in opened) == 20
    assert rej.by_reason == {"sender rate limited": 80}
    # Another sender has an allowance of its own.
    other = _sealed(Sealer(MALLORY, M_ADDR, 1, WIRE).seal(B_ADDR, CORE.encode(HopAck(1))))
    assert gate.open(other, now=0.0) is not None


# ------------------------------------------------------------------------------ link sessions


def _handshake() -> tuple[OutSession, InSession, Gate, Rejections]:
    gate, rej = _gate()
    init = SessionInitiator(ALICE, A_ADDR, B_ADDR, WIRE)
    opening = WIRE.decode(init.open_frame)
    assert isinstance(opening, SessionOpen)
    accepted = gate.accept_session(opening, BOB)
    assert accepted is not None
    reply, inbound = accepted
    return init.finish(WIRE.decode(reply), A_ADDR), inbound, gate, rej


def _authed(raw: bytes) -> Authed:
    msg = WIRE.decode(raw)
    assert isinstance(msg, Authed)
    return msg


def test_a_link_session_authenticates_frames_in_order() -> None:
    out, inbound, gate, rej = _handshake()
    assert inbound.src == A_ADDR and inbound.node_id == ALICE.node_id
    ping = Ping(Handle(ALICE.node_id, A_ADDR))
    frames = [_authed(out.wrap(CORE.encode(m))) for m in (ping, HopAck(1), HopAck(2))]
    for f in frames:
        assert inbound.check(f)
    assert gate.admit_authed(inbound, frames[0], 0.0) == (A_ADDR, ping)
    assert rej.total == 0


def test_a_link_refuses_replayed_reordered_and_altered_frames() -> None:
    out, inbound, _, _ = _handshake()
    a, b, c = (_authed(out.wrap(CORE.encode(HopAck(i)))) for i in range(3))
    assert inbound.check(a)
    assert not inbound.check(a)  # replayed
    assert not inbound.check(c)  # skipped one
    assert not inbound.check(Authed(CORE.encode(HopAck(9)), b.tag))  # altered body
    assert inbound.check(b)
    # A frame from another session (another key) never passes.
    other, _, _, _ = _handshake()
    assert not inbound.check(_authed(other.wrap(CORE.encode(HopAck(3)))))


def test_session_openings_are_checked_like_envelopes() -> None:
    gate, rej = _gate()
    opening = WIRE.decode(SessionInitiator(ALICE, A_ADDR, B_ADDR, WIRE).open_frame)
    assert isinstance(opening, SessionOpen)
    forged = SessionOpen(
        opening.key, opening.src, opening.dst, bytes(32 - 1) + b"\x09", opening.sig
    )
    assert gate.accept_session(forged, BOB) is None  # eph key not the signed one
    impostor = WIRE.decode(SessionInitiator(MALLORY, A_ADDR, B_ADDR, WIRE).open_frame)
    assert gate.accept_session(impostor, BOB) is None  # Alice's address, Mallory's key
    elsewhere = WIRE.decode(SessionInitiator(ALICE, A_ADDR, M_ADDR, WIRE).open_frame)
    assert gate.accept_session(elsewhere, BOB) is None  # meant for Mallory
    assert rej.by_reason == {
        "bad signature": 1,
        "id does not match key": 1,
        "wrong destination": 1,
    }


def test_the_initiator_refuses_an_answer_from_anyone_but_its_peer() -> None:
    init = SessionInitiator(ALICE, A_ADDR, B_ADDR, WIRE)
    opening = WIRE.decode(init.open_frame)
    # Mallory answers as herself: not the peer Alice meant to reach.
    accepted = Gate(M_ADDR, Rejections(), wire=WIRE).accept_session(
        SessionOpen(opening.key, opening.src, M_ADDR, opening.eph, opening.sig), MALLORY
    )
    assert accepted is None  # (and the opening was not signed for her anyway)
    gate, _ = _gate()
    reply, _ = gate.accept_session(opening, BOB)  # type: ignore[misc]
    accept = WIRE.decode(reply)
    assert isinstance(accept, SessionAccept)
    tampered = SessionAccept(accept.key, accept.src, accept.dst, accept.eph, bytes(64))
    with pytest.raises(RemoteProtocolError):
        init.finish(tampered, A_ADDR)
    with pytest.raises(RemoteProtocolError):
        SessionInitiator(ALICE, A_ADDR, M_ADDR, WIRE).finish(accept, A_ADDR)  # not whom we called
    init.finish(accept, A_ADDR)
