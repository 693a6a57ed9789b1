"""``rangecast sim churn``: the overlay under failures, checked by an oracle.

Stages: the overlay forms (oracle bootstrap, failure detection on: keep-alives and hop acks);
thesis-workload subscriptions arrive from random peers; the tree settles and its nodes are
replicated on their replica sets; then a fraction of the peers crashes at once (no goodbye);
failure detection, leaf-set repair and replica promotion run for ``repair_s``; then events are
published from random live peers. Every event's expected receivers are the live subscribers whose
subscriptions match it (brute force over the subscription set).

Reported: ``subscriptions_installed`` (acknowledged), ``subscriptions_lost`` (live subscribers'
subscriptions with a piece that no live peer holds any more, as primary or replica),
``delivery_recall`` (deliveries / expected, live subscribers, events published after the
repair), ``duplicates``, ``false_positives``, the repair traffic (replication messages sent from
the crash on) and, for the audit, how many replica sets died whole (``whole_sets_lost``) and
what they held.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from rangecast.dht.errors import LocalProtocolError
from rangecast.dht.node import PastryNode
from rangecast.dht.wire import codec_for
from rangecast.pubsub.node import EventDelivered, OverlayConfig, SubscriptionInstalled
from rangecast.pubsub.peer import OverlayPeer
from rangecast.pubsub.schema import THESIS_SCHEMA, SchemaRegistry
from rangecast.pubsub.subscription import Subscription
from rangecast.sim import runlog
from rangecast.sim.engine import Simulator
from rangecast.sim.latency import latency_model
from rangecast.sim.network import ROOT_CACHE, SimNetwork, dht_config, dht_fields
from rangecast.sim.options import require_finite
from rangecast.sim.progress import Progress, as_progress
from rangecast.sim.streams import stream
from rangecast.sim.thesis_experiment import MatchOracle
from rangecast.sim.workload import THESIS_WORKLOAD, Workload

REPLICA_KINDS = ("ReplicaPut", "ReplicaOp", "ReplicaDrop")
#: The DHT's own repair traffic: Pastry's leaf-set and row requests; Kademlia's lookups (which,
#: with iterative routing, also carry every routed message's first steps).
DHT_REPAIR_KINDS = (
    "LeafSetRequest",
    "LeafSetReply",
    "RowRequest",
    "RowReply",
    "FindNode",
    "FoundNodes",
)
WALL_FIELDS = ("wall_s",)


@dataclass(frozen=True, slots=True)
class ChurnParams:
    nodes: int = 2000
    fail_fraction: float = 0.2
    replicas: int = 3
    seed: int = 1
    subs_per_node: float = 1.0
    events: int = 1000
    #: Gaps between arrivals (exponential means, ms).
    sub_gap_ms: float = 20.0
    pub_gap_ms: float = 50.0
    #: Simulated seconds between installing and the crash (replication settles), and between
    #: the crash and the first event (failure detection and repair).
    settle_s: float = 30.0
    repair_s: float = 60.0
    latency: str = "synthetic"
    #: Peers that join (through the join protocol) while the events are being published.
    joins: int = 0
    #: Continuous churn: every peer lives an exponential session of this median (simulated
    #: seconds), then crashes and is replaced by a newcomer joining through the join protocol;
    #: events are published for ``duration_s``. None: the one-off crash of ``fail_fraction``.
    session_median_s: float | None = None
    duration_s: float = 7200.0
    #: Continuous churn publishes for hours: one event per second on average.
    churn_pub_gap_ms: float = 1000.0
    capacity: tuple[int, int] = (10, 30)
    overlay: OverlayConfig = field(default_factory=OverlayConfig)
    dht: str = "pastry"
    lookup: str = "iterative"
    #: Kademlia iterative lookups: roots remembered per node (0: a lookup per message).
    root_cache: int = ROOT_CACHE

    def check(self) -> None:
        dht_config(self.dht, lookup=self.lookup, root_cache=self.root_cache)
        require_finite(
            {
                "--fail-fraction": self.fail_fraction,
                "--subs-per-node": self.subs_per_node,
                "--repair-s": self.repair_s,
                "--session-median": self.session_median_s,
                "--duration-s": self.duration_s,
                "settle_s": self.settle_s,
                "sub_gap_ms": self.sub_gap_ms,
                "pub_gap_ms": self.pub_gap_ms,
                "churn_pub_gap_ms": self.churn_pub_gap_ms,
            }
        )
        if self.nodes < 2:
            raise LocalProtocolError("--nodes must be >= 2")
        if not 0.0 <= self.fail_fraction < 1.0:
            raise LocalProtocolError("--fail-fraction must be in [0, 1)")
        if not 1 <= self.replicas <= 9:
            raise LocalProtocolError("--replicas must be in [1, 9]")
        if self.subs_per_node <= 0 or self.events < 0:
            raise LocalProtocolError("need --subs-per-node > 0 and --events >= 0")
        if self.repair_s < 0 or self.settle_s < 0:
            raise LocalProtocolError("need --repair-s >= 0")
        if self.joins < 0:
            raise LocalProtocolError("--joins must be >= 0")
        if self.session_median_s is not None and self.session_median_s <= 0:
            raise LocalProtocolError("--session-median must be > 0")
        if self.duration_s <= 0:
            raise LocalProtocolError("--duration-s must be > 0")


class _Deliveries:
    def __init__(self) -> None:
        self.installed: dict[tuple[int, int], float] = {}
        #: (eid) -> {(subscriber index, sid)}
        self.received: dict[int, set[tuple[int, int]]] = {}
        self.repeats = 0

    def __call__(self, i: int, events: list[Any]) -> None:
        for ev in events:
            if isinstance(ev, EventDelivered):
                got = self.received.setdefault(ev.event.eid, set())
                for sid in ev.sids:
                    if (i, sid) in got:
                        self.repeats += 1
                    else:
                        got.add((i, sid))
            elif isinstance(ev, SubscriptionInstalled):
                self.installed[(i, ev.sid)] = ev.now


def _kinds(sim: Simulator, kinds: tuple[str, ...]) -> tuple[int, int]:
    msgs = byts = 0
    for k in kinds:
        tc = sim.stats.by_type.get(k)
        if tc is not None:
            msgs += tc.messages
            byts += tc.bytes
    return msgs, byts


def _overlay(params: ChurnParams, say: Progress) -> tuple[Simulator, SimNetwork, Any]:
    """The simulator and an empty overlay of replicating peers with failure detection on."""
    seed = params.seed
    registry = SchemaRegistry((THESIS_SCHEMA,))
    model = latency_model(params.latency, seed)
    sim = Simulator(
        model,
        stream(seed, "network"),
        codec=codec_for(*OverlayPeer.TABLES),
        progress=say.engine_hook,
    )
    cap_rng = stream(seed, "capacity")
    overlay_cfg = replace(params.overlay, replicas=params.replicas)

    def make_core(i: int, node: PastryNode) -> OverlayPeer:
        cap = cap_rng.randint(*params.capacity)
        return OverlayPeer(node, schemas=registry, capacity=cap, rng=node.rng, overlay=overlay_cfg)

    cfg = dht_config(params.dht, lookup=params.lookup, root_cache=params.root_cache)
    return sim, SimNetwork(sim, seed, config=cfg, core_factory=make_core), model


def _start_log(sim: Simulator, out_dir: Path | None) -> runlog.MessageLog | None:
    if out_dir is None:
        return None
    log = runlog.MessageLog(out_dir / "messages.parquet", sim.codec)
    sim.message_log = log.record
    return log


def _finish_log(
    out_dir: Path | None,
    log: runlog.MessageLog | None,
    sim: Simulator,
    params: ChurnParams,
    result: dict[str, Any],
    say: Progress,
) -> None:
    """The run log of a churn run: messages, nodes (``alive`` tells who crashed) and run.json
    (docs/run-logs.md)."""
    if out_dir is None or log is None:
        return
    say(f"writing the run log to {out_dir}")
    log.close()
    sim.message_log = None
    runlog.write_nodes(out_dir, sim)
    runlog.write_run(out_dir, "churn", {**asdict(params), "scenario": "churn"}, result)


def run_churn(
    params: ChurnParams,
    progress: Callable[[str], None] | None = None,
    out: Path | str | None = None,
    *,
    force: bool = False,
) -> dict[str, Any]:
    """Run the experiment; with ``out``, also write its run log there (docs/run-logs.md)."""
    params.check()
    out_dir = runlog.prepare_dir(out, force=force) if out is not None else None
    if params.session_median_s is not None:
        return run_continuous(params, progress, out_dir)
    wall0 = time.perf_counter()
    say = as_progress(progress, "churn")
    seed = params.seed
    schema = THESIS_SCHEMA
    workload = Workload(schema, THESIS_WORKLOAD, stream(seed, "workload-layout"))
    sim, net, model = _overlay(params, say)
    messages_log = _start_log(sim, out_dir)
    indices = net.create(params.nodes)
    net.oracle_bootstrap(indices)
    joiners = list(net.create(params.joins)) if params.joins else []
    peers: list[OverlayPeer] = net.cores  # type: ignore[assignment]
    got = _Deliveries()
    sim.on_events = got
    say(f"{params.nodes} nodes ({model.name}), k = {params.replicas}")

    # ---- subscriptions
    n_subs = max(1, round(params.nodes * params.subs_per_node))
    sub_rng = stream(seed, "subscriptions")
    subs: list[Subscription] = []
    owners: list[tuple[int, int]] = []

    def do_subscribe(i: int, sub: Subscription) -> None:
        sid = peers[i].overlay.subscribe(sub, sim.now)
        subs.append(sub)
        owners.append((i, sid))
        sim.poke(i)

    t = sim.now
    for _ in range(n_subs):
        t += sub_rng.expovariate(1000.0 / params.sub_gap_ms)
        who = sub_rng.randrange(params.nodes)
        sim.call_at(t, do_subscribe, who, workload.subscription(sub_rng))
    say(f"installing {n_subs:,} subscriptions")
    say.phase("installing", n_subs, lambda: len(got.installed), "subs")
    sim.run(until=t + params.settle_s)
    say.end()
    installed = sum(1 for o in owners if o in got.installed)
    install_msgs = _kinds(sim, REPLICA_KINDS)

    # ---- the crash
    crash_rng = stream(seed, "crash")
    n_fail = round(params.fail_fraction * params.nodes)
    crashed = set(crash_rng.sample(range(params.nodes), n_fail))
    whole_sets, pieces_in_dead_sets = _whole_sets_lost(peers, net, crashed, params.replicas)
    before_repl = _kinds(sim, REPLICA_KINDS)
    before_dht = _kinds(sim, DHT_REPAIR_KINDS)
    for i in sorted(crashed):
        sim.crash(i)
    say(f"crashed {n_fail} peers at once; repairing for {params.repair_s:.0f} simulated s")
    t0 = sim.now
    say.phase("repairing", params.repair_s, lambda: sim.now - t0, "sim s")
    sim.run(until=sim.now + params.repair_s)
    say.end()
    live = [i for i in range(params.nodes) if i not in crashed]

    # ---- events
    pub_rng = stream(seed, "events")
    live_subs = [j for j, (i, _) in enumerate(owners) if i not in crashed]
    oracle = MatchOracle(schema, [subs[j] for j in live_subs])
    expected: dict[int, list[tuple[int, int]]] = {}

    def do_publish(values: tuple[float | None, ...], i: int) -> None:
        eid = peers[i].overlay.publish(schema.name, values, sim.now)
        expected[eid] = [owners[live_subs[j]] for j in oracle.matches(values)]
        sim.poke(i)

    def do_join(j: int, contact: int) -> None:
        peers[j].dht.join(sim.addrs[contact], sim.now)
        sim.poke(j)

    t = sim.now
    for _ in range(params.events):
        t += pub_rng.expovariate(1000.0 / params.pub_gap_ms)
        sim.call_at(t, do_publish, workload.event(pub_rng), live[pub_rng.randrange(len(live))])
    # Joins spread over the publication: the tree nodes they become root of change hands while
    # events are probing them.
    join_rng = stream(seed, "joins")
    for j in joiners:
        at = sim.now + join_rng.uniform(0.0, max(t - sim.now, 1.0))
        sim.call_at(at, do_join, j, live[join_rng.randrange(len(live))])
    say(
        f"publishing {params.events:,} events"
        + (f", {len(joiners)} peers joining" if joiners else "")
    )
    say.phase("publishing", params.events, lambda: len(expected), "events")
    sim.run(until=t + 30.0)
    say.end()

    # ---- the checks
    want_total = hit = false_pos = 0
    for eid, pairs in expected.items():
        want = set(pairs)
        have = got.received.get(eid, set())
        want_total += len(want)
        hit += len(want & have)
        false_pos += len(have - want)
    lost = _lost_subscriptions(peers, crashed, owners)
    after_repl = _kinds(sim, REPLICA_KINDS)
    after_dht = _kinds(sim, DHT_REPAIR_KINDS)
    totals: dict[str, int] = {}
    joined = sum(1 for j in joiners if peers[j].dht.state.value == "ready")
    for i in live + joiners:
        st = peers[i].overlay.stats
        for k in (
            "promoted",
            "handed_off",
            "replica_puts",
            "replica_ops",
            "recreated",
            "refreshes",
            "lost",
            "jumps",
        ):
            totals[k] = totals.get(k, 0) + getattr(st, k)
    wall = time.perf_counter() - wall0
    result = {
        "nodes": params.nodes,
        "replicas": params.replicas,
        "fail_fraction": params.fail_fraction,
        "crashed": n_fail,
        "subscriptions": n_subs,
        "subscriptions_installed": installed,
        "subscriptions_live": len(live_subs),
        "subscriptions_lost": lost,
        "events": params.events,
        "expected_deliveries": want_total,
        "deliveries": hit,
        "delivery_recall": hit / want_total if want_total else 1.0,
        "duplicates": got.repeats,
        "false_positives": false_pos,
        "repair_messages": after_repl[0] - before_repl[0],
        "repair_bytes": after_repl[1] - before_repl[1],
        "dht_repair_messages": after_dht[0] - before_dht[0],
        "dht_repair_bytes": after_dht[1] - before_dht[1],
        "replication_messages_while_installing": install_msgs[0],
        "replication_bytes_while_installing": install_msgs[1],
        "joins": len(joiners),
        "joins_completed": joined,
        "whole_sets_lost": whole_sets,
        "pieces_in_lost_sets": pieces_in_dead_sets,
        "overlay": totals,
        "seed": seed,
        **dht_fields(params.dht, params.lookup, params.root_cache),
        "latency_model": model.describe(),
        "sim_messages": sim.stats.messages,
        "sim_time_s": sim.now,
        "wall_s": wall,
    }
    _finish_log(out_dir, messages_log, sim, params, result, say)
    return result


def _holders(peers: list[OverlayPeer]) -> dict[tuple[str, Any], list[int]]:
    """For every tree node, the peers holding it (as primary or replica)."""
    out: dict[tuple[str, Any], list[int]] = {}
    for i, p in enumerate(peers):
        for key in p.overlay.nodes:
            out.setdefault(key, []).append(i)
        for key in p.overlay.replicas:
            out.setdefault(key, []).append(i)
    return out


def _whole_sets_lost(
    peers: list[OverlayPeer], net: SimNetwork, crashed: set[int], k: int
) -> tuple[int, int]:
    """Tree nodes all of whose holders are about to crash, and the pieces they hold."""
    sets = pieces = 0
    for key, holders in _holders(peers).items():
        if all(h in crashed for h in holders):
            sets += 1
            for h in holders:
                node = peers[h].overlay.nodes.get(key) or peers[h].overlay.replicas.get(key)
                if node is not None and node.index is not None:
                    pieces += len(node.index)
                    break
    return sets, pieces


def _lost_subscriptions(
    peers: list[OverlayPeer], crashed: set[int], owners: list[tuple[int, int]]
) -> int:
    """Live subscribers' subscriptions with a piece no live peer holds at a leaf."""
    held: set[tuple[bytes, int, int, int]] = set()
    for i, p in enumerate(peers):
        if i in crashed:
            continue
        for table in (p.overlay.nodes, p.overlay.replicas):
            for node in table.values():
                if node.index is not None:
                    for s in node.index:
                        held.add((s.subscriber.id, s.sid, s.gen, s.piece))
    lost = 0
    for i, sid in owners:
        if i in crashed:
            continue
        ov = peers[i].overlay
        rec = ov._subs.get(sid)
        if rec is None:
            continue
        me = ov.dht.me.handle.id
        if any((me, sid, piece.gen, piece.piece) not in held for piece in rec.pieces):
            lost += 1
    return lost


def run_continuous(
    params: ChurnParams,
    progress: Callable[[str], None] | None = None,
    out_dir: Path | None = None,
) -> dict[str, Any]:
    """Continuous churn: sessions end in crashes, newcomers replace them (arrivals balance
    departures), events flow all along. A (subscription, event) pair is expected when the
    subscription was installed before the event was published and its subscriber lived until
    ``grace_s`` after the publication (long enough to receive it)."""
    assert params.session_median_s is not None
    wall0 = time.perf_counter()
    say = as_progress(progress, "churn")
    seed = params.seed
    grace_s = 30.0
    schema = THESIS_SCHEMA
    workload = Workload(schema, THESIS_WORKLOAD, stream(seed, "workload-layout"))
    sim, net, model = _overlay(params, say)
    messages_log = _start_log(sim, out_dir)
    net.oracle_bootstrap(net.create(params.nodes))
    peers: list[OverlayPeer] = net.cores  # type: ignore[assignment]
    got = _Deliveries()
    sim.on_events = got
    died: dict[int, float] = {}
    rate = math.log(2) / params.session_median_s  # exponential sessions with this median
    life_rng = stream(seed, "sessions")
    sub_rng = stream(seed, "subscriptions")
    subs: list[Subscription] = []
    owners: list[tuple[int, int]] = []
    arrivals = departures = 0
    say(
        f"{params.nodes} nodes ({model.name}), k = {params.replicas}, "
        f"median session {params.session_median_s:.0f} s"
    )

    def subscribe(i: int) -> None:
        if not sim.alive[i] or peers[i].dht.state.value != "ready":
            return
        sub = workload.subscription(sub_rng)
        sid = peers[i].overlay.subscribe(sub, sim.now)
        subs.append(sub)
        owners.append((i, sid))
        sim.poke(i)

    def end_session(i: int) -> None:
        nonlocal arrivals, departures
        sim.crash(i)
        died[i] = sim.now
        departures += 1
        live = [j for j in range(len(peers)) if sim.alive[j] and j not in died]
        (j,) = net.create(1)
        peers[j].dht.join(sim.addrs[live[life_rng.randrange(len(live))]], sim.now)
        sim.poke(j)
        arrivals += 1
        # The newcomer subscribes once it has joined, and lives its own session.
        sim.call_at(sim.now + 5.0, subscribe, j)
        sim.call_at(sim.now + life_rng.expovariate(rate), end_session, j)

    # Subscriptions of the initial peers, then the churn starts.
    t = sim.now
    for i in range(params.nodes):
        t += sub_rng.expovariate(1000.0 / params.sub_gap_ms)
        sim.call_at(t, subscribe, i)
    sim.run(until=t + params.settle_s)
    start = sim.now
    for i in range(params.nodes):
        sim.call_at(start + life_rng.expovariate(rate), end_session, i)

    pub_rng = stream(seed, "events")
    published: list[tuple[int, float, tuple[float | None, ...]]] = []

    def publish() -> None:
        live = [j for j in range(len(peers)) if sim.alive[j] and j not in died]
        i = live[pub_rng.randrange(len(live))]
        if peers[i].dht.state.value != "ready":
            return
        values = workload.event(pub_rng)
        eid = peers[i].overlay.publish(schema.name, values, sim.now)
        published.append((eid, sim.now, values))
        sim.poke(i)

    t = start
    while True:
        t += pub_rng.expovariate(1000.0 / params.churn_pub_gap_ms)
        if t > start + params.duration_s:
            break
        sim.call_at(t, publish)
    say(f"{params.duration_s:.0f} simulated seconds of churn and events")
    say.phase("churn", params.duration_s + grace_s, lambda: sim.now - start, "sim s")
    sim.run(until=start + params.duration_s + grace_s)
    say.end()

    # ---- expected pairs: installed before publication, subscriber alive through the grace
    index = {o: j for j, o in enumerate(owners)}
    installed_at = {index[o]: at for o, at in got.installed.items() if o in index}
    want_total = hit = false_pos = 0
    inf = math.inf
    oracle = MatchOracle(schema, subs)
    for eid, at, values in published:
        have = got.received.get(eid, set())
        want: set[tuple[int, int]] = set()
        matching = set(oracle.matches(values).tolist())
        for j in matching:
            inst = installed_at.get(j)
            if inst is None or inst > at or died.get(owners[j][0], inf) < at + grace_s:
                continue
            want.add(owners[j])
        want_total += len(want)
        hit += len(want & have)
        # A delivery to a subscription outside ``want`` is false only if it does not match.
        for o in have - want:
            j = index.get(o)
            if j is None or j not in matching:
                false_pos += 1
    totals: dict[str, int] = {}
    for p in peers:
        st = p.overlay.stats
        for k in ("promoted", "handed_off", "replica_puts", "replica_ops", "lost"):
            totals[k] = totals.get(k, 0) + getattr(st, k)
    repl = _kinds(sim, REPLICA_KINDS)
    wall = time.perf_counter() - wall0
    result = {
        "nodes": params.nodes,
        "replicas": params.replicas,
        "session_median_s": params.session_median_s,
        "duration_s": params.duration_s,
        "departures": departures,
        "arrivals": arrivals,
        "subscriptions": len(subs),
        "subscriptions_installed": len(installed_at),
        # Subscriptions of peers alive at the end with a piece no live peer holds.
        "subscriptions_lost": _lost_subscriptions(peers, set(died), owners),
        "events": len(published),
        "expected_deliveries": want_total,
        "deliveries": hit,
        "delivery_recall": hit / want_total if want_total else 1.0,
        "duplicates": got.repeats,
        "false_positives": false_pos,
        "repair_messages": repl[0],
        "repair_bytes": repl[1],
        "overlay": totals,
        "seed": seed,
        **dht_fields(params.dht, params.lookup, params.root_cache),
        "latency_model": model.describe(),
        "sim_messages": sim.stats.messages,
        "sim_time_s": sim.now,
        "wall_s": wall,
    }
    _finish_log(out_dir, messages_log, sim, params, result, say)
    return result
