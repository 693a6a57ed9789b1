"""``rangecast sim run partition``: cut the overlay in two for longer than failure detection
takes, heal the network, and check that the overlay merges and delivers as before.

Thesis-workload subscriptions are installed on replicating peers; then every message between a
random ``--side`` of the peers and the rest is lost for ``--split-s`` (the simulator's ``drop``
hook), so each side declares the other failed; then the network is whole again for
``--after-s`` and the events are published, from both sides, each checked against the
brute-force oracle over every subscription. With ``--heal on`` (the default, as on real
peers) the peers ask the peers they declared failed again every ``--heal-s`` (``dht.healing``);
with ``--heal off`` the two overlays stay apart. The result says when, after the network
healed, every peer's neighbours were the whole membership's again (``merged_after_s``), and
how many were not at the end (``unconverged``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from rangecast.dht.errors import LocalProtocolError
from rangecast.dht.substrate import DhtConfig
from rangecast.pubsub.base import OverlayConfig
from rangecast.sim.options import positive_float
from rangecast.sim.pubsub_scenario import PubSubScenario, ReplicatedResult
from rangecast.sim.scenario import OnDht, Verdict, flat, param, require

#: Simulated seconds between two looks at the neighbours while the overlay merges.
_LOOK_S = 1.0


@dataclass(frozen=True, slots=True)
class PartitionParams(OnDht):
    split_s: float = param(60.0, "simulated seconds the two sides are cut apart")
    side: float = param(0.5, "fraction of the peers on one side (drawn at random)")
    heal: bool = param(True, "ask the peers declared failed again (dht.healing)", style="on-off")
    heal_s: float = param(30.0, "with --heal on: one of them asked every this many seconds")
    after_s: float = param(180.0, "simulated seconds with the network whole before the events")
    replicas: int = param(3, "copies of every tree node (1: no replication)")
    nodes: int = param(200, "overlay size")
    subs_per_node: float = param(2.0, "subscriptions per node on average", type=positive_float)
    events: int = param(400, "events, published after the network healed")
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
        if not 0 < self.side < 1 or self.split_s < 0 or self.after_s < 0 or self.heal_s <= 0:
            raise LocalProtocolError(
                "need --side in (0, 1), --split-s >= 0, --after-s >= 0, --heal-s > 0"
            )


@dataclass(kw_only=True, slots=True)
class PartitionResult(ReplicatedResult):
    verdict: Verdict = flat()
    heal: bool
    side_peers: int
    split_s: float
    #: Peers whose neighbours differed from the whole membership's when the network healed,
    #: and after ``after_s``.
    unconverged_at_heal: int
    unconverged: int
    #: Simulated seconds from the heal until every peer's neighbours were right (None: never).
    merged_after_s: float | None
    heal_pings: int
    events: int
    subscriptions_lost: int

    def succeeded(self) -> bool:
        return self.verdict.succeeded() and self.unconverged == 0

    def summary(self) -> str:
        v = self.verdict
        merged = "never" if self.merged_after_s is None else f"after {self.merged_after_s:.0f} s"
        return (
            f"{self.nodes} peers cut {self.side_peers} / {self.nodes - self.side_peers} for "
            f"{self.split_s:.0f} s, healing {'on' if self.heal else 'off'}: "
            f"{self.unconverged_at_heal} peers with wrong neighbours when the network healed, "
            f"merged {merged}, {self.unconverged} still wrong; {self.heal_pings:,} heal pings\n"
            f"deliveries: {v.deliveries:,} of {v.expected_deliveries:,} over {self.events} "
            f"events; missed {v.missed}, duplicates {v.duplicates}, false positives "
            f"{v.false_positives}; subscriptions lost {self.subscriptions_lost}"
        )


class Partition(PubSubScenario[PartitionParams, PartitionResult]):
    name = "partition"
    command = ("run", "partition")
    help = "cut the overlay in two, heal the network; check the merge and every delivery"
    params_type = PartitionParams

    def dht_config(self) -> DhtConfig:
        p = self.params
        cfg: Any = super().dht_config()
        return replace(cfg, heal_s=p.heal_s if p.heal else math.inf)

    def overlay_config(self) -> OverlayConfig:
        return OverlayConfig(replicas=self.params.replicas)

    def workload(self) -> None:
        p, rng, sim, net = self.params, self.stream("workload"), self.sim, self.net
        self.install(round(p.nodes * p.subs_per_node), rng)
        k = min(p.nodes - 1, max(1, round(p.nodes * p.side)))
        side = frozenset(self.stream("partition").sample(range(p.nodes), k))
        self.side_peers = len(side)
        sim.drop = lambda src, dst, msg: (src in side) != (dst in side)
        t0 = sim.now
        self.say.phase("cut apart", p.split_s, lambda: sim.now - t0, "sim s")
        sim.run(until=t0 + p.split_s)
        self.say.end()
        sim.drop = None
        healed_at = sim.now
        self.unconverged_at_heal = len(net.leafset_mismatches())
        self.merged_after_s: float | None = 0.0 if self.unconverged_at_heal == 0 else None
        self.say.phase("network whole", p.after_s, lambda: sim.now - healed_at, "sim s")
        while sim.now < healed_at + p.after_s:
            sim.run(until=min(sim.now + _LOOK_S, healed_at + p.after_s))
            if self.merged_after_s is None and not net.leafset_mismatches():
                self.merged_after_s = sim.now - healed_at
        self.say.end()
        self.unconverged = len(net.leafset_mismatches())
        self.publish_events(p.events, rng)

    def check(self) -> PartitionResult:
        p = self.params
        return PartitionResult(
            nodes=p.nodes,
            replicas=p.replicas,
            heal=p.heal,
            side_peers=self.side_peers,
            split_s=p.split_s,
            unconverged_at_heal=self.unconverged_at_heal,
            unconverged=self.unconverged,
            merged_after_s=self.merged_after_s,
            heal_pings=sum(node.stats.heal_pings for node in self.net.nodes),
            events=len(self.expected),
            verdict=self.verdict(),
            subscriptions_lost=self.lost(),
            **self.common_fields(),
        )
