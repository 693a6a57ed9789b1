"""Issue 29, build item 7: what a lying or broken peer can no longer do.

* ``swarm check`` cross-checks the peers' reports: a peer lying about the swarm's settings or
  about tree nodes is named, and its lies are not reported as violations among honest peers
  (``cli.swarm_check.cross_check``, fed reports made from a simulated overlay);
* ``peer status`` against a peer replying with wrong JSON types: one line naming the address,
  exit 2, no traceback (a fake peer on a loopback socket);
* a sealed frame captured before the recipient restarts is refused after the restart.
"""

from __future__ import annotations

import dataclasses
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from rangecast.cli import swarm_check
from rangecast.cli.swarm_check import cross_check
from rangecast.dht.messages import Ping
from rangecast.dht.wire import Handle, codec_for
from rangecast.pubsub.peer import OverlayPeer
from rangecast.pubsub.schema import THESIS_SCHEMA, builtin_schemas
from rangecast.pubsub.space import TreeId
from rangecast.pubsub.subscription import where
from rangecast.runtime.guard import FrameReader, Gate, Rejections, Sealer, frame, wire_codec
from rangecast.runtime.identity import Identity, PeerAddress, StateDir
from rangecast.runtime.messages import (
    Hello,
    HelloReply,
    Sealed,
    StatusReply,
    StatusRequest,
    TreeReply,
    WireTreeConfig,
)
from rangecast.runtime.peer import PeerConfig, PeerRuntime
from rangecast.runtime.treestate import picture
from rangecast.testkit.live import check_live, snapshot_from
from rangecast.testkit.simnet import SimOverlay
from rangecast.testkit.snapshot import Domain, HostedNode, TreeSnapshot

CORE = codec_for(*OverlayPeer.TABLES)
WIRE = wire_codec(*OverlayPeer.TABLES)
N = 8
ADDRS = [f"127.0.0.1:{7400 + i}" for i in range(N)]
LIAR = ADDRS[0]  # the first peer asked: the one whose settings the check used to take


# ----------------------------------------------------------------------- swarm check


def _overlay() -> SimOverlay:
    net = SimOverlay(N, 3, THESIS_SCHEMA, capacity=(2, 2))
    for k in range(30):
        expr = where(THESIS_SCHEMA).between("Attr1", k * 30.0, k * 30.0 + 50).build()
        net.subscribe(k % N, expr)
    net.settle()
    return net


NET = _overlay()


def _pages(core: OverlayPeer, config: WireTreeConfig | None = None) -> list[TreeReply]:
    """What the peer's ``TreeReply`` pages would carry (``runtime/treestate.py``)."""
    pic = picture(core, NET.registry)
    last = len(pic.pages) - 1
    return [
        TreeReply(
            1,
            k,
            k < last,
            "ready",
            page,
            pic.schemas if k == 0 else [],
            (config or pic.config) if k == 0 else None,
        )
        for k, page in enumerate(pic.pages)
    ]


def _honest() -> dict[str, TreeSnapshot]:
    """Every peer's own report, as ``gather`` makes them."""
    return {a: snapshot_from({a: _pages(core)}) for a, core in zip(ADDRS, NET.peers, strict=True)}


def _merged(reports: dict[str, TreeSnapshot]) -> TreeSnapshot:
    """The snapshot the check used to take: every node, the first report's settings."""
    first = next(iter(reports.values()))
    nodes = tuple(n for r in reports.values() for n in r.nodes)
    return dataclasses.replace(first, peers=tuple(reports), nodes=nodes)


def _honest_only(violations: list[Any]) -> list[Any]:
    return [v for v in violations if LIAR not in v.peers]


def test_an_honest_swarm_is_still_clean() -> None:
    result = cross_check(_honest())
    assert result.ok and result.violations == [] and result.disagreements == []
    assert check_live(_merged(_honest())) == []


def test_a_peer_lying_about_the_configuration_is_named_and_not_believed() -> None:
    reports = _honest()
    c = picture(NET.peers[0], NET.registry).config
    lie = WireTreeConfig(c.replicas + 2, c.internal_replicas + 2, c.max_depth, False, c.cutoff)
    reports[LIAR] = snapshot_from({LIAR: _pages(NET.peers[0], lie)})
    # Before: the first peer's word was the swarm's configuration.
    assert _honest_only(check_live(_merged(reports)))
    result = cross_check(reports)
    assert result.violations == []
    (d,) = result.disagreements
    assert (d.peer, d.others) == (LIAR, N - 1)
    assert f"replicas {c.replicas + 2}" in d.about and f"replicas {c.replicas}" in d.about
    assert result.snapshot.config.replicas == c.replicas


def test_a_peer_lying_about_a_schema_is_named_and_not_believed() -> None:
    reports = _honest()
    attrs = reports[LIAR].schemas["thesis"]
    halved = (Domain(attrs[0].name, attrs[0].lo, attrs[0].hi / 8), *attrs[1:])
    reports[LIAR] = dataclasses.replace(reports[LIAR], schemas={"thesis": halved})
    assert _honest_only(check_live(_merged(reports)))  # before: pieces "outside" their leaves
    result = cross_check(reports)
    assert result.violations == []
    (d,) = result.disagreements
    assert (d.peer, d.others) == (LIAR, N - 1) and "schema thesis" in d.about


def test_a_peer_claiming_the_others_nodes_is_named_and_its_claims_folded() -> None:
    """The liar claims to be the primary of every node the others are primary of, and that
    each tree's root is a leaf: every violation this makes names an honest peer too."""
    reports = _honest()
    others = [n for a in ADDRS[1:] for n in reports[a].nodes]
    dup = [dataclasses.replace(n, peer=LIAR) for n in others if n.primary]
    roots = {(n.schema, TreeId(n.tid.attr, 0, 0)) for n in others}
    fake = [HostedNode(LIAR, s, t, True, True) for s, t in sorted(roots)]
    reports[LIAR] = dataclasses.replace(reports[LIAR], nodes=(*dup, *fake, *reports[LIAR].nodes))
    before = check_live(_merged(reports))
    assert len({p for v in before for p in v.peers} - {LIAR}) >= 2
    result = cross_check(reports)
    (d,) = result.disagreements
    assert d.peer == LIAR and d.others >= 2 and d.implied
    # Nothing is reported among honest peers alone, and nothing the liar implied is lost.
    assert _honest_only(result.violations) == []
    assert all(LIAR in v.peers for v in d.implied)
    assert len(d.implied) + len(result.violations) == len(before)


def test_a_crashed_peer_is_nobodys_lie() -> None:
    """Lost copies depend on no single report: they stay violations, nobody is named."""
    for gone in range(N):
        reports = {a: r for a, r in _honest().items() if a != ADDRS[gone]}
        result = cross_check(reports)
        assert result.disagreements == []
        assert sorted(map(str, result.violations)) == sorted(map(str, check_live(_merged(reports))))


def test_a_report_that_cannot_be_checked_names_its_peer_and_stops_nothing() -> None:
    reports = _honest()
    odd = [
        HostedNode(LIAR, "nosuch", TreeId(0, 0, 0), True, True),
        HostedNode(LIAR, "thesis", TreeId(40, 0, 0), True, True),
        HostedNode(LIAR, "thesis", TreeId(0, 1, 5), True, True),
    ]
    reports[LIAR] = dataclasses.replace(reports[LIAR], nodes=(*reports[LIAR].nodes, *odd))
    result = cross_check(reports)
    assert result.violations == []
    assert {d.peer for d in result.disagreements} == {LIAR}
    assert len(result.disagreements) == 3 and all(d.others == 0 for d in result.disagreements)


def _lying_config() -> dict[str, TreeSnapshot]:
    reports = _honest()
    c = picture(NET.peers[0], NET.registry).config
    lie = WireTreeConfig(c.replicas + 2, c.internal_replicas, c.max_depth, False, c.cutoff)
    reports[LIAR] = snapshot_from({LIAR: _pages(NET.peers[0], lie)})
    return reports


def test_real_peers_reports_agree() -> None:
    """``gather`` on live peers (one process): every report on its own, and they agree."""
    from rangecast.runtime.client import connect
    from rangecast.runtime.inprocess import start_local_swarm

    async def main() -> Any:
        async with trio.open_nursery() as nursery:
            cfg = PeerConfig(id_difficulty=0, capacity=4)
            peers = await start_local_swarm(nursery, 4, seed=29, config=cfg)
            addrs = [p.address.endpoint for p in peers if p.address is not None]
            async with connect("127.0.0.1", peers[1].address.port) as client:  # type: ignore[union-attr]
                for k in range(12):
                    await client.subscribe(f"Attr1 between {k * 80} and {k * 80 + 60}")
                got = await swarm_check.gather([*addrs, "127.0.0.1:1"], timeout_s=10)
            for p in peers:
                p.stop()
            return addrs, got

    addrs, (reports, states, unreachable) = trio.run(main)
    assert list(reports) == addrs and set(states.values()) == {"ready"}
    assert list(unreachable) == ["127.0.0.1:1"]
    assert all(r.peers == (a,) for a, r in reports.items())
    result = cross_check(reports)
    assert len(result.snapshot.nodes) > 4
    assert result.ok, [str(x) for x in [*result.disagreements, *result.violations]]


@pytest.mark.parametrize("as_json", [False, True])
def test_the_command_names_the_liar(
    as_json: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from rangecast.cli.main import main

    reports = _lying_config()

    async def gather(*_: object, **__: object) -> tuple[Any, Any, Any]:
        return reports, dict.fromkeys(reports, "ready"), {}

    monkeypatch.setattr(swarm_check, "gather", gather)
    args = ["swarm", "check", "--via", ",".join(ADDRS)] + (["--json"] if as_json else [])
    assert main(args) == 1
    out = capsys.readouterr().out
    if as_json:
        data = json.loads(out)
        assert data["violations"] == [] and not data["ok"]
        assert [(d["peer"], d["others"]) for d in data["disagreements"]] == [(LIAR, N - 1)]
    else:
        lines = out.splitlines()
        named = [x for x in lines if x.startswith("[disagreement]")]
        assert len(named) == 1 and f"peer {LIAR}'s report disagrees with {N - 1} others" in named[0]
        assert not [x for x in lines if x.startswith("[replicas")]
        assert lines[-1] == f"1 disagreements (reports of {LIAR})"


# ------------------------------------------------------------------------ peer status

GOOD: dict[str, Any] = {
    "id": "ab" * 20,
    "address": "127.0.0.1:1",
    "state": "ready",
    "uptime_s": 12.5,
    "dht_kind": "pastry",
    "neighbours": [],
    "leaf_set": {"left": ["x"], "right": []},
    "routing_table": {"entries": 3, "rows": 2, "per_row": [2, 1]},
    "tree_nodes": [{"schema": "thesis", "leaf": True, "subscriptions": 4}],
    "subscriptions": 1,
    "links": 2,
    "rejected": {"total": 0, "runtime": {}, "dht_malformed": 0, "overlay_malformed": 0},
    "transport": {"frames_in": 5, "frames_out": 6, "dropped_out": 0},
    "dht": {"end_to_end": None, "healing": None},
}


class FakePeer:
    """A loopback server that answers a hello and replies ``status`` (text) to every status
    request: a peer whose status is whatever the test says."""

    def __init__(self, status: str) -> None:
        self.status = status
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        me = Identity.generate()
        self.hello = HelloReply(
            PeerAddress(me.node_id, "127.0.0.1", self.port).to_bytes(),
            me.public_key,
            "ready",
            ["thesis"],
        )
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            with conn:
                reader = FrameReader()
                try:
                    while data := conn.recv(65536):
                        for f in reader.feed(data):
                            msg = WIRE.decode(f)
                            if isinstance(msg, Hello):
                                conn.sendall(frame(WIRE.encode(self.hello)))
                            elif isinstance(msg, StatusRequest):
                                reply = StatusReply(msg.req, self.status)
                                conn.sendall(frame(WIRE.encode(reply)))
                except OSError:
                    pass

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def fake_peer() -> Iterator[Any]:
    made: list[FakePeer] = []

    def make(status: str) -> FakePeer:
        made.append(FakePeer(status))
        return made[-1]

    yield make
    for p in made:
        p.close()


def _with(**changes: Any) -> str:
    return json.dumps({**GOOD, **changes})


BAD = {
    "a number for a dict": (_with(routing_table=5), "routing_table"),
    "a string for a number": (_with(uptime_s="long"), "uptime_s"),
    "a string for a count": (
        _with(transport={**GOOD["transport"], "frames_in": "many"}),
        "transport.frames_in",
    ),
    "true for a count": (_with(links=True), "links"),
    "a list for the status": ("[1, 2]", "object"),
    "a number for a list": (_with(tree_nodes=7), "tree_nodes"),
    "no routing rows": (_with(routing_table={"entries": 1}), "routing_table"),
    "not JSON": ("{", "not JSON"),
}


@pytest.mark.parametrize("as_json", [False, True])
@pytest.mark.parametrize("case", sorted(BAD))
def test_peer_status_with_wrong_types_is_one_line(
    case: str, as_json: bool, fake_peer: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from rangecast.cli.main import main

    text, what = BAD[case]
    peer = fake_peer(text)
    via = f"127.0.0.1:{peer.port}"
    assert main(["peer", "status", "--via", via, *(["--json"] if as_json else [])]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert captured.out == ""
    assert len(lines) == 1 and via in lines[0] and what in lines[0], captured.err


def test_peer_status_of_a_good_reply_and_a_starting_peer(
    fake_peer: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from rangecast.cli.main import main

    via = f"127.0.0.1:{fake_peer(json.dumps(GOOD)).port}"
    assert main(["peer", "status", "--via", via]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"peer      {GOOD['id']}") and "1 leaves, 4 stored" in out
    assert main(["peer", "status", "--via", via, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == GOOD
    starting = f"127.0.0.1:{fake_peer(json.dumps({'state': 'starting'})).port}"
    assert main(["peer", "status", "--via", starting]) == 0
    assert capsys.readouterr().out.strip() == f"the peer at {starting} is starting"


def test_peer_status_from_the_command_line_prints_no_traceback(fake_peer: Any) -> None:
    via = f"127.0.0.1:{fake_peer(_with(rejected=[1])).port}"
    done = subprocess.run(
        [sys.executable, "-m", "rangecast.cli.main", "peer", "status", "--via", via],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and via in lines[0] and "rejected" in lines[0], done.stderr
    assert "Traceback" not in done.stderr


# ---------------------------------------------------------------- replay after a restart

ALICE = Identity.generate()
A_ADDR = PeerAddress(ALICE.node_id, "127.0.0.1", 4001).to_bytes()


def _sealed(raw: bytes) -> Sealed:
    env = WIRE.decode(raw)
    assert isinstance(env, Sealed)
    return env


def test_a_sealed_frame_captured_before_a_restart_is_refused_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bob's replay window is in memory; his boot epoch (from his state directory) is what
    survives the restart. A clock the test moves (µs): Bob boots, Alice boots and sends him a
    Ping, which Mallory records; Bob restarts; Mallory replays it."""
    now = [1_700_000_000_000_000]
    monkeypatch.setattr(time, "time_ns", lambda: now[0] * 1000)
    state = StateDir(tmp_path / "bob")
    bob, _ = state.load_identity()
    b_addr = PeerAddress(bob.node_id, "127.0.0.1", 4002).to_bytes()
    ping = CORE.encode(Ping(Handle(ALICE.node_id, A_ADDR)))
    gate = Gate(b_addr, Rejections(), wire=WIRE, not_before=state.next_epoch())
    now[0] += 5_000_000
    alice = Sealer(ALICE, A_ADDR, now[0], WIRE)
    captured = _sealed(alice.seal(b_addr, ping))
    assert gate.open(captured) is not None
    assert gate.open(captured) is None  # within the boot: the replay window
    now[0] += 5_000_000
    rej = Rejections()
    after = Gate(b_addr, rej, wire=WIRE, not_before=state.next_epoch())  # same key, new boot
    # Before the fix, a fresh window took it (a gate not bound to a boot still does).
    assert Gate(b_addr, Rejections(), wire=WIRE).open(captured) is not None
    assert after.open(captured) is None
    assert rej.by_reason == {"sealed before this boot": 1}
    # Alice restarting (a later epoch) is heard again.
    now[0] += 1
    fresh = _sealed(Sealer(ALICE, A_ADDR, now[0], WIRE).seal(b_addr, ping))
    assert after.open(fresh) is not None
    assert after.open(fresh) is None
    assert rej.by_reason == {"sealed before this boot": 1, "replayed": 1}


def test_a_peer_restarted_from_its_state_refuses_a_ping_sealed_before(tmp_path: Path) -> None:
    """The same on a real peer: accepted and answered (a Pong to Mallory's address, which
    nobody listens on: a failed connect) before the restart, refused after it."""
    mallory = Identity.generate()
    m_addr = PeerAddress(mallory.node_id, "127.0.0.1", 9).to_bytes()
    ping = CORE.encode(Ping(Handle(mallory.node_id, m_addr)))
    state = StateDir(tmp_path / "peer")
    identity, _ = state.load_identity(0)
    out: dict[str, Any] = {}
    schemas = builtin_schemas()

    async def send(port: int, raw: bytes) -> None:
        async with await trio.open_tcp_stream("127.0.0.1", port) as s:
            await s.send_all(frame(raw))

    async def until(cond: Any) -> None:  # a guard against a hang; the asserts decide
        with trio.move_on_after(30):
            while not cond():
                await trio.sleep(0.02)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            cfg = PeerConfig(id_difficulty=0)
            # The boot epoch as `peer start --state` passes it.
            first = PeerRuntime(identity, schemas, cfg, state=state, epoch=state.next_epoch())
            await nursery.start(first.run, [])
            assert first.address is not None
            port = first.address.port
            captured = Sealer(mallory, m_addr, time.time_ns() // 1000, WIRE).seal(first.addr, ping)
            await send(port, captured)
            await until(lambda: first.transport.connect_failures >= 1)
            out["first"] = (first.rejections.total, first.transport.connect_failures)
            first.stop()
            await first.stopped.wait()
            cfg = PeerConfig(id_difficulty=0, port=port)
            second = PeerRuntime(identity, schemas, cfg, state=state, epoch=state.next_epoch())
            await nursery.start(second.run, [])
            assert second.addr == first.addr  # same key, same address: the frame is for it
            await send(port, captured)
            await until(lambda: second.transport.frames_in >= 1)
            out["second"] = dict(second.rejections.by_reason)
            second.stop()

    trio.run(main)
    assert out["first"][0] == 0 and out["first"][1] >= 1
    assert out["second"] == {"sealed before this boot": 1}


def test_swarm_status_survives_a_peer_reporting_wrong_types() -> None:
    """A peer whose status has the wrong shape is one ``unreadable`` row of ``swarm status``,
    not a traceback for the whole swarm."""
    from rangecast.runtime.swarm import status_fields

    good = {
        "state": "ready",
        "neighbours": ["a", "b"],
        "routing_table": {"entries": 7},
        "tree_nodes": [1],
        "rejected": {"total": 0},
    }
    assert status_fields(good) == {
        "state": "ready",
        "leaf_set": 2,
        "routing_entries": 7,
        "tree_nodes": 1,
        "rejected": 0,
    }
    assert status_fields(None)["state"] is None
    for bad in (
        {**good, "neighbours": 5},
        {**good, "routing_table": "x"},
        {**good, "state": 1},
        {**good, "rejected": {"total": "many"}},
        {"state": "ready"},
        [],
    ):
        row = status_fields(bad)
        assert row["state"] == "unreadable" and row["leaf_set"] is None
