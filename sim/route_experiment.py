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
from dataclasses import dataclass, replace
from typing import Any

from rangecast.dht.errors import LocalProtocolError
from rangecast.dht.node import Application
from rangecast.dht.wire import Handle
from rangecast.sim.engine import Simulator
from rangecast.sim.network import DhtConfig, SimNetwork
from rangecast.sim.options import finite_float, non_negative_float
from rangecast.sim.percentiles import percentile
from rangecast.sim.scenario import (
    LATENCY_HELP,
    OnDht,
    Scenario,
    TimedResult,
    dht_fields_of,
    optional,
    param,
    refuse_beyond_memory,
    substrate_title,
)

#: Peak resident memory of ``sim route``: per node and the process's own (4.96 GiB at
#: 1,000,000 nodes, docs/simulator.md), for the up-front check of a size that cannot fit.
ROUTE_BYTES_PER_NODE = 5_200
ROUTE_BASE_BYTES = 200 * 2**20


@dataclass(frozen=True, slots=True)
class RouteParams(OnDht):
    nodes: int = param(1000, "overlay size N")
    lookups: int = param(10000, "number of lookups L")
    seed: int = param(1, "seed of every random stream")
    bootstrap: str = param(
        "oracle",
        "build routing state directly, or run the join protocol node by node",
        choices=("oracle", "join"),
    )
    fail: float = param(0.0, "fraction of nodes to crash before the lookups")
    repair_s: float = param(
        60.0,
        "simulated seconds of failure detection and repair after crashing",
        type=non_negative_float,
    )
    latency: str = param("synthetic", LATENCY_HELP)
    lookup_rate_per_s: float = param(
        10000.0, "lookups injected per simulated second (Poisson)", flag="--lookup-rate"
    )
    loss: float = param(0.0, "message loss probability", type=finite_float)
    #: Leaf-set keep-alives: "on", "off", or "auto" (off exactly when nothing can fail: oracle
    #: bootstrap, no --fail, no --loss; see ``keepalives_on``).
    keepalives: str = param(
        "auto",
        "leaf-set keep-alives; auto: off when nothing can fail (oracle bootstrap, "
        "no --fail, no --loss)",
        choices=("auto", "on", "off"),
    )

    def check(self) -> None:
        self.check_common(nodes=self.nodes)
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
        refuse_beyond_memory(
            self.nodes,
            ROUTE_BASE_BYTES + self.nodes * ROUTE_BYTES_PER_NODE,
            f"about {ROUTE_BYTES_PER_NODE / 1000:,.0f} KB a node, measured at 1,000,000 nodes",
        )

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

    def deliver(self, key: int, payload: bytes, origin: Handle, hops: int, now: float) -> None:
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


@dataclass(kw_only=True, slots=True)
class RouteResult(TimedResult):
    lookups: int
    bootstrap: str
    keepalives: bool
    failed_nodes: int
    live_nodes: int
    delivered: int
    duplicate_deliveries: int
    correct_root_fraction: float
    mean_hops: float
    p99_hops: float
    max_hops: int
    log16_n: float
    mean_latency_ms: float
    #: Messages and bytes of the lookup phase alone.
    lookup_phase: dict[str, int]
    sim_messages: int
    sim_bytes: int
    sim_time_s: float
    messages_by_type: dict[str, Any]
    sim_messages_per_s: float
    wall_phases_s: dict[str, float]
    #: With ``--bootstrap join``: the joins and how many leaf sets differ from the oracle.
    join: dict[str, Any] | None = optional()
    #: With ``--fail``: leaf sets that differ from the oracle once repair has run.
    leafset_mismatches_after_repair: int | None = optional()

    def summary(self) -> str:
        r = self.json()
        lm = r["latency_model"]
        lines = [
            f"{substrate_title(r)} routing: {r['nodes']:,} nodes ({r['bootstrap']} bootstrap), "
            f"{r['lookups']:,} lookups, seed {r['seed']}",
            f"  latency model      {lm['name']} (mean RTT {lm['mean_rtt_ms']:.1f} ms)",
        ]
        if r["failed_nodes"]:
            lines.append(f"  crashed nodes      {r['failed_nodes']:,} (live {r['live_nodes']:,})")
        if "join" in r:
            j = r["join"]
            lines.append(
                f"  joins              {j['completed']:,}/{j['joins']:,} completed, "
                f"{j['leafset_mismatches']} leaf sets differ from the oracle"
            )
        root = (
            f"{r['correct_root_fraction']:.4%} "
            f"({r['delivered']:,} delivered, {r['duplicate_deliveries']} duplicates)"
            if r["delivered"]
            else "- (no lookup delivered)"
        )
        lines += [
            f"  correct root       {root}",
            f"  hops               mean {r['mean_hops']:.3f}  p99 {r['p99_hops']:g}  "
            f"max {r['max_hops']}  (log16 N = {r['log16_n']:.2f})",
            f"  latency            mean {r['mean_latency_ms']:.1f} ms",
            f"  simulated messages {r['sim_messages']:,} ({r['sim_bytes']:,} bytes)",
            f"  wall               {r['wall_s']:.1f} s ({r['sim_messages_per_s']:,.0f} messages/s)",
        ]
        return "\n".join(lines)


class Route(Scenario[RouteParams, RouteResult]):
    name = "route"
    command = ("route",)
    help = "route random lookups through a simulated DHT, checked by an oracle"
    params_type = RouteParams

    def simulator_options(self) -> dict[str, Any]:
        return {"loss": self.params.loss}

    def dht_config(self) -> DhtConfig:
        config = super().dht_config()
        return config if self.params.keepalives_on() else replace(config, keepalive_s=math.inf)

    def stack(self) -> dict[str, Any]:
        self.log = log = _LookupLog(self.sim)
        return {"app_factory": lambda i: _Recorder(i, log)}

    def bootstrap(self) -> None:
        params, sim, net, say = self.params, self.sim, self.net, self.say
        indices = net.create(params.nodes)
        say(f"{params.nodes} nodes placed ({self.model.name}); bootstrap: {params.bootstrap}")
        self.phases["setup"] = self.elapsed()
        mark = time.perf_counter()
        self.join: dict[str, Any] | None = None
        if params.bootstrap == "oracle":
            net.oracle_bootstrap(indices)
        else:
            joins = net.join_all(indices)
            # Let the last announcements and keep-alives settle before judging the leaf sets.
            sim.run(until=sim.now + 2 * net.cfg.keepalive_s)
            mismatches = net.leafset_mismatches()
            self.join = {**joins, "leafset_mismatches": len(mismatches)}
            say(
                f"joins: {joins['completed']:,} of {joins['joins']:,} completed, "
                f"{len(mismatches)} leaf sets differ from the oracle"
            )
        self.phases["bootstrap"] = time.perf_counter() - mark

    def workload(self) -> None:
        params, sim, net, say, log = self.params, self.sim, self.net, self.say, self.log
        mark = time.perf_counter()
        self.failed: list[int] = []
        self.mismatches_after_repair: int | None = None
        if params.fail > 0:
            self.failed = net.crash_fraction(params.fail, self.stream("failures"))
            say(f"crashed {len(self.failed)} nodes; repairing for {params.repair_s:g} simulated s")
            t0 = sim.now
            say.phase("repairing", params.repair_s, lambda: sim.now - t0, "sim s")
            sim.run(until=sim.now + params.repair_s)
            say.end()
            self.mismatches_after_repair = len(net.leafset_mismatches())
        self.phases["failures"] = time.perf_counter() - mark
        mark = time.perf_counter()
        self.live = live = net.live()
        oracle = net.oracle()
        lk_rng = self.stream("lookups")
        n = params.lookups
        log.at = [-1] * n
        log.hops = [0] * n
        log.latency = [0.0] * n
        log.start = [0.0] * n
        log.outstanding = n
        self.before = (sim.stats.messages, sim.stats.bytes)
        # Every lookup's time, source and key are drawn up front, in the order a5c21ca drew
        # them, but each is put on the event queue only when the previous one fires: a queue
        # holding 10^6 pending injections would make every message's push and pop dearer.
        times = array("d")
        srcs = array("q")
        keys: list[int] = []
        t = sim.now
        for _ in range(n):
            t += lk_rng.expovariate(params.lookup_rate_per_s)
            times.append(t)
            srcs.append(live[lk_rng.randrange(len(live))])
            keys.append(net.space.random_id(lk_rng))
        self.expected = [oracle.root(key) for key in keys]
        if n:
            sim.call_at(times[0], _Injector(sim, net, log, times, srcs, keys), 0)
        say(f"routing {n:,} lookups from {len(live):,} live nodes")
        if n:
            say.phase("lookups", n, lambda: n - log.outstanding, "lookups")
            # Generous horizon: every lookup either arrives or is given up by its hops' retries.
            sim.run(until=t + 120.0)
            say.end()
        self.phases["lookups"] = time.perf_counter() - mark

    def check(self) -> RouteResult:
        params, sim, log = self.params, self.sim, self.log
        wall = self.elapsed()
        n = params.lookups
        delivered = [lid for lid in range(n) if log.at[lid] != -1]
        correct = sum(1 for lid in delivered if log.at[lid] == self.expected[lid])
        hops = sorted(log.hops[lid] for lid in delivered)
        lat = [log.latency[lid] * 1000.0 for lid in delivered]
        # The one reference cycle of the run (each node's recorder -> log -> simulator ->
        # nodes): broken, reference counting frees the run's millions of objects on return, and
        # the cyclic collector, enabled again, does not have to walk them all to find out.
        log.sim = None
        return RouteResult(
            nodes=params.nodes,
            lookups=n,
            correct_root_fraction=correct / n if n else 1.0,
            mean_hops=sum(hops) / len(hops) if hops else 0.0,
            p99_hops=percentile(hops, 0.99),
            max_hops=hops[-1] if hops else 0,
            mean_latency_ms=sum(lat) / len(lat) if lat else 0.0,
            sim_messages=sim.stats.messages,
            wall_s=wall,
            sim_messages_per_s=sim.stats.messages / wall if wall > 0 else 0.0,
            wall_phases_s=self.phases,
            seed=params.seed,
            **dht_fields_of(params),
            bootstrap=params.bootstrap,
            keepalives=params.keepalives_on(),
            latency_model=self.model.describe(),
            failed_nodes=len(self.failed),
            live_nodes=len(self.live),
            delivered=len(delivered),
            duplicate_deliveries=log.duplicates,
            log16_n=math.log(params.nodes, 16) if params.nodes > 1 else 0.0,
            lookup_phase={
                "messages": sim.stats.messages - self.before[0],
                "bytes": sim.stats.bytes - self.before[1],
            },
            sim_bytes=sim.stats.bytes,
            sim_time_s=sim.now,
            messages_by_type=sim.stats.types_json(),
            join=self.join,
            leafset_mismatches_after_repair=self.mismatches_after_repair,
        )


#: ``Route().run(...)`` as JSON (tests, benchmarks).
run_route = Route.run_json


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
WALL_FIELDS = RouteResult.WALL_FIELDS
