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

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from dht.errors import LocalProtocolError
from dht.node import PastryNode
from pubsub.node import (
    EventDelivered,
    OverlayConfig,
    PieceStored,
    SubscriptionInstalled,
)
from pubsub.peer import OverlayPeer
from pubsub.schema import THESIS_SCHEMA, Schema, SchemaRegistry
from pubsub.subscription import Subscription
from sim import runlog
from sim.engine import Simulator
from sim.latency import latency_model
from sim.options import require_finite
from sim.overlay import ROOT_CACHE, PastryOverlay, dht_config, dht_fields
from sim.percentiles import percentile
from sim.progress import as_progress
from sim.streams import stream
from sim.workload import THESIS_WORKLOAD, CsvEvents, Workload, default_params

INSTALL_KINDS = ("ProbeSub", "InstallAck", "LeafUpdate", "TransferSub")
PROBE_KINDS = ("ProbePub", "ProbePubMulticast")
DELIVERY_KINDS = ("EventDelivery", "LbddDelivery", "DeliveryMulticast")
#: Fields that depend on the machine, not on the seed.
WALL_FIELDS = ("wall_s", "sim_messages_per_s", "wall_phases_s")


@dataclass(frozen=True, slots=True)
class ThesisParams:
    nodes: int = 1000
    subs_per_node: float = 5.0
    events: int = 10_000
    seed: int = 1
    lb: bool = False
    partial: str = "strict"
    events_from: str | None = None
    #: A CSV cell marking an absent value: a number (``-200``) or a word (``NA``).
    missing: float | str | None = None
    #: Which CSV columns to publish and under what attribute names: ``"temp C=temp,RH"``
    #: (docs/simulator.md); None: every numeric column, names made valid.
    columns: str | None = None
    latency: str = "synthetic"
    capacity: tuple[int, int] = (10, 30)
    sub_gap_ms: float = 2000.0
    pub_gap_ms: float = 1000.0
    overlay: OverlayConfig = field(default_factory=OverlayConfig)
    dht: str = "pastry"
    lookup: str = "iterative"
    #: Kademlia iterative lookups: roots remembered per node (0: a lookup per message).
    root_cache: int = ROOT_CACHE

    def check(self) -> None:
        dht_config(self.dht, lookup=self.lookup, root_cache=self.root_cache)
        require_finite(
            {
                "--subs-per-node": self.subs_per_node,
                "--missing": self.missing,
                "--p": self.overlay.p,
                "--cutoff": self.overlay.cutoff,
                "sub_gap_ms": self.sub_gap_ms,
                "pub_gap_ms": self.pub_gap_ms,
            }
        )
        if self.nodes < 1:
            raise LocalProtocolError("--nodes must be at least 1")
        if self.subs_per_node <= 0 or self.events < 0:
            raise LocalProtocolError("--subs-per-node must be > 0 and --events >= 0")
        if self.partial not in ("strict", "lenient"):
            raise LocalProtocolError("--partial must be 'strict' or 'lenient'")
        lo, hi = self.capacity
        if not 1 <= lo <= hi:
            raise LocalProtocolError("capacity range must satisfy 1 <= low <= high")
        if self.sub_gap_ms <= 0 or self.pub_gap_ms <= 0:
            raise LocalProtocolError("inter-arrival times must be positive")
        if self.missing is not None and self.events_from is None:
            raise LocalProtocolError("--missing needs --events-from")
        if self.columns is not None and self.events_from is None:
            raise LocalProtocolError("--columns needs --events-from")


#: The setting of the thesis' own run (Chapter 4, Tables 4.1-4.3), the only one its figures
#: (331 ms, 333 ms, 14.32 B, 1.32 KB) can be compared with.
THESIS_SETTING = ThesisParams()
THESIS_SUBSCRIPTIONS = 5_000


def thesis_comparison(params: ThesisParams, subscriptions: int, events: int) -> dict[str, Any]:
    """Whether a run's figures may be set next to the thesis' (``applies``), and if not, each
    way its setting differs from the thesis' (``differences``, readable). The latency model is
    not among them: the thesis' King data set is not available, and latencies are compared in
    units of the mean RTT too (docs/overlay.md)."""
    t = THESIS_SETTING
    diffs: list[str] = []
    if params.nodes != t.nodes:
        diffs.append(f"{params.nodes:,} nodes, thesis ran {t.nodes:,}")
    if subscriptions != THESIS_SUBSCRIPTIONS:
        diffs.append(f"{subscriptions:,} subscriptions, thesis installed {THESIS_SUBSCRIPTIONS:,}")
    if events != t.events:
        diffs.append(f"{events:,} events, thesis published {t.events:,}")
    if params.events_from is not None:
        diffs.append(
            f"events from {Path(params.events_from).name}, thesis generated its own (Table 4.3)"
        )
    if params.dht != t.dht:
        diffs.append(f"{params.dht} DHT, thesis ran {t.dht}")
    if params.lb != t.lb:
        diffs.append("load balancing on, thesis' figures are without it")
    o, to = params.overlay, t.overlay
    if o.probe != to.probe:
        diffs.append(f"{o.probe} probes, thesis probed by {to.probe}")
    if o.delivery != to.delivery:
        diffs.append(f"{o.delivery} delivery, thesis delivered by {to.delivery}")
    if (o.min_level, o.max_level, o.p) != (to.min_level, to.max_level, to.p):
        diffs.append(
            f"probe levels {o.min_level}-{o.max_level} with p {o.p:g}, thesis used "
            f"{to.min_level}-{to.max_level} with p {to.p:g}"
        )
    if params.capacity != t.capacity:
        diffs.append(f"capacity {params.capacity}, thesis drew {t.capacity}")
    if (params.sub_gap_ms, params.pub_gap_ms) != (t.sub_gap_ms, t.pub_gap_ms):
        diffs.append("arrival gaps differ from the thesis' (2 s, 1 s)")
    return {"applies": not diffs, "differences": diffs}


class Oracle:
    """Brute force: which subscriptions match an event. Independent of the overlay."""

    def __init__(self, schema: Schema, subs: Sequence[Subscription]) -> None:
        n_attr = len(schema.attributes)
        n = len(subs)
        self.strict = schema.partial == "strict"
        self.present = np.zeros((n_attr, n), dtype=bool)
        self.lo = np.full((n_attr, n), -np.inf)
        self.hi = np.full((n_attr, n), np.inf)
        self.lo_open = np.zeros((n_attr, n), dtype=bool)
        self.hi_open = np.zeros((n_attr, n), dtype=bool)
        for j, sub in enumerate(subs):
            for a, r in sub.ranges:
                self.present[a, j] = True
                self.lo[a, j] = r.lo
                self.hi[a, j] = r.hi
                self.lo_open[a, j] = r.lo_open
                self.hi_open[a, j] = r.hi_open
        self.n = n

    def matches(self, values: Sequence[float | None]) -> np.ndarray:
        ok = np.ones(self.n, dtype=bool)
        for a, v in enumerate(values):
            present = self.present[a]
            if v is None:
                if self.strict:
                    ok &= ~present
                continue
            above = (v > self.lo[a]) | ((v == self.lo[a]) & ~self.lo_open[a])
            below = (v < self.hi[a]) | ((v == self.hi[a]) & ~self.hi_open[a])
            ok &= ~present | (above & below)
        return np.flatnonzero(ok)


def _summary(values: list[float], with_max: bool = False) -> dict[str, float]:
    vals = sorted(values)
    out = {
        "mean": sum(vals) / len(vals) if vals else 0.0,
        "p50": percentile(vals, 0.50),
        "p70": percentile(vals, 0.70),
        "p90": percentile(vals, 0.90),
        "p99": percentile(vals, 0.99),
    }
    if with_max:
        out["max"] = vals[-1] if vals else 0.0
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


class _Collector:
    """Receives the cores' application events."""

    def __init__(self, index_of_id: dict[bytes, int]) -> None:
        self.index_of_id = index_of_id
        self.installed: dict[tuple[int, int], float] = {}
        self.stored: dict[tuple[int, int], float] = {}
        #: Per event: first receipt time of each (subscriber index, sid); repeats are counted.
        self.received: dict[int, dict[tuple[int, int], float]] = {}
        self.repeats = 0
        #: Receipts beyond the first per (eid, subscriber index, sid); only the run log needs them.
        self.extra: dict[tuple[int, int, int], int] = {}
        self.expect_installs = 0
        self.sim: Simulator | None = None

    def __call__(self, i: int, events: list[Any]) -> None:
        for ev in events:
            if isinstance(ev, EventDelivered):
                eid = ev.event.eid
                received = self.received.get(eid)
                if received is None:
                    received = self.received[eid] = {}
                for sid in ev.sids:
                    key = (i, sid)
                    if key in received:
                        self.repeats += 1
                        k3 = (eid, i, sid)
                        self.extra[k3] = self.extra.get(k3, 0) + 1
                    else:
                        received[key] = ev.now
            elif isinstance(ev, PieceStored):
                key = (self.index_of_id[ev.subscriber], ev.sid)
                prev = self.stored.get(key)
                if prev is None or ev.now > prev:
                    self.stored[key] = ev.now
            elif isinstance(ev, SubscriptionInstalled):
                self.installed[(i, ev.sid)] = ev.now
                if len(self.installed) == self.expect_installs and self.sim is not None:
                    self.sim.stop()


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


def run_thesis(
    params: ThesisParams,
    progress: Callable[[str], None] | None = None,
    out: Path | str | None = None,
    *,
    force: bool = False,
) -> dict[str, Any]:
    """Run the experiment; with ``out``, also write its run log there (docs/run-logs.md)."""
    params.check()
    out_dir = runlog.prepare_dir(out, force=force) if out is not None else None
    wall0 = time.perf_counter()
    say = as_progress(progress, "thesis")
    seed = params.seed

    # ---- workload
    csv: CsvEvents | None = None
    if params.events_from:
        csv = CsvEvents.load(params.events_from, missing=params.missing, columns=params.columns)
        for note in csv.notes():
            say(note)
        schema = csv.schema.with_partial(params.partial)
        workload = Workload(schema, default_params(schema), stream(seed, "workload-layout"))
    else:
        schema = THESIS_SCHEMA.with_partial(params.partial)
        workload = Workload(schema, THESIS_WORKLOAD, stream(seed, "workload-layout"))
    registry = SchemaRegistry()
    registry.add(schema)

    # ---- overlay
    model = latency_model(params.latency, seed)
    sim = Simulator(model, stream(seed, "network"), progress=say.engine_hook)
    cap_rng = stream(seed, "capacity")
    proto_rng = stream(seed, "overlay")
    # The thesis' evaluation has no churn, so no replication (its cost is measured by the churn
    # experiment instead, which switches failure detection on).
    overlay_cfg = replace(params.overlay, load_balancing=params.lb, replicas=1)

    capacities: list[int] = []

    def make_core(i: int, node: PastryNode) -> OverlayPeer:
        cap = cap_rng.randint(*params.capacity)
        capacities.append(cap)
        return OverlayPeer(node, schemas=registry, capacity=cap, rng=proto_rng, overlay=overlay_cfg)

    # No churn in this experiment: leaf-set keep-alives and hop acknowledgements would only
    # cost wall time (and acks would double the routed messages); the thesis' simulator had
    # neither. Churn experiments switch both on.
    dht_cfg = dht_config(
        params.dht, lookup=params.lookup, root_cache=params.root_cache, failure_free=True
    )
    net = PastryOverlay(sim, seed, config=dht_cfg, core_factory=make_core)
    indices = net.create(params.nodes)
    net.oracle_bootstrap(indices)
    peers: list[OverlayPeer] = net.cores  # type: ignore[assignment]
    index_of_id = {net.space.to_bytes(p.id): i for i, p in enumerate(net.peers)}
    collector = _Collector(index_of_id)
    collector.sim = sim
    sim.on_events = collector
    messages_log = None
    trees = runlog.TreeSnapshots()
    if out_dir is not None:
        messages_log = runlog.MessageLog(out_dir / "messages.parquet")
        sim.message_log = messages_log.record
    phases = {"setup": time.perf_counter() - wall0}
    say(
        f"{params.nodes} nodes ({model.name}); schema {schema.name} ({schema.partial}); "
        f"load balancing {'on' if params.lb else 'off'}"
    )

    # ---- stage 1: subscriptions
    mark = time.perf_counter()
    n_subs = max(1, round(params.nodes * params.subs_per_node))
    sub_rng = stream(seed, "subscriptions")
    subs: list[Subscription] = []
    owners: list[tuple[int, int]] = []
    called: dict[tuple[int, int], float] = {}
    t = sim.now
    plan = []
    for _ in range(n_subs):
        t += sub_rng.expovariate(1000.0 / params.sub_gap_ms)
        plan.append((t, sub_rng.randrange(params.nodes), workload.subscription(sub_rng)))

    def do_subscribe(i: int, sub: Subscription) -> None:
        sid = peers[i].overlay.subscribe(sub, sim.now)
        subs.append(sub)
        owners.append((i, sid))
        called[(i, sid)] = sim.now
        sim.poke(i)

    for at, i, sub in plan:
        sim.call_at(at, do_subscribe, i, sub)
    collector.expect_installs = n_subs
    say(f"installing {n_subs:,} subscriptions")
    say.phase("installing", n_subs, lambda: len(collector.installed), "subs")
    sim.run(until=t + 600.0)
    installed = len(collector.installed)
    say.end()
    # Let the last splits' transfers and leaf-table updates land before publishing.
    sim.run(until=sim.now + 60.0)
    phases["install"] = time.perf_counter() - mark
    if out_dir is not None:
        trees.take("installed", (p.overlay for p in peers))
    install_messages = sim.stats.messages
    install_bytes = sim.stats.bytes

    # ---- stage 2: events
    mark = time.perf_counter()
    oracle = Oracle(schema, subs)
    pub_rng = stream(seed, "events")
    if csv is not None:
        event_values = csv.events[: params.events]
    else:
        event_values = [workload.event(pub_rng) for _ in range(params.events)]
    expected: dict[int, list[tuple[int, int]]] = {}
    published: dict[int, float] = {}
    publisher: dict[int, int] = {}

    def do_publish(k: int, i: int) -> None:
        values = event_values[k]
        eid = peers[i].overlay.publish(schema.name, values, sim.now)
        published[eid] = sim.now
        publisher[eid] = i
        expected[eid] = [owners[j] for j in oracle.matches(values)]
        sim.poke(i)

    t = sim.now
    for k in range(len(event_values)):
        t += pub_rng.expovariate(1000.0 / params.pub_gap_ms)
        sim.call_at(t, do_publish, k, pub_rng.randrange(params.nodes))
    collector.expect_installs = -1
    say(f"publishing {len(event_values):,} events")
    say.phase("publishing", len(event_values), lambda: len(published), "events")
    sim.run()
    say.end()
    phases["publish"] = time.perf_counter() - mark
    wall = time.perf_counter() - wall0

    # ---- check against the oracle
    duplicates = collector.repeats
    expected_total = missed = false_pos = received_total = 0
    delivery_lat: list[float] = []
    for eid, pairs in expected.items():
        got = collector.received.get(eid, {})
        want = set(pairs)
        expected_total += len(want)
        received_total += len(got)
        t0 = published[eid]
        for pair, first in got.items():
            if pair in want:
                delivery_lat.append((first - t0) * 1000.0)
            else:
                false_pos += 1
        missed += sum(1 for pair in want if pair not in got)
    # Notifications for events nobody published (cannot happen unless ids collide) are false.
    false_pos += sum(len(v) for e, v in collector.received.items() if e not in expected)
    install_lat = [
        (collector.stored[k] - called[k]) * 1000.0 for k in called if k in collector.stored
    ]
    n_events = len(event_values)
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
        for k in (
            "jumps",
            "parked",
            "park_timeouts",
            "lost",
            "duplicate_probes",
            "splits",
            "repeated_deliveries",
        ):
            totals[k] = totals.get(k, 0) + getattr(st, k)

    mean_rtt = model.mean_rtt_ms()
    inst = _summary(install_lat)
    deliv = _summary(delivery_lat, with_max=True)
    sim_messages = sim.stats.messages
    result = {
        "nodes": params.nodes,
        "subscriptions": n_subs,
        "installed": installed,
        "events": n_events,
        "expected_deliveries": expected_total,
        "deliveries": received_total + duplicates,
        "missed": missed,
        "duplicates": duplicates,
        "false_positives": false_pos,
        "install_latency_ms": inst,
        "delivery_latency_ms": deliv,
        "install_latency_rtt": {k: v / mean_rtt for k, v in inst.items()},
        "delivery_latency_rtt": {k: v / mean_rtt for k, v in deliv.items()},
        "install_bytes_per_sub_per_node_mean": _bandwidth(install_bw)["mean"],
        "install_bytes_per_sub_per_node": _bandwidth(install_bw),
        "publish_bytes_per_event_per_node": _bandwidth(publish_bw),
        "probe_bytes_per_event_per_node": _bandwidth(probe_bw),
        "delivery_bytes_per_event_per_node": _bandwidth(delivery_bw),
        "messages_by_type": sim.stats.types_json(),
        "tree": {"leaves": leaves, "internal": internal, "max_depth": max_depth},
        "overlay": totals,
        "seed": seed,
        **dht_fields(params.dht, params.lookup, params.root_cache),
        "dht_totals": _dht_totals(net.nodes),
        "lb": params.lb,
        "partial": params.partial,
        "probe": overlay_cfg.probe,
        "delivery": overlay_cfg.delivery,
        "schema": schema.name,
        "events_from": params.events_from,
        "thesis_comparison": thesis_comparison(params, n_subs, n_events),
        "latency_model": model.describe(),
        "mean_rtt_ms": mean_rtt,
        "install_phase_messages": install_messages,
        # Every message of each phase, the DHT's own (Kademlia's lookups) included, per
        # subscription and per event: what the two substrates are compared on.
        "install_phase_bytes": install_bytes,
        "bytes_per_subscription": install_bytes / n_subs,
        "messages_per_subscription": install_messages / n_subs,
        "bytes_per_event": (sim.stats.bytes - install_bytes) / n_events if n_events else 0.0,
        "messages_per_event": ((sim_messages - install_messages) / n_events if n_events else 0.0),
        "sim_messages": sim_messages,
        "sim_time_s": sim.now,
        "wall_s": wall,
        "sim_messages_per_s": sim_messages / wall if wall > 0 else 0.0,
        "wall_phases_s": phases,
    }
    if csv is not None:
        # The columns published, skipped (and why) and renamed: what the figures are about.
        result["csv"] = csv.describe()
    if out_dir is not None and messages_log is not None:
        say(f"writing the run log to {out_dir}")
        messages_log.close()
        sim.message_log = None
        runlog.write_nodes(out_dir, sim, capacities)
        runlog.write_installs(out_dir, called, collector.stored)
        copies = {k: 1 + n for k, n in collector.extra.items()}
        runlog.write_deliveries(out_dir, expected, publisher, published, collector.received, copies)
        trees.take("end", (p.overlay for p in peers))
        trees.write(out_dir)
        logged = asdict(params)
        logged.update(probe=overlay_cfg.probe, delivery=overlay_cfg.delivery, scenario="thesis")
        runlog.write_run(out_dir, "thesis", logged, result)
    return result
