"""Peer admission (issue 29): a swarm started with a swarm key links only to peers that prove
it in their link handshake, both ways, so a peer of one's own (and its raised limits) cannot
join it. Off by default: without a key the handshake is the same bytes as before."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trio
from runtime_harness import oracle_round

from rangecast.cli.main import main as cli_main
from rangecast.dht.errors import LocalProtocolError, RemoteProtocolError
from rangecast.dht.messages import HopAck, Ping
from rangecast.dht.wire import Handle, codec_for
from rangecast.pubsub.peer import OverlayPeer
from rangecast.pubsub.schema import builtin_schemas
from rangecast.runtime.guard import (
    SWARM_KEY_MISSING,
    SWARM_KEY_WRONG,
    Gate,
    HandshakeRefused,
    InSession,
    Rejections,
    Sealer,
    SessionInitiator,
    SwarmKeyRefused,
    frame,
    wire_codec,
)
from rangecast.runtime.identity import SWARM_KEY_FILE, Identity, PeerAddress, SwarmKey
from rangecast.runtime.inprocess import start_local_swarm
from rangecast.runtime.messages import (
    Authed,
    KeyedAccept,
    KeyedOpen,
    Sealed,
    SessionAccept,
    SessionOpen,
)
from rangecast.runtime.peer import PeerConfig, PeerRuntime

CORE = codec_for(*OverlayPeer.TABLES)
WIRE = wire_codec(*OverlayPeer.TABLES)
ALICE = Identity.generate()
BOB = Identity.generate()
A_ADDR = PeerAddress(ALICE.node_id, "127.0.0.1", 4001).to_bytes()
B_ADDR = PeerAddress(BOB.node_id, "127.0.0.1", 4002).to_bytes()
KEY = SwarmKey(bytes(range(32)))
OTHER_KEY = SwarmKey(bytes(range(1, 33)))


# --------------------------------------------------------------------------- the key file


def test_a_created_key_file_is_owner_only_and_loads_back(tmp_path: Path) -> None:
    path = tmp_path / SWARM_KEY_FILE
    key = SwarmKey.create(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert SwarmKey.load(path) == key
    assert key.secret.hex() not in repr(key) and len(key.fingerprint) == 16
    with pytest.raises(LocalProtocolError, match=str(path)):
        SwarmKey.create(path)  # never overwritten
    assert SwarmKey.load(path) == key
    hand_made = tmp_path / "by-hand"
    hand_made.write_text(f"# comment\n\n  {KEY.secret.hex().upper()}  \n")
    assert SwarmKey.load(hand_made) == KEY
    assert PeerConfig().swarm_key is None  # off by default


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "No such file"),
        ("", "not 0 lines"),
        ("# only a comment\n", "not 0 lines"),
        (KEY.secret.hex()[:-2] + "\n", "not 62 characters"),
        (KEY.secret.hex()[:-1] + "g\n", "not 64 characters"),
        (f"{KEY.secret.hex()}\n{OTHER_KEY.secret.hex()}\n", "not 2 lines"),
        (b"\xff" * 32, "not ASCII"),
        ("dir", "Is a directory"),
    ],
)
def test_a_bad_key_file_is_one_line_naming_it(
    tmp_path: Path, content: str | bytes | None, problem: str
) -> None:
    path = tmp_path / "swarm.key"
    if content == "dir":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    with pytest.raises(LocalProtocolError, match=problem) as err:
        SwarmKey.load(path)
    assert str(err.value).startswith(str(path)) and "\n" not in str(err.value)


def test_the_command_line_refuses_a_bad_key_file_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.key"
    state = tmp_path / "state"
    assert cli_main(["peer", "start", "--alone", "--state", str(state),
                     "--swarm-key", str(missing)]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert err.startswith("rangecast: error:") and str(missing) in err and "\n" not in err
    assert not state.exists()  # refused before the identity was made
    short = tmp_path / "short.key"
    short.write_text("abcd\n")
    assert cli_main(["swarm", "up", "-n", "1", "--dir", str(tmp_path / "s"),
                     "--swarm-key", str(short)]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert str(short) in err and "64 hex digits" in err and "\n" not in err
    assert not (tmp_path / "s").exists()


# ----------------------------------------------------------------------- the handshake


def _open(key: SwarmKey | None, me: Identity = ALICE) -> tuple[SessionInitiator, SessionOpen]:
    addr = PeerAddress(me.node_id, "127.0.0.1", 4001).to_bytes()
    init = SessionInitiator(me, addr, B_ADDR, WIRE, key)
    msg = WIRE.decode(init.open_frame)
    assert isinstance(msg, SessionOpen)
    return init, msg


def test_keyed_peers_prove_the_key_both_ways_and_share_a_session() -> None:
    rej = Rejections()
    gate = Gate(B_ADDR, rej, wire=WIRE, swarm_key=KEY)
    init, opening = _open(KEY)
    assert type(opening) is KeyedOpen
    accepted = gate.accept_session(opening, BOB)
    assert accepted is not None and rej.total == 0
    reply, inbound = accepted
    answer = WIRE.decode(reply)
    assert type(answer) is KeyedAccept
    out = init.finish(answer, A_ADDR)
    wrapped = WIRE.decode(out.wrap(CORE.encode(HopAck(5))))
    assert isinstance(wrapped, Authed) and isinstance(inbound, InSession)
    assert inbound.check(wrapped)
    # The proof costs 34 bytes each way (a 32-byte HMAC and its length); nothing else changes.
    plain_init, plain = _open(None)
    assert type(plain) is SessionOpen
    plain_accepted = Gate(B_ADDR, Rejections(), wire=WIRE).accept_session(plain, BOB)
    assert plain_accepted is not None
    plain_reply = plain_accepted[0]
    assert type(WIRE.decode(plain_reply)) is SessionAccept
    assert len(plain_init.open_frame) == len(plain_reply) == 194  # as before keys existed
    assert len(init.open_frame) - len(plain_init.open_frame) == 34
    assert len(reply) - len(plain_reply) == 34


def test_an_opening_without_the_key_is_refused_before_its_signature() -> None:
    rej = Rejections()
    gate = Gate(B_ADDR, rej, wire=WIRE, swarm_key=KEY)
    _, plain = _open(None)
    forged = SessionOpen(plain.key, plain.src, plain.dst, plain.eph, bytes(64))  # bad signature
    assert gate.accept_session(plain, BOB) is None
    assert gate.accept_session(forged, BOB) is None
    _, other = _open(OTHER_KEY)
    assert isinstance(other, KeyedOpen)
    assert gate.accept_session(other, BOB) is None
    _, mine = _open(KEY)
    assert isinstance(mine, KeyedOpen)
    moved = KeyedOpen(mine.key, mine.src, mine.dst, other.eph, mine.sig, mine.proof)
    assert gate.accept_session(moved, BOB) is None  # a proof binds its own handshake only
    empty = KeyedOpen(plain.key, plain.src, plain.dst, plain.eph, plain.sig)
    assert gate.accept_session(empty, BOB) is None
    # Neither is charged a signature check ("bad signature" would be counted after it).
    assert rej.by_reason == {SWARM_KEY_MISSING: 2, SWARM_KEY_WRONG: 3}


def test_a_keyed_opener_refuses_an_answer_that_does_not_prove_its_key() -> None:
    # A peer without a key answers a keyed opening as a plain one: the opener learns it.
    init, opening = _open(KEY)
    accepted = Gate(B_ADDR, Rejections(), wire=WIRE).accept_session(opening, BOB)
    assert accepted is not None
    with pytest.raises(SwarmKeyRefused) as err:
        init.finish(WIRE.decode(accepted[0]), A_ADDR)
    assert err.value.reason == SWARM_KEY_MISSING and isinstance(err.value, HandshakeRefused)
    # An answer whose proof is not under our key (tampered on the way, here).
    init, opening = _open(KEY)
    accepted = Gate(B_ADDR, Rejections(), wire=WIRE, swarm_key=KEY).accept_session(opening, BOB)
    assert accepted is not None
    answer = WIRE.decode(accepted[0])
    assert isinstance(answer, KeyedAccept)
    bent = KeyedAccept(answer.key, answer.src, answer.dst, answer.eph, answer.sig, bytes(32))
    with pytest.raises(SwarmKeyRefused) as err:
        init.finish(bent, A_ADDR)
    assert err.value.reason == SWARM_KEY_WRONG
    # A plain opener does not take a keyed answer (it could not share the session key).
    plain_init, _ = _open(None)
    with pytest.raises(RemoteProtocolError, match="expected SessionAccept"):
        plain_init.finish(answer, A_ADDR)


def test_a_keyed_gate_refuses_every_envelope() -> None:
    ping = Ping(Handle(ALICE.node_id, A_ADDR))
    env = WIRE.decode(Sealer(ALICE, A_ADDR, 1, WIRE).seal(B_ADDR, CORE.encode(ping)))
    assert isinstance(env, Sealed)
    rej = Rejections()
    assert Gate(B_ADDR, rej, wire=WIRE, swarm_key=KEY).open(env) is None
    assert rej.by_reason == {SWARM_KEY_MISSING: 1}
    assert Gate(B_ADDR, Rejections(), wire=WIRE).open(env) == (A_ADDR, ping)


# ------------------------------------------------------------------------------ live peers


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


async def _join_error(nursery: trio.Nursery, cfg: PeerConfig, port: int) -> str:
    """Start a peer joining through ``127.0.0.1:port``; the error its join ends with."""
    peer = PeerRuntime(Identity.generate(0), builtin_schemas(), cfg)
    try:
        with trio.fail_after(60):  # a guard against a hang, not a timing check
            await nursery.start(peer.run, [("127.0.0.1", port)])
    except BaseException as exc:  # the join's error, possibly in a group
        leaf = _leaf(exc)
        assert isinstance(leaf, LocalProtocolError), repr(exc)
        return str(leaf)
    peer.stop()
    raise AssertionError("the peer joined")


def test_a_keyed_swarm_delivers_and_admits_only_key_holders() -> None:
    keyed = PeerConfig(id_difficulty=0, swarm_key=KEY)
    out: dict[str, Any] = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            peers = await start_local_swarm(nursery, 4, seed=29, config=keyed)
            ports = [p.address.port for p in peers if p.address is not None]
            out["oracle"] = await oracle_round(
                (ports[0], ports[1]), (ports[2], ports[3]), 29, n_subs=30, n_events=40
            )
            contact = peers[0]
            out["before"] = dict(contact.rejections.by_reason)
            out["keyless"] = await _join_error(nursery, PeerConfig(id_difficulty=0), ports[0])
            wrong = PeerConfig(id_difficulty=0, swarm_key=OTHER_KEY)
            out["wrong"] = await _join_error(nursery, wrong, ports[0])
            # A sealed envelope from a stranger, over a plain connection: refused, counted.
            mallory = Identity.generate(0)
            m_addr = PeerAddress(mallory.node_id, "127.0.0.1", 9).to_bytes()
            env = Sealer(mallory, m_addr, 1, WIRE).seal(contact.addr, CORE.encode(HopAck(1)))
            async with await trio.open_tcp_stream("127.0.0.1", ports[0]) as stream:
                await stream.send_all(frame(env))
                with trio.move_on_after(30):  # a guard against a hang, not a timing check
                    while contact.rejections.by_reason.get(SWARM_KEY_MISSING, 0) < 2:
                        await trio.sleep(0.01)
            out["status"] = contact.status()
            out["members"] = [sorted(str(n) for n in p.dht.neighbours()) for p in peers]
            # A keyed peer cannot join a swarm without the key either.
            (open_peer,) = await start_local_swarm(nursery, 1, seed=30, config=PeerConfig(
                id_difficulty=0))  # fmt: skip
            assert open_peer.address is not None
            out["keyed_into_open"] = await _join_error(nursery, keyed, open_peer.address.port)
            for p in [*peers, open_peer]:
                p.stop()

    trio.run(main)
    assert out["oracle"] == (0, 0, 0)
    assert SWARM_KEY_MISSING not in out["before"] and SWARM_KEY_WRONG not in out["before"]
    port = out["status"]["address"]
    for why in ("keyless", "wrong"):
        assert out[why].startswith("could not join: ") and port in out[why], out[why]
        assert "closed the connection at our link handshake" in out[why]
        assert "\n" not in out[why]
    assert "--swarm-key" in out["keyless"] and "another --swarm-key" in out["wrong"]
    assert "answered without a swarm key" in out["keyed_into_open"]
    st = out["status"]
    assert st["swarm_key"] == KEY.fingerprint
    runtime = st["rejected"]["runtime"]
    # One refused opening each (the keyless one, then the envelope), one with the wrong key.
    assert runtime[SWARM_KEY_MISSING] == 2 and runtime[SWARM_KEY_WRONG] == 1
    assert st["internal_errors"] == 0
    # The outsiders are in nobody's leaf set: each member sees exactly the three others.
    assert all(len(m) == 3 for m in out["members"])


def test_without_a_key_the_status_says_so() -> None:
    async def main() -> dict[str, Any]:
        async with trio.open_nursery() as nursery:
            (peer,) = await start_local_swarm(nursery, 1, seed=31, config=PeerConfig(
                id_difficulty=0))  # fmt: skip
            st = peer.status()
            peer.stop()
            return st

    assert trio.run(main)["swarm_key"] is None


# ----------------------------------------------------------------------- real processes


# Real processes, about 1 s.
def test_a_keyless_peer_start_cannot_join_a_keyed_one(tmp_path: Path) -> None:
    """``peer start --swarm-key``: a peer without it (or with another) exits 2 with one line
    naming the contact, and the contact counts the refusals in ``peer status --json``."""
    from test_runtime_cli import RANGECAST, _one_line_error, free_base, rc

    key = tmp_path / "swarm.key"
    SwarmKey.create(key)
    other = tmp_path / "other.key"
    SwarmKey.create(other)
    port = free_base(1)
    contact = subprocess.Popen(
        [*RANGECAST, "peer", "start", "--listen", f"127.0.0.1:{port}", "--id-difficulty", "0",
         "--swarm-key", str(key)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert contact.stdout is not None
        assert json.loads(contact.stdout.readline())["address"] == f"127.0.0.1:{port}"
        join = ["peer", "start", "--join", f"127.0.0.1:{port}", "--id-difficulty", "0"]
        keyless = _one_line_error(rc(*join))
        assert f"127.0.0.1:{port}" in keyless and "--swarm-key" in keyless
        wrong = _one_line_error(rc(*join, "--swarm-key", str(other)))
        assert f"127.0.0.1:{port}" in wrong and "another --swarm-key" in wrong
        st = rc("peer", "status", "--via", f"127.0.0.1:{port}", "--json")
        assert st.returncode == 0, st.stderr
        status = json.loads(st.stdout)
        assert status["swarm_key"] == SwarmKey.load(key).fingerprint
        runtime = status["rejected"]["runtime"]
        assert runtime[SWARM_KEY_MISSING] == 1 and runtime[SWARM_KEY_WRONG] == 1
    finally:
        contact.terminate()
        contact.wait(timeout=30)


# Real processes, about 5 s.
def test_swarm_up_makes_its_own_key_and_every_peer_holds_it(tmp_path: Path) -> None:
    from test_runtime_cli import free_base, rc

    n = 2
    base = free_base(n)
    swarm_dir = tmp_path / "swarm"
    up = rc("swarm", "up", "-n", str(n), "--dir", str(swarm_dir), "--base-port", str(base),
            "--id-difficulty", "0", "--swarm-key")  # fmt: skip
    assert up.returncode == 0, up.stderr
    key_file = swarm_dir / SWARM_KEY_FILE
    try:
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        fingerprint = SwarmKey.load(key_file).fingerprint
        for i in range(n):
            st = rc("peer", "status", "--via", f"127.0.0.1:{base + i}", "--json")
            assert st.returncode == 0, st.stderr
            assert json.loads(st.stdout)["swarm_key"] == fingerprint
        assert json.loads((swarm_dir / "swarm.json").read_text())["swarm_key"] == str(
            key_file.resolve()
        )
    finally:
        down = rc("swarm", "down", "--dir", str(swarm_dir))
    assert down.returncode == 0, down.stderr
    assert os.path.exists(key_file)  # kept for the next `swarm up --swarm-key`
