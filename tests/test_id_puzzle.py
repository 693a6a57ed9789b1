"""The id puzzle (runtime.identity): a key is admissible only if the hash of its id starts with
``difficulty`` zero bits; generation grinds to it, stored keys are reused, and a peer refuses
handshakes and frames from keys below its own difficulty (counted, never raising)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given
from hypothesis import strategies as st

from rangecast.dht.errors import LocalProtocolError, RemoteProtocolError
from rangecast.dht.messages import HopAck, Ping
from rangecast.dht.routing import Handle
from rangecast.dht.wire import codec_for
from rangecast.pubsub.peer import OverlayPeer
from rangecast.pubsub.schema import builtin_schemas
from rangecast.runtime.guard import (
    ID_PUZZLE,
    Gate,
    IdPuzzleFailed,
    Rejections,
    Sealer,
    SessionInitiator,
    frame,
    wire_codec,
)
from rangecast.runtime.identity import (
    DEFAULT_ID_DIFFICULTY,
    KEY_FILE,
    MAX_ID_DIFFICULTY,
    Identity,
    PeerAddress,
    StateDir,
    check_difficulty,
    meets_puzzle,
    node_id_of,
    puzzle_bits,
)
from rangecast.runtime.messages import Sealed, SessionOpen
from rangecast.runtime.peer import PeerConfig, PeerRuntime

CORE = codec_for(*OverlayPeer.TABLES)
WIRE = wire_codec(*OverlayPeer.TABLES)

#: Known vectors: the Ed25519 key whose 32-byte seed is the integer 993 (big-endian) solves the
#: puzzle at 9 bits; seed 1's key at 0.
SEED_9_BITS = 993
ID_9_BITS = "a45f00fdc26deb4c73bd6a645d4f556156bb0247"
PUZZLE_HASH_9_BITS = "0052be1165bbd08c4040a614c228a8497959bf68915ed06a0ef5d6c53bd7e48b"
ID_0_BITS = "b018350572bb9d8777dedc5fc8c9a606d3e1853e"


def _seeded(seed: int) -> Identity:
    return Identity(Ed25519PrivateKey.from_private_bytes(seed.to_bytes(32, "big")))


def _below(difficulty: int) -> Identity:
    """A fresh identity whose id does not solve the puzzle at ``difficulty``."""
    while True:
        ident = Identity.generate()
        if not meets_puzzle(ident.node_id, difficulty):
            return ident


def _addr(ident: Identity, port: int) -> bytes:
    return PeerAddress(ident.node_id, "127.0.0.1", port).to_bytes()


# ------------------------------------------------------------------------------ the check


def test_a_known_key_solves_the_puzzle_at_its_bits() -> None:
    ident = _seeded(SEED_9_BITS)
    assert ident.node_id.hex() == ID_9_BITS == hashlib.sha1(ident.public_key).hexdigest()
    digest = hashlib.sha256(b"rangecast/id-puzzle/1\x00" + ident.node_id).hexdigest()
    assert digest == PUZZLE_HASH_9_BITS  # 0x00 0x52: 8 + 1 leading zero bits
    assert puzzle_bits(ident.node_id) == 9
    assert meets_puzzle(ident.node_id, 9) and not meets_puzzle(ident.node_id, 10)
    low = _seeded(1)
    assert low.node_id.hex() == ID_0_BITS
    assert puzzle_bits(low.node_id) == 0
    assert meets_puzzle(low.node_id, 0) and not meets_puzzle(low.node_id, 1)


@given(st.binary(min_size=20, max_size=20), st.integers(1, MAX_ID_DIFFICULTY))
def test_meeting_a_difficulty_means_meeting_every_lower_one(node_id: bytes, d: int) -> None:
    if meets_puzzle(node_id, d):
        assert meets_puzzle(node_id, d - 1)
    assert meets_puzzle(node_id, d) == (puzzle_bits(node_id) >= d)
    assert meets_puzzle(node_id, 0) and meets_puzzle(node_id, -d)


def test_generation_grinds_to_the_difficulty() -> None:
    for d in (0, 4, 8):
        ident = Identity.generate(d)
        assert ident.node_id == node_id_of(ident.public_key)
        assert meets_puzzle(ident.node_id, d)


def test_difficulties_out_of_range_are_one_line_errors() -> None:
    assert check_difficulty(0) == 0 and check_difficulty(MAX_ID_DIFFICULTY) == MAX_ID_DIFFICULTY
    for bad in (-1, MAX_ID_DIFFICULTY + 1):
        with pytest.raises(LocalProtocolError, match="id difficulty"):
            check_difficulty(bad)
        with pytest.raises(LocalProtocolError, match="id difficulty"):
            PeerConfig(id_difficulty=bad)
        with pytest.raises(LocalProtocolError, match="id difficulty"):
            Identity.generate(bad)


def test_a_peer_whose_own_key_is_below_its_difficulty_does_not_start() -> None:
    with pytest.raises(LocalProtocolError, match="id puzzle"):
        PeerRuntime(_below(6), builtin_schemas(), PeerConfig(id_difficulty=6))


def test_a_stored_key_is_reused_and_one_below_the_difficulty_replaced(tmp_path: Path) -> None:
    state = StateDir(tmp_path / "peer")
    first, created = state.load_identity(6)
    assert created and meets_puzzle(first.node_id, 6)
    again, created = StateDir(tmp_path / "peer").load_identity(6)
    assert not created and again.node_id == first.node_id
    # Lower difficulties keep it too (monotonicity).
    assert StateDir(tmp_path / "peer").load_identity(0)[0].node_id == first.node_id
    # A swarm that now asks for more than the key has: a new key, the old one kept aside.
    bits = puzzle_bits(first.node_id)
    new, created = StateDir(tmp_path / "peer").load_identity(bits + 1)
    assert created and new.node_id != first.node_id and meets_puzzle(new.node_id, bits + 1)
    old = (tmp_path / "peer" / (KEY_FILE + ".old")).read_bytes()
    assert Identity.from_pem(old).node_id == first.node_id


# --------------------------------------------------------------------- handshake (sans-IO)

B = Identity.generate(8)
B_ADDR = _addr(B, 4002)


def _open(ident: Identity, port: int = 4001) -> tuple[SessionInitiator, SessionOpen]:
    init = SessionInitiator(ident, _addr(ident, port), B_ADDR, WIRE)
    msg = WIRE.decode(init.open_frame)
    assert isinstance(msg, SessionOpen)
    return init, msg


def test_a_session_opening_from_a_key_below_the_puzzle_is_refused_and_counted() -> None:
    rej = Rejections()
    gate = Gate(B_ADDR, rej, wire=WIRE, id_difficulty=8)
    _, weak = _open(_below(8))
    assert gate.accept_session(weak, B) is None
    assert rej.by_reason == {ID_PUZZLE: 1}
    init, strong = _open(Identity.generate(8))
    accepted = gate.accept_session(strong, B)
    assert accepted is not None
    assert rej.total == 1
    init.finish(WIRE.decode(accepted[0]), strong.src, id_difficulty=8)


def test_difficulty_zero_admits_every_key() -> None:
    rej = Rejections()
    gate = Gate(B_ADDR, rej, wire=WIRE, id_difficulty=0)
    for _ in range(20):
        assert gate.accept_session(_open(_below(1))[1], B) is not None
    assert rej.total == 0


def test_a_sealed_frame_from_a_key_below_the_puzzle_is_refused_before_its_signature() -> None:
    rej = Rejections()
    gate = Gate(B_ADDR, rej, wire=WIRE, id_difficulty=8)
    weak = _below(8)
    w_addr = _addr(weak, 4001)
    raw = WIRE.decode(Sealer(weak, w_addr, 1, WIRE).seal(B_ADDR, CORE.encode(HopAck(1))))
    assert isinstance(raw, Sealed)
    bad_sig = Sealed(raw.key, raw.src, raw.dst, raw.epoch, raw.seq, raw.body, bytes(64))
    assert gate.open(raw) is None and gate.open(bad_sig) is None
    assert rej.by_reason == {ID_PUZZLE: 2}  # no signature was checked
    strong = Identity.generate(8)
    s_addr = _addr(strong, 4003)
    ping = Ping(Handle(strong.node_id, s_addr))
    ok = WIRE.decode(Sealer(strong, s_addr, 1, WIRE).seal(B_ADDR, CORE.encode(ping)))
    assert isinstance(ok, Sealed)
    assert gate.open(ok) == (s_addr, ping)


def test_each_side_enforces_its_own_difficulty() -> None:
    """A responder that asks for nothing answers a weak initiator, but an initiator asking for
    8 bits refuses a responder below them, whatever the responder's own setting."""
    weak = _below(8)
    w_addr = _addr(weak, 4004)
    lax = Gate(w_addr, Rejections(), wire=WIRE, id_difficulty=0)
    me = Identity.generate(8)
    init = SessionInitiator(me, _addr(me, 4005), w_addr, WIRE)
    opening = WIRE.decode(init.open_frame)
    assert isinstance(opening, SessionOpen)
    accepted = lax.accept_session(opening, weak)
    assert accepted is not None
    reply = WIRE.decode(accepted[0])
    with pytest.raises(IdPuzzleFailed):
        init.finish(reply, _addr(me, 4005), id_difficulty=8)
    assert issubclass(IdPuzzleFailed, RemoteProtocolError)  # the link code's existing path
    # The same answer is fine for an initiator that asks for nothing.
    init.finish(reply, _addr(me, 4005), id_difficulty=0)


# ---------------------------------------------------------------------- real peer, loopback


def test_a_live_peer_refuses_and_counts_weak_keys_both_ways_and_keeps_serving() -> None:
    """Over loopback: a session opening signed by a key below the peer's difficulty gets no
    answer and is counted; a link the peer opens to a responder below it is refused and
    counted; a peer with a good key then joins through it as usual."""
    d = 6
    out: dict[str, object] = {}

    async def main() -> None:
        cfg = PeerConfig(id_difficulty=d, seed=1)
        async with trio.open_nursery() as nursery:
            target = PeerRuntime(Identity.generate(d), builtin_schemas(), cfg)
            await nursery.start(target.run, [])
            assert target.address is not None
            port = target.address.port
            # 1. A weak key opens a session: no answer, and counted.
            weak = _below(d)
            init = SessionInitiator(weak, _addr(weak, 9), target.addr, WIRE)
            async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
                await stream.send_all(frame(init.open_frame))
                with trio.move_on_after(30):  # a guard against a hang, not a timing check
                    while not target.rejections.by_reason.get(ID_PUZZLE):
                        await trio.sleep(0.01)
            out["responder"] = dict(target.rejections.by_reason)
            # 2. The peer opens a link to a (lax) peer whose key is below its difficulty.
            lax = PeerRuntime(weak, builtin_schemas(), PeerConfig(id_difficulty=0, seed=2))
            await nursery.start(lax.run, [])
            target._send(lax.addr, Ping(Handle(target.identity.node_id, target.addr)))
            with trio.move_on_after(30):
                while target.rejections.by_reason.get(ID_PUZZLE, 0) < 2:
                    await trio.sleep(0.01)
            out["initiator"] = dict(target.rejections.by_reason)
            # 3. An honest peer joins through the target: the target kept serving.
            honest = PeerRuntime(Identity.generate(d), builtin_schemas(), cfg)
            with trio.fail_after(60):
                await nursery.start(honest.run, [("127.0.0.1", port)])
            out["status"] = target.status()
            for p in (target, lax, honest):
                p.stop()

    trio.run(main)
    assert out["responder"] == {ID_PUZZLE: 1}
    assert out["initiator"] == {ID_PUZZLE: 2}
    status = out["status"]
    assert isinstance(status, dict)
    assert status["rejected"]["runtime"] == {ID_PUZZLE: 2}
    assert status["internal_errors"] == 0


def test_the_command_line_sets_the_difficulty_and_refuses_a_bad_one() -> None:
    from rangecast.cli.main import build_parser, main

    parser = build_parser()
    start = parser.parse_args(["peer", "start"])
    up = parser.parse_args(["swarm", "up", "-n", "2", "--dir", "x"])
    assert start.id_difficulty == up.id_difficulty == DEFAULT_ID_DIFFICULTY
    assert parser.parse_args(["peer", "start", "--id-difficulty", "0"]).id_difficulty == 0
    # Refused before any key is ground or port bound.
    assert main(["peer", "start", "--id-difficulty", str(MAX_ID_DIFFICULTY + 1)]) == 2
