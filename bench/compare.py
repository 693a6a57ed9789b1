"""Side by side: the same runs on a baseline commit and on this checkout, alternated.

What it measures
----------------
Each run (below) is executed on two source trees, one after the other, for ``--repeat K``
rounds (base, head, base, head, ...):

* **base**: a git worktree of ``--base REV`` (default ``a5c21ca``, the commit issue 15 was
  measured on), created on demand with ``git worktree add --detach`` in
  ``bench/.baseline-<sha>/`` (ignored by git; reused when present; ``--cache-dir`` moves it);
* **head**: this checkout (``--head-dir``, default the repository this file is in), as it is on
  disk, uncommitted changes included.

Both trees run under the same interpreter (this venv's python). Every run is its own child
process whose working directory and first ``sys.path`` entry are its tree, so the tree's own
``dht``/``multicast``/``pubsub``/``sim``/``runtime`` are imported, not the editable install's:
the child checks, after the run, that every module of those packages it loaded came from its
tree (a run that imported anything from elsewhere fails), and the first run of each tree prints
where ``sim`` and ``dht`` came from. The old code runs exactly as it was committed. The child
calls the tree's own CLI (``rangecast.cli.main``; ``sim.cli.main`` in trees from before the
one namespace; ``--json --quiet``) or its own ``bench/runtime_swarm.py --json``; the parent
reaps it with ``os.wait4``, so the peak RSS (``ru_maxrss``) is that run's alone.

Per run and tree it reports the wall time of the run (the CLI call in the child, interpreter
start-up excluded), the child's CPU time (user + system, from the same ``wait4``: on a machine
whose cores are shared, CPU time moves much less with the others' load than wall time), the
simulated messages per second as the experiment reports them (``sim_messages_per_s``: messages
over the experiment's own wall time) and the peak RSS; per run, the speed-ups ``wall
base/head``, ``CPU base/head`` and ``msgs/s head/base`` (> 1 when head is faster; medians over
the rounds). It then checks that the protocol did not change: the same simulated
message count (and delivered/expected counts), 0 missed / 0 duplicates / 0 false positives on
both trees, and the latency and byte means within 1 % (each difference is printed).

Runs (``--only NAME...`` picks some; ``--quick`` shrinks them for a smoke test):

* ``thesis``: ``rangecast sim run thesis --seed 1`` (1,000 nodes, 5,000 subscriptions, 10,000
  events); ``--quick``: 300 nodes, 2,000 events. ``probe-multicast``, ``delivery-lbdd``,
  ``lb-on``, ``kademlia-recursive``: the same with ``--probe multicast``, ``--delivery lbdd``,
  ``--lb on``, ``--dht kademlia --lookup recursive``.
* ``route``: ``rangecast sim route --seed 1 --nodes 10000 --lookups 100000`` (``--quick``:
  2,000 nodes, 2,000 lookups); ``route-keepalives``: the same with ``--keepalives on``.
* ``runtime_swarm``: ``bench/runtime_swarm.py --seed 1 --latency-events 400 --events 1000``
  (32 real trio peers on 127.0.0.1, 320 subscriptions); ``--quick``: 8 peers, 80
  subscriptions, 100 + 200 events.

``route`` runs each tree with its defaults: a5c21ca always sent leaf-set keep-alives, later
trees leave them out when nothing can fail (``--keepalives auto``), so there the message and
byte totals are compared without the keep-alive traffic (pings, pongs, leaf-set exchange) and
the msgs/s ratio compares different streams (read the wall ratio). ``route-keepalives`` gives
``--keepalives on`` to every tree whose CLI knows the option (an option a tree's CLI lacks is
left out for that tree): the same stream on both, compared in full.

``runtime_swarm`` (issue 15, acceptance item 6: it must not get slower) has no simulated
messages: its rows show the sustained events/s of the throughput phase in the msgs/s column,
and a second table gives the latency phase's mean/p50/p99 and the throughput phase's events/s
and deliveries/s side by side with ratios (latency base/head, rates head/base: > 1 means head
is better). Its peers take fresh keys on every run (the ring layout differs), and it measures
real time on a shared machine, so its ratios are noisier than the simulator's; its check is the
oracle's (every phase 0 missed / duplicates / false positives, all delivered).

Usage::

    .venv/bin/python bench/compare.py                          # every run, base a5c21ca, once
    .venv/bin/python bench/compare.py --only thesis --repeat 3
    .venv/bin/python bench/compare.py --quick                  # smoke test, ~2 minutes
    .venv/bin/python bench/compare.py --base HEAD --quick --only thesis   # ratio ~1

Progress (which run, which tree, elapsed) goes to stderr; one table and the checks go to
stdout; everything (each round's figures, module paths, checks) is written to ``--json PATH``
(default ``bench/results/compare.json``). Exit status 0 when every protocol check holds, 1 when
one does not or a run failed, 2 for bad arguments (an unknown revision, say).

The machine's other load counts: run it on an otherwise idle machine, or with ``--repeat`` and
read the medians, and compare ratios rather than absolute figures across invocations.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_BASE = "a5c21ca"
PACKAGES = ("dht", "multicast", "pubsub", "sim", "runtime")
#: Relative tolerance of the means that must not move (issue 15: "within 1%").
TOLERANCE = 0.01
#: Seconds between "still running" notes on stderr.
HEARTBEAT_S = 30.0


class UsageError(Exception):
    """Bad input: reported as one line, exit status 2."""


# ---------------------------------------------------------------------------------- the runs


@dataclass(frozen=True)
class Run:
    """One benchmark run: a command executed the same way on each tree."""

    name: str
    kind: str  # "thesis" | "route" | "swarm"
    argv: tuple[str, ...]
    quick_argv: tuple[str, ...]
    #: An option (and its value) given only to trees whose CLI knows it (a5c21ca has no
    #: ``--keepalives``: it always sends them, which is what ``--keepalives on`` asks for).
    optional: tuple[str, ...] = ()

    def command(self, quick: bool, tree: Path | None = None) -> tuple[str, ...]:
        argv = self.quick_argv if quick else self.argv
        if self.optional and (tree is None or _cli_knows(tree, self.optional[0])):
            argv = (*argv, *self.optional)
        return argv


def _cli_knows(tree: Path, option: str) -> bool:
    """Whether the tree's command line has ``option`` (read from the source: the option itself, or
    the parameter field it is generated from)."""
    field = option.removeprefix("--").replace("-", "_")
    sources = [p for d in ("sim", "cli") if (tree / d).is_dir() for p in (tree / d).glob("*.py")]
    return any(f'"{option}"' in p.read_text() or f"    {field}:" in p.read_text() for p in sources)


_THESIS = ("sim", "run", "thesis", "--seed", "1")
_THESIS_QUICK = (*_THESIS, "--nodes", "300", "--events", "2000")
_ROUTE = ("sim", "route", "--seed", "1")
_SWARM = ("bench/runtime_swarm.py", "--seed", "1")


def _thesis_run(name: str, *extra: str) -> Run:
    return Run(name, "thesis", (*_THESIS, *extra), (*_THESIS_QUICK, *extra))


RUNS: tuple[Run, ...] = (
    _thesis_run("thesis"),
    _thesis_run("probe-multicast", "--probe", "multicast"),
    _thesis_run("delivery-lbdd", "--delivery", "lbdd"),
    _thesis_run("lb-on", "--lb", "on"),
    _thesis_run("kademlia-recursive", "--dht", "kademlia", "--lookup", "recursive"),
    Run(
        "route",
        "route",
        (*_ROUTE, "--nodes", "10000", "--lookups", "100000"),
        (*_ROUTE, "--nodes", "2000", "--lookups", "2000"),
    ),
    Run(
        "route-keepalives",
        "route",
        (*_ROUTE, "--nodes", "10000", "--lookups", "100000"),
        (*_ROUTE, "--nodes", "2000", "--lookups", "2000"),
        optional=("--keepalives", "on"),
    ),
    Run(
        "runtime_swarm",
        "swarm",
        (*_SWARM, "--latency-events", "400", "--events", "1000"),
        (*_SWARM, "--peers", "8", "--subs", "80", "--latency-events", "100", "--events", "200"),
    ),
)
RUN_NAMES = tuple(r.name for r in RUNS)


# ---------------------------------------------------------------------------------- the child

# Executed with ``python -c`` in the tree's directory: argv = tree, meta path, kind, command.
# It must work with any tree's code, so it uses nothing but the standard library and the
# tree's public entry points (its CLI's ``main``, a bench script run as ``__main__``).
_CHILD = r"""
import json, os, runpy, sys, time
tree, meta_path, kind = sys.argv[1], sys.argv[2], sys.argv[3]
command = sys.argv[4:]
sys.path.insert(0, tree)
packages = @PACKAGES@
# Trees from before the one ``rangecast`` namespace import their folders as top-level packages.
namespaced = os.path.isdir(os.path.join(tree, "rangecast"))

def origin(mod):
    f = getattr(mod, "__file__", None)
    if f:
        return os.path.realpath(f)
    paths = list(getattr(mod, "__path__", []) or [])
    return os.path.realpath(paths[0]) if paths else "?"

rc = 0
t0 = time.perf_counter()
try:
    if kind == "swarm":
        sys.argv = [os.path.join(tree, command[0]), *command[1:], "--json"]
        runpy.run_path(sys.argv[0], run_name="__main__")
    else:
        if namespaced:
            from rangecast.cli.main import main
        else:
            from sim.cli import main
        rc = main([*command, "--json", "--quiet"])
except SystemExit as exc:
    rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
wall = time.perf_counter() - t0
sys.stdout.flush()
if namespaced:
    import rangecast.dht as dht, rangecast.sim as sim
else:
    import dht, sim
root = os.path.realpath(tree) + os.sep
loaded = {
    name: origin(mod)
    for name, mod in list(sys.modules.items())
    if mod is not None and name.removeprefix("rangecast.").split(".")[0] in packages
}
foreign = sorted(f"{n}: {p}" for n, p in loaded.items() if not p.startswith(root))
with open(meta_path, "w") as fh:
    json.dump(
        {
            "rc": rc,
            "wall_s": wall,
            "sim_file": origin(sim),
            "dht_file": origin(dht),
            "modules_loaded": len(loaded),
            "foreign_modules": foreign,
        },
        fh,
    )
sys.exit(rc)
""".replace("@PACKAGES@", repr(PACKAGES))


@dataclass
class Attempt:
    """One run of one command on one tree."""

    run: str
    tree: str  # "base" | "head"
    round: int
    ok: bool = False
    error: str = ""
    wall_s: float = float("nan")
    process_wall_s: float = float("nan")
    cpu_s: float = float("nan")
    rss_mib: float = float("nan")
    #: The machine's 1-minute load average when the run ended: how busy the others kept it.
    load: float = float("nan")
    rc: int | None = None
    result: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        """Simulated messages/s (swarm: sustained events/s of the throughput phase)."""
        r = self.result
        if "sim_messages_per_s" in r:
            return float(r["sim_messages_per_s"])
        rate = r.get("throughput_phase", {}).get("events_per_s")
        return float(rate) if rate is not None else float("nan")

    def summary(self) -> dict[str, Any]:
        keep = (
            "sim_messages",
            "sim_messages_per_s",
            "wall_s",
            "wall_phases_s",
            "missed",
            "duplicates",
            "false_positives",
            "correct_root_fraction",
            "mean_hops",
        )
        return {
            "run": self.run,
            "tree": self.tree,
            "round": self.round,
            "ok": self.ok,
            "error": self.error,
            "rc": self.rc,
            "wall_s": self.wall_s,
            "process_wall_s": self.process_wall_s,
            "cpu_s": self.cpu_s,
            "rate": self.rate,
            "rss_mib": self.rss_mib,
            "load_at_end": self.load,
            "experiment": {k: self.result[k] for k in keep if k in self.result},
            "meta": self.meta,
        }


def _maxrss_mib(ru_maxrss: int) -> float:
    # Linux reports KiB, macOS bytes.
    return ru_maxrss / (1024.0 * 1024.0) if sys.platform == "darwin" else ru_maxrss / 1024.0


def run_child(
    tree: Path,
    kind: str,
    command: Sequence[str],
    say: Callable[[str], None],
    workdir: Path,
) -> tuple[dict[str, Any], dict[str, Any], int, float, float, float, str]:
    """Run ``command`` on ``tree`` in a child process.

    Returns (result JSON, child meta, exit status, process wall s, process CPU s (user + system),
    peak RSS MiB, stderr tail).
    """
    meta_path = workdir / "meta.json"
    out_path = workdir / "stdout"
    err_path = workdir / "stderr"
    for p in (meta_path, out_path, err_path):
        p.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    argv = [sys.executable, "-c", _CHILD, str(tree), str(meta_path), kind, *command]
    t0 = time.perf_counter()
    with out_path.open("wb") as out, err_path.open("wb") as err:
        proc = subprocess.Popen(argv, cwd=tree, env=env, stdout=out, stderr=err)
        next_note = t0 + HEARTBEAT_S
        while True:
            # os.wait4 rather than Popen.wait: its rusage is this child's alone (peak RSS).
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            now = time.perf_counter()
            if now >= next_note:
                say(f"running, {now - t0:.0f} s")
                next_note += HEARTBEAT_S
            time.sleep(0.2)
    wall = time.perf_counter() - t0
    rc = os.waitstatus_to_exitcode(status)
    proc.returncode = rc  # reaped above; keep Popen from waiting again
    rss = _maxrss_mib(usage.ru_maxrss)
    cpu = usage.ru_utime + usage.ru_stime
    stdout = out_path.read_text(errors="replace")
    stderr_tail = "\n".join(err_path.read_text(errors="replace").splitlines()[-15:])
    result: dict[str, Any] = {}
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                result = json.loads(line)
            except json.JSONDecodeError:
                continue
            break
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    return result, meta, rc, wall, cpu, rss, stderr_tail


# ---------------------------------------------------------------------------------- checks


@dataclass
class Check:
    """One protocol figure compared between the trees."""

    name: str
    base: Any
    head: Any
    ok: bool
    rule: str  # "equal", "zero", "1%", ...

    def diff_text(self) -> str:
        numbers = [x for x in (self.base, self.head) if isinstance(x, int | float)]
        if len(numbers) == 2 and not any(isinstance(x, bool) for x in numbers):
            if self.rule.endswith("%") and self.base:
                return f"{(self.head - self.base) / abs(self.base) * 100:+.4f} %"
            return f"{self.head - self.base:+g}"
        return ""


def _get(d: dict[str, Any], path: str) -> Any:
    cur: Any = d
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def _equal(name: str, base: dict[str, Any], head: dict[str, Any], path: str) -> Check:
    b, h = _get(base, path), _get(head, path)
    return Check(name, b, h, b is not None and b == h, "equal")


def _zero(name: str, base: dict[str, Any], head: dict[str, Any], path: str) -> Check:
    b, h = _get(base, path), _get(head, path)
    return Check(name, b, h, b == 0 and h == 0, "0 on both")


def _close(
    name: str, base: dict[str, Any], head: dict[str, Any], path: str, tol: float = TOLERANCE
) -> Check:
    b, h = _get(base, path), _get(head, path)
    if not isinstance(b, int | float) or not isinstance(h, int | float):
        return Check(name, b, h, False, f"{tol * 100:g}%")
    ok = abs(h - b) <= tol * abs(b) if b else h == b
    return Check(name, b, h, ok, f"{tol * 100:g}%")


def thesis_checks(base: dict[str, Any], head: dict[str, Any]) -> list[Check]:
    """The protocol must not change: same counts, no oracle mismatch, means within 1 %."""
    return [
        _equal("simulated messages", base, head, "sim_messages"),
        _equal("expected deliveries", base, head, "expected_deliveries"),
        _equal("deliveries", base, head, "deliveries"),
        _zero("missed", base, head, "missed"),
        _zero("duplicates", base, head, "duplicates"),
        _zero("false positives", base, head, "false_positives"),
        _close("delivery latency mean ms", base, head, "delivery_latency_ms.mean"),
        _close("install latency mean ms", base, head, "install_latency_ms.mean"),
        _close("bytes per event", base, head, "bytes_per_event"),
        _close("bytes per subscription", base, head, "bytes_per_subscription"),
    ]


def _type_counts(r: dict[str, Any], exclude: tuple[str, ...]) -> tuple[int, int] | None:
    by_type = r.get("messages_by_type")
    if not isinstance(by_type, dict):
        return None
    kept = [v for k, v in by_type.items() if k not in exclude]
    return sum(v["messages"] for v in kept), sum(v["bytes"] for v in kept)


#: Pastry's leaf-set maintenance: the keep-alive pings, their answers, and the leaf-set exchange
#: every few keep-alive rounds (``dht/node.py``, ``_on_keepalive``).
KEEPALIVE_TYPES = ("Ping", "Pong", "LeafSetRequest", "LeafSetReply")


def route_checks(base: dict[str, Any], head: dict[str, Any]) -> list[Check]:
    """Same lookups, same paths. a5c21ca always ran leaf-set keep-alives; later trees leave
    them out when nothing can fail (``--keepalives auto``, the JSON's ``keepalives`` field). If
    the two runs differ there, the message and byte totals are compared without the keep-alive
    traffic (``KEEPALIVE_TYPES``)."""
    pings_b, pings_h = base.get("keepalives", True), head.get("keepalives", True)
    if pings_b == pings_h:
        totals = [
            _equal("simulated messages", base, head, "sim_messages"),
            _close("simulated bytes", base, head, "sim_bytes"),
        ]
    else:
        b, h = _type_counts(base, KEEPALIVE_TYPES), _type_counts(head, KEEPALIVE_TYPES)
        bm, bb = b or (None, None)
        hm, hb = h or (None, None)
        pings = f"keep-alives: base {'on' if pings_b else 'off'}, head {'on' if pings_h else 'off'}"
        totals = [
            Check(
                "messages w/o keep-alives", bm, hm, bm is not None and bm == hm, f"equal; {pings}"
            ),
            _close("bytes w/o keep-alives", {"x": bb}, {"x": hb}, "x"),
        ]
    ok_root = [
        Check(
            "correct root fraction",
            _get(base, "correct_root_fraction"),
            _get(head, "correct_root_fraction"),
            _get(base, "correct_root_fraction") == _get(head, "correct_root_fraction") == 1.0,
            "1.0 on both",
        )
    ]
    return [
        *totals,
        _equal("delivered", base, head, "delivered"),
        *ok_root,
        _zero("duplicate deliveries", base, head, "duplicate_deliveries"),
        _close("mean hops", base, head, "mean_hops"),
        _close("mean latency ms", base, head, "mean_latency_ms"),
    ]


def swarm_checks(base: dict[str, Any], head: dict[str, Any]) -> list[Check]:
    """Real peers: no equality of counts (fresh keys each run), only the oracle on each tree."""
    checks = []
    for phase in ("latency_phase", "throughput_phase"):
        short = phase.split("_")[0]
        for key in ("missed", "duplicates", "false_positives"):
            checks.append(_zero(f"{short}: {key}", base, head, f"{phase}.oracle.{key}"))
        b = _get(base, f"{phase}.all_delivered_before_timeout")
        h = _get(head, f"{phase}.all_delivered_before_timeout")
        checks.append(Check(f"{short}: all delivered", b, h, b is True and h is True, "true"))
    return checks


CHECKS: dict[str, Callable[[dict[str, Any], dict[str, Any]], list[Check]]] = {
    "thesis": thesis_checks,
    "route": route_checks,
    "swarm": swarm_checks,
}

#: runtime_swarm figures shown side by side: (label, path, higher is better).
SWARM_FIGURES: tuple[tuple[str, str, bool], ...] = (
    ("latency mean ms", "latency_phase.latency.mean_ms", False),
    ("latency p50 ms", "latency_phase.latency.p50_ms", False),
    ("latency p99 ms", "latency_phase.latency.p99_ms", False),
    ("throughput events/s", "throughput_phase.events_per_s", True),
    ("throughput deliveries/s", "throughput_phase.deliveries_per_s", True),
    ("under load p50 ms", "throughput_phase.latency_under_load.p50_ms", False),
    ("frames per event", "totals.frames_per_event_incl_setup", False),
)


def _median(xs: Sequence[float]) -> float:
    xs = [x for x in xs if x == x]  # drop NaN (a failed attempt)
    return statistics.median(xs) if xs else float("nan")


def _ratio(num: float, den: float) -> float:
    return num / den if den and num == num and den == den else float("nan")


def summarise(run: Run, attempts: list[Attempt]) -> dict[str, Any]:
    """Medians per tree, the speed-ups, and the protocol checks of every base/head pair."""
    by_tree = {t: [a for a in attempts if a.tree == t] for t in ("base", "head")}
    med = {
        t: {
            "wall_s": _median([a.wall_s for a in xs]),
            "cpu_s": _median([a.cpu_s for a in xs]),
            "rate": _median([a.rate for a in xs]),
            "rss_mib": _median([a.rss_mib for a in xs]),
        }
        for t, xs in by_tree.items()
    }
    failed = [f"{a.tree} round {a.round}: {a.error}" for a in attempts if not a.ok]
    checks: list[Check] = []
    bases = [a for a in by_tree["base"] if a.ok]
    heads = [a for a in by_tree["head"] if a.ok]
    if bases and heads:
        checks = CHECKS[run.kind](bases[0].result, heads[0].result)
        # Later rounds must repeat the first bit for bit (the simulator is deterministic).
        if run.kind != "swarm":
            for a in [*bases[1:], *heads[1:]]:
                first = bases[0] if a.tree == "base" else heads[0]
                same = a.result.get("sim_messages") == first.result.get("sim_messages")
                checks.append(
                    Check(
                        f"{a.tree} round {a.round} repeats round 1",
                        first.result.get("sim_messages"),
                        a.result.get("sim_messages"),
                        same,
                        "equal",
                    )
                )
    figures = {}
    if run.kind == "swarm" and bases and heads:
        for label, path, higher_better in SWARM_FIGURES:
            b = _median([float(_get(a.result, path) or float("nan")) for a in bases])
            h = _median([float(_get(a.result, path) or float("nan")) for a in heads])
            figures[label] = {
                "base": b,
                "head": h,
                "ratio": _ratio(h, b) if higher_better else _ratio(b, h),
            }
    ok = not failed and bool(checks) and all(c.ok for c in checks)
    return {
        "run": run.name,
        "kind": run.kind,
        "median": med,
        "wall_ratio_base_over_head": _ratio(med["base"]["wall_s"], med["head"]["wall_s"]),
        "cpu_ratio_base_over_head": _ratio(med["base"]["cpu_s"], med["head"]["cpu_s"]),
        "rate_ratio_head_over_base": _ratio(med["head"]["rate"], med["base"]["rate"]),
        "checks": [c.__dict__ | {"diff": c.diff_text()} for c in checks],
        "checks_ok": ok,
        "failed": failed,
        "swarm_figures": figures,
    }


# ---------------------------------------------------------------------------------- trees


def _git(cwd: Path, *args: str) -> str:
    out = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise UsageError(f"{cwd}: git {' '.join(args)}: {out.stderr.strip() or 'failed'}")
    return out.stdout.strip()


def head_description(head_dir: Path) -> dict[str, Any]:
    try:
        sha = _git(head_dir, "rev-parse", "HEAD")
        dirty = bool(_git(head_dir, "status", "--porcelain", "--untracked-files=no"))
    except UsageError:
        return {"dir": str(head_dir), "commit": None, "dirty": None}
    return {"dir": str(head_dir), "commit": sha, "dirty": dirty}


def baseline_tree(head_dir: Path, rev: str, cache_dir: Path) -> tuple[Path, str]:
    """The worktree of ``rev`` (created on first use); returns (path, full commit id)."""
    try:
        sha = _git(head_dir, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    except UsageError:
        raise UsageError(f"{head_dir}: no commit {rev!r} in this repository") from None
    path = cache_dir / f".baseline-{sha[:12]}"
    if path.exists():
        try:
            have = _git(path, "rev-parse", "HEAD")
        except UsageError:
            have = ""
        if have != sha:
            raise UsageError(
                f"{path}: exists but is not a worktree of {sha[:12]}; remove it "
                f"(git worktree remove --force {path}) and run again"
            )
        return path, sha
    cache_dir.mkdir(parents=True, exist_ok=True)
    _git(head_dir, "worktree", "add", "--detach", str(path), sha)
    # Compile once so that the first timed run does not pay for the bytecode.
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", *[p for p in PACKAGES if (path / p).is_dir()]],
        cwd=path,
        capture_output=True,
    )
    return path, sha


# ---------------------------------------------------------------------------------- output


def _fmt(x: float, spec: str) -> str:
    return "-" if x != x else format(x, spec)


def table(summaries: list[dict[str, Any]], attempts: list[Attempt]) -> str:
    cols = f"{'run':<19} {'tree':<4} {'wall s':>7} {'CPU s':>7} {'msgs/s':>9} {'RSS MiB':>7}"
    head = f"{cols}  speed-up (wall, CPU, rate)"
    lines = [head, "-" * len(head)]
    for s in summaries:
        for tree in ("base", "head"):
            m = s["median"][tree]
            n = sum(1 for a in attempts if a.run == s["run"] and a.tree == tree)
            label = s["run"] if tree == "base" else ""
            ratio = ""
            if tree == "head":
                ratio = (
                    f"  {_fmt(s['wall_ratio_base_over_head'], '.2f')}x "
                    f"{_fmt(s['cpu_ratio_base_over_head'], '.2f')}x "
                    f"{_fmt(s['rate_ratio_head_over_base'], '.2f')}x"
                )
            med = f"  (median of {n})" if n > 1 else ""
            lines.append(
                f"{label:<19} {tree:<4} {_fmt(m['wall_s'], '7.1f')} {_fmt(m['cpu_s'], '7.1f')} "
                f"{_fmt(m['rate'], '9,.0f')} {_fmt(m['rss_mib'], '7.0f')}{ratio}{med}"
            )
    lines += [
        "wall: the run in its child process; CPU: the child's user + system time; msgs/s: the",
        "experiment's own sim_messages_per_s (runtime_swarm: sustained events/s); speed-up:",
        "wall base/head, CPU base/head, msgs/s head/base (> 1: head is faster)",
    ]
    return "\n".join(lines)


def checks_text(summaries: list[dict[str, Any]]) -> str:
    lines = []
    for s in summaries:
        verdict = "protocol unchanged" if s["checks_ok"] else "CHECK FAILED"
        lines.append(f"{s['run']}: {verdict}")
        for f in s["failed"]:
            lines.append(f"  run failed: {f}")
        for c in s["checks"]:
            mark = "ok  " if c["ok"] else "FAIL"
            diff = f"  diff {c['diff']}" if c["diff"] else ""
            lines.append(
                f"  {mark} {c['name']:<28} base {_short(c['base'])}  head {_short(c['head'])}"
                f"  ({c['rule']}){diff}"
            )
        if s["swarm_figures"]:
            lines.append(f"  {'figure':<26} {'base':>10} {'head':>10} {'ratio':>7}")
            for label, f in s["swarm_figures"].items():
                lines.append(
                    f"  {label:<26} {_fmt(f['base'], '10,.1f')} {_fmt(f['head'], '10,.1f')} "
                    f"{_fmt(f['ratio'], '6.2f')}x"
                )
            lines.append("  ratio: latency base/head, rates head/base (> 1: head is better)")
    return "\n".join(lines)


def _short(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.6g}"
    if isinstance(x, int) and not isinstance(x, bool):
        return f"{x:,}"
    return str(x)


# ---------------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0],
        epilog="runs: " + ", ".join(RUN_NAMES) + " (module docstring: what each one is)",
    )
    ap.add_argument(
        "--base",
        default=DEFAULT_BASE,
        metavar="REV",
        help=f"baseline commit (default: {DEFAULT_BASE})",
    )
    ap.add_argument(
        "--head-dir", type=Path, default=REPO, help="the tree to compare (default: this checkout)"
    )
    ap.add_argument(
        "--cache-dir",
        type=Path,
        default=HERE,
        help="where the baseline worktree .baseline-<sha> lives (default: bench/)",
    )
    ap.add_argument("--repeat", type=int, default=1, metavar="K", help="rounds of base, head")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="runs to do: " + ", ".join(RUN_NAMES))
    ap.add_argument("--quick", action="store_true", help="small runs, for a smoke test")
    ap.add_argument(
        "--json",
        type=Path,
        default=HERE / "results" / "compare.json",
        metavar="PATH",
        help="where to write every figure (default: bench/results/compare.json)",
    )
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    unknown = [n for n in args.only or () if n not in RUN_NAMES]
    if unknown:
        ap.error(f"unknown run {', '.join(unknown)} (runs: {', '.join(RUN_NAMES)})")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    t_start = time.perf_counter()

    def say(msg: str) -> None:
        print(f"[compare {time.perf_counter() - t_start:7.1f}s] {msg}", file=sys.stderr, flush=True)

    try:
        head_dir = args.head_dir.resolve()
        if not (head_dir / "sim" / "engine.py").is_file():
            raise UsageError(f"{head_dir}: not a Rangecast checkout (no sim/engine.py)")
        base_dir, base_sha = baseline_tree(head_dir, args.base, args.cache_dir.resolve())
    except UsageError as exc:
        print(f"compare.py: {exc}", file=sys.stderr)
        return 2
    trees = {"base": base_dir, "head": head_dir}
    say(f"base {base_sha[:12]} in {base_dir}; head {head_dir}")
    runs = [r for r in RUNS if not args.only or r.name in args.only]
    attempts: list[Attempt] = []
    summaries: list[dict[str, Any]] = []
    shown_modules: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="rangecast-compare-") as tmp:
        for run in runs:
            run_attempts = []
            for rnd in range(1, args.repeat + 1):
                for tree in ("base", "head"):
                    command = run.command(args.quick, trees[tree])
                    tag = f"{run.name} [{tree}, round {rnd}/{args.repeat}]"
                    say(f"{tag}: {' '.join(command)}")
                    result, meta, rc, pwall, cpu, rss, err = run_child(
                        trees[tree],
                        run.kind,
                        command,
                        lambda m, tag=tag: say(f"{tag}: {m}"),
                        Path(tmp),
                    )
                    a = Attempt(run.name, tree, rnd, rc=rc, process_wall_s=pwall, rss_mib=rss)
                    a.cpu_s = cpu
                    a.load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
                    a.result, a.meta = result, meta
                    a.wall_s = float(meta.get("wall_s", pwall))
                    if not meta:
                        a.error = f"exit status {rc}, no report from the child: {err}"
                    elif meta["foreign_modules"]:
                        a.error = "imported outside its tree: " + "; ".join(
                            meta["foreign_modules"][:5]
                        )
                    elif not result:
                        a.error = f"exit status {rc}, no JSON on stdout: {err}"
                    else:
                        a.ok = True
                    if meta and tree not in shown_modules:
                        shown_modules.add(tree)
                        say(
                            f"{tree} tree: sim from {meta['sim_file']}, dht from {meta['dht_file']}"
                        )
                    say(
                        f"{tag}: "
                        + (
                            f"done, wall {a.wall_s:.1f} s, CPU {cpu:.1f} s, "
                            f"{_fmt(a.rate, ',.0f')} /s, "
                            f"peak RSS {rss:.0f} MiB, load {a.load:.1f}"
                            if a.ok
                            else f"FAILED: {a.error}"
                        )
                    )
                    run_attempts.append(a)
            attempts += run_attempts
            summaries.append(summarise(run, run_attempts))
    print(table(summaries, attempts))
    print()
    print(checks_text(summaries))
    report = {
        "base": {"rev": args.base, "commit": base_sha, "dir": str(base_dir)},
        "head": head_description(head_dir),
        "quick": args.quick,
        "repeat": args.repeat,
        "python": sys.version.split()[0],
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "loadavg_at_end": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        },
        "commands": {
            r.name: {t: list(r.command(args.quick, d)) for t, d in trees.items()} for r in runs
        },
        "summaries": summaries,
        "attempts": [a.summary() for a in attempts],
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=1, default=str))
    say(f"wrote {args.json}")
    return 0 if all(s["checks_ok"] for s in summaries) else 1


if __name__ == "__main__":
    sys.exit(main())
