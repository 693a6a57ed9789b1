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
from dataclasses import dataclass, field, replace
from typing import Any

from rangecast.dht.errors import LocalProtocolError
from rangecast.pubsub.node import OverlayConfig
from rangecast.pubsub.peer import OverlayPeer
from rangecast.sim.engine import Simulator
from rangecast.sim.network import SimNetwork
from rangecast.sim.options import non_negative_float, positive_float
from rangecast.sim.pubsub_scenario import (
    MatchOracle,
    PubSubScenario,
    ReplicatedResult,
    lost_subscriptions,
)
from rangecast.sim.scenario import OnDht, param, require

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


@dataclass(frozen=True, slots=True)
class ChurnParams(OnDht):
    nodes: int = param(2000, "overlay size")
    fail_fraction: float = param(0.2, "fraction of peers that crash at once")
    replicas: int = param(3, "copies of every tree node (1: no replication)")
    seed: int = param(1, "seed of every random stream")
    subs_per_node: float = param(1.0, "subscriptions per node on average", type=positive_float)
    events: int = param(1000, "events published after repair")
    #: Gaps between arrivals (exponential means, ms).
    sub_gap_ms: float = 20.0
    pub_gap_ms: float = 50.0
    #: Simulated seconds between installing and the crash (replication settles), and between
    #: the crash and the first event (failure detection and repair).
    settle_s: float = 30.0
    repair_s: float = param(
        60.0, "simulated seconds of repair after the crash", type=non_negative_float
    )
    #: Peers that join (through the join protocol) while the events are being published.
    joins: int = param(0, "peers that join while the events are published")
    #: Continuous churn: every peer lives an exponential session of this median (simulated
    #: seconds), then crashes and is replaced by a newcomer joining through the join protocol;
    #: events are published for ``duration_s``. None: the one-off crash of ``fail_fraction``.
    session_median_s: float | None = param(
        None,
        "continuous churn: sessions of this median end in crashes, newcomers replace them",
        flag="--session-median",
        type=positive_float,
        metavar="SECONDS",
    )
    duration_s: float = param(
        7200.0, "continuous churn: simulated seconds of events", type=positive_float
    )
    latency: str = param("synthetic", "'synthetic', 'planetlab' or a path")
    #: Continuous churn publishes for hours: one event per second on average.
    churn_pub_gap_ms: float = 1000.0
    capacity: tuple[int, int] = (10, 30)
    overlay: OverlayConfig = field(default_factory=OverlayConfig)

    def check(self) -> None:
        self.check_common()
        if self.nodes < 2:
            raise LocalProtocolError("--nodes must be >= 2")
        if not 0.0 <= self.fail_fraction < 1.0:
            raise LocalProtocolError("--fail-fraction must be in [0, 1)")
        if not 1 <= self.replicas <= 9:
            raise LocalProtocolError("--replicas must be in [1, 9]")
        require(
            self,
            ("subs_per_node", lambda v: v > 0, "must be more than 0"),
            ("events", lambda v: v >= 0, "must be at least 0"),
            ("repair_s", lambda v: v >= 0, "must be at least 0"),
            ("settle_s", lambda v: v >= 0, "must be at least 0"),
        )
        if self.joins < 0:
            raise LocalProtocolError("--joins must be >= 0")
        if self.session_median_s is not None and self.session_median_s <= 0:
            raise LocalProtocolError("--session-median must be > 0")
        if self.duration_s <= 0:
            raise LocalProtocolError("--duration-s must be > 0")


@dataclass(kw_only=True, slots=True)
class ChurnResult(ReplicatedResult):
    """What both kinds of churn run report."""

    subscriptions: int
    subscriptions_installed: int
    #: Live subscribers' subscriptions with a piece no live peer holds any more.
    subscriptions_lost: int
    events: int
    expected_deliveries: int
    deliveries: int
    delivery_recall: float
    duplicates: int
    false_positives: int
    #: Replication traffic (from the crash on, or all of it under continuous churn).
    repair_messages: int
    repair_bytes: int
    overlay: dict[str, int]
    sim_messages: int
    sim_time_s: float

    def succeeded(self) -> bool:
        return self.subscriptions_lost + self.duplicates + self.false_positives == 0


@dataclass(kw_only=True, slots=True)
class CrashResult(ChurnResult):
    """A fraction of the peers crashed at once."""

    fail_fraction: float
    crashed: int
    subscriptions_live: int
    dht_repair_messages: int
    dht_repair_bytes: int
    replication_messages_while_installing: int
    replication_bytes_while_installing: int
    joins: int
    joins_completed: int
    #: Tree nodes all of whose holders crashed, and the pieces they held.
    whole_sets_lost: int
    pieces_in_lost_sets: int

    def summary(self) -> str:
        promoted = self.overlay.get("promoted", 0)
        return (
            f"{self.nodes} peers, {self.crashed} crashed at once, k = {self.replicas}\n"
            f"subscriptions: {self.subscriptions_installed:,} installed, "
            f"{self.subscriptions_live:,} of live subscribers, {self.subscriptions_lost} lost\n"
            f"deliveries after repair: {self.deliveries:,} of {self.expected_deliveries:,} "
            f"(recall {self.delivery_recall:.6f}), {self.duplicates} duplicates, "
            f"{self.false_positives} false positives\n"
            f"replica repair: {self.repair_messages:,} messages, {self.repair_bytes:,} bytes; "
            f"{promoted} replicas promoted; replica sets lost whole: {self.whole_sets_lost}\n"
            f"wall {self.wall_s:.1f} s"
        )


def _kinds(sim: Simulator, kinds: tuple[str, ...]) -> tuple[int, int]:
    msgs = byts = 0
    for k in kinds:
        tc = sim.stats.by_type.get(k)
        if tc is not None:
            msgs += tc.messages
            byts += tc.bytes
    return msgs, byts


class ChurnBase(PubSubScenario[ChurnParams, ChurnResult]):
    """Set-up of the churn runs: replicating pub/sub peers on a DHT with failure detection on
    (keep-alives and hop acks), thesis-workload subscriptions and events."""

    name = "churn"
    reportable = False
    params_type = ChurnParams

    def setup(self) -> None:
        super().setup()
        # The churn run log's nodes table has always left capacities out (-1).
        self.capacities = None

    def overlay_config(self) -> OverlayConfig:
        return replace(self.params.overlay, replicas=self.params.replicas)

    def overlay_totals(self, peers: list[int], counters: tuple[str, ...]) -> dict[str, int]:
        totals: dict[str, int] = {}
        for i in peers:
            st = self.peers[i].overlay.stats
            for k in counters:
                totals[k] = totals.get(k, 0) + getattr(st, k)
        return totals


class Churn(ChurnBase):
    """A fraction of the peers crashes at once after the subscriptions are installed; events
    follow the repair. With ``session_median_s``: continuous churn instead (ContinuousChurn)."""

    command = ("churn",)
    help = "crash a fraction of the peers at once; check that replication loses nothing"

    @classmethod
    def scenario_for(cls, params: ChurnParams) -> type[ChurnBase]:
        return cls if params.session_median_s is None else ContinuousChurn

    def bootstrap(self) -> None:
        super().bootstrap()
        p = self.params
        self.joiners = list(self.net.create(p.joins)) if p.joins else []
        self.say(f"{p.nodes} nodes ({self.model.name}), k = {p.replicas}")

    def workload(self) -> None:
        params, sim, say, peers, got = self.params, self.sim, self.say, self.peers, self.got
        gen = self.gen
        # ---- subscriptions
        self.n_subs = n_subs = max(1, round(params.nodes * params.subs_per_node))
        sub_rng = self.stream("subscriptions")
        t = sim.now
        for _ in range(n_subs):
            t += sub_rng.expovariate(1000.0 / params.sub_gap_ms)
            who = sub_rng.randrange(params.nodes)
            sim.call_at(t, self.subscribe, who, gen.subscription(sub_rng))
        say(f"installing {n_subs:,} subscriptions")
        say.phase("installing", n_subs, lambda: len(got.installed), "subs")
        sim.run(until=t + params.settle_s)
        say.end()
        self.installed = sum(1 for o in self.owners if o in got.installed)
        self.install_msgs = _kinds(sim, REPLICA_KINDS)

        # ---- the crash
        n_fail = round(params.fail_fraction * params.nodes)
        crashed = set(self.stream("crash").sample(range(params.nodes), n_fail))
        self.whole_sets = _whole_sets_lost(peers, self.net, crashed, params.replicas)
        self.before = (_kinds(sim, REPLICA_KINDS), _kinds(sim, DHT_REPAIR_KINDS))
        say(f"crashed {n_fail} peers at once; repairing for {params.repair_s:.0f} simulated s")
        self.crash(crashed, params.repair_s)
        self.live = live = [i for i in range(params.nodes) if i not in crashed]

        # ---- events
        pub_rng = self.stream("events")
        self.oracle_over_live()

        def do_join(j: int, contact: int) -> None:
            peers[j].dht.join(sim.addrs[contact], sim.now)
            sim.poke(j)

        t = sim.now
        for _ in range(params.events):
            t += pub_rng.expovariate(1000.0 / params.pub_gap_ms)
            values = gen.event(pub_rng)
            sim.call_at(t, self.publish, live[pub_rng.randrange(len(live))], values)
        # Joins spread over the publication: the tree nodes they become root of change hands
        # while events are probing them.
        join_rng = self.stream("joins")
        for j in self.joiners:
            at = sim.now + join_rng.uniform(0.0, max(t - sim.now, 1.0))
            sim.call_at(at, do_join, j, live[join_rng.randrange(len(live))])
        say(
            f"publishing {params.events:,} events"
            + (f", {len(self.joiners)} peers joining" if self.joiners else "")
        )
        say.phase("publishing", params.events, lambda: len(self.expected), "events")
        sim.run(until=t + 30.0)
        say.end()

    def check(self) -> CrashResult:
        params, sim, peers = self.params, self.sim, self.peers
        v = self.verdict()
        after_repl = _kinds(sim, REPLICA_KINDS)
        after_dht = _kinds(sim, DHT_REPAIR_KINDS)
        before_repl, before_dht = self.before
        joined = sum(1 for j in self.joiners if peers[j].dht.state.value == "ready")
        counters = (
            "promoted",
            "handed_off",
            "replica_puts",
            "replica_ops",
            "recreated",
            "refreshes",
            "lost",
            "jumps",
        )
        totals = self.overlay_totals(self.live + self.joiners, counters)
        return CrashResult(
            nodes=params.nodes,
            replicas=params.replicas,
            fail_fraction=params.fail_fraction,
            crashed=len(self.dead),
            subscriptions=self.n_subs,
            subscriptions_installed=self.installed,
            subscriptions_live=len(self.live_subs),
            subscriptions_lost=self.lost(),
            events=params.events,
            expected_deliveries=v.expected_deliveries,
            deliveries=v.deliveries,
            delivery_recall=v.deliveries / v.expected_deliveries if v.expected_deliveries else 1.0,
            duplicates=v.duplicates,
            false_positives=v.false_positives,
            repair_messages=after_repl[0] - before_repl[0],
            repair_bytes=after_repl[1] - before_repl[1],
            dht_repair_messages=after_dht[0] - before_dht[0],
            dht_repair_bytes=after_dht[1] - before_dht[1],
            replication_messages_while_installing=self.install_msgs[0],
            replication_bytes_while_installing=self.install_msgs[1],
            joins=len(self.joiners),
            joins_completed=joined,
            whole_sets_lost=self.whole_sets[0],
            pieces_in_lost_sets=self.whole_sets[1],
            overlay=totals,
            sim_messages=sim.stats.messages,
            sim_time_s=sim.now,
            **self.common_fields(),
        )


#: ``Churn().run(...)`` as JSON (tests, benchmarks).
run_churn = Churn.run_json


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


@dataclass(kw_only=True, slots=True)
class ContinuousResult(ChurnResult):
    """Sessions ended in crashes and newcomers replaced them, events all along."""

    session_median_s: float
    duration_s: float
    departures: int
    arrivals: int

    def summary(self) -> str:
        r = self.json()
        return (
            f"{r['nodes']} peers, median session {r['session_median_s']:.0f} s, "
            f"{r['duration_s']:.0f} s of events: {r['departures']} crashes, "
            f"{r['arrivals']} joins, k = {r['replicas']}\n"
            f"subscriptions: {r['subscriptions_installed']:,} installed of "
            f"{r['subscriptions']:,}, {r['subscriptions_lost']} lost\n"
            f"deliveries: {r['deliveries']:,} of {r['expected_deliveries']:,} "
            f"(recall {r['delivery_recall']:.6f}), {r['duplicates']} duplicates, "
            f"{r['false_positives']} false positives\n"
            f"replication: {r['repair_messages']:,} messages, {r['repair_bytes']:,} bytes; "
            f"{r['overlay'].get('promoted', 0)} promotions, "
            f"{r['overlay'].get('handed_off', 0)} hand-offs\n"
            f"wall {r['wall_s']:.1f} s"
        )


class ContinuousChurn(ChurnBase):
    """Continuous churn: sessions end in crashes, newcomers replace them (arrivals balance
    departures), events flow all along. A (subscription, event) pair is expected when the
    subscription was installed before the event was published and its subscriber lived until
    ``grace_s`` after the publication (long enough to receive it)."""

    command = ("churn",)
    help = Churn.help
    grace_s = 30.0

    def bootstrap(self) -> None:
        super().bootstrap()
        p = self.params
        self.say(
            f"{p.nodes} nodes ({self.model.name}), k = {p.replicas}, "
            f"median session {p.session_median_s:.0f} s"
        )

    def workload(self) -> None:
        params, sim, net, say, peers = self.params, self.sim, self.net, self.say, self.peers
        schema, gen = self.schema, self.gen
        assert params.session_median_s is not None
        self.died = died = dict[int, float]()
        rate = math.log(2) / params.session_median_s  # exponential sessions with this median
        life_rng = self.stream("sessions")
        sub_rng = self.stream("subscriptions")
        self.arrivals = self.departures = 0

        def subscribe(i: int) -> None:
            if sim.alive[i] and peers[i].dht.state.value == "ready":
                self.subscribe(i, gen.subscription(sub_rng))

        def end_session(i: int) -> None:
            sim.crash(i)
            died[i] = sim.now
            self.departures += 1
            live = [j for j in range(len(peers)) if sim.alive[j] and j not in died]
            (j,) = net.create(1)
            peers[j].dht.join(sim.addrs[live[life_rng.randrange(len(live))]], sim.now)
            sim.poke(j)
            self.arrivals += 1
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

        pub_rng = self.stream("events")
        self.published = published = list[tuple[int, float, tuple[float | None, ...]]]()

        def publish() -> None:
            live = [j for j in range(len(peers)) if sim.alive[j] and j not in died]
            i = live[pub_rng.randrange(len(live))]
            if peers[i].dht.state.value != "ready":
                return
            values = gen.event(pub_rng)
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
        horizon = params.duration_s + self.grace_s
        say.phase("churn", horizon, lambda: sim.now - start, "sim s")
        sim.run(until=start + horizon)
        say.end()

    def check(self) -> ContinuousResult:
        params, sim, got, owners, died = self.params, self.sim, self.got, self.owners, self.died
        # Expected pairs: installed before publication, subscriber alive through the grace.
        index = {o: j for j, o in enumerate(owners)}
        installed_at = {index[o]: at for o, at in got.installed.items() if o in index}
        want_total = hit = false_pos = 0
        inf = math.inf
        oracle = MatchOracle(self.schema, self.subs)
        for eid, at, values in self.published:
            have = got.received.get(eid, set())
            want: set[tuple[int, int]] = set()
            matching = set(oracle.matches(values).tolist())
            for j in matching:
                inst = installed_at.get(j)
                if inst is None or inst > at or died.get(owners[j][0], inf) < at + self.grace_s:
                    continue
                want.add(owners[j])
            want_total += len(want)
            hit += len(want & have)
            # A delivery to a subscription outside ``want`` is false only if it does not match.
            for o in have - want:
                j = index.get(o)
                if j is None or j not in matching:
                    false_pos += 1
        counters = ("promoted", "handed_off", "replica_puts", "replica_ops", "lost")
        totals = self.overlay_totals(list(range(len(self.peers))), counters)
        repl = _kinds(sim, REPLICA_KINDS)
        assert params.session_median_s is not None
        return ContinuousResult(
            nodes=params.nodes,
            replicas=params.replicas,
            session_median_s=params.session_median_s,
            duration_s=params.duration_s,
            departures=self.departures,
            arrivals=self.arrivals,
            subscriptions=len(self.subs),
            subscriptions_installed=len(installed_at),
            # Subscriptions of peers alive at the end with a piece no live peer holds.
            subscriptions_lost=lost_subscriptions(self.peers, set(died), owners),
            events=len(self.published),
            expected_deliveries=want_total,
            deliveries=hit,
            delivery_recall=hit / want_total if want_total else 1.0,
            duplicates=got.repeats,
            false_positives=false_pos,
            repair_messages=repl[0],
            repair_bytes=repl[1],
            overlay=totals,
            sim_messages=sim.stats.messages,
            sim_time_s=sim.now,
            **self.common_fields(),
        )


#: Fields that depend on the machine, not on the seed.
WALL_FIELDS = ChurnResult.WALL_FIELDS
