"""``rangecast sim run crash-root``: crash the peer hosting the busiest tree node mid-run.

The example of docs/scenarios.md. Thesis-workload subscriptions are installed on replicating
peers (k copies of every tree node); half the events are published; then the peer that is the
DHT root of the tree node holding the most subscription pieces crashes (no goodbye), failure
detection and replica promotion run for ``repair_s``, and the other half of the events follows.
Every event is checked against the brute-force oracle over the subscriptions of the subscribers
alive when it was published: with k >= 2 nothing may be missed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rangecast.dht.errors import LocalProtocolError
from rangecast.pubsub.base import OverlayConfig
from rangecast.pubsub.peer import OverlayPeer
from rangecast.pubsub.schema import THESIS_SCHEMA, SchemaRegistry
from rangecast.sim.churn_experiment import Receipts, lost_subscriptions
from rangecast.sim.options import positive_float
from rangecast.sim.scenario import OnDht, Scenario, SubstrateResult, Verdict, flat, param
from rangecast.sim.thesis_experiment import MatchOracle
from rangecast.sim.workload import THESIS_WORKLOAD, Workload


@dataclass(frozen=True, slots=True)
class CrashRootParams(OnDht):
    replicas: int = param(3, "copies of every tree node (1: no replication)")
    repair_s: float = param(60.0, "simulated seconds of repair after the crash")
    nodes: int = param(200, "overlay size")
    subs_per_node: float = param(2.0, "subscriptions per node on average", type=positive_float)
    events: int = param(400, "events: half before the crash, half after the repair")
    seed: int = param(1, "seed of every random stream")
    latency: str = param("synthetic", "'synthetic', 'planetlab' or a path")
    capacity: tuple[int, int] = (10, 30)

    def check(self) -> None:
        self.check_common()
        if self.nodes < 2 or self.events < 0 or not 1 <= self.replicas <= 9:
            raise LocalProtocolError("need --nodes >= 2, --events >= 0, --replicas in [1, 9]")


@dataclass(kw_only=True, slots=True)
class CrashRootResult(SubstrateResult):
    nodes: int
    replicas: int
    crashed_peer: int
    pieces_at_crashed_root: int
    events: int
    verdict: Verdict = flat()
    subscriptions_lost: int

    def succeeded(self) -> bool:
        return self.verdict.succeeded() and self.subscriptions_lost == 0

    def summary(self) -> str:
        v = self.verdict
        return (
            f"{self.nodes} peers, k = {self.replicas}: crashed peer {self.crashed_peer} "
            f"(root of a tree node of {self.pieces_at_crashed_root} pieces)\n"
            f"deliveries: {v.deliveries:,} of {v.expected_deliveries:,} over {self.events} "
            f"events; missed {v.missed}, duplicates {v.duplicates}, false positives "
            f"{v.false_positives}; subscriptions lost {self.subscriptions_lost}"
        )


class CrashRoot(Scenario[CrashRootParams, CrashRootResult]):
    name = "crash-root"
    tables = OverlayPeer.TABLES
    command = ("run", "crash-root")
    help = "crash the peer hosting the busiest tree node mid-run; check every delivery"
    params_type = CrashRootParams

    def stack(self) -> dict[str, object]:
        overlay = replace(OverlayConfig(), replicas=self.params.replicas)
        return self.pubsub_stack(SchemaRegistry((THESIS_SCHEMA,)), overlay)

    def workload(self) -> None:
        p, sim, peers = self.params, self.sim, self.net.cores
        self.got = got = Receipts()
        sim.on_events = got
        gen = Workload(THESIS_SCHEMA, THESIS_WORKLOAD, self.stream("workload-layout"))
        rng, self.owners, subs = self.stream("workload"), list[tuple[int, int]](), []
        for _ in range(round(p.nodes * p.subs_per_node)):
            i, sub = rng.randrange(p.nodes), gen.subscription(rng)
            self.owners.append((i, peers[i].overlay.subscribe(sub, sim.now)))  # type: ignore[attr-defined]
            subs.append(sub)
            sim.poke(i)
            sim.run(until=sim.now + 0.02)
        sim.run(until=sim.now + 30.0)  # installs, splits and replicas settle
        self.expected: dict[int, set[tuple[int, int]]] = {}

        def publish(count: int, dead: set[int]) -> None:
            live = [j for j, (i, _) in enumerate(self.owners) if i not in dead]
            oracle = MatchOracle(THESIS_SCHEMA, [subs[j] for j in live])
            for _ in range(count):
                i, values = rng.choice([i for i in range(p.nodes) if i not in dead]), gen.event(rng)
                eid = peers[i].overlay.publish(THESIS_SCHEMA.name, values, sim.now)  # type: ignore[attr-defined]
                self.expected[eid] = {self.owners[live[j]] for j in oracle.matches(values)}
                sim.poke(i)
                sim.run(until=sim.now + 0.05)
            sim.run(until=sim.now + 30.0)

        publish(p.events // 2, set())
        # The busiest tree node: the one holding the most subscription pieces; crash its root.
        self.pieces, self.victim = max(
            (len(node.index), i)
            for i, peer in enumerate(peers)
            for node in peer.overlay.nodes.values()  # type: ignore[attr-defined]
            if node.index is not None
        )
        self.say(f"crashing peer {self.victim}, root of a tree node of {self.pieces} pieces")
        sim.crash(self.victim)
        sim.run(until=sim.now + p.repair_s)
        publish(p.events - p.events // 2, {self.victim})

    def check(self) -> CrashRootResult:
        p, got = self.params, self.got
        want = sum(len(w) for w in self.expected.values())
        hit = sum(len(w & got.received.get(e, set())) for e, w in self.expected.items())
        extra = sum(len(got.received.get(e, set()) - w) for e, w in self.expected.items())
        peers = self.net.cores
        return CrashRootResult(
            nodes=p.nodes,
            replicas=p.replicas,
            crashed_peer=self.victim,
            pieces_at_crashed_root=self.pieces,
            events=len(self.expected),
            verdict=Verdict(
                expected_deliveries=want,
                deliveries=hit,
                missed=want - hit,
                duplicates=got.repeats,
                false_positives=extra,
            ),
            subscriptions_lost=lost_subscriptions(peers, {self.victim}, self.owners),  # type: ignore[arg-type]
            **self.common_fields(),
        )
