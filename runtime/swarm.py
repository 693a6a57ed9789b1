"""``rangecast swarm up|status|down``: N peers on 127.0.0.1 as background processes.

``up`` starts peer 0 (a new overlay), waits until it answers, then starts the others joining
through it, and returns once the swarm is ready: every peer's leaf set (Kademlia: sibling list)
is the one the whole membership implies, and every peer is past the hand-off window of a peer
that just joined, so a subscription is installed at once and a publish finds it. Each peer runs
``rangecast peer start`` with its own state directory ``DIR/peer-<i>`` (key pair, log file
``peer.log``); ``DIR/swarm.json`` lists each peer's index, id, address, pid, state directory and
log. ``up`` on the directory of a stopped swarm restarts the same peers (their ids come from the
state directories); on a running one it refuses. ``down`` sends SIGTERM (a graceful leave),
waits, SIGKILLs whatever is left and checks that every process is gone.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

import trio

from rangecast.dht.errors import LocalProtocolError
from rangecast.dht.kademlia import ROOT_CACHE
from rangecast.dht.substrate import substrate
from rangecast.pubsub.node import OverlayConfig
from rangecast.runtime.identity import DEFAULT_ID_DIFFICULTY, STATE_FILE, SwarmKey
from rangecast.runtime.tokens import read_token_lines

SWARM_FILE = "swarm.json"


@dataclass(frozen=True)
class SwarmSpec:
    """What ``up`` starts (the defaults are the command line's: cli.swarm reads them here)."""

    #: Number of peers; peer i listens on 127.0.0.1:``base_port + i``.
    n: int
    #: The swarm directory: each peer's state directory and log, and ``swarm.json``.
    dir: Path
    base_port: int = 7400
    #: A built-in schema's name or a schema file (None: thesis).
    schema: str | None = None
    #: Subscriptions a tree leaf holds before it splits.
    capacity: int = 100
    dht: str = "pastry"
    lookup: str = "iterative"
    root_cache: int = ROOT_CACHE
    #: The id puzzle's difficulty every peer grinds its key to and asks of the others.
    id_difficulty: int = DEFAULT_ID_DIFFICULTY
    #: Seconds to wait for the swarm to be ready.
    timeout: float = 120.0
    #: No progress on stderr.
    quiet: bool = False
    #: A client token file every peer requires tokens from (``runtime/tokens.py``); the
    #: swarm's own status probes present its first token. None: no tokens.
    client_tokens: Path | None = None
    #: Peer admission: the swarm key file every peer is started with (``--swarm-key``;
    #: ``SwarmKey``). None: no key, any peer may join.
    swarm_key: Path | None = None
    #: Make ``swarm_key`` (a new random key, mode 0600) if it does not exist yet.
    create_swarm_key: bool = False
    #: Every peer signs its end-to-end acks (``peer start --signed-acks``).
    signed_acks: bool = False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by its parent) is gone for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return True


def _running(entry: dict[str, Any]) -> bool:
    """Whether the process of a swarm.json entry still runs and is that peer: a pid of a swarm
    stopped long ago may since belong to another program, which must not count (or be killed)."""
    pid = entry.get("pid")
    if not isinstance(pid, int) or not _alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except FileNotFoundError:
        return False  # exited just now
    except OSError:
        return True  # no /proc to tell: trust the pid
    return str(entry.get("state_dir", "")).encode() in cmdline


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _last_error(log: Path) -> str:
    """The last ``rangecast: error:`` line of a peer's log (why it exited), else ``""``."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
            tail = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    errors = [line.strip() for line in tail if line.startswith("rangecast: error:")]
    return errors[-1].removeprefix("rangecast: error:").strip() if errors else ""


def _read(dir_: Path) -> dict[str, Any]:
    path = dir_ / SWARM_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise LocalProtocolError(f"no swarm in {dir_} ({SWARM_FILE} not found)") from None
    except json.JSONDecodeError as exc:
        raise LocalProtocolError(f"{path}: not valid JSON ({exc})") from None
    except OSError as exc:
        raise LocalProtocolError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("peers"), list):
        raise LocalProtocolError(f"{path}: not a swarm file")
    return data


def addresses(dir_: Path) -> list[str]:
    """The ``HOST:PORT`` of every peer of the swarm in ``dir_`` (its ``swarm.json``), running
    or not; ``LocalProtocolError`` naming the directory or file if there is no swarm there."""
    peers = _read(dir_)["peers"]
    if not all(isinstance(p, dict) and isinstance(p.get("address"), str) for p in peers):
        raise LocalProtocolError(f"{dir_ / SWARM_FILE}: a peer without an address")
    return [str(p["address"]) for p in peers]


def _write(dir_: Path, data: dict[str, Any]) -> None:
    tmp = dir_ / (SWARM_FILE + ".tmp")
    try:
        tmp.write_text(json.dumps(data, indent=2))
        os.replace(tmp, dir_ / SWARM_FILE)
    except OSError as exc:
        raise LocalProtocolError(
            f"cannot write {dir_ / SWARM_FILE}: {exc.strerror or exc}"
        ) from None


async def _probe(port: int, token: str | None = None) -> dict[str, Any] | None:
    """A peer's status, or None if it does not answer (yet)."""
    from rangecast.runtime.client import ConnectionLost, connect

    try:
        with trio.fail_after(3.0):
            async with connect("127.0.0.1", port, token=token) as client:
                return await client.status()
    except (ConnectionLost, OSError, trio.TooSlowError):
        return None


def _spawn(i: int, port: int, dir_: Path, join: int | None, args: SwarmSpec) -> dict:
    state = dir_ / f"peer-{i}"
    state.mkdir(parents=True, exist_ok=True)
    log_path = state / "peer.log"
    cmd = [
        sys.executable,
        "-m",
        "rangecast.cli.main",
        "peer",
        "start",
        "--listen",
        f"127.0.0.1:{port}",
        "--state",
        str(state),
        "--capacity",
        str(args.capacity),
        "--dht",
        args.dht,
    ]
    if substrate(args.dht).has_lookup:
        cmd += ["--lookup", args.lookup, "--root-cache", str(args.root_cache)]
    if join is not None:
        cmd += ["--join", f"127.0.0.1:{join}"]
    else:
        cmd += ["--alone"]  # a new overlay, whatever peers a reused state directory remembers
    if args.schema:
        cmd += ["--schema", args.schema]
    cmd += ["--id-difficulty", str(args.id_difficulty)]
    if args.client_tokens is not None:
        cmd += ["--client-tokens", str(args.client_tokens)]
    if args.swarm_key is not None:
        cmd += ["--swarm-key", str(args.swarm_key)]
    if args.signed_acks:
        cmd += ["--signed-acks"]
    with open(log_path, "ab") as log_file:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=log_file,
            start_new_session=True,  # Ctrl-C in the shell that ran `swarm up` does not reach it
        )
    return {
        "index": i,
        "id": None,
        "address": f"127.0.0.1:{port}",
        "pid": proc.pid,
        "state_dir": str(state),
        "log": str(log_path),
    }


def _lock(dir_: Path) -> Any:
    """Hold ``DIR/.swarm.lock`` while ``up`` runs, so two of them never share a directory. Also
    the first write into the directory: an unwritable one fails here, before anything starts."""
    try:
        dir_.mkdir(parents=True, exist_ok=True)
        f = open(dir_ / ".swarm.lock", "w")  # noqa: SIM115 (held open until the process ends)
    except OSError as exc:
        raise LocalProtocolError(
            f"cannot use {dir_} as the swarm directory: {exc.strerror or exc}"
        ) from None
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        raise LocalProtocolError(f"another `rangecast swarm up` is using {dir_}") from None
    return f


def _reusable(dir_: Path, n: int, dht: str) -> int:
    """How many of the peers' state directories exist already (their peers restart with the
    same ids). Refuses a directory whose swarm still runs, or whose peers use another DHT."""
    if (dir_ / SWARM_FILE).exists():
        old = _read(dir_)
        running = [p for p in old["peers"] if isinstance(p, dict) and _running(p)]
        if running:
            raise LocalProtocolError(
                f"a swarm is already running in {dir_} ({len(running)} peers); "
                f"stop it first: rangecast swarm down --dir {dir_}"
            )
    reused = 0
    for i in range(n):
        state = dir_ / f"peer-{i}"
        if not state.is_dir():
            continue
        reused += 1
        try:
            saved = json.loads((state / STATE_FILE).read_text()).get("dht")
        except (OSError, ValueError, AttributeError):
            continue
        if saved not in (None, dht):
            raise LocalProtocolError(
                f"{dir_} holds a stopped {saved} swarm: restart it with --dht {saved}, "
                "or give another --dir"
            )
    return reused


def _unconverged(statuses: dict[int, dict[str, Any]], dht: str) -> list[int]:
    """The peers whose leaf set (Kademlia: sibling list, and with few enough peers the whole
    membership in the k-buckets) is not yet what the membership implies. Until then two peers
    can disagree about which of them is the root of a key."""
    from rangecast.runtime.peer import PeerConfig

    # The peer processes run with the runtime's configuration of their substrate (``--lookup``
    # and ``--root-cache`` leave the neighbour sets and the bucket size alone).
    spec, config = substrate(dht), PeerConfig(dht=dht).dht_config
    where = {int(st["id"], 16): st["address"] for st in statuses.values()}
    ids = sorted(where)
    n = len(ids)
    bad = []
    for i, st in statuses.items():
        own = int(st["id"], 16)
        have = {str(s).rsplit("@", 1)[-1] for s in st["neighbours"]}
        if not spec.table_settled(n, st["routing_table"]["entries"], config):
            bad.append(i)
            continue
        want_ids = spec.expected_neighbours(ids, own, config)
        if have != {where[x] for x in want_ids}:
            bad.append(i)
    return bad


class UpProgress:
    """``swarm up``'s progress on stderr, as the simulator's (sim.progress; the runtime cannot
    import it): on a terminal one tqdm bar of the peers joined; otherwise one line per phase
    (peer 0 up, the others started, all joined, the hand-off window), never a line per peer
    or per poll (16 peers used to print ~36); then ``summary``. ``quiet``: nothing at all.
    ``clock`` is injected: tests drive it by hand."""

    def __init__(
        self,
        n: int,
        quiet: bool = False,
        *,
        stream: TextIO | None = None,
        bars: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.n = n
        self.quiet = quiet
        self.stream = stream if stream is not None else sys.stderr
        if bars is None:
            isatty = getattr(self.stream, "isatty", None)
            bars = bool(isatty and isatty())
        self.bars = bars and not quiet
        self.clock = clock
        self.t0 = clock()
        self._bar: Any = None
        self._said: set[str] = set()
        self._full = False

    def say(self, message: str) -> None:
        """A line with the seconds since ``up`` began."""
        if self.quiet:
            return
        line = f"swarm: {message} ({self.clock() - self.t0:.1f} s)"
        if self._bar is not None:
            from tqdm import tqdm

            tqdm.write(line, file=self.stream)
        else:
            print(line, file=self.stream, flush=True)

    def once(self, phase: str, message: str) -> None:
        """``say`` the first time ``phase`` is reached only (the wait polls every 0.5 s)."""
        if phase not in self._said:
            self._said.add(phase)
            self.say(message)

    def joined(self, ready: int, total: int) -> None:
        """``ready`` of ``total`` peers answer as joined: the bar moves (no line without)."""
        if not self.bars or total < 2 or self._full:
            return
        if self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(
                total=total,
                desc="swarm: peers joined",
                unit=" peers",
                file=self.stream,
                leave=True,
                dynamic_ncols=True,
            )
        if ready > self._bar.n:
            self._bar.update(ready - self._bar.n)
        if ready >= total:
            # One finished bar stays; the notes after it go below, and a peer that answers
            # late on a later poll does not start a second bar.
            self._full = True
            self.close()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def summary(self, dir_: Path, base_port: int, restarted: int) -> None:
        """The one closing line: peers, addresses, where their state is, how to stop them."""
        self.close()
        last = base_port + self.n - 1
        ports = f"127.0.0.1:{base_port}" + (f"..{last}" if self.n > 1 else "")
        again = f" ({restarted} restarted with their ids)" if restarted else ""
        if not self.quiet:
            # The time first: the line ends with a command to copy.
            print(
                f"swarm: {self.n} peer{'s' if self.n != 1 else ''} up{again} in "
                f"{self.clock() - self.t0:.1f} s on {ports}; state, logs and {SWARM_FILE} in "
                f"{dir_}; stop with: rangecast swarm down --dir {dir_}",
                file=self.stream,
                flush=True,
            )


def up(args: SwarmSpec) -> int:
    """Start the swarm ``args`` describes (or restart a stopped one in its directory); print
    ``{"swarm", "peers", "restarted"}`` once every peer is ready. Exit status 0."""
    n, base = args.n, args.base_port
    if n < 1:
        raise LocalProtocolError("-n must be >= 1")
    if not (base >= 1024 and base + n - 1 <= 65535):
        raise LocalProtocolError("ports base-port .. base-port+n-1 must lie in 1024..65535")
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        raise LocalProtocolError(f"--timeout must be a positive number, got {args.timeout}")
    if args.root_cache < 0:  # as `peer start` and `sim route` refuse it, whatever the DHT
        raise LocalProtocolError(f"--root-cache {args.root_cache}: must be >= 0")
    if args.capacity < 1:
        raise LocalProtocolError(f"--capacity {args.capacity}: must be >= 1")
    if args.schema:
        from rangecast.pubsub.schema import builtin_schemas

        builtin_schemas().resolve(args.schema)  # fail now, not in N log files
        if Path(args.schema).is_file():
            args = replace(args, schema=str(Path(args.schema).resolve()))
    token = None
    if args.client_tokens is not None:
        # A bad file fails now, not in N log files; the peers get its absolute path.
        token = read_token_lines(args.client_tokens)[0]
        args = replace(args, client_tokens=args.client_tokens.resolve())
    make_key = False
    if args.swarm_key is not None:
        # Likewise for the swarm key; one the swarm makes itself is made once all is checked.
        make_key = args.create_swarm_key and not args.swarm_key.exists()
        if not make_key:
            SwarmKey.load(args.swarm_key)
        args = replace(args, swarm_key=args.swarm_key.resolve())
    dir_ = Path(args.dir)
    lock = _lock(dir_)
    reused = _reusable(dir_, n, args.dht)
    busy = [base + i for i in range(n) if not _port_free(base + i)]
    if busy:
        raise LocalProtocolError(
            f"ports in use: {', '.join(map(str, busy[:10]))}; choose another --base-port"
        )
    if make_key:
        assert args.swarm_key is not None
        SwarmKey.create(args.swarm_key)
    data: dict[str, Any] = {
        "created": time.time(),
        "schema": args.schema or "thesis",
        "dht": args.dht,
        "client_tokens": str(args.client_tokens) if args.client_tokens else None,
        "swarm_key": str(args.swarm_key) if args.swarm_key else None,
        "peers": [],
    }
    # A peer that has just joined parks probes for tree nodes it may be about to receive from
    # their previous root, for this long; a subscription routed there meanwhile waits with it.
    settle_s = OverlayConfig().handoff_wait_s
    shown = UpProgress(n, args.quiet)

    if reused:
        shown.say(f"restarting the stopped swarm in {dir_}: {reused} peers keep their ids")

    async def wait_ready(indices: list[int], timeout: float, settle: bool) -> dict[int, dict]:
        """Wait until the peers are ready: joined, converged and, if ``settle``, past the
        hand-off window (a peer that started the overlay alone has nothing to wait for)."""
        seen_ready: dict[int, float] = {}
        lagging = indices
        deadline = trio.current_time() + timeout
        while trio.current_time() < deadline:
            statuses: dict[int, dict] = {}
            for i in indices:
                # Our own child (not _running: between fork and exec its command line is ours).
                if not _alive(data["peers"][i]["pid"]):
                    log = data["peers"][i]["log"]
                    why = _last_error(Path(log))
                    raise LocalProtocolError(
                        f"peer {i} exited{f' ({why})' if why else ''}; see its log {log}"
                    )
                st = await _probe(base + i, token)
                if st is not None and st.get("state") == "ready":
                    seen_ready.setdefault(i, trio.current_time())
                    statuses[i] = st
            shown.joined(len(statuses), len(indices))
            lagging = [i for i in indices if i not in statuses]
            if not lagging:
                lagging = _unconverged(statuses, args.dht)
                if not lagging:
                    wait = max(seen_ready.values()) + settle_s - trio.current_time()
                    if wait <= 0 or not settle:
                        return statuses
                    shown.once("settle", f"leaf sets converged; {wait:.1f} s of hand-off window")
                    await trio.sleep(wait)
                    continue  # and check once more that nothing moved meanwhile
            if len(statuses) == len(indices) > 1:
                shown.once("joined", f"all {len(indices)} joined; leaf sets converging")
            await trio.sleep(0.5)
        raise LocalProtocolError(
            f"peers {lagging} were not ready within {timeout:.0f} s; see their logs in {dir_}"
        )

    def spawn(i: int, join: int | None) -> None:
        try:
            data["peers"].append(_spawn(i, base + i, dir_, join, args))
        except OSError as exc:
            raise LocalProtocolError(
                f"cannot start peer {i} in {dir_ / f'peer-{i}'}: {exc.strerror or exc}"
            ) from None
        _write(dir_, data)

    async def main() -> None:
        spawn(0, None)
        await wait_ready([0], args.timeout, settle=False)
        shown.say("peer 0 up")
        for i in range(1, n):
            spawn(i, base)
            # Joins are paced so the bootstrap peer is not asked by every joiner at once.
            await trio.sleep(0.05)
        if n > 1:
            shown.say(f"{n - 1} more peers started, joining through peer 0")
        statuses = await wait_ready(list(range(n)), args.timeout, settle=True)
        for i, st in statuses.items():
            data["peers"][i]["id"] = st["id"]
        _write(dir_, data)

    try:
        trio.run(main)
    except BaseException:
        shown.close()
        # Leave nothing half-started behind.
        _stop_all([p["pid"] for p in data.get("peers", [])], quiet=True)
        with contextlib.suppress(LocalProtocolError):
            _write(dir_, data)
        raise
    finally:
        lock.close()
    shown.summary(dir_, base, reused)
    print(json.dumps({"swarm": str(dir_ / SWARM_FILE), "peers": n, "restarted": reused}))
    return 0


def status_fields(st: Any) -> dict[str, Any]:
    """The columns of ``swarm status`` from one peer's status (None: no answer). A reply of
    the wrong shape or types, from a broken or lying peer, is the row's state
    ``unreadable``, never a traceback for the whole swarm's status."""
    empty: dict[str, Any] = dict.fromkeys(
        ("state", "leaf_set", "routing_entries", "tree_nodes", "rejected")
    )
    if st is None:
        return empty
    try:
        state, entries = st["state"], st["routing_table"]["entries"]
        rejected = st["rejected"]["total"]
        if not (isinstance(state, str) and isinstance(entries, int)):
            raise TypeError("state or routing_table.entries")
        if not isinstance(rejected, int):
            raise TypeError("rejected.total")
        return {
            "state": state,
            "leaf_set": len(st["neighbours"]),
            "routing_entries": entries,
            "tree_nodes": len(st["tree_nodes"]),
            "rejected": rejected,
        }
    except (KeyError, TypeError, IndexError):
        return {**empty, "state": "unreadable"}


def status(dir_: Path, *, as_json: bool = False) -> int:
    """Print each peer's process and overlay state (a table, or JSON); 0 when all are ready."""
    data = _read(dir_)
    tokens = data.get("client_tokens")
    token = read_token_lines(Path(tokens))[0] if isinstance(tokens, str) else None

    async def main() -> list[dict[str, Any]]:
        rows = []
        for p in data["peers"]:
            port = int(str(p["address"]).rsplit(":", 1)[1])
            alive = _running(p)
            st = await _probe(port, token) if alive else None
            rows.append(
                {
                    "index": p["index"],
                    "id": p.get("id"),
                    "address": p["address"],
                    "pid": p["pid"],
                    "process": "running" if alive else "gone",
                    **status_fields(st),
                }
            )
        return rows

    rows = trio.run(main)
    if as_json:
        print(json.dumps({"peers": rows}, indent=2))
    else:
        print(
            f"{'#':>3} {'id':<12} {'address':<16} {'pid':>7} {'process':<8} {'state':<6} "
            f"{'leaves':>6} {'routes':>6} {'tree':>5} {'rejected':>8}"
        )
        for r in rows:
            print(
                f"{r['index']:>3} {(r['id'] or '?')[:12]:<12} {r['address']:<16} {r['pid']:>7} "
                f"{r['process']:<8} {r['state'] or '-':<6} {_dash(r['leaf_set']):>6} "
                f"{_dash(r['routing_entries']):>6} {_dash(r['tree_nodes']):>5} "
                f"{_dash(r['rejected']):>8}"
            )
    healthy = all(r["process"] == "running" and r["state"] == "ready" for r in rows)
    return 0 if healthy else 1


def _dash(v: object) -> str:
    return "-" if v is None else str(v)


def _stop_all(pids: list[int], quiet: bool = False, grace_s: float = 10.0) -> list:
    pids = [p for p in pids if _alive(p)]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    killed = [p for p in pids if _alive(p)]
    for pid in killed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)
    left = [p for p in pids if _alive(p)]
    if left and not quiet:
        raise LocalProtocolError(f"processes still running after SIGKILL: {left}")
    return killed


def down(dir_: Path, grace_s: float = 10.0) -> int:
    """Stop every peer of the swarm in ``dir_``: SIGTERM (a graceful leave), SIGKILL after
    ``grace_s``; print what was stopped."""
    if not (math.isfinite(grace_s) and grace_s >= 0):
        raise LocalProtocolError(f"--grace must be a number of seconds >= 0, got {grace_s}")
    data = _read(dir_)
    running = [p for p in data["peers"] if _running(p)]
    killed = _stop_all([p["pid"] for p in running], grace_s=grace_s)
    if running:
        data["stopped"] = time.time()
        _write(dir_, data)
    else:
        print(f"swarm: no peer of {dir_} was running", file=sys.stderr)
    print(
        json.dumps({"stopped": len(running), "killed_after_grace": len(killed), "dir": str(dir_)})
    )
    return 0
