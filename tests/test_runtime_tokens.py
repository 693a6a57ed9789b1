"""Optional client tokens (issue 18): a peer started with tokens serves only clients whose hello
carries one of them; others get a clear refusal (``Unauthorized``), counted in ``peer status``.
Peers still greet and join each other without tokens. Off by default."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from rangecast.cli.main import main as cli_main
from rangecast.dht.errors import LocalProtocolError, WireError
from rangecast.pubsub.peer import OverlayPeer
from rangecast.runtime.client import RequestError, Unauthorized, connect
from rangecast.runtime.guard import FrameReader, frame, wire_codec
from rangecast.runtime.inprocess import start_local_swarm
from rangecast.runtime.messages import Hello, StatusRequest, SubscribeReply, SubscribeRequest
from rangecast.runtime.peer import PeerConfig, PeerRuntime
from rangecast.runtime.tokens import (
    BAD_TOKEN,
    TOKEN_ENV,
    TOKEN_REFUSED,
    UNAUTHORIZED_PREFIX,
    ClientTokens,
    client_token,
    load_tokens,
)

WIRE = wire_codec(*OverlayPeer.TABLES)
EVENT = {"Attr1": 50.0, "Attr2": 0.0, "Attr3": 1.0, "Attr4": 2.0}
GOOD = "s3cret-token-of-the-swarm-0001"
OTHER = "s3cret-token-of-the-swarm-0002"


def _port(peer: PeerRuntime) -> int:
    assert peer.address is not None
    return peer.address.port


# ------------------------------------------------------------------------- tokens, files


def test_tokens_match_exactly_and_only_their_own() -> None:
    tokens = ClientTokens.of([GOOD, OTHER])
    assert tokens.check(GOOD) and tokens.check(OTHER)
    for wrong in ("", GOOD[:-1], GOOD + "x", GOOD.upper(), "é" * 20):
        assert not tokens.check(wrong)
    assert PeerConfig().client_tokens is None  # off by default
    with pytest.raises(LocalProtocolError, match="none given"):
        ClientTokens.of([])
    with pytest.raises(LocalProtocolError, match="16 to 256"):
        ClientTokens.of(["short"])


def test_a_token_file_is_read_one_token_a_line(tmp_path: Path) -> None:
    f = tmp_path / "tokens"
    f.write_text(f"# the swarm's clients\n\n{GOOD}\n  {OTHER}  \n")
    tokens = load_tokens(f)
    assert len(tokens) == 2 and tokens.check(OTHER)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "No such file"),
        ("", "no client token"),
        ("# only a comment\n", "no client token"),
        (f"{GOOD}\nshort\n", ":2: a token has 16 to 256 characters"),
        ("with a space in the token\n", ":1: a token is printable ASCII"),
        (b"\xff\xfe not text", "not UTF-8"),
    ],
)
def test_a_bad_token_file_is_one_line_naming_it(
    tmp_path: Path, content: str | bytes | None, problem: str
) -> None:
    f = tmp_path / "tokens"
    if isinstance(content, bytes):
        f.write_bytes(content)
    elif content is not None:
        f.write_text(content)
    with pytest.raises(LocalProtocolError, match=problem) as err:
        load_tokens(f)
    assert str(err.value).startswith(str(f)) and "\n" not in str(err.value)


def test_peer_start_with_a_bad_token_file_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope"
    assert cli_main(["peer", "start", "--alone", "--client-tokens", str(missing)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rangecast: error:") and str(missing) in err and "\n" not in err
    bad = tmp_path / "bad"
    bad.write_text("short\n")
    assert cli_main(["swarm", "up", "-n", "1", "--dir", str(tmp_path / "s"),
                     "--client-tokens", str(bad)]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert f"{bad}:1:" in err and "\n" not in err
    assert not (tmp_path / "s").exists()  # refused before anything was started


def test_client_commands_take_the_token_from_the_option_or_the_environment(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert client_token(None, {}) is None
    assert client_token(None, {TOKEN_ENV: GOOD}) == GOOD
    assert client_token(OTHER, {TOKEN_ENV: GOOD}) == OTHER
    with pytest.raises(LocalProtocolError, match=TOKEN_ENV):
        client_token(None, {TOKEN_ENV: "short"})
    assert cli_main(["peer", "status", "--via", "127.0.0.1:1", "--token", "short"]) == 2
    assert "--token: a token has 16 to 256" in capsys.readouterr().err
    monkeypatch.setenv(TOKEN_ENV, "bad token with spaces")
    assert cli_main(["publish", "--via", "127.0.0.1:1", "Attr1=1"]) == 2
    assert f"{TOKEN_ENV}: a token is printable ASCII" in capsys.readouterr().err


def test_the_hello_token_is_decoded_strictly() -> None:
    assert WIRE.decode(WIRE.encode(Hello(GOOD))) == Hello(GOOD)
    assert WIRE.decode(WIRE.encode(Hello())) == Hello("")
    with pytest.raises(WireError):
        WIRE.decode(WIRE.encode(Hello("x" * 257)))


# ------------------------------------------------------------------------------ live peers


async def _raw_request(port: int, *msgs: Any) -> list[Any]:
    """Send ``msgs`` on a bare connection; the replies, one per message."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    reader = FrameReader()
    out: list[Any] = []
    async with stream:
        for m in msgs:
            await stream.send_all(frame(WIRE.encode(m)))
            while len(out) < len(msgs) and not (frames := reader.feed(await stream.receive_some())):
                pass
            out += [WIRE.decode(f) for f in frames]
    return out


def test_a_peer_with_tokens_serves_only_clients_that_present_one() -> None:
    cfg = PeerConfig(id_difficulty=0, client_tokens=ClientTokens.of([GOOD, OTHER]))

    async def main() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with trio.open_nursery() as nursery:
            # The second peer joins through the first: peers greet without tokens.
            peers = await start_local_swarm(nursery, 2, seed=31, config=cfg)
            port = _port(peers[0])
            with pytest.raises(Unauthorized, match="requires a client token"):
                async with connect("127.0.0.1", port):
                    pass
            with pytest.raises(Unauthorized, match="client token refused"):
                async with connect("127.0.0.1", port, token=GOOD[:-1] + "X"):
                    pass
            # A client that ignores the hello's answer: every request is refused, with a reply.
            replies = await _raw_request(
                port, Hello(), SubscribeRequest(7, "thesis", "Attr1 >= 0"), StatusRequest(8)
            )
            out["raw"] = replies
            # One guess per connection: after a wrong token, the right one is refused too.
            out["guess"] = await _raw_request(port, Hello(OTHER[::-1]), Hello(OTHER))
            async with (
                connect("127.0.0.1", _port(peers[1]), token=GOOD) as sub_client,
                connect("127.0.0.1", port, token=OTHER) as pub_client,
            ):
                sub = await sub_client.subscribe("Attr1 >= 40")
                eid = await pub_client.publish(EVENT)
                async for d in sub:
                    out["delivered"] = d.eid == eid
                    break
                out["status"] = await pub_client.status()
            for p in peers:
                p.stop()
        return out

    out = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    hello, subscribe, status = out["raw"]
    assert hello.error.startswith(UNAUTHORIZED_PREFIX) and hello.key  # still says who it is
    assert isinstance(subscribe, SubscribeReply) and subscribe.req == 7
    assert subscribe.error.startswith(UNAUTHORIZED_PREFIX)
    assert status.req == 8 and status.error.startswith(UNAUTHORIZED_PREFIX)
    assert [r.error for r in out["guess"]] == [BAD_TOKEN, BAD_TOKEN]
    assert out["delivered"]
    clients = out["status"]["clients"]
    assert clients["tokens_required"] is True
    # The wrong token's hello, the two requests and the two guesses; a hello without a token
    # is not counted (peers send one to learn a contact's key).
    assert clients["refused"][TOKEN_REFUSED] == 5


def test_without_tokens_a_client_token_is_ignored_and_anyone_is_served() -> None:
    async def main() -> tuple[int, dict[str, Any]]:
        async with trio.open_nursery() as nursery:
            (peer,) = await start_local_swarm(nursery, 1, seed=32)
            async with connect("127.0.0.1", _port(peer), token=GOOD) as c:
                eid = await c.publish(EVENT)
                st = await c.status()
            async with connect("127.0.0.1", _port(peer)) as c:
                with pytest.raises(RequestError) as err:
                    await c.subscribe("Attr9 >= 1")
                assert not isinstance(err.value, Unauthorized)
            peer.stop()
            return eid, st

    eid, st = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert eid > 0
    assert st["clients"]["tokens_required"] is False
    assert TOKEN_REFUSED not in st["clients"]["refused"]


@pytest.mark.slow  # real processes: about 20 s
def test_a_swarm_with_tokens_from_the_command_line(tmp_path: Path) -> None:
    """``swarm up --client-tokens``: every peer requires a token, the swarm's own status
    probes present one, and client commands need ``--token`` or the environment."""
    from test_runtime_cli import RANGECAST, free_base, rc

    tokens = tmp_path / "tokens"
    tokens.write_text(f"{GOOD}\n{OTHER}\n")
    n = 2
    base = free_base(n)
    swarm_dir = tmp_path / "swarm"
    up = rc("swarm", "up", "-n", str(n), "--dir", str(swarm_dir), "--base-port", str(base),
            "--id-difficulty", "0", "--client-tokens", str(tokens))  # fmt: skip
    assert up.returncode == 0, up.stderr
    via = f"127.0.0.1:{base + 1}"
    try:
        assert rc("swarm", "status", "--dir", str(swarm_dir)).returncode == 0
        bare = rc("peer", "status", "--via", via)
        assert bare.returncode == 2 and "requires a client token" in bare.stderr
        assert len(bare.stderr.strip().splitlines()) == 1
        env = {**os.environ, TOKEN_ENV: OTHER}
        pub = subprocess.run(
            [*RANGECAST, "publish", "--via", via, "Attr1=5", "Attr2=0", "Attr3=1", "Attr4=2"],
            capture_output=True, text=True, timeout=60, env=env, check=False,
        )  # fmt: skip
        assert pub.returncode == 0, pub.stderr
        st = rc("peer", "status", "--via", via, "--token", GOOD, "--json")
        assert st.returncode == 0, st.stderr
        clients = json.loads(st.stdout)["clients"]
        assert clients["tokens_required"] is True
        assert TOKEN_REFUSED not in clients["refused"]  # a hello without a token: not counted
        assert clients["publishes_accepted"] == 1
    finally:
        down = rc("swarm", "down", "--dir", str(swarm_dir))
    assert down.returncode == 0, down.stderr
