"""Real ``rangecast peer start`` processes on loopback for the attack suite
(tests/test_runtime_live_attacks.py): start them, read their memory, ask their status, and talk
to them as a raw client from a chosen source address (each attack its own, so the per-address
quotas one attack uses up are not the next one's)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import trio
from test_runtime_cli import free_base

from rangecast.dht.wire import Message
from rangecast.pubsub.peer import OverlayPeer
from rangecast.runtime.client import connect
from rangecast.runtime.guard import FrameReader, frame, wire_codec
from rangecast.runtime.identity import Identity, PeerAddress

RANGECAST = [sys.executable, "-m", "rangecast.cli.main"]
#: This suite's ports (test_runtime_cli uses 7600-7700, test_runtime_resilience 7700-7900).
PORT_LO, PORT_HI = 7900, 8100
WIRE = wire_codec(*OverlayPeer.TABLES)


class LiveSwarm:
    """``n`` peer processes, the first alone, the others joining it; ``env`` per peer index."""

    def __init__(self, tmp: Path, n: int, env: dict[int, dict[str, str]], extra: list[str]) -> None:
        self.tmp = tmp
        base = free_base(n, PORT_LO, PORT_HI)
        self.ports = [base + i for i in range(n)]
        self.procs: list[subprocess.Popen[str]] = []
        for i, port in enumerate(self.ports):
            args = ["--listen", f"127.0.0.1:{port}", "--state", str(tmp / f"p{i}"), *extra]
            if i:
                args += ["--join", f"127.0.0.1:{base}"]
            log = (tmp / f"p{i}.log").open("a")
            proc = subprocess.Popen(
                [*RANGECAST, "peer", "start", *args],
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                env={**os.environ, **env.get(i, {})},
            )
            log.close()
            self.procs.append(proc)
            assert proc.stdout is not None
            line = proc.stdout.readline()  # the peer's hello line: it listens
            assert line, f"peer {i} exited: {self.log(i)[-2000:]}"
            json.loads(line)

    def log(self, i: int) -> str:
        return (self.tmp / f"p{i}.log").read_text()

    def alive(self) -> list[bool]:
        return [p.poll() is None for p in self.procs]

    def rss_mib(self) -> list[float]:
        """Each peer's resident memory now (VmRSS), in MiB (0 for a peer that has exited)."""
        out = []
        for p in self.procs:
            if p.poll() is not None:
                out.append(0.0)
                continue
            text = Path(f"/proc/{p.pid}/status").read_text()
            kib = next(int(line.split()[1]) for line in text.splitlines() if line[:6] == "VmRSS:")
            out.append(kib / 1024.0)
        return out

    def identity(self, i: int) -> Identity:
        """Peer ``i``'s key, read from its state directory (an attacker holding a member's key)."""
        return Identity.from_pem((self.tmp / f"p{i}" / "identity.pem").read_bytes())

    def address(self, i: int) -> bytes:
        ident = self.identity(i)
        return PeerAddress(ident.node_id, "127.0.0.1", self.ports[i]).to_bytes()

    def stop(self) -> None:
        stop_processes(self.procs)


def stop_processes(procs: list[subprocess.Popen[str]]) -> None:
    """SIGTERM every peer process still running, then wait for each (SIGKILL after 20 s)."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def cli_status(port: int) -> dict[str, Any]:
    """``rangecast peer status --via 127.0.0.1:PORT --json``, as a user reads it."""
    r = subprocess.run(
        [*RANGECAST, "peer", "status", "--via", f"127.0.0.1:{port}", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    out: dict[str, Any] = json.loads(r.stdout)
    return out


async def status(port: int) -> dict[str, Any]:
    async with connect("127.0.0.1", port) as c:
        return await c.status()


async def wait_for(cond: Any, guard_s: float = 60.0) -> bool:
    """Poll ``cond`` (an async predicate); the guard only keeps a broken run from hanging."""
    with trio.move_on_after(guard_s):
        while True:
            with contextlib.suppress(Exception):
                if await cond():
                    return True
            await trio.sleep(0.2)
    return False


async def leaf_sets_full(ports: list[int]) -> bool:
    """Every peer's leaf set holds exactly the other peers."""
    want = {f"127.0.0.1:{p}" for p in ports}
    for port in ports:
        st = await status(port)
        members = {m.split("@")[-1] for m in (*st["leaf_set"]["left"], *st["leaf_set"]["right"])}
        if members != want - {f"127.0.0.1:{port}"}:
            return False
    return True


async def open_from(source: str, port: int) -> trio.SocketStream:
    """A TCP connection to the peer at ``port`` from the loopback address ``source``."""
    return await trio.open_tcp_stream("127.0.0.1", port, local_address=source)


async def exchange(stream: trio.SocketStream, requests: Iterable[Message]) -> list[Message]:
    """Send ``requests`` back to back (pipelined) and read one reply per request."""
    reqs = list(requests)
    await stream.send_all(b"".join(frame(WIRE.encode(m)) for m in reqs))
    reader = FrameReader()
    replies: list[Message] = []
    while len(replies) < len(reqs):
        data = await stream.receive_some(65536)
        if not data:
            break
        replies.extend(WIRE.decode(f) for f in reader.feed(data))
    return replies


async def drain_until_closed(stream: trio.SocketStream) -> None:
    """Read until the peer closes the connection."""
    try:
        while await stream.receive_some(65536):
            pass
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass


async def sample_rss(
    swarm: LiveSwarm, attack: Callable[[], Awaitable[Any]]
) -> tuple[Any, list[float], list[float]]:
    """Run ``attack`` while sampling every peer's RSS every 0.1 s: (its result, each peer's
    RSS before it, each peer's largest sample)."""
    start = swarm.rss_mib()
    peaks = list(start)

    def sample() -> None:
        peaks[:] = [max(a, b) for a, b in zip(peaks, swarm.rss_mib(), strict=True)]

    async def sampler() -> None:
        while True:
            sample()
            await trio.sleep(0.1)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sampler)
        result = await attack()
        sample()
        nursery.cancel_scope.cancel()
    return result, start, peaks
