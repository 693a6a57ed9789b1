"""One network prefix against the replica sets: how many tree nodes it holds every copy of, and
what it takes with it when all its peers vanish, without and with replica sets spread across
address groups (``dht.locality``).

The run: replicating peers (``replicas`` copies of every leaf, ``INTERNAL_REPLICAS`` of every
internal node) each get an address group, the honest ones drawn among ``2 * nodes`` /24s (so a
few share one); thesis-workload subscriptions are installed. Then the attacker, a budget of
``attacker_fraction * nodes`` peers in one /24 with ids placed at will, takes its ids where they
hurt: tree nodes with the most pieces first, it puts its ids at the ``need`` positions closest
to the node's key (``strategy``: ``replica-set``, the node's replica set: k for a leaf, 9 for an
internal node; ``neighbourhood``: the whole neighbourhood the spread chooses from, Pastry's leaf
set and the root, so the spread has no honest peer to choose), as long as the budget lasts. (The
simulator's ids are drawn at random; placing ids is modelled by relabelling the peers at those
positions as the attacker's, which is the same overlay.) The peers learn the groups
(``spread``: replica sets are re-chosen at the next reconcile), and after ``settle_s``:

- ``captured``: tree nodes every holder of which (primary and replicas) is the attacker's, and
  ``captured_pieces``, the subscription pieces they hold;
- the attacker's peers all crash at once; after ``repair_s`` of failure detection, promotion
  and re-homing, ``subscriptions_lost`` (live subscribers' subscriptions with a piece no live
  peer holds) and the oracle's verdict over ``events`` events.

Not a ``rangecast sim`` command: ``bench/replica_locality.py`` prints it, the tests check it.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field, replace
from typing import Any

from rangecast.dht.errors import LocalProtocolError
from rangecast.dht.routing import Peer
from rangecast.dht.substrate import substrate
from rangecast.pubsub.base import NodeKey, OverlayConfig
from rangecast.pubsub.replication import INTERNAL_REPLICAS
from rangecast.pubsub.tree import TreeNode
from rangecast.sim.pubsub_scenario import PubSubScenario, ReplicatedResult
from rangecast.sim.scenario import OnDht, Verdict, flat, require

STRATEGIES = ("replica-set", "neighbourhood")
ATTACKER = "attacker"


@dataclass(frozen=True, slots=True)
class PrefixAttackParams(OnDht):
    nodes: int = 200
    attacker_fraction: float = 0.2
    #: Replica sets spread across address groups (False: the k closest, the simulator's default).
    spread: bool = True
    strategy: str = "replica-set"
    replicas: int = 3
    subs_per_node: float = 1.0
    events: int = 200
    seed: int = 1
    latency: str = "synthetic"
    settle_s: float = 30.0
    repair_s: float = 60.0
    capacity: tuple[int, int] = (10, 30)
    overlay: OverlayConfig = field(default_factory=OverlayConfig)

    def check(self) -> None:
        self.check_common(self.nodes)
        require(
            self,
            ("attacker_fraction", lambda v: 0.0 <= v < 1.0, "must be in [0, 1)"),
            ("strategy", lambda v: v in STRATEGIES, f"must be one of {', '.join(STRATEGIES)}"),
        )
        if not 1 <= self.replicas <= 9:
            raise LocalProtocolError("replicas must be in [1, 9]")


@dataclass(kw_only=True, slots=True)
class PrefixAttackResult(ReplicatedResult):
    spread: bool
    strategy: str
    attackers: int
    tree_nodes: int
    captured: int
    captured_fraction: float
    pieces: int
    captured_pieces: int
    subscriptions: int
    subscriptions_lost: int
    promoted: int
    handed_off: int
    verdict: Verdict = flat()

    def summary(self) -> str:
        v = self.verdict
        return (
            f"{self.nodes} peers, {self.attackers} in the attacker's /24 ({self.strategy}), "
            f"spread {'on' if self.spread else 'off'}: {self.captured} of {self.tree_nodes} "
            f"tree nodes ({self.captured_fraction:.1%}) held only by the attacker, "
            f"{self.captured_pieces} of {self.pieces} pieces\n"
            f"after the attacker's peers crash: {self.subscriptions_lost} of "
            f"{self.subscriptions} subscriptions lost; {v.deliveries} of "
            f"{v.expected_deliveries} deliveries, {v.missed} missed, {v.duplicates} "
            f"duplicates, {v.false_positives} false positives"
        )


class PrefixAttack(PubSubScenario[PrefixAttackParams, PrefixAttackResult]):
    name = "prefix-attack"
    params_type = PrefixAttackParams

    def overlay_config(self) -> OverlayConfig:
        return replace(self.params.overlay, replicas=self.params.replicas)

    def bootstrap(self) -> None:
        super().bootstrap()
        p = self.params
        rng = self.stream("address-groups")
        self.group_of: dict[int, Hashable] = {
            peer.dht.me.id: ("honest", rng.randrange(2 * p.nodes)) for peer in self.peers
        }

    def _group(self, peer: Peer) -> Hashable:
        return self.group_of.get(peer.id, ("unknown", peer.id))

    def _holders(self) -> dict[NodeKey, list[int]]:
        out: dict[NodeKey, list[int]] = {}
        for i, peer in enumerate(self.peers):
            if i in self.dead:
                continue
            for key in (*peer.overlay.nodes, *peer.overlay.replicas):
                out.setdefault(key, []).append(i)
        return out

    def _node(self, key: NodeKey, holders: list[int]) -> TreeNode:
        ov = self.peers[holders[0]].overlay
        node = ov.nodes.get(key) or ov.replicas.get(key)
        assert node is not None
        return node

    def _pieces(self, key: NodeKey, holders: list[int]) -> int:
        node = self._node(key, holders)
        return len(node.index) if node.index is not None else 0

    def _place_attacker(self) -> set[int]:
        """The peers relabelled as the attacker's: per tree node, busiest first, the ``need``
        closest to its key, while the budget lasts."""
        p = self.params
        budget = round(p.attacker_fraction * p.nodes)
        kademlia = substrate(p.dht).kademlia_ids
        dht0 = self.peers[0].dht
        space = dht0.space
        if p.strategy == "neighbourhood":
            width = 2 * dht0.cfg.siblings if kademlia else dht0.cfg.leaf_set_size
        ids = [peer.dht.me.id for peer in self.peers]
        holders = self._holders()
        ranked = sorted(
            holders,
            key=lambda k: (-self._pieces(k, holders[k]), k[0], k[1].attr, k[1].depth, k[1].path),
        )
        attacker: set[int] = set()
        for key in ranked:
            internal = self._node(key, holders[key]).index is None
            k = max(p.replicas, INTERNAL_REPLICAS) if internal and p.replicas > 1 else p.replicas
            need = width + 1 if p.strategy == "neighbourhood" else k
            h = self.peers[holders[key][0]].overlay._key(*key)

            def metric(i: int, h: int = h) -> int:
                return ids[i] ^ h if kademlia else space.distance(ids[i], h)

            closest = sorted(range(len(ids)), key=metric)[:need]
            fresh = [i for i in closest if i not in attacker]
            if len(attacker) + len(fresh) > budget:
                continue
            attacker.update(fresh)
        return attacker

    def workload(self) -> None:
        p, sim = self.params, self.sim
        rng = self.stream("workload")
        self.install(round(p.nodes * p.subs_per_node), rng)
        self.attackers = self._place_attacker()
        for i in self.attackers:
            self.group_of[self.peers[i].dht.me.id] = ATTACKER
        if p.spread:
            for peer in self.peers:
                peer.dht.locality = self._group
        sim.run(until=sim.now + p.settle_s)  # reconcile timers re-choose every replica set
        holders = self._holders()
        self.tree_nodes = len(holders)
        self.pieces = sum(self._pieces(k, h) for k, h in holders.items())
        taken = [k for k, h in holders.items() if all(i in self.attackers for i in h)]
        self.captured = len(taken)
        self.captured_pieces = sum(self._pieces(k, holders[k]) for k in taken)
        self.crash(self.attackers, p.repair_s)
        self.publish_events(p.events, rng)

    def check(self) -> PrefixAttackResult:
        p = self.params
        live = [peer for i, peer in enumerate(self.peers) if i not in self.dead]
        return PrefixAttackResult(
            nodes=p.nodes,
            replicas=p.replicas,
            spread=p.spread,
            strategy=p.strategy,
            attackers=len(self.attackers),
            tree_nodes=self.tree_nodes,
            captured=self.captured,
            captured_fraction=self.captured / self.tree_nodes if self.tree_nodes else 0.0,
            pieces=self.pieces,
            captured_pieces=self.captured_pieces,
            subscriptions=len(self.owners),
            subscriptions_lost=self.lost(),
            verdict=self.verdict(),
            promoted=sum(peer.overlay.stats.promoted for peer in live),
            handed_off=sum(peer.overlay.stats.handed_off for peer in live),
            **self.common_fields(),
        )


def run_prefix_attack(**params: Any) -> dict[str, Any]:
    """``PrefixAttack`` with ``params`` (``PrefixAttackParams``' fields), as JSON."""
    return PrefixAttack.run_json(PrefixAttackParams(**params))


__all__ = [
    "ATTACKER",
    "STRATEGIES",
    "PrefixAttack",
    "PrefixAttackParams",
    "PrefixAttackResult",
    "run_prefix_attack",
]
