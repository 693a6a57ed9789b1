"""``rangecast sim run thesis``: the thesis' evaluation (Chapter 4), checked by an oracle.

Stages (thesis 4.1.1): the overlay forms (oracle bootstrap); subscriptions arrive one by one
(exponential gaps, mean 2 s; subscriber a random node; capacity rand(10, 30) per node); once all
are installed and the tree has settled, events are published (exponential gaps, mean 1 s;
publisher a random node). Every event's matching subscriptions are computed by brute force over
the whole subscription set (numpy, independent of the overlay's own matching) and compared with
what the subscribers received.

Figures follow the thesis' definitions:

* install latency: from the ``subscribe`` call to the moment the last piece is stored at its leaf;
* delivery latency: from the ``publish`` call to the delivery at the subscriber, per delivered
  (subscription, event) pair;
* install bandwidth per node: bytes the node sent as ProbeSub, InstallAck (the thesis'
  InsertSubMessage), LeafUpdate and TransferSub, divided by the number of subscriptions;
* publish bandwidth per node: bytes the node sent as ProbePub (and ProbePubMulticast) and
  EventDelivery, divided by the number of events; probe bandwidth leaves EventDelivery out (as
  the thesis does when comparing multicast with unicast and load balancing).

Bytes are real encoded sizes of whole messages, DHT routing headers included (the thesis measured
Java serialisation of each message). DHT overhead (hop acks) is reported separately under
``messages_by_type``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from rangecast.dht.errors import LocalProtocolError
from rangecast.pubsub.node import (
    OverlayConfig,
)
from rangecast.pubsub.schema import SchemaRegistry
from rangecast.pubsub.subscription import Subscription
from rangecast.sim import comparable, runlog
from rangecast.sim.deliveries import Collector, Deliveries
from rangecast.sim.engine import Simulator
from rangecast.sim.event_source import (
    EventSource,
    check_csv_params,
    columns_param,
    events_from_param,
    missing_param,
)
from rangecast.sim.network import DhtConfig, dht_config
from rangecast.sim.options import positive_float
from rangecast.sim.percentiles import ordered_sum, percentile
from rangecast.sim.progress import steps
from rangecast.sim.pubsub_scenario import MatchOracle, PubSubScenario
from rangecast.sim.scenario import (
    LATENCY_HELP,
    OnDht,
    Option,
    TimedResult,
    Verdict,
    dht_fields_of,
    flat,
    group,
    optional,
    param,
    refuse_beyond_memory,
    substrate_title,
)
from rangecast.sim.workloads import WorkloadSpec, paper_plan

INSTALL_KINDS = ("ProbeSub", "InstallAck", "LeafUpdate", "TransferSub")
PROBE_KINDS = ("ProbePub", "ProbePubMulticast")
DELIVERY_KINDS = ("EventDelivery", "LbddDelivery", "DeliveryMulticast")


#: Peak resident memory of a thesis run (``/usr/bin/time -v``, 100 events, seed 1): 318,676 KiB
#: at 5,000 nodes, 983,156 at 20,000, 1,883,748 at 40,000 (5 subscriptions per node; linear,
#: 45.8 KB a node) and 476,088 at 5,000 nodes with 10 per node (6.4 KB a subscription), with
#: the interpreter's ~93 MiB. More events add receipts (~20 bytes each, docs/simulator.md): the
#: estimate is the least a run needs, for the up-front check of a size that cannot fit.
THESIS_BASE_BYTES = 93 * 2**20
THESIS_BYTES_PER_NODE = 13_550
THESIS_BYTES_PER_SUB = 6_450


@dataclass(frozen=True, slots=True)
class ThesisParams(OnDht):
    nodes: int = param(1000, "overlay size")
    subs_per_node: float = param(5.0, "subscriptions per node on average", type=positive_float)
    events: int = param(10_000, "events to publish")
    seed: int = param(1, "seed of every random stream")
    lb: bool = param(False, "load balancing with a cut-off line per attribute", style="on-off")
    partial: str = param(
        "strict",
        "rule for events that lack an attribute a subscription constrains (generated events "
        "lack none, so both rules give the same run: it matters with --events-from and "
        "--missing)",
        choices=("strict", "lenient"),
    )
    events_from: str | None = events_from_param()
    missing: float | str | None = missing_param()
    columns: str | None = columns_param()
    latency: str = param("synthetic", LATENCY_HELP)
    workload: str = param(
        "thesis",
        "thesis: the thesis' workload (Tables 4.2-4.3; a random publisher per event); "
        "clustered: POP/GRAPE's (--publishers long-lived publishers, one stock symbol each, 5%% "
        "of the subscribers high-rated at one node), the broker systems' work in sim compare",
        choices=("thesis", "clustered"),
    )
    publishers: int = param(10, "clustered: publishers, one symbol each")
    sub_brokers: int = param(
        0, "clustered: the X nodes with subscribers (the hot one and X-1 at random); 0: all"
    )
    capacity: tuple[int, int] = (10, 30)
    sub_gap_ms: float = 2000.0
    pub_gap_ms: float = 1000.0
    overlay: OverlayConfig = group(
        OverlayConfig,
        plan_exclude=("load_balancing",),  # ``lb`` above
        min_level=Option("RndRegionProbe min level"),
        max_level=Option("RndRegionProbe max level"),
        p=Option("RndRegionProbe probability"),
        cutoff=Option("load-balancing cut-off c as a fraction of each domain"),
        probe=Option(
            "event probes: one message per target tree node (the thesis' baseline), or grouped "
            "per next hop (prefix-grouped application-layer multicast)",
            choices=("unicast", "multicast"),
        ),
        forward=Option(
            "how an internal tree node sends a probe on to the leaves of its leaf table: as "
            "--probe says (the thesis' Program 3.3), or one routed message per leaf whatever "
            "--probe says (its ProbePubMessage 'is currently sent by unicast instead of "
            "multicast', section 4.2.1)",
            choices=("probe", "unicast"),
        ),
        delivery=Option(
            "notifications: one message per matched subscriber, grouped per next hop towards "
            "the subscribers' ids, or down an LBDD tree in which subscribers relay",
            choices=("unicast", "multicast", "lbdd"),
        ),
    )

    def check(self) -> None:
        self.check_common(nodes=self.nodes)
        if self.subs_per_node > 0:
            need = THESIS_BASE_BYTES + self.nodes * (
                THESIS_BYTES_PER_NODE + self.subs_per_node * THESIS_BYTES_PER_SUB
            )
            per = (THESIS_BYTES_PER_NODE + self.subs_per_node * THESIS_BYTES_PER_SUB) / 1000
            refuse_beyond_memory(
                self.nodes,
                need,
                f"about {per:,.0f} KB a node with {self.subs_per_node:g} subscriptions each, "
                "measured at 5,000-40,000 nodes; more with many events",
            )
        # The overlay as the run will build it: --cutoff is checked only with --lb on.
        replace(self.overlay, load_balancing=self.lb)
        if self.subs_per_node <= 0 or self.events < 0:
            raise LocalProtocolError("--subs-per-node must be > 0 and --events >= 0")
        if self.partial not in ("strict", "lenient"):
            raise LocalProtocolError("--partial must be 'strict' or 'lenient'")
        lo, hi = self.capacity
        if not 1 <= lo <= hi:
            raise LocalProtocolError("capacity range must satisfy 1 <= low <= high")
        if self.sub_gap_ms <= 0 or self.pub_gap_ms <= 0:
            raise LocalProtocolError("inter-arrival times must be positive")
        check_csv_params(self)
        if self.workload != "thesis":
            if not 1 <= self.publishers <= self.nodes // 2:
                raise LocalProtocolError(
                    f"--publishers {self.publishers}: must be in [1, --nodes/2]"
                )
            if not 0 <= self.sub_brokers <= self.nodes:
                raise LocalProtocolError(
                    f"--sub-brokers {self.sub_brokers}: 0 (all) or in [1, --nodes]"
                )
            if self.events_from is not None:
                raise LocalProtocolError(
                    f"--events-from {self.events_from}: needs --workload thesis"
                )


def thesis_comparison(params: ThesisParams, subscriptions: int, events: int) -> dict[str, Any]:
    """Whether a run's figures may be set next to the thesis' (``applies``), and if not, each
    way its setting differs (``differences``): the one rule, ``sim.comparable``, which the
    report and the reproduction's page apply too."""
    setting = dataclasses.asdict(params)
    return comparable.thesis_comparison(setting, subscriptions, events).as_dict()


def _summary(values: Sequence[float] | np.ndarray, with_max: bool = False) -> dict[str, float]:
    vals = np.sort(np.asarray(values, dtype=np.float64))
    out = {
        "mean": ordered_sum(vals) / len(vals) if len(vals) else 0.0,
        "p50": percentile(vals, 0.50),
        "p70": percentile(vals, 0.70),
        "p90": percentile(vals, 0.90),
        "p99": percentile(vals, 0.99),
    }
    if with_max:
        out["max"] = float(vals[-1]) if len(vals) else 0.0
    return out


def _per_node(sim: Simulator, kinds: Sequence[str], divisor: float) -> list[float]:
    n = len(sim.cores)
    totals = [0] * n
    for kind in kinds:
        tc = sim.stats.by_type.get(kind)
        if tc is not None:
            for i, b in enumerate(tc.per_node):
                totals[i] += b
    return [t / divisor for t in totals] if divisor else [0.0] * n


def _bandwidth(per_node: list[float]) -> dict[str, float]:
    vals = sorted(per_node)
    top = vals[-20:]
    return {
        "mean": sum(vals) / len(vals) if vals else 0.0,
        "p70": percentile(vals, 0.70),
        "p90": percentile(vals, 0.90),
        "max": vals[-1] if vals else 0.0,
        "top20_mean": sum(top) / len(top) if top else 0.0,
    }


def _dht_totals(nodes: Sequence[Any]) -> dict[str, int]:
    """What the substrate did, summed over the nodes (Kademlia adds its lookup counters)."""
    names = (
        "delivered",
        "forwarded",
        "reroutes",
        "dropped",
        "lookups",
        "queries",
        "lookup_rounds",
        "root_cache_hits",
    )
    present = [k for k in names if hasattr(nodes[0].stats, k)] if nodes else []
    return {k: sum(getattr(n.stats, k) for n in nodes) for k in present}


@dataclass(kw_only=True, slots=True)
class ThesisResult(TimedResult):
    subscriptions: int
    installed: int
    events: int
    #: The oracle's verdict.
    verdict: Verdict = flat()
    # ---- latencies (ms, and in units of the mean RTT) and bandwidth per node
    install_latency_ms: dict[str, float]
    delivery_latency_ms: dict[str, float]
    install_latency_rtt: dict[str, float]
    delivery_latency_rtt: dict[str, float]
    install_bytes_per_sub_per_node_mean: float
    install_bytes_per_sub_per_node: dict[str, float]
    publish_bytes_per_event_per_node: dict[str, float]
    probe_bytes_per_event_per_node: dict[str, float]
    delivery_bytes_per_event_per_node: dict[str, float]
    messages_by_type: dict[str, Any]
    tree: dict[str, int]
    overlay: dict[str, int]
    dht_totals: dict[str, int]
    # ---- the setting
    lb: bool
    partial: str
    probe: str
    delivery: str
    schema: str
    events_from: str | None
    thesis_comparison: dict[str, Any]
    mean_rtt_ms: float
    # ---- traffic per phase
    install_phase_messages: int
    # Every message of each phase, the DHT's own (Kademlia's lookups) included, per
    # subscription and per event: what the two substrates are compared on.
    install_phase_bytes: int
    bytes_per_subscription: float
    messages_per_subscription: float
    bytes_per_event: float
    messages_per_event: float
    #: One-way propagation delays of every message of the event phase, summed, per event (ms):
    #: traffic weighed by latency (NetStats.delay_ms).
    traffic_ms_per_event: float
    #: Stored pieces the matching leaves hold, summed over an event's matches, per event: the
    #: entries the overlay tests an event against (a broker's are its PRT scans).
    matchings_per_event: float
    sim_messages: int
    sim_time_s: float
    sim_messages_per_s: float
    wall_phases_s: dict[str, float]
    #: With ``--events-from``: the columns published, skipped (and why) and renamed.
    csv: dict[str, Any] | None = optional()

    def succeeded(self) -> bool:
        return self.verdict.succeeded()

    def summary(self) -> str:
        r = self.json()
        lm = r["latency_model"]
        il, dl = r["install_latency_ms"], r["delivery_latency_ms"]
        pb, pr = r["publish_bytes_per_event_per_node"], r["probe_bytes_per_event_per_node"]
        dv = r["delivery_bytes_per_event_per_node"]
        tree = r["tree"]
        verdict = (
            "every matching subscriber got every event exactly once"
            if self.succeeded()
            else "MISMATCH against the oracle"
        )
        cmp = r["thesis_comparison"]

        def thesis(text: str) -> str:
            # The thesis' figures belong next to a run of the thesis' own setting only.
            return f"   (thesis: {text})" if cmp["applies"] else ""

        lines = [
            f"Content-based pub/sub, thesis workload: {r['nodes']:,} nodes on "
            f"{substrate_title(r)}, {r['subscriptions']:,} subscriptions, {r['events']:,} events, "
            f"seed {r['seed']}",
            f"  schema {r['schema']} ({r['partial']}), load balancing "
            f"{'on' if r['lb'] else 'off'}, latency model {lm['name']} "
            f"(mean RTT {lm['mean_rtt_ms']:.0f} ms)",
        ]
        if "csv" in r:
            c = r["csv"]
            lines.append(
                f"  events from        {c['path']}: {c['events']:,} events; columns used: "
                + ", ".join(c["columns_used"])
            )
            if c["skipped_columns"]:
                lines.append(
                    "  skipped columns    "
                    + "; ".join(f"{k['name']} ({k['reason']})" for k in c["skipped_columns"])
                )
            if c["renamed_columns"]:
                lines.append(
                    "  renamed columns    "
                    + ", ".join(
                        f"{k['column']!r} -> {k['attribute']}" for k in c["renamed_columns"]
                    )
                )
        lines += [
            f"  oracle             {r['expected_deliveries']:,} expected deliveries; "
            f"missed {r['missed']}, duplicates {r['duplicates']}, "
            f"false positives {r['false_positives']}: {verdict}",
            f"  install latency    mean {il['mean']:.0f} ms, p50 {il['p50']:.0f}, "
            f"p90 {il['p90']:.0f}, p99 {il['p99']:.0f}" + thesis("mean 331 ms"),
            f"  delivery latency   mean {dl['mean']:.0f} ms, p50 {dl['p50']:.0f}, "
            f"p90 {dl['p90']:.0f}, max {dl['max']:.0f}" + thesis("mean 333 ms"),
            f"  install bandwidth  {r['install_bytes_per_sub_per_node_mean']:.2f} bytes per "
            f"subscription per node" + thesis("14.32"),
            f"  publish bandwidth  mean {pb['mean']:.0f} B per event per node, "
            f"p90 {pb['p90']:.0f}, max {pb['max']:.0f}" + thesis("mean 1.32 KB"),
            f"  probe bandwidth    mean {pr['mean']:.0f} B per event per node, "
            f"top-20 {pr['top20_mean']:.0f}, max {pr['max']:.0f}   ({r['probe']} probes)",
            f"  delivery bandwidth mean {dv['mean']:.0f} B per event per node, "
            f"top-20 {dv['top20_mean']:.0f}, max {dv['max']:.0f}   ({r['delivery']} delivery)",
            f"  per event          {r['messages_per_event']:.1f} messages, "
            f"{r['bytes_per_event']:,.0f} bytes, latency-weighted traffic "
            f"{r['traffic_ms_per_event']:,.0f} ms, {r['matchings_per_event']:,.0f} matchings",
            f"  2d-tree            {tree['leaves']:,} leaves, {tree['internal']:,} internal, "
            f"max depth {tree['max_depth']}",
            f"  simulated messages {r['sim_messages']:,}; wall {r['wall_s']:.1f} s "
            f"({r['sim_messages_per_s']:,.0f} messages/s)",
        ]
        if not cmp["applies"]:
            lines.append("  no thesis comparison: " + "; ".join(cmp["differences"]))
        return "\n".join(lines)


class Thesis(PubSubScenario[ThesisParams, ThesisResult]):
    """``inspect`` is called once the events have been delivered, before the oracle check, with
    the run's live state by name (``bench/memory.py`` measures where the memory goes)."""

    name = "thesis"
    command = ("run", "thesis")
    help = "the thesis' evaluation workload, every delivery checked by a brute-force oracle"
    params_type = ThesisParams

    def __init__(self, inspect: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.inspect = inspect

    def setup(self) -> None:
        params, say = self.params, self.say
        self.source = source = EventSource.load(
            params, self.stream("workload-layout"), partial=params.partial, say=say
        )
        self.csv, self.schema, self.workload_gen = source.csv, source.schema, source.gen
        # The thesis' evaluation has no churn, so no replication (its cost is measured by the
        # churn experiment instead, which switches failure detection on).
        self.overlay_cfg = replace(params.overlay, load_balancing=params.lb, replicas=1)
        super().setup()
        self.phases["setup"] = self.elapsed()
        say(
            f"{params.nodes} nodes ({self.model.name}); schema {self.schema.name} "
            f"({self.schema.partial}); load balancing {'on' if params.lb else 'off'}"
        )

    def prepare_workload(self) -> None:
        # The thesis' own bookkeeping: deliveries in arrays, not the harness' sets (10^8 pairs).
        params = self.params
        index_of_id = {self.net.space.to_bytes(p.id): i for i, p in enumerate(self.net.peers)}
        #: A broker paper's workload (``--workload clustered``), drawn over every node as the
        #: broker systems draw it over their brokers; None: the thesis workload.
        self.paper = (
            paper_plan(WorkloadSpec.of(params), range(params.nodes))
            if params.workload != "thesis"
            else None
        )
        self.n_subs = (
            len(self.paper.subs)
            if self.paper is not None
            else max(1, round(params.nodes * params.subs_per_node))
        )
        self.deliveries = Deliveries(self.n_subs)
        self.collector = Collector(index_of_id, self.deliveries)
        self.collector.sim = self.sim
        self.sim.on_events = self.collector
        self.trees = runlog.TreeSnapshots()

    def dht_config(self) -> DhtConfig:
        # No churn in this experiment: leaf-set keep-alives and hop acknowledgements would
        # only cost wall time (and acks would double the routed messages); the thesis'
        # simulator had neither. Churn experiments switch both on.
        p = self.params
        return dht_config(p.dht, lookup=p.lookup, root_cache=p.root_cache, failure_free=True)

    def stack(self) -> dict[str, Any]:
        registry = SchemaRegistry()
        registry.add(self.schema)
        return self.pubsub_stack(registry, self.overlay_cfg)

    def subscription_plan(self, start: float) -> list[tuple[float, int, Subscription]]:
        """The subscriptions as (time, subscriber node, subscription), from ``start`` (s): the
        thesis workload's draws, or the paper workload's (``--workload``)."""
        params = self.params
        if self.paper is not None:
            return [(start + t, i, sub) for t, i, sub in self.paper.subs]
        sub_rng = self.stream("subscriptions")
        t = start
        plan = []
        # Seconds at 10^5 nodes, before the install phase's own bar.
        for _ in steps(self.say, range(self.n_subs), "drawing subscriptions", unit="subs"):
            t += sub_rng.expovariate(1000.0 / params.sub_gap_ms)
            plan.append(
                (t, sub_rng.randrange(params.nodes), self.workload_gen.subscription(sub_rng))
            )
        return plan

    def record_published(self, eid: int, matches: np.ndarray) -> None:
        """Hand the oracle's answer for a just-published event to the record (a subclass that
        measures the event phase hooks in here)."""
        self.deliveries.published(eid, matches)

    def event_plan(self) -> tuple[list[tuple[float | None, ...]], list[tuple[float, int]]]:
        """The events' values, and per event (gap after the previous one in s, publisher
        node): the thesis workload's draws, in their order (values first), or the paper
        workload's."""
        params = self.params
        if self.paper is not None:
            return list(self.paper.events), list(self.paper.pubs)
        pub_rng = self.stream("events")
        values = self.source.events(params.events, pub_rng)
        pubs = []
        for _ in range(len(values)):
            gap = pub_rng.expovariate(1000.0 / params.pub_gap_ms)
            pubs.append((gap, pub_rng.randrange(params.nodes)))
        return values, pubs

    def workload(self) -> None:
        sim, say, peers = self.sim, self.say, self.peers
        collector, deliveries, n_subs = self.collector, self.deliveries, self.n_subs
        # ---- stage 1: subscriptions
        mark = time.perf_counter()
        self.subs = subs = list[Subscription]()
        self.called = called = dict[tuple[int, int], float]()
        plan = self.subscription_plan(sim.now)
        t = plan[-1][0] if plan else sim.now

        def do_subscribe(i: int, sub: Subscription) -> None:
            sid = peers[i].overlay.subscribe(sub, sim.now)
            subs.append(sub)
            deliveries.subscribed(i, sid)
            called[(i, sid)] = sim.now
            sim.poke(i)

        for at, i, sub in plan:
            sim.call_at(at, do_subscribe, i, sub)
        del plan  # the queue holds each call's arguments until it runs
        collector.expect_installs = n_subs
        say(f"installing {n_subs:,} subscriptions")
        say.phase("installing", n_subs, lambda: len(collector.installed), "subs")
        sim.run(until=t + 600.0)
        self.installed = len(collector.installed)
        say.end()
        # Let the last splits' transfers and leaf-table updates land before publishing.
        sim.run(until=sim.now + 60.0)
        self.phases["install"] = time.perf_counter() - mark
        if self.out_dir is not None:
            self.trees.take("installed", (p.overlay for p in peers))
        self.install_traffic = (sim.stats.messages, sim.stats.bytes)
        self.install_delay_ms = sim.stats.delay_ms

        # ---- stage 2: events
        mark = time.perf_counter()
        schema = self.schema
        self.oracle = oracle = MatchOracle(schema, subs)
        self.event_values, pubs = self.event_plan()
        event_values = self.event_values
        self.published = published = dict[int, float]()
        self.publisher = publisher = dict[int, int]()

        def do_publish(k: int, i: int) -> None:
            values = event_values[k]
            eid = peers[i].overlay.publish(schema.name, values, sim.now)
            published[eid] = sim.now
            publisher[eid] = i
            self.record_published(eid, oracle.matches(values))
            sim.poke(i)

        t = sim.now
        for k, (gap, i) in enumerate(pubs):
            t += gap
            sim.call_at(t, do_publish, k, i)
        collector.expect_installs = -1
        say(f"publishing {len(event_values):,} events")
        say.phase("publishing", len(event_values), lambda: len(published), "events")
        sim.run()
        say.end()
        self.phases["publish"] = time.perf_counter() - mark
        self.wall = self.elapsed()
        if self.inspect is not None:
            self.inspect(
                {
                    "sim": sim,
                    "net": self.net,
                    "peers": peers,
                    "collector": collector,
                    "deliveries": deliveries,
                    "oracle": oracle,
                    "subscriptions": subs,
                    "event_values": event_values,
                    "called": called,
                    "published": published,
                    "publisher": publisher,
                    "messages_log": self.messages_log,
                    "trees": self.trees,
                }
            )

    def check(self) -> ThesisResult:
        params, sim, peers, n_subs = self.params, self.sim, self.peers, self.n_subs
        mark = time.perf_counter()
        deliveries_log = None
        if self.out_dir is not None:
            deliveries_log = runlog.DeliveryLog(self.out_dir / "deliveries.parquet")
        counts, delivery_lat = self.deliveries.check(
            self.published, self.publisher, deliveries_log, self.say
        )
        if deliveries_log is not None:
            deliveries_log.close()
        self.phases["check"] = time.perf_counter() - mark
        stored = self.collector.stored
        install_lat = [(stored[k] - self.called[k]) * 1000.0 for k in self.called if k in stored]
        n_events = len(self.event_values)
        install_bw = _per_node(sim, INSTALL_KINDS, n_subs)
        publish_bw = _per_node(sim, PROBE_KINDS + DELIVERY_KINDS, n_events)
        probe_bw = _per_node(sim, PROBE_KINDS, n_events)
        delivery_bw = _per_node(sim, DELIVERY_KINDS, n_events)

        leaves = internal = max_depth = 0
        totals: dict[str, int] = {}
        for p in peers:
            for _, node in p.overlay.tree_nodes():
                if node.is_leaf:
                    leaves += 1
                else:
                    internal += 1
                max_depth = max(max_depth, node.tid.depth)
            st = p.overlay.stats
            for counter in (
                "jumps",
                "parked",
                "park_timeouts",
                "lost",
                "duplicate_probes",
                "splits",
                "repeated_deliveries",
            ):
                totals[counter] = totals.get(counter, 0) + getattr(st, counter)

        mean_rtt = self.model.mean_rtt_ms()
        inst = _summary(install_lat)
        deliv = _summary(delivery_lat, with_max=True)
        sim_messages = sim.stats.messages
        install_messages, install_bytes = self.install_traffic
        wall = self.wall
        return ThesisResult(
            nodes=params.nodes,
            subscriptions=n_subs,
            installed=self.installed,
            events=n_events,
            verdict=Verdict(
                expected_deliveries=counts["expected"],
                deliveries=counts["received"] + counts["duplicates"],
                missed=counts["missed"],
                duplicates=counts["duplicates"],
                false_positives=counts["false_positives"],
            ),
            install_latency_ms=inst,
            delivery_latency_ms=deliv,
            install_latency_rtt={k: v / mean_rtt for k, v in inst.items()},
            delivery_latency_rtt={k: v / mean_rtt for k, v in deliv.items()},
            install_bytes_per_sub_per_node_mean=_bandwidth(install_bw)["mean"],
            install_bytes_per_sub_per_node=_bandwidth(install_bw),
            publish_bytes_per_event_per_node=_bandwidth(publish_bw),
            probe_bytes_per_event_per_node=_bandwidth(probe_bw),
            delivery_bytes_per_event_per_node=_bandwidth(delivery_bw),
            messages_by_type=sim.stats.types_json(),
            tree={"leaves": leaves, "internal": internal, "max_depth": max_depth},
            overlay=totals,
            seed=params.seed,
            **dht_fields_of(params),
            dht_totals=_dht_totals(self.net.nodes),
            lb=params.lb,
            partial=params.partial,
            probe=self.overlay_cfg.probe,
            delivery=self.overlay_cfg.delivery,
            schema=self.schema.name,
            events_from=params.events_from,
            thesis_comparison=thesis_comparison(params, n_subs, n_events),
            latency_model=self.model.describe(),
            mean_rtt_ms=mean_rtt,
            install_phase_messages=install_messages,
            install_phase_bytes=install_bytes,
            bytes_per_subscription=install_bytes / n_subs,
            messages_per_subscription=install_messages / n_subs,
            bytes_per_event=(sim.stats.bytes - install_bytes) / n_events if n_events else 0.0,
            messages_per_event=((sim_messages - install_messages) / n_events if n_events else 0.0),
            traffic_ms_per_event=(
                (sim.stats.delay_ms - self.install_delay_ms) / n_events if n_events else 0.0
            ),
            matchings_per_event=(
                sum(p.overlay.stats.scanned for p in peers) / n_events if n_events else 0.0
            ),
            sim_messages=sim_messages,
            sim_time_s=sim.now,
            wall_s=wall,
            sim_messages_per_s=sim_messages / wall if wall > 0 else 0.0,
            wall_phases_s=self.phases,
            csv=self.csv.describe() if self.csv is not None else None,
        )

    def logged_params(self) -> dict[str, Any]:
        logged = super().logged_params()
        logged.update(
            probe=self.overlay_cfg.probe,
            forward=self.overlay_cfg.forward,
            delivery=self.overlay_cfg.delivery,
        )
        return logged

    def write_more_logs(self, out_dir: Path) -> None:
        runlog.write_installs(out_dir, self.called, self.collector.stored)
        self.trees.take("end", (p.overlay for p in self.peers))
        self.trees.write(out_dir)


def run_thesis(
    params: ThesisParams,
    progress: Callable[[str], None] | None = None,
    out: Path | str | None = None,
    *,
    force: bool = False,
    inspect: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """``Thesis(inspect).run(...)`` as JSON (docs/run-logs.md)."""
    return Thesis(inspect).run(params, progress, out, force=force).json()


#: Fields that depend on the machine, not on the seed.
WALL_FIELDS = ThesisResult.WALL_FIELDS
