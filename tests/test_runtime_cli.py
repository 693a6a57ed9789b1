"""The real-peer command line as a user types it: ``swarm up``, ``subscribe``, ``publish``,
``peer status``, ``swarm status``, a peer restarted from its state directory, ``swarm down``."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

RANGECAST = [sys.executable, "-m", "rangecast.cli.main"]


def rc(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*RANGECAST, *args], capture_output=True, text=True, timeout=timeout, check=False
    )


#: The port range of the newer tests (apart from the range other test runs draw from).
PORTS = (7600, 7700)


def _ephemeral_low() -> int:
    """The lowest port the kernel hands to outgoing connections (Linux's default: 32768)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def free_base(n: int, lo: int = 20_000, hi: int | None = None) -> int:
    """A base port with ``n + 1`` free ports from it, drawn at random from ``[lo, hi)``.

    The default range ends where the kernel's ephemeral ports begin: a port found free there
    can be taken, between this check and the peer's bind, as the local end of any outgoing
    connection on the machine (another test's client, this swarm's own joins)."""
    if hi is None:
        hi = max(lo + 2 * (n + 1), min(_ephemeral_low(), 60_000))
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    for _ in range(50):
        base = rng.randrange(lo, hi - n - 1)
        ok = True
        for port in range(base, base + n + 1):
            with socket.socket() as s:
                # As the peers listen: a port whose last connections linger in TIME_WAIT is free.
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    pytest.skip("no free port range")


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][:1] == "Z"
    return False


def _wait(cond, timeout: float = 60.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.2)
    return False


def test_the_swarm_command_line_end_to_end(tmp_path: Path) -> None:
    n = 4
    base = free_base(n)
    swarm_dir = tmp_path / "swarm"
    up = rc("swarm", "up", "-n", str(n), "--dir", str(swarm_dir), "--base-port", str(base))
    assert up.returncode == 0, up.stderr
    info = json.loads((swarm_dir / "swarm.json").read_text())
    pids = [p["pid"] for p in info["peers"]]
    restarted: subprocess.Popen[str] | None = None
    try:
        assert [p["address"] for p in info["peers"]] == [f"127.0.0.1:{base + i}" for i in range(n)]
        assert all(len(p["id"]) == 40 for p in info["peers"])
        status = rc("swarm", "status", "--dir", str(swarm_dir), "--json")
        assert status.returncode == 0, status.stdout + status.stderr
        rows = json.loads(status.stdout)["peers"]
        assert all(r["process"] == "running" and r["state"] == "ready" for r in rows)
        assert all(r["leaf_set"] == n - 1 for r in rows)

        # Subscribe through peer 1; publish through peers 2 and 3.
        sub = subprocess.Popen(
            [
                *RANGECAST,
                "subscribe",
                "--via",
                f"127.0.0.1:{base + 1}",
                "Attr1 between 10 and 20 and Attr4 < 100",
                "--count",
                "2",
                "--timeout",
                "60",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert sub.stdout is not None
        first = json.loads(sub.stdout.readline())
        assert set(first) == {"subscribed"} and first["subscribed"] >= 1
        published = []
        for via, values in (
            (2, ["Attr1=15", "Attr2=0", "Attr3=1", "Attr4=2"]),
            (3, ["Attr1=150", "Attr2=0", "Attr3=1", "Attr4=2"]),  # does not match
            (3, ["Attr1=12.5", "Attr2=-3", "Attr3=7", "Attr4=99"]),
        ):
            pub = rc("publish", "--via", f"127.0.0.1:{base + via}", *values)
            assert pub.returncode == 0, pub.stderr
            published.append(json.loads(pub.stdout)["published"])
        out, err = sub.communicate(timeout=90)
        assert sub.returncode == 0, err
        lines = [json.loads(line) for line in out.splitlines()]
        assert {d["event"] for d in lines} == {published[0], published[2]}
        assert len(lines) == 2
        assert lines[0]["sid"] == first["subscribed"]
        assert set(lines[0]["values"]) == {"Attr1", "Attr2", "Attr3", "Attr4"}

        # Mistakes get one clear line and exit status 2, not a traceback.
        bad = rc("publish", "--via", f"127.0.0.1:{base}", "Attr9=1")
        assert bad.returncode == 2 and "unknown attribute 'Attr9'" in bad.stderr
        bad = rc("subscribe", "--via", f"127.0.0.1:{base}", "Attr1 >< 3", "--timeout", "1")
        assert bad.returncode == 2 and "Traceback" not in bad.stderr
        bad = rc("peer", "status", "--via", f"127.0.0.1:{base + n}")  # nobody there
        assert bad.returncode == 2 and "Traceback" not in bad.stderr

        st = rc("peer", "status", "--via", f"127.0.0.1:{base}", "--json")
        assert st.returncode == 0, st.stderr
        peer0 = json.loads(st.stdout)
        assert peer0["id"] == info["peers"][0]["id"]
        assert len({*peer0["leaf_set"]["left"], *peer0["leaf_set"]["right"]}) == n - 1
        assert peer0["routing_table"]["entries"] >= 1
        assert {"tree_nodes", "rejected"} <= set(peer0)
        text = rc("peer", "status", "--via", f"127.0.0.1:{base}")
        assert "leaf set" in text.stdout and "rejected" in text.stdout

        # Restart peer 3 from its state directory alone: same id, same address, rejoins.
        old = info["peers"][3]
        os.kill(old["pid"], signal.SIGTERM)
        assert _wait(lambda: _gone(old["pid"]))
        restarted = subprocess.Popen(
            [*RANGECAST, "peer", "start", "--state", old["state_dir"]],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert restarted.stdout is not None
        hello = json.loads(restarted.stdout.readline())
        assert hello == {"id": old["id"], "address": old["address"]}

        def rejoined() -> bool:
            r = rc("peer", "status", "--via", old["address"], "--json")
            if r.returncode != 0:
                return False
            s = json.loads(r.stdout)
            return len({*s["leaf_set"]["left"], *s["leaf_set"]["right"]}) == n - 1

        def known_again() -> bool:
            r = rc("peer", "status", "--via", f"127.0.0.1:{base}", "--json")
            s = json.loads(r.stdout)
            return any(old["id"][:12] in p for p in s["leaf_set"]["left"] + s["leaf_set"]["right"])

        assert _wait(rejoined)
        assert _wait(known_again)  # and the others have it back in their leaf sets
    finally:
        if restarted is not None:
            restarted.send_signal(signal.SIGTERM)
            restarted.wait(timeout=30)
        down = rc("swarm", "down", "--dir", str(swarm_dir))
    assert down.returncode == 0, down.stderr
    assert all(_gone(pid) for pid in pids)
    assert restarted is None or restarted.returncode == 0


def test_a_kademlia_swarm_from_the_command_line(tmp_path: Path) -> None:
    """``--dht kademlia`` end to end: the swarm comes up, routes subscriptions and events,
    shows its k-buckets, keeps the choice across a restart and answers plain Kademlia nodes."""
    import asyncio

    from kademlia.network import Server

    n = 4
    base = free_base(n)
    swarm_dir = tmp_path / "swarm"
    up = rc("swarm", "up", "-n", str(n), "--dir", str(swarm_dir), "--base-port", str(base),
            "--dht", "kademlia")  # fmt: skip
    assert up.returncode == 0, up.stderr
    info = json.loads((swarm_dir / "swarm.json").read_text())
    try:
        assert info["dht"] == "kademlia"
        rows = json.loads(rc("swarm", "status", "--dir", str(swarm_dir), "--json").stdout)
        assert all(r["state"] == "ready" and r["leaf_set"] == n - 1 for r in rows["peers"])
        sub = subprocess.Popen(
            [*RANGECAST, "subscribe", "--via", f"127.0.0.1:{base + 1}", "Attr1 < 50",
             "--count", "1", "--timeout", "60"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert sub.stdout is not None
        assert "subscribed" in json.loads(sub.stdout.readline())
        pub = rc("publish", "--via", f"127.0.0.1:{base + 3}", "Attr1=5", "Attr2=0", "Attr3=1",
                 "Attr4=2")  # fmt: skip
        assert pub.returncode == 0, pub.stderr
        out, err = sub.communicate(timeout=90)
        assert sub.returncode == 0, err
        assert [json.loads(x)["event"] for x in out.splitlines()] == [
            json.loads(pub.stdout)["published"]
        ]
        st = json.loads(rc("peer", "status", "--via", f"127.0.0.1:{base}", "--json").stdout)
        assert st["dht_kind"] == "kademlia" and st["routing_table"]["entries"] == n - 1
        assert st["kademlia_rpc"]["port"] == base
        assert "k-buckets" in rc("peer", "status", "--via", f"127.0.0.1:{base}").stdout

        # A plain kademlia node joins through peer 2's UDP port; what it sets lands on the
        # peers (all of them are among the k = 20 closest), and the peers answer its gets.
        async def plain() -> object:
            server = Server()
            await server.listen(0, interface="127.0.0.1")
            try:
                await server.bootstrap([("127.0.0.1", base + 2)])
                assert await server.set("from-plain", "hello")
                other = Server()
                await other.listen(0, interface="127.0.0.1")
                try:
                    await other.bootstrap([("127.0.0.1", base + 1)])
                    return await other.get("from-plain")
                finally:
                    other.stop()
            finally:
                server.stop()

        assert asyncio.run(plain()) == "hello"
        # A peer keeps its DHT across a restart, and refuses to switch.
        peer2 = info["peers"][2]
        bad = rc("peer", "start", "--state", peer2["state_dir"], "--dht", "pastry",
                 "--listen", "127.0.0.1:0")  # fmt: skip
        assert bad.returncode == 2 and "belongs to a kademlia peer" in bad.stderr
    finally:
        down = rc("swarm", "down", "--dir", str(swarm_dir))
    assert down.returncode == 0, down.stderr


@pytest.mark.slow
def test_sixteen_peer_processes_four_killed_with_sigkill(tmp_path: Path) -> None:
    """Real processes: four of sixteen peers are SIGKILLed after the subscriptions are in;
    once the keep-alives (5 s, failure after 12 s) and the replicas have repaired the overlay,
    events published afterwards reach every live matching subscriber exactly once."""
    import trio

    from rangecast.pubsub.schema import THESIS_SCHEMA
    from rangecast.runtime.client import ClientSubscription, connect
    from rangecast.sim.workload import thesis_workload

    n = 16
    base = free_base(n)
    swarm_dir = tmp_path / "swarm"
    # A small leaf capacity, so that the tree splits and its nodes spread over the swarm.
    up = rc(
        "swarm",
        "up",
        "-n",
        str(n),
        "--dir",
        str(swarm_dir),
        "--base-port",
        str(base),
        "--capacity",
        "4",
    )
    assert up.returncode == 0, up.stderr
    info = json.loads((swarm_dir / "swarm.json").read_text())
    victims = [info["peers"][i]["pid"] for i in (3, 6, 10, 14)]
    living = [base + i for i in range(n) if i not in (3, 6, 10, 14)]
    rng = random.Random(7)
    workload = thesis_workload(random.Random(70))
    subs = [workload.subscription(rng) for _ in range(100)]
    events = [workload.event(rng) for _ in range(100)]
    names = [a.name for a in THESIS_SCHEMA.attributes]
    got: dict[int, list[int]] = {k: [] for k in range(len(subs))}
    published: list[int] = []
    promoted: list[int] = []

    async def collect(k: int, sub: ClientSubscription) -> None:
        async for d in sub:
            got[k].append(d.eid)

    async def main() -> None:
        async with (
            connect("127.0.0.1", living[0]) as a,
            connect("127.0.0.1", living[5]) as b,
            connect("127.0.0.1", living[9]) as pub,
            trio.open_nursery() as readers,
        ):
            for k, s in enumerate(subs):
                h = await (a, b)[k % 2].subscribe(s.describe(THESIS_SCHEMA))
                readers.start_soon(collect, k, h)
            await trio.sleep(2.0)
            for pid in victims:
                os.kill(pid, signal.SIGKILL)
            await trio.sleep(45.0)  # detection (12 s), repair, promotions, a refresh round
            expected = 0
            for values in events:
                published.append(await pub.publish(dict(zip(names, values, strict=True))))
                expected += sum(1 for s in subs if s.matches(values, "strict"))
            with trio.move_on_after(60):
                while sum(len(v) for v in got.values()) < expected:
                    await trio.sleep(0.1)
            await trio.sleep(1.0)
            readers.cancel_scope.cancel()
        for port in living:
            async with connect("127.0.0.1", port) as c:
                promoted.append((await c.status())["overlay"]["promoted"])

    try:
        trio.run(main)
    finally:
        down = rc("swarm", "down", "--dir", str(swarm_dir))
    assert down.returncode == 0, down.stderr
    missed = dups = false = 0
    for k, s in enumerate(subs):
        want = {e for e, v in zip(published, events, strict=True) if s.matches(v, "strict")}
        missed += len(want - set(got[k]))
        false += len(set(got[k]) - want)
        dups += len(got[k]) - len(set(got[k]))
    assert (missed, dups, false) == (0, 0, 0)
    assert sum(promoted) > 0  # replicas really took over from the killed peers


# ------------------------------------------------------------------ issue 14: the user's path


def _one_line_error(done: subprocess.CompletedProcess[str], code: int = 2) -> str:
    """The single stderr line of a refused command (no traceback), checked; ``peer start``'s
    log lines before it do not count."""
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    lines = [x for x in done.stderr.strip().splitlines() if " INFO " not in x]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def _round(via_sub: str, via_pub: str, values: list[str], *schema: str) -> None:
    """Subscribe, publish once the subscription is live, and see the event delivered."""
    sub = subprocess.Popen(
        [*RANGECAST, "subscribe", "--via", via_sub, "Attr1 between 10 and 20", *schema,
         "--count", "1", "--timeout", "60"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert sub.stdout is not None
    first = sub.stdout.readline()
    assert first.startswith('{"subscribed"'), first + sub.communicate()[1]
    pub = rc("publish", "--via", via_pub, *values, *schema)
    assert pub.returncode == 0, pub.stderr
    out, err = sub.communicate(timeout=90)
    assert sub.returncode == 0, err
    assert [json.loads(x)["event"] for x in out.splitlines()] == [
        json.loads(pub.stdout)["published"]
    ]


def test_swarm_up_again_after_down_restarts_the_same_peers(tmp_path: Path) -> None:
    """Issue 14 items 3 and 9: ``swarm up`` on the directory of a stopped swarm restarts its
    peers with their ids and ports; on a running swarm it refuses and leaves swarm.json alone;
    a second ``swarm down`` says nothing was running."""
    n = 2
    base = free_base(n, *PORTS)
    swarm_dir = tmp_path / "swarm"
    up = ["swarm", "up", "-n", str(n), "--dir", str(swarm_dir), "--base-port", str(base)]
    first = rc(*up, "--quiet")
    assert first.returncode == 0, first.stderr
    try:
        before = (swarm_dir / "swarm.json").read_text()
        again = rc(*up)
        line = _one_line_error(again)
        assert "already running" in line and "swarm down" in line
        assert (swarm_dir / "swarm.json").read_text() == before
        down = rc("swarm", "down", "--dir", str(swarm_dir))
        assert down.returncode == 0 and json.loads(down.stdout)["stopped"] == n
        twice = rc("swarm", "down", "--dir", str(swarm_dir))
        assert twice.returncode == 0, twice.stderr
        assert json.loads(twice.stdout)["stopped"] == 0
        assert "no peer" in twice.stderr and "running" in twice.stderr

        restart = rc(*up, "--quiet")
        assert restart.returncode == 0, restart.stderr
        old = json.loads(before)["peers"]
        new = json.loads((swarm_dir / "swarm.json").read_text())["peers"]
        assert [(p["id"], p["address"]) for p in new] == [(p["id"], p["address"]) for p in old]
        status = rc("swarm", "status", "--dir", str(swarm_dir), "--json")
        assert status.returncode == 0, status.stdout + status.stderr
        _round(f"127.0.0.1:{base + 1}", f"127.0.0.1:{base}",
               ["Attr1=15", "Attr2=0", "Attr3=1", "Attr4=2"])  # fmt: skip
    finally:
        rc("swarm", "down", "--dir", str(swarm_dir))


SENSORS = """name = "sensors"
[[attribute]]
name = "Attr1"
type = "float"
min = 0
max = 100
[[attribute]]
name = "hum"
type = "float"
min = 0
max = 100
"""


@pytest.fixture(scope="module")
def sensors_swarm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, int]]:
    """Two peers started with ``--schema sensors.toml``; yields (the directory holding the
    schema file, the base port)."""
    where = tmp_path_factory.mktemp("sensors")
    (where / "sensors.toml").write_text(SENSORS)
    base = free_base(2, *PORTS)
    swarm_dir = where / "swarm"
    up = subprocess.run(
        [*RANGECAST, "swarm", "up", "-n", "2", "--dir", str(swarm_dir), "--base-port",
         str(base), "--schema", "sensors.toml", "--quiet"],
        capture_output=True, text=True, timeout=120, check=False, cwd=where,
    )  # fmt: skip
    assert up.returncode == 0, up.stderr
    try:
        yield where, base
    finally:
        rc("swarm", "down", "--dir", str(swarm_dir))


def test_custom_schemas_from_the_command_line(
    sensors_swarm: tuple[Path, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 14 item 4: with a swarm started with ``--schema sensors.toml``, ``subscribe`` and
    ``publish`` take the same file, or the schema's name that only the peers know."""
    where, base = sensors_swarm
    monkeypatch.chdir(where)
    values = ["Attr1=15", "hum=40"]
    for sub_schema, pub_schema in (("sensors.toml", "sensors"), ("sensors", "sensors.toml")):
        _round(f"127.0.0.1:{base + 1}", f"127.0.0.1:{base}", values, "--schema", sub_schema)
        pub = rc("publish", "--via", f"127.0.0.1:{base}", *values, "--schema", pub_schema)
        assert pub.returncode == 0, pub.stderr
    bad = rc("subscribe", "--via", f"127.0.0.1:{base}", "Attr1 < 5", "--schema", "sensorz")
    line = _one_line_error(bad)
    assert "sensorz" in line and "sensors" in line and "thesis" in line
    bad = rc("publish", "--via", f"127.0.0.1:{base}", "Attr1=1", "--schema", "missing.toml")
    assert "missing.toml" in _one_line_error(bad)


def test_subscribe_that_times_out_says_so(sensors_swarm: tuple[Path, int]) -> None:
    """Issue 14 item 9: ``--count 1 --timeout 2`` with nothing delivered is a failure (exit 1,
    one line on stderr); ``--timeout`` alone is how long to listen (exit 0)."""
    _, base = sensors_swarm
    via = f"127.0.0.1:{base}"
    timed_out = rc("subscribe", "--via", via, "Attr1 < 5", "--count", "1", "--timeout", "2")
    assert "timed out" in _one_line_error(timed_out, code=1)
    assert [set(json.loads(x)) for x in timed_out.stdout.splitlines()] == [{"subscribed"}]
    listened = rc("subscribe", "--via", via, "Attr1 < 5", "--timeout", "1")
    assert listened.returncode == 0, listened.stderr


def test_os_errors_name_the_address_or_path(tmp_path: Path) -> None:
    """Issue 14 item 6: no peer at --via, an unusable --dir or --state, a port in use: one line
    naming the address or path and the reason, exit 2, no traceback."""
    port = free_base(1, *PORTS)
    via = f"127.0.0.1:{port}"
    for args in (
        ("subscribe", "--via", via, "Attr1 < 5", "--timeout", "5"),
        ("publish", "--via", via, "Attr1=1", "Attr2=0", "Attr3=0", "Attr4=0"),
        ("peer", "status", "--via", via),
    ):
        line = _one_line_error(rc(*args))
        assert via in line and "Connection refused" in line, line
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    for dir_ in ("/proc/no/such/dir", str(a_file)):
        line = _one_line_error(rc("swarm", "up", "-n", "1", "--dir", dir_, "--base-port",
                                  str(port)))  # fmt: skip
        assert dir_ in line, line
        line = _one_line_error(rc("peer", "start", "--state", dir_, "--listen", via))
        assert dir_ in line, line
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen()
        line = _one_line_error(rc("peer", "start", "--listen", via))
        assert via in line and "in use" in line, line


def test_a_peer_that_exits_during_swarm_up_is_named_with_its_reason(tmp_path: Path) -> None:
    """A peer of `swarm up` that exits (its port taken between the check and its bind, say):
    the one-line error gives the reason from its log, not only the log's path."""
    from rangecast.runtime.swarm import _last_error

    log = tmp_path / "peer.log"
    assert _last_error(log) == ""  # no log at all
    log.write_text(
        "2026-01-01 00:00:00,000 INFO    rangecast.cli: created identity 5e55 in /x\n"
        + "x" * 5000  # more than the tail read
        + "\nrangecast: error: cannot listen on 127.0.0.1:7401: Address already in use\n"
    )
    assert _last_error(log) == "cannot listen on 127.0.0.1:7401: Address already in use"
    log.write_text("INFO started\n")
    assert _last_error(log) == ""


@pytest.mark.parametrize(
    "argv",
    [
        ["peer", "start", "--help"],
        ["publish", "--help"],
        ["subscribe", "--help"],
        ["swarm", "up", "--help"],
        ["swarm", "check", "--help"],
    ],
)
def test_the_peers_commands_do_not_load_the_simulator(argv: list[str]) -> None:
    """The peers' command lines build only their own parsers: neither the simulator nor numpy
    is imported (they would double the start-up of every ``peer start`` and ``publish``)."""
    code = (
        "import contextlib, io, sys\n"
        "from rangecast.cli.main import main\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        f"    main({argv!r})\n"
        "heavy = sorted(m for m in sys.modules if m == 'numpy' or m.startswith('rangecast.sim.')"
        " and m != 'rangecast.sim.options')\n"
        "print(heavy)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout


def test_the_whole_command_tree_is_still_one_parser() -> None:
    """``rangecast --help`` and an unknown command see every command."""
    out = rc("--help")
    assert out.returncode == 0
    for command in ("sim", "report", "reproduce", "peer", "swarm", "subscribe", "publish"):
        assert command in out.stdout
    bad = rc("nosuch")
    assert bad.returncode == 2 and "sim" in bad.stderr and "publish" in bad.stderr, bad.stderr


# ------------------------------------------------------------------ issue 30: options first


@pytest.mark.parametrize(
    ("option", "value", "want"),
    [
        ("--capacity", "0", "--capacity 0: must be >= 1"),
        ("--capacity", "-3", "--capacity -3: must be >= 1"),
    ],
)
def test_peer_start_refuses_a_bad_option_before_making_an_identity(
    option: str, value: str, want: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 30 item 2: the whole configuration is checked before the state directory is
    touched: one line naming the option and its value, exit 2, and no key pair left behind."""
    from rangecast.cli.main import main

    state = tmp_path / "state"
    port = free_base(1, *PORTS)
    code = main(["peer", "start", "--state", str(state), option, value,
                 "--listen", f"127.0.0.1:{port}"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    lines = [x for x in err.strip().splitlines() if " INFO " not in x]
    assert lines == [f"rangecast: error: {want} (subscriptions a leaf holds)"], err
    assert not state.exists()


def test_a_bare_rangecast_prints_the_help() -> None:
    """Issue 30 item 3: no arguments is a question, not a mistake: the usage and the
    commands, exit 0."""
    out = rc()
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: rangecast") and out.stderr == ""
    for command in ("sim", "report", "peer", "swarm", "subscribe", "publish"):
        assert f"    {command} " in out.stdout


def test_small_mistakes_name_the_option(tmp_path: Path) -> None:
    """Issue 30 item 6: a --state that is a file, and a negative --root-cache for `swarm up`
    (refused by `peer start` and `sim route` already): one line naming the option, exit 2,
    nothing made."""
    a_file = tmp_path / "afile"
    a_file.write_text("")
    out = rc("peer", "start", "--state", str(a_file), "--listen", "127.0.0.1:7999")
    assert out.returncode == 2 and out.stderr.strip().splitlines() == [
        f"rangecast: error: --state {a_file}: not a directory"
    ]
    swarm_dir = tmp_path / "sw"
    out = rc("swarm", "up", "--dir", str(swarm_dir), "-n", "2", "--root-cache", "-1")
    assert out.returncode == 2 and "--root-cache -1: must be >= 0" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and not swarm_dir.exists()
