"""``rangecast sim run crash-root``: crash the peer hosting the busiest tree node mid-run.

The example of docs/scenarios.md. Thesis-workload subscriptions are installed on replicating
peers (k copies of every tree node); half the events are published; then the peer that is the
DHT root of the tree node holding the most subscription pieces crashes (no goodbye), failure
detection and replica promotion run for ``repair_s``, and the other half of the events follows.
Every event is checked against the brute-force oracle over the subscriptions of the subscribers
alive when it was published: with k >= 2 nothing may be missed.
"""

from __future__ import annotations

from dataclasses import dataclass

from rangecast.pubsub.base import OverlayConfig
from rangecast.sim.options import positive_float
from rangecast.sim.pubsub_scenario import PubSubScenario, ReplicatedResult
from rangecast.sim.scenario import OnDht, Verdict, flat, param, require


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
        require(
            self,
            ("nodes", lambda v: v >= 2, "must be at least 2"),
            ("events", lambda v: v >= 0, "must be at least 0"),
            ("replicas", lambda v: 1 <= v <= 9, "must be in [1, 9]"),
        )


@dataclass(kw_only=True, slots=True)
class CrashRootResult(ReplicatedResult):
    verdict: Verdict = flat()
    crashed_peer: int
    pieces_at_crashed_root: int
    events: int
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


class CrashRoot(PubSubScenario[CrashRootParams, CrashRootResult]):
    name = "crash-root"
    command = ("run", "crash-root")
    help = "crash the peer hosting the busiest tree node mid-run; check every delivery"
    params_type = CrashRootParams

    def overlay_config(self) -> OverlayConfig:
        return OverlayConfig(replicas=self.params.replicas)

    def workload(self) -> None:
        p, rng = self.params, self.stream("workload")
        self.install(round(p.nodes * p.subs_per_node), rng)
        self.publish_events(p.events // 2, rng)
        # The busiest tree node: the one holding the most subscription pieces; crash its root.
        self.pieces, self.victim = max(
            (len(node.index), i)
            for i, peer in enumerate(self.peers)
            for node in peer.overlay.nodes.values()
            if node.index is not None
        )
        self.say(f"crashing peer {self.victim}, root of a tree node of {self.pieces} pieces")
        self.crash({self.victim}, p.repair_s)
        self.publish_events(p.events - p.events // 2, rng)

    def check(self) -> CrashRootResult:
        return CrashRootResult(
            nodes=self.params.nodes,
            replicas=self.params.replicas,
            crashed_peer=self.victim,
            pieces_at_crashed_root=self.pieces,
            events=len(self.expected),
            verdict=self.verdict(),
            subscriptions_lost=self.lost(),
            **self.common_fields(),
        )
