"""``rangecast sim route``: route random lookups through a simulated DHT (Pastry or Kademlia) and
check every delivery against the oracle.

Stages: place and create N nodes; bootstrap (oracle or the join protocol); optionally crash a
fraction of them and let the failure detectors and repair run for ``repair_s`` of simulated time;
then inject ``lookups`` lookups (exponential inter-arrival, from a random live node, for a random
key) and run until each is delivered. A lookup is correct when it is delivered at the live node
closest to its key (numerically for Pastry, by XOR for Kademlia). Latency is from the ``route``
call to the delivery upcall.
"""

from __future__ import annotations

import math
import time
from array import array
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from rangecast.dht.errors import LocalProtocolError
from rangecast.dht.messages import DHT_TABLE
from rangecast.dht.node import Application
from rangecast.dht.routing import Peer
from rangecast.dht.wire import codec_for
from rangecast.sim import runlog
from rangecast.sim.engine import Simulator, cyclic_gc_paused
from rangecast.sim.latency import latency_model
from rangecast.sim.network import ROOT_CACHE, SimNetwork, dht_config, dht_fields
from rangecast.sim.options import require_finite
from rangecast.sim.percentiles import percentile
from rangecast.sim.progress import as_progress
from rangecast.sim.streams import stream


@dataclass(frozen=True, slots=True)
class RouteParams:
    nodes: int = 1000
    lookups: int = 10000
    seed: int = 1
    bootstrap: str = "oracle"
    fail: float = 0.0
    latency: str = "synthetic"
    repair_s: float = 60.0
    lookup_rate_per_s: float = 10000.0
    loss: float = 0.0
    dht: str = "pastry"
    lookup: str = "iterative"
    #: Leaf-set keep-alives: "on", "off", or "auto" (off exactly when nothing can fail: oracle
    #: bootstrap, no --fail, no --loss; see ``keepalives_on``).
    keepalives: str = "auto"
    #: Kademlia iterative lookups: roots remembered per node (0: a lookup per message).
    root_cache: int = ROOT_CACHE

    def check(self) -> None:
        dht_config(self.dht, lookup=self.lookup, root_cache=self.root_cache)
        require_finite(
            {
                "--fail": self.fail,
                "--repair-s": self.repair_s,
                "--lookup-rate": self.lookup_rate_per_s,
                "--loss": self.loss,
            }
        )
        if self.nodes < 1:
            raise LocalProtocolError("--nodes must be at least 1")
        if self.lookups < 0:
            raise LocalProtocolError("--lookups must be >= 0")
        if self.bootstrap not in ("oracle", "join"):
            raise LocalProtocolError("--bootstrap must be 'oracle' or 'join'")
        if not 0.0 <= self.fail < 1.0:
            raise LocalProtocolError("--fail must be in [0, 1)")
        if self.repair_s < 0 or self.lookup_rate_per_s <= 0:
            raise LocalProtocolError("--repair-s must be >= 0 and the lookup rate > 0")
        if self.keepalives not in ("auto", "on", "off"):
            raise LocalProtocolError("--keepalives must be 'auto', 'on' or 'off'")

    def keepalives_on(self) -> bool:
        """Keep-alives detect failed leaves. In a run where no node fails and no message is
        lost they never change a routing decision, but they cost N x leaf-set size pings every
        5 simulated seconds: at 10^6 nodes, 3.2 M pings per simulated second against 50,000
        lookup messages. "auto" leaves them out of such runs (hop acks stay, so every routed
        hop is still acknowledged and charged)."""
        if self.keepalives != "auto":
            return self.keepalives == "on"
        return self.bootstrap != "oracle" or self.fail > 0 or self.loss > 0


class _Recorder(Application):
    """Per-node application: records where each lookup arrived."""

    __slots__ = ("index", "log")

    def __init__(self, index: int, log: _LookupLog) -> None:
        self.index = index
        self.log = log

    def deliver(self, key: int, payload: bytes, origin: Peer, hops: int, now: float) -> None:
        self.log.delivered(int.from_bytes(payload, "big"), self.index, hops, now)


class _LookupLog:
    __slots__ = ("at", "duplicates", "hops", "latency", "outstanding", "sim", "start")

    def __init__(self, sim: Simulator) -> None:
        self.sim: Simulator | None = sim
        self.start: list[float] = []
        self.at: list[int] = []
        self.hops: list[int] = []
        self.latency: list[float] = []
        self.duplicates = 0
        self.outstanding = 0

    def delivered(self, lid: int, index: int, hops: int, now: float) -> None:
        if lid >= len(self.at) or self.at[lid] != -1:
            self.duplicates += 1
            return
        self.at[lid] = index
        self.hops[lid] = hops
        self.latency[lid] = now - self.start[lid]
        self.outstanding -= 1
        if self.outstanding == 0 and self.sim is not None:
            self.sim.stop()


def run_route(
    params: RouteParams,
    progress: Callable[[str], None] | None = None,
    out: Path | str | None = None,
    *,
    force: bool = False,
) -> dict[str, Any]:
    """Run the lookups; with ``out``, also write the run log there (docs/run-logs.md)."""
    params.check()
    with cyclic_gc_paused():
        return _run_route(params, progress, out, force=force)


def _run_route(
    params: RouteParams,
    progress: Callable[[str], None] | None,
    out: Path | str | None,
    *,
    force: bool,
) -> dict[str, Any]:
    out_dir = runlog.prepare_dir(out, force=force) if out is not None else None
    wall0 = time.perf_counter()
    say = as_progress(progress, "route")
    model = latency_model(params.latency, params.seed)
    sim = Simulator(
        model,
        stream(params.seed, "network"),
        codec=codec_for(DHT_TABLE),
        loss=params.loss,
        progress=say.engine_hook,
    )
    log = _LookupLog(sim)
    messages_log = runlog.MessageLog(out_dir / "messages.parquet", sim.codec) if out_dir else None
    if messages_log is not None:
        sim.message_log = messages_log.record
    config = dht_config(params.dht, lookup=params.lookup, root_cache=params.root_cache)
    if not params.keepalives_on():
        config = replace(config, keepalive_s=math.inf)
    overlay = SimNetwork(
        sim,
        params.seed,
        config=config,
        app_factory=lambda i: _Recorder(i, log),
    )
    indices = overlay.create(params.nodes)
    say(f"{params.nodes} nodes placed ({model.name}); bootstrap: {params.bootstrap}")
    result: dict[str, Any] = {}
    phases: dict[str, float] = {"setup": time.perf_counter() - wall0}
    mark = time.perf_counter()
    if params.bootstrap == "oracle":
        overlay.oracle_bootstrap(indices)
    else:
        joins = overlay.join_all(indices)
        # Let the last announcements and keep-alives settle before judging the leaf sets.
        sim.run(until=sim.now + 2 * overlay.cfg.keepalive_s)
        mismatches = overlay.leafset_mismatches()
        result["join"] = {**joins, "leafset_mismatches": len(mismatches)}
        say(
            f"joins: {joins['completed']:,} of {joins['joins']:,} completed, "
            f"{len(mismatches)} leaf sets differ from the oracle"
        )
    phases["bootstrap"] = time.perf_counter() - mark
    mark = time.perf_counter()
    failed: list[int] = []
    if params.fail > 0:
        failed = overlay.crash_fraction(params.fail, stream(params.seed, "failures"))
        say(f"crashed {len(failed)} nodes; repairing for {params.repair_s:g} simulated s")
        t0 = sim.now
        say.phase("repairing", params.repair_s, lambda: sim.now - t0, "sim s")
        sim.run(until=sim.now + params.repair_s)
        say.end()
        result["leafset_mismatches_after_repair"] = len(overlay.leafset_mismatches())

    phases["failures"] = time.perf_counter() - mark
    mark = time.perf_counter()
    live = overlay.live()
    oracle = overlay.oracle()
    lk_rng = stream(params.seed, "lookups")
    space = overlay.space
    log.at = [-1] * params.lookups
    log.hops = [0] * params.lookups
    log.latency = [0.0] * params.lookups
    log.start = [0.0] * params.lookups
    log.outstanding = params.lookups
    messages_before = sim.stats.messages
    bytes_before = sim.stats.bytes
    # Every lookup's time, source and key are drawn up front, in the order a5c21ca drew them,
    # but each is put on the event queue only when the previous one fires: a queue holding
    # 10^6 pending injections would make every message's push and pop dearer.
    times = array("d")
    srcs = array("q")
    keys: list[int] = []
    t = sim.now
    for _ in range(params.lookups):
        t += lk_rng.expovariate(params.lookup_rate_per_s)
        times.append(t)
        srcs.append(live[lk_rng.randrange(len(live))])
        keys.append(space.random_id(lk_rng))
    expected = [oracle.root(key) for key in keys]
    if params.lookups:
        sim.call_at(times[0], _Injector(sim, overlay, log, times, srcs, keys), 0)
    say(f"routing {params.lookups:,} lookups from {len(live):,} live nodes")
    if params.lookups:
        say.phase("lookups", params.lookups, lambda: params.lookups - log.outstanding, "lookups")
        # Generous horizon: every lookup either arrives or is given up by its hops' retries.
        sim.run(until=t + 120.0)
        say.end()
    phases["lookups"] = time.perf_counter() - mark
    wall = time.perf_counter() - wall0

    delivered = [lid for lid in range(params.lookups) if log.at[lid] != -1]
    correct = sum(1 for lid in delivered if log.at[lid] == expected[lid])
    hops = sorted(log.hops[lid] for lid in delivered)
    lat = [log.latency[lid] * 1000.0 for lid in delivered]
    sim_messages = sim.stats.messages
    result = {
        "nodes": params.nodes,
        "lookups": params.lookups,
        "correct_root_fraction": correct / params.lookups if params.lookups else 1.0,
        "mean_hops": sum(hops) / len(hops) if hops else 0.0,
        "p99_hops": percentile(hops, 0.99),
        "max_hops": hops[-1] if hops else 0,
        "mean_latency_ms": sum(lat) / len(lat) if lat else 0.0,
        "sim_messages": sim_messages,
        "wall_s": wall,
        "sim_messages_per_s": sim_messages / wall if wall > 0 else 0.0,
        "wall_phases_s": phases,
        "seed": params.seed,
        **dht_fields(params.dht, params.lookup, params.root_cache),
        "bootstrap": params.bootstrap,
        "keepalives": params.keepalives_on(),
        "latency_model": model.describe(),
        "failed_nodes": len(failed),
        "live_nodes": len(live),
        "delivered": len(delivered),
        "duplicate_deliveries": log.duplicates,
        "log16_n": math.log(params.nodes, 16) if params.nodes > 1 else 0.0,
        "lookup_phase": {
            "messages": sim.stats.messages - messages_before,
            "bytes": sim.stats.bytes - bytes_before,
        },
        "sim_bytes": sim.stats.bytes,
        "sim_time_s": sim.now,
        "messages_by_type": sim.stats.types_json(),
        **result,
    }
    if out_dir is not None and messages_log is not None:
        messages_log.close()
        runlog.write_nodes(out_dir, sim)
        runlog.write_run(out_dir, "route", {**asdict(params), "scenario": "route"}, result)
    # The one reference cycle of the run (each node's recorder -> log -> simulator -> nodes):
    # broken, reference counting frees the run's millions of objects on return, and the cyclic
    # collector, enabled again, does not have to walk them all to find out.
    log.sim = None
    return result


class _Injector:
    """Starts lookup ``lid`` and schedules lookup ``lid + 1``."""

    __slots__ = ("keys", "log", "nodes", "sim", "srcs", "times")

    def __init__(
        self,
        sim: Simulator,
        overlay: SimNetwork,
        log: _LookupLog,
        times: array[float],
        srcs: array[int],
        keys: list[int],
    ) -> None:
        self.sim = sim
        self.nodes = overlay.nodes
        self.log = log
        self.times = times
        self.srcs = srcs
        self.keys = keys

    def __call__(self, lid: int) -> None:
        sim = self.sim
        if lid + 1 < len(self.keys):
            sim.call_at(self.times[lid + 1], self, lid + 1)
        src = self.srcs[lid]
        if not sim.alive[src]:
            return
        self.log.start[lid] = sim.now
        self.nodes[src].route(self.keys[lid], lid.to_bytes(4, "big"), sim.now)
        sim.poke(src)


#: Fields that depend on the machine, not on the seed: left out when comparing two runs.
WALL_FIELDS = ("wall_s", "sim_messages_per_s", "wall_phases_s")
