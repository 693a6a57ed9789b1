"""``rangecast sim run siena|padres|octopia|kyra|kmeans|pop|grape``: the broker-overlay systems on
the thesis workload, every delivery checked by the thesis' brute-force oracle.

Same work as ``sim run thesis`` of the same seed and sizes: the same latency model and node
placement (sim.broker_network), the same schema, and the same subscriptions, subscribers,
events and publishers, drawn from the same named streams in the same order (``plan``). Every
node is a broker (but OctopiA's, beyond a multiple of ``--clusters``, whose clients attach to the
nearest broker); a subscriber is a client at its node, and so is each event's publisher.

Stages: the publishers that will publish advertise (systems with advertisements: PADRES, POP,
GRAPE, OctopiA), one **full-domain ad** per publisher (the thesis workload's publishers are
uniform over the nodes, with no content locality an ad could describe: the honest ad is the
whole domain); subscriptions arrive as in the thesis (exponential gaps, mean 2 s); the network
settles (the **set-up cost** is every message until then); events are published (gaps of mean
1 s) and the network settles again. Each (subscription, event) receipt is compared with the
oracle (``MatchOracle``): missed, duplicates and false deliveries; false-positive *receptions*
(a broker received a publication it neither delivered nor forwarded) are a broker metric.

The systems (docs/baselines.md has each one's readings):

* ``siena``: the filter-based tree (latency MST, or ``--tree kary``), subscriptions flooded,
  optional covering;
* ``padres``: the same tree with advertisements, subscriptions toward overlapping ads;
* ``pop``, ``grape``: PADRES plus publisher relocation (tracing, the 1-median walk or GRAPE's
  sessions and choice, the MUM/MCM migration); the driver applies the clients' pause/resume;
* ``octopia``: a SCOT of ``--clusters`` m copies of a tree shape of n/m regions (brokers assigned
  to (region, cluster) at random), CIVs, static routing, or IDR with ``--dynamic on`` and
  per-link queues or a per-broker service time (``--service-ms``, ``--match-us``, ``--send-ms``);
* ``kyra``: HAC cliques (``--max-distance``, ``--max-size``), k-d zones per clique from an event
  sample (not the published events) and the clique's subscriptions, T global zones and trees;
* ``kmeans``: Kyra's multicast-based baseline (Riabov et al.): ``--cells`` bins per attribute,
  the grid's cells clustered into ``--groups`` multicast groups by Forgy's K-means over their
  subscribers (weights from an event sample), a latency MST per group, events flooded
  unfiltered on their group's tree; subscriptions are static (no set-up message).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from rangecast.brokers import kmeans, kyra, octopia
from rangecast.brokers.broker import Broker, RoutingConfig, padres, siena
from rangecast.brokers.clients import ClientCommand
from rangecast.brokers.filters import Box
from rangecast.brokers.grape_strategy import GrapeStrategy
from rangecast.brokers.graphs import BrokerGraph, hac_cliques, kary_tree, latency_mst
from rangecast.brokers.messages import BROKER_TABLE
from rangecast.brokers.migration import Relocation
from rangecast.brokers.pop import PopStrategy
from rangecast.dht.errors import LocalProtocolError
from rangecast.pubsub.schema import THESIS_SCHEMA
from rangecast.sim import runlog
from rangecast.sim.broker_network import BrokerNetwork, BrokerNode, ClientCall
from rangecast.sim.event_source import (
    EventSource,
    check_csv_params,
    columns_param,
    events_from_param,
    missing_param,
)
from rangecast.sim.options import non_negative_float, positive_float
from rangecast.sim.percentiles import ordered_sum, percentile
from rangecast.sim.scenario import (
    LATENCY_HELP,
    Part,
    RunResult,
    Scenario,
    Verdict,
    check_finite,
    flat,
    param,
    require,
)
from rangecast.sim.thesis_experiment import MatchOracle
from rangecast.sim.workloads import Plan, WorkloadSpec, paper_plan, plan

__all__ = [
    "SYSTEMS",
    "BrokerParams",
    "BrokerResult",
    "BrokerScenario",
    "gini",
    "plan",
]

SYSTEMS = ("siena", "padres", "octopia", "kyra", "kmeans", "pop", "grape")
WORKLOADS = ("thesis", "burst", "clustered", "random")


@dataclass(frozen=True, slots=True)
class BrokerParams:
    nodes: int = param(500, "nodes, each a broker (OctopiA: but those beyond a multiple of m)")
    subs_per_node: float = param(5.0, "subscriptions per node on average", type=positive_float)
    events: int = param(1000, "events to publish")
    seed: int = param(1, "seed of every random stream")
    latency: str = param("synthetic", LATENCY_HELP)
    covering: bool = param(
        True, "covering on the filter-based trees (siena, padres, pop, grape, kyra)", style="on-off"
    )
    tree: str = param(
        "mst",
        "the broker tree (siena, padres, pop, grape) and OctopiA's cluster shape: latency MST "
        "or a balanced k-ary tree (brokers placed at random)",
        choices=("mst", "kary"),
    )
    arity: int = param(2, "k of --tree kary")
    clusters: int = param(5, "octopia: clusters m of the SCOT")
    placement: str = param(
        "latency",
        "octopia (and padres --cyclic): brokers into the SCOT's m clusters as m equal-size "
        "latency groups, each region's brokers the nearest across clusters; or at random",
        choices=("latency", "random"),
    )
    dynamic: bool = param(
        False,
        "octopia: dynamic inter-cluster routing (IDR; needs --link-mbps or a service time)",
        style="on-off",
    )
    # The paper gives no values; cliques must hold more servers than the tree zones a
    # subscription meets for Kyra's storage to fall below the filter-based tree's (at 50 ms / 8
    # it does not below ~500 servers: docs/baselines.md, "Kyra's table entries, traced").
    max_distance: float = param(
        100.0, "kyra: largest RTT (ms) inside a clique", type=positive_float
    )
    max_size: int = param(16, "kyra: largest clique")
    trees: int = param(0, "kyra: global zones and trees T (0: the largest clique's size)")
    # Riabov et al. give no values; small, so that K-means has few cells to cluster.
    groups: int = param(8, "kmeans: multicast groups G (Forgy K-means over cells)")
    cells: int = param(4, "kmeans: grid bins per attribute")
    threshold: int = param(
        100, "pop: traces before the walk (P_threshold); grape: publications per session"
    )
    priority: str = param("load", "grape: the priority metric", choices=("load", "delay"))
    weight: float = param(100.0, "grape: weight of the priority metric, 0-100")
    link_delay: bool = param(
        False,
        "grape: Algorithm 1's delay estimate adds each tree hop's RTT/2 (our reading; the "
        "paper's counts queueing and matching only, which without queues is just the ping)",
        style="on-off",
    )
    link_mbps: float = param(
        0.0,
        "per-link output queues of this bandwidth (Mbit/s) at every broker; 0: none",
        type=non_negative_float,
    )
    service_ms: float = param(
        0.0,
        "per-broker service time: each broker serves its inputs one at a time (one FIFO input "
        "queue), this many ms each; 0: none",
        type=non_negative_float,
    )
    match_us: float = param(
        0.0, "service time: plus this many us per PRT entry scanned", type=non_negative_float
    )
    send_ms: float = param(
        0.0, "service time: plus this many ms per message the broker sends", type=non_negative_float
    )
    cyclic: bool = param(
        False,
        "padres: tree-ID routing on OctopiA's unclustered SCOT (--clusters, --tree, --arity) "
        "instead of one tree: OctopiA's comparator",
        style="on-off",
    )
    events_from: str | None = events_from_param()
    missing: float | str | None = missing_param()
    columns: str | None = columns_param()
    workload: str = param(
        "thesis",
        "thesis: the thesis workload (full-domain ads); burst: OctopiA's burst run "
        "(--publishers background publishers, a high-rate publisher with --hrp-subs subscribers, "
        "--events of it at --hrp-rate/s); clustered: POP/GRAPE's clustered workload (95%% "
        "low-rated subscribers at random brokers, 5%% high-rated on one broker); random: "
        "POP/GRAPE's random one (70%% low-, 25%% medium-, 5%% high-rated, all at random brokers)",
        choices=WORKLOADS,
    )
    publishers: int = param(
        10, "burst, clustered, random: publishers, one ad box (stock symbol) each"
    )
    sub_brokers: int = param(
        0,
        "clustered: the X brokers with subscribers (the hot one and X-1 at random); random: "
        "the X brokers with subscribers, at random; 0: all",
    )
    warmup: float = param(
        0.0,
        "share of the events (in publication order) left out of the steady-state figures "
        "(result 'steady'; 0: none reported)",
        type=non_negative_float,
    )
    hrp_subs: int = param(40, "burst: subscribers of the high-rate publisher (every event)")
    hrp_rate: float = param(
        100.0, "burst: the high-rate publisher's events per second", type=positive_float
    )
    #: The system; each command fixes it (``SiennaParams`` and the like below).
    system: str = "siena"
    sub_gap_ms: float = 2000.0
    pub_gap_ms: float = 1000.0

    def check(self) -> None:
        check_finite(self)
        if self.system not in SYSTEMS:
            raise LocalProtocolError(f"system is one of {', '.join(SYSTEMS)}, not {self.system!r}")
        at_least_1 = (lambda v: v >= 1, "must be at least 1")
        require(
            self,
            ("nodes", lambda v: v >= 2, "must be at least 2"),
            ("events", lambda v: v >= 0, "must be at least 0"),
            ("subs_per_node", lambda v: v > 0, "must be more than 0"),
            ("arity", *at_least_1),
            ("max_size", *at_least_1),
            ("threshold", *at_least_1),
            ("trees", lambda v: v >= 0, "must be at least 0"),
            ("groups", *at_least_1),
            ("cells", *at_least_1),
        )
        if not 1 <= self.clusters <= self.nodes:
            raise LocalProtocolError("--clusters must be in [1, --nodes]")
        if not 0 <= self.weight <= 100:
            raise LocalProtocolError("--weight must be in [0, 100]")
        if self.sub_gap_ms <= 0 or self.pub_gap_ms <= 0:
            raise LocalProtocolError("inter-arrival times must be positive")
        if self.workload not in WORKLOADS:
            raise LocalProtocolError(f"workload is one of {', '.join(WORKLOADS)}")
        if self.workload != "thesis":
            half = self.nodes // 2
            require(self, ("publishers", lambda v: 1 <= v <= half, "must be in [1, {nodes}/2]"))
        if not 0 <= self.sub_brokers <= self.nodes:
            raise LocalProtocolError("--sub-brokers is 0 (all) or in [1, --nodes]")
        if not 0 <= self.warmup < 1:
            raise LocalProtocolError("--warmup must be in [0, 1)")
        check_csv_params(self)
        if self.events_from is not None and self.workload != "thesis":
            raise LocalProtocolError("--events-from needs --workload thesis")
        if self.cyclic and (self.system != "padres" or self.covering):
            raise LocalProtocolError("--cyclic on is PADRES' tree-ID routing: needs --covering off")


@dataclass(frozen=True, slots=True)
class SienaParams(BrokerParams):
    system: str = "siena"


@dataclass(frozen=True, slots=True)
class PadresParams(BrokerParams):
    system: str = "padres"


@dataclass(frozen=True, slots=True)
class OctopiaParams(BrokerParams):
    system: str = "octopia"


@dataclass(frozen=True, slots=True)
class KyraParams(BrokerParams):
    system: str = "kyra"


@dataclass(frozen=True, slots=True)
class KmeansParams(BrokerParams):
    system: str = "kmeans"


@dataclass(frozen=True, slots=True)
class PopParams(BrokerParams):
    system: str = "pop"


@dataclass(frozen=True, slots=True)
class GrapeParams(BrokerParams):
    system: str = "grape"


# -------------------------------------------------------------------------------- systems


class _System:
    """How one system lays out its brokers and how clients call them."""

    #: Publishers advertise first.
    ads: ClassVar[bool] = False

    def __init__(self, sc: BrokerScenario) -> None:
        self.sc = sc
        self.p = sc.params
        self.schema = THESIS_SCHEMA
        self.rtt = sc.model.rtt_ms
        self.layout: dict[str, Any] = {}

    def brokers(self) -> list[int]:
        return list(range(self.p.nodes))

    def build(self, brokers: list[int]) -> None:
        """Lay the overlays out over ``brokers`` (before ``make``)."""

    def after_setup(self) -> dict[str, Any]:
        """What the set-up made of the system's mechanism, for the layout (whether it can act
        on this workload); nothing by default."""
        return {}

    def make(self, v: int) -> Broker:
        raise NotImplementedError

    def advertise(self, b: Broker, client: int, box: Box, now: float) -> int:
        raise NotImplementedError

    def subscribe(self, b: Broker, box: Box, now: float) -> int:
        return b.subscribe(box, now, 0)

    def publish(self, b: Broker, ad: int, values: Sequence[float | None], now: float) -> int:
        return b.publish(values, now, 0)

    def scot_brokers(self) -> list[int]:
        m = self.p.clusters
        return list(range(self.p.nodes // m * m))

    def scot_shape(self, brokers: list[int]) -> tuple[list[tuple[int, int]], list[list[int]]]:
        """OctopiA's SCOT layout: brokers into m clusters of n/m regions (``--placement``:
        latency groups, or shuffled at random), the shape the tree (--tree) over cluster 0's
        brokers (positions: their order in the group)."""
        m = self.p.clusters
        n = len(brokers) // m
        rng = self.sc.stream("octopia-layout")
        if self.p.placement == "random":
            order = list(brokers)
            rng.shuffle(order)
            groups = [order[c * n : (c + 1) * n] for c in range(m)]
        else:
            groups = latency_groups(brokers, m, self.rtt, rng)
        self.layout["placement"] = self.p.placement
        g = self.tree(groups[0])
        pos = {v: x for x, v in enumerate(groups[0])}
        return [(pos[a], pos[b]) for a, b in g.edges_with()], groups

    def tree(self, nodes: list[int], rng_name: str = "broker-tree") -> BrokerGraph:
        p = self.p
        if p.tree == "kary":
            g = kary_tree(nodes, p.arity, self.sc.stream(rng_name), self.rtt)
        else:
            g = latency_mst(nodes, self.rtt)
        self.layout.update(tree=p.tree, diameter=_diameter(g, nodes))
        return g


def latency_groups(
    brokers: Sequence[int], m: int, rtt: Callable[[int, int], float], rng: random.Random
) -> list[list[int]]:
    """``brokers`` as m equal-size latency groups (OctopiA's clusters: each a site of nearby
    brokers), in region order: ``groups[c][x]`` is region x of cluster c.

    Centres by farthest-first (the first one drawn from ``rng``), then every (broker, centre)
    pair by RTT, nearest first, joins while the centre's group has room: a balanced greedy
    assignment. Region x of cluster c > 0 is the broker of c nearest to region x of cluster 0
    (the same greedy matching), so a region's iLinks join the closest brokers the groups
    allow."""
    n = len(brokers) // m
    pool = list(brokers[: n * m])
    centres = [pool[rng.randrange(len(pool))]]
    while len(centres) < m:
        centres.append(
            max(
                (v for v in pool if v not in centres),
                key=lambda v: (min(rtt(v, c) for c in centres), -v),
            )
        )
    groups: list[list[int]] = [[] for _ in range(m)]
    placed: set[int] = set()
    for _, v, c in sorted((rtt(v, ctr), v, c) for v in pool for c, ctr in enumerate(centres)):
        if v not in placed and len(groups[c]) < n:
            groups[c].append(v)
            placed.add(v)
    base = sorted(groups[0])
    ordered = [base]
    for grp in groups[1:]:
        slot: dict[int, int] = {}
        used: set[int] = set()
        for _, x, v in sorted((rtt(b, v), x, v) for x, b in enumerate(base) for v in grp):
            if x not in slot and v not in used:
                slot[x] = v
                used.add(v)
        ordered.append([slot[x] for x in range(n)])
    return ordered


def mean_max(values: Sequence[float]) -> dict[str, float]:
    """A per-broker count's summary: mean and max (0 for no brokers)."""
    return {
        "mean": sum(values) / len(values) if values else 0.0,
        "max": float(max(values, default=0)),
    }


def _diameter(g: BrokerGraph, nodes: list[int]) -> int:
    """The tree's longest path in hops (a label of the layout): the farthest broker from the
    farthest broker of any start, which holds on a tree whichever node is its root."""
    if not nodes:
        return 0
    far, _ = _farthest(g, nodes[0])
    return _farthest(g, far)[1]


def _farthest(g: BrokerGraph, start: int) -> tuple[int, int]:
    """The broker farthest from ``start`` on the tree ``g`` and its distance in hops."""
    seen = {start: 0}
    todo = [start]
    best = (start, 0)
    while todo:
        u = todo.pop()
        for w in g.neighbours(u):
            if w not in seen:
                seen[w] = seen[u] + 1
                todo.append(w)
                if seen[w] > best[1]:
                    best = (w, seen[w])
    return best


class _Tree(_System):
    """SIENA, and PADRES (with advertisements) on one tree."""

    def config(self) -> RoutingConfig:
        if self.ads:
            return padres(self.p.covering, cyclic=self.p.cyclic)
        return siena(self.p.covering)

    def brokers(self) -> list[int]:
        return self.scot_brokers() if self.p.cyclic else super().brokers()

    def build(self, brokers: list[int]) -> None:
        if self.p.cyclic:
            # OctopiA's comparator: the same SCOT, unclustered, one cyclic overlay.
            edges, groups = self.scot_shape(brokers)
            self.graph = octopia.build(edges, self.p.clusters, groups, self.rtt).graph
            self.layout.update(graph="scot", clusters=self.p.clusters)
        else:
            self.graph = self.tree(brokers)
        self.cfg = self.config()

    def make(self, v: int) -> Broker:
        return Broker(v, self.schema, {0: self.graph.neighbours(v)}, self.cfg, self.strategy(v))

    def strategy(self, v: int) -> Any:
        return None

    def advertise(self, b: Broker, client: int, box: Box, now: float) -> int:
        return b.advertise(box, now, 0)

    def publish(self, b: Broker, ad: int, values: Sequence[float | None], now: float) -> int:
        return b.publish(values, now, 0, ad)


class _Siena(_Tree):
    pass


class _Padres(_Tree):
    ads = True

    def after_setup(self) -> dict[str, Any]:
        """With tree IDs: the PRT entries whose subscription came in from different neighbours
        for different trees, the only places where TID dynamic routing could send a
        publication another way ("Paths associated with the bounded TIDs are used in dynamic
        routing of publications provided their last hops are different", OctopiA's
        description of its ref. [20]). 0 means dynamic routing would route as static."""
        if not self.p.cyclic:
            return {}
        entries = alternatives = 0
        for _, b in sorted(self.sc.bnet.brokers.items()):
            for e in b.tables(0).prt.values():
                if e.hops:
                    entries += 1
                    if len(set(e.hops.values())) > 1:
                        alternatives += 1
        return {"tid_entries": entries, "tid_alternatives": alternatives}


class _Relocating(_Padres):
    """POP and GRAPE: the strategy's client calls, and the driver's part of a migration."""

    def build(self, brokers: list[int]) -> None:
        super().build(brokers)
        net = self.sc.bnet
        net.migration_ad = self._migration_ad
        self.layout["threshold"] = self.p.threshold

    def _migration_ad(self, b: Broker, cmd: ClientCommand, now: float) -> None:
        s = b.strategy
        assert isinstance(s, Relocation)
        s.migration_ad(b, cmd.client, cmd.ad, cmd.path, now)

    def advertise(self, b: Broker, client: int, box: Box, now: float) -> int:
        s = b.strategy
        assert isinstance(s, Relocation)
        return s.attach_publisher(b, client, box, now)

    def publish(self, b: Broker, ad: int, values: Sequence[float | None], now: float) -> int:
        s = b.strategy
        assert isinstance(s, Relocation)
        return s.publish(b, ad, values, now)


class _Pop(_Relocating):
    def strategy(self, v: int) -> Any:
        # At most half of P_threshold traced per window, as the paper sets it when it varies
        # the threshold ("the maximum number of traceable publications per time window to be
        # half of P_threshold"): its defaults, 50 of 100.
        t = self.p.threshold
        return PopStrategy(self.sc.stream(f"pop:{v}"), n_trace=max(1, t // 2), threshold=t)


class _Grape(_Relocating):
    def build(self, brokers: list[int]) -> None:
        super().build(brokers)
        self.layout.update(priority=self.p.priority, weight=self.p.weight)
        if self.p.link_delay:
            self.layout["link_delay"] = True

    def strategy(self, v: int) -> Any:
        p, net = self.p, self.sc.bnet
        queued = p.link_mbps or p.service_ms or p.match_us or p.send_ms
        return GrapeStrategy(
            p.priority,  # type: ignore[arg-type]
            p.weight,
            p.threshold,
            ping=net.ping,
            link_delay=self._hop_delay if p.link_delay else None,
            # Algorithm 1's per-hop delays from the driver's queues when it models any:
            # a queued message costs the broker's service plus one send; matching is per PRT
            # entry scanned, as the driver charges it.
            queues=net.queues if queued else None,
            service=(p.service_ms + p.send_ms) * 1e-3 if queued else 0.0,
            match_cost=p.match_us * 1e-6,
        )

    def _hop_delay(self, a: Any, b: Any) -> float:
        """The tree hop's propagation (s), for Algorithm 1 in the ``link_delay`` mode."""
        return float(self.sc.bnet.model.one_way_ms(a, b)) * 0.001


class _Octopia(_System):
    ads = True

    def brokers(self) -> list[int]:
        return self.scot_brokers()

    def build(self, brokers: list[int]) -> None:
        m = self.p.clusters
        edges, groups = self.scot_shape(brokers)
        n = len(groups[0])
        self.lay = octopia.build(edges, m, groups, self.rtt)
        self.configs = self.lay.configs()
        self.layout.update(clusters=m, regions=n, dynamic=self.p.dynamic)

    def make(self, v: int) -> Broker:
        ovs = {i: ov.neighbours(v) for i, ov in enumerate(self.lay.overlays)}
        net = self.sc.bnet
        p = self.p
        queued = p.link_mbps or p.service_ms or p.match_us or p.send_ms
        strat = self.lay.strategy(v, p.dynamic, net.queues if queued else None)
        return Broker(v, self.schema, ovs, self.configs, strat)

    def _s(self, b: Broker) -> octopia.OctopiaStrategy:
        s = b.strategy
        assert isinstance(s, octopia.OctopiaStrategy)
        return s

    def advertise(self, b: Broker, client: int, box: Box, now: float) -> int:
        return self._s(b).advertise(b, box, now)

    def subscribe(self, b: Broker, box: Box, now: float) -> int:
        return self._s(b).subscribe(b, box, now)

    def publish(self, b: Broker, ad: int, values: Sequence[float | None], now: float) -> int:
        return self._s(b).publish(b, ad, values, now)

    def after_setup(self) -> dict[str, Any]:
        """The clusters each publisher's events are sent to (the CIV of its ad at the host),
        on average: every one of the m clusters means the CIVs prune nothing."""
        sc = self.sc
        counts = []
        for client, ad in sorted(sc.ad_of.items()):
            host = sc.bnet.brokers[sc.ad_host[client]]
            counts.append(bin(self._s(host).civ(host, ad)).count("1"))
        return {"target_clusters_mean": sum(counts) / len(counts)} if counts else {}


class _Kyra(_System):
    def build(self, brokers: list[int]) -> None:
        p, sc = self.p, self.sc
        cliques = hac_cliques(brokers, self.rtt, p.max_distance, p.max_size)
        sample_rng = sc.stream("kyra-sample")
        sample = [sc.plan.gen.event(sample_rng) for _ in range(1000)]
        boxes: dict[int, list[Box]] = {}
        for _, i, sub in sc.plan.subs:
            boxes.setdefault(sc.bnet.nearest_broker(i), []).append(sc.boxes[id(sub)])
        t = p.trees or max(len(c) for c in cliques)
        cuts = kyra.kd_tree(self.schema, t, sample, alpha=1.0, beta=0.0)
        tree_zones = cuts.leaves()
        zone: dict[int, Box] = {}
        for c in cliques:
            subs = [bx for v in c for bx in boxes.get(v, ())]
            zs = kyra.aligned_partition(self.schema, cuts, len(c), sample, subs)
            zone.update(zip(c, zs, strict=True))
        self.lay = kyra.build(
            cliques, zone, tree_zones, self.rtt, p.covering, may_miss=self.sc.may_miss
        )
        self.configs = self.lay.configs()
        sizes = [len(c) for c in cliques]
        self.layout.update(
            cliques=len(cliques),
            clique_size_mean=sum(sizes) / len(sizes),
            clique_size_max=max(sizes),
            trees=t,
            tree_members_mean=sum(len(ms) for ms in self.lay.members) / t,
        )

    def make(self, v: int) -> Broker:
        ovs = {i: ov.neighbours(v) for i, ov in enumerate(self.lay.overlays)}
        return Broker(v, self.schema, ovs, self.configs, self.lay.strategy(v))

    def _s(self, b: Broker) -> kyra.KyraStrategy:
        s = b.strategy
        assert isinstance(s, kyra.KyraStrategy)
        return s

    def subscribe(self, b: Broker, box: Box, now: float) -> int:
        return self._s(b).subscribe(b, box, now)

    def publish(self, b: Broker, ad: int, values: Sequence[float | None], now: float) -> int:
        return self._s(b).publish(b, values, now)


class _Kmeans(_System):
    def build(self, brokers: list[int]) -> None:
        p, sc = self.p, self.sc
        # Built from the known subscriptions and a sample, like Kyra's layout.
        sample_rng = sc.stream("kmeans-sample")
        sample = [sc.plan.gen.event(sample_rng) for _ in range(1000)]
        subs = [(sc.bnet.nearest_broker(i), sc.boxes[id(sub)]) for _, i, sub in sc.plan.subs]
        forgy = sc.stream("kmeans-forgy")
        self.lay = kmeans.kmeans_layout(
            self.schema, brokers, subs, sample, self.rtt, p.groups, p.cells, forgy
        )
        self.configs = self.lay.configs()
        sizes = [len(ms) for ms in self.lay.members]
        self.layout.update(
            groups=len(sizes),
            cells=sum(len(cs) for cs in self.lay.groups),
            grid=self.lay.grid.size,
            group_members_mean=sum(sizes) / len(sizes) if sizes else 0.0,
            group_members_min=min(sizes, default=0),
            group_members_max=max(sizes, default=0),
            servers=len(brokers),
        )

    def make(self, v: int) -> Broker:
        ovs = {i: ov.neighbours(v) for i, ov in enumerate(self.lay.overlays)}
        return Broker(v, self.schema, ovs, self.configs, self.lay.strategy(v))

    def _s(self, b: Broker) -> kmeans.KMeansStrategy:
        s = b.strategy
        assert isinstance(s, kmeans.KMeansStrategy)
        return s

    def subscribe(self, b: Broker, box: Box, now: float) -> int:
        return self._s(b).subscribe(b, box, now)

    def publish(self, b: Broker, ad: int, values: Sequence[float | None], now: float) -> int:
        return self._s(b).publish(b, values, now)


_SYSTEMS: dict[str, type[_System]] = {
    "siena": _Siena,
    "padres": _Padres,
    "octopia": _Octopia,
    "kyra": _Kyra,
    "kmeans": _Kmeans,
    "pop": _Pop,
    "grape": _Grape,
}


# --------------------------------------------------------------------------------- result


@dataclass(kw_only=True, slots=True)
class Spread(Part):
    """Per-node figures: mean and max."""

    mean: float
    max: float


@dataclass(kw_only=True, slots=True)
class BrokerResult(RunResult):
    WALL_FIELDS = ("wall_s",)

    system: str
    workload: str
    nodes: int
    brokers: int
    subscriptions: int
    events: int
    verdict: Verdict = flat()
    #: Every message of the event phase (publications and control), per event.
    messages_per_event: float
    bytes_per_event: float
    #: One-way propagation delays of every message of the event phase, summed, per event (ms):
    #: traffic weighed by latency (NetStats.delay_ms; the clients' hops to their brokers are
    #: not messages of the overlay and are left out).
    traffic_ms_per_event: float
    #: PRT entries the brokers scanned matching publications (every broker a publication
    #: reaches matches it against its whole PRT to route it), per event.
    matchings_per_event: float
    #: Broker-overlay hops from the publishing broker to the delivering one, per delivery.
    hops_per_delivery: float
    delivery_latency_ms: dict[str, float]
    #: Publications a broker received and neither delivered nor forwarded.
    false_positive_receptions: int
    pure_forwards: int
    #: SRT + PRT entries per broker, over its overlays.
    table_entries: dict[str, float]
    #: Other brokers each broker keeps links to, over its overlays (mean, max): its routing
    #: state in peers, as a DHT peer's is the peers in its routing table and leaf set.
    neighbours: dict[str, float]
    #: Messages sent + received per broker in the event phase: max/mean and Gini.
    load_max_over_mean: float
    load_gini: float
    #: Per broker, the input side's busy time over the event phase's elapsed time (from the
    #: first publication to the last delivery), mean and max over the brokers: the papers'
    #: input utilisation (0 without service times: then nothing is ever busy).
    input_utilisation: dict[str, float]
    setup_messages: int
    setup_bytes: int
    #: From a broker's advertise call to the last broker processing that advertisement (ms,
    #: mean and max over the ads; {} without ads).
    ad_delay_ms: dict[str, float]
    #: From a broker's subscribe call to the last broker processing that subscription (ms;
    #: {} where subscriptions do not travel under their own id: Kyra, K-means groups).
    sub_delay_ms: dict[str, float]
    #: The input queue of the burst workload's high-rate publisher's broker over the event
    #: phase: its time-weighted mean length and its longest (needs a service time; {} on the
    #: other workloads).
    hrp_queue: dict[str, float]
    #: Publication messages (broker to broker) per event: the papers' message rate.
    publications_per_event: float
    #: Advertisement messages of the set-up (OctopiA: with its CIB_SET replies).
    ad_messages: int
    #: SRT (advertisement) entries per broker after the set-up.
    srt_entries: dict[str, float]
    messages_by_type: dict[str, Any]
    migrations: int
    layout: dict[str, Any]
    sim_time_s: float
    #: With ``warmup`` > 0: the figures over the events from ``from_event`` on (the papers
    #: measure after relocation has settled): messages and publications per event (and the
    #: inputs of the brokers: those plus the event's entry from its publisher, the paper's
    #: message rate), mean delay and hops of their deliveries, and the migrations in the window.
    steady: dict[str, float] = field(default_factory=dict)

    def succeeded(self) -> bool:
        return self.verdict.succeeded()

    def summary(self) -> str:
        v, dl, te = self.verdict, self.delivery_latency_ms, self.table_entries
        verdict = "every delivery as the oracle" if self.verdict.succeeded() else "MISMATCH"
        return "\n".join(
            [
                f"{self.system} on the {self.workload} workload: {self.brokers:,} brokers of "
                f"{self.nodes:,} nodes, {self.subscriptions:,} subscriptions, {self.events:,} "
                f"events, seed {self.seed} (latency model {self.latency_model['name']})",
                "  layout             "
                + ", ".join(f"{k} {_fmt(x)}" for k, x in self.layout.items()),
                f"  oracle             {v.expected_deliveries:,} expected; missed {v.missed}, "
                f"duplicates {v.duplicates}, false deliveries {v.false_positives}: {verdict}",
                f"  per event          {self.messages_per_event:.1f} messages, "
                f"{self.bytes_per_event:,.0f} bytes, {self.publications_per_event:.1f} "
                f"publications; {self.hops_per_delivery:.2f} hops per delivery; "
                f"latency-weighted traffic {self.traffic_ms_per_event:,.0f} ms; "
                f"{self.matchings_per_event:,.0f} matchings",
                f"  delivery latency   mean {dl['mean']:.0f} ms, p90 {dl['p90']:.0f}, "
                f"max {dl['max']:.0f}",
                f"  brokers            {self.false_positive_receptions:,} false-positive "
                f"receptions, {self.pure_forwards:,} pure forwards; table entries mean "
                f"{te['mean']:.0f}, max {te['max']:.0f}",
                f"  load spread        max/mean {self.load_max_over_mean:.2f}, "
                f"Gini {self.load_gini:.3f}; input utilisation mean "
                f"{self.input_utilisation['mean']:.1%}, max {self.input_utilisation['max']:.1%}",
                f"  set-up             {self.setup_messages:,} messages, "
                f"{self.setup_bytes:,} bytes; migrations {self.migrations}",
                f"  advertisements     {self.ad_messages:,} messages; SRT entries mean "
                f"{self.srt_entries['mean']:.1f}, max {self.srt_entries['max']:.0f}",
                *self._delay_lines(),
                *self._steady_line(),
                f"  wall {self.wall_s:.1f} s",
            ]
        )

    def _delay_lines(self) -> list[str]:
        words = [
            f"{what} delay mean {d['mean']:.0f} ms, max {d['max']:.0f}"
            for what, d in (
                ("advertisement", self.ad_delay_ms),
                ("subscription", self.sub_delay_ms),
            )
            if d
        ]
        q = self.hrp_queue
        if q:
            words.append(f"HRP broker's input queue mean {q['mean']:.1f}, max {q['max']:.0f}")
        return ["  set-up, queues     " + "; ".join(words)] if words else []

    def _steady_line(self) -> list[str]:
        st = self.steady
        if not st:
            return []
        return [
            f"  steady (event {st['from_event']:.0f} on) {st['messages_per_event']:.1f} messages, "
            f"{st['publications_per_event']:.2f} publications per event; delay mean "
            f"{st['delay_mean_ms']:.0f} ms, {st['hops_per_delivery']:.2f} hops; "
            f"input utilisation {st['input_utilisation']:.1%}; migrations {st['migrations']:.0f}"
        ]


def _fmt(x: Any) -> str:
    return f"{x:.2f}" if isinstance(x, float) else str(x)


def gini(values: Sequence[float]) -> float:
    """The Gini coefficient of non-negative values (0: all equal)."""
    xs = sorted(values)
    n, total = len(xs), sum(xs)
    if n == 0 or total == 0:
        return 0.0
    weighted = sum((i + 1) * x for i, x in enumerate(xs))
    return 2.0 * weighted / (n * total) - (n + 1) / n


# ------------------------------------------------------------------------------- scenario


class BrokerScenario(Scenario[BrokerParams, BrokerResult]):
    """One broker system on the thesis workload; the subclasses fix the system."""

    name = "brokers"
    command = ("run", "brokers")
    help = "a broker-overlay system on the thesis workload"
    params_type = BrokerParams
    tables = (BROKER_TABLE,)

    bnet: BrokerNetwork
    plan: Plan

    def setup(self) -> None:
        p = self.params
        self.setup_engine()
        self.bnet = BrokerNetwork(
            self.sim,
            p.seed,
            p.nodes,
            link_bps=p.link_mbps * 1e6,
            service=p.service_ms * 1e-3,
            match_cost=p.match_us * 1e-6,
            send_cost=p.send_ms * 1e-3,
        )
        self.system = _SYSTEMS[p.system](self)
        brokers = self.system.brokers()
        if p.workload == "thesis":
            source = EventSource.load(p, self.stream("workload-layout"), say=self.say)
            self.plan = plan(
                p.seed, p.nodes, p.subs_per_node, p.events, p.sub_gap_ms, p.pub_gap_ms, source
            )
        else:
            self.plan = paper_plan(WorkloadSpec.of(p), brokers)
        self.schema = schema = self.plan.gen.schema
        self.system.schema = schema
        #: The attributes some event misses (bit i for attribute i; Kyra's pieces keep them free).
        self.may_miss = sum(
            1 << i for i in range(len(schema)) if any(e[i] is None for e in self.plan.events)
        )
        self.boxes = {id(s): Box.from_subscription(s, schema) for _, _, s in self.plan.subs}
        self.bnet.place(brokers)
        self.system.build(brokers)
        self.bnet.start(self.system.make)
        self.bnet.on_resume = self._resume
        self.phases["setup"] = self.elapsed()
        self.say(f"{p.system}: {len(brokers)} brokers on {p.nodes} nodes ({self.model.name})")

    # -- the workload -----------------------------------------------------------------------

    def workload(self) -> None:
        p, sim, net, system, pl = self.params, self.sim, self.bnet, self.system, self.plan
        n = p.nodes
        mark = time.perf_counter()
        for i in {i for _, i, _ in pl.subs}:
            net.attach(i, i)
        publishers = sorted({i for _, i in pl.pubs})
        for i in publishers:
            net.attach(n + i, i)
        self.ad_of: dict[int, int] = {}
        #: publisher client -> the broker hosting its ad
        self.ad_host: dict[int, int] = {}
        #: ad id -> when its broker advertised it; subscription id -> when its broker took it.
        self.ad_called: dict[int, float] = {}
        self.sub_called: dict[int, float] = {}
        whole = Box.whole(self.schema)
        if system.ads:
            for i in publishers:
                box = pl.ads.get(i, whole)

                def adv(b: Broker, now: float, c: int = n + i, box: Box = box) -> None:
                    ad = self.ad_of[c] = system.advertise(b, c, box, now)
                    self.ad_host[c] = b.id
                    self.ad_called[ad] = now

                net.call(n + i, adv, 0.0)
        #: (broker, sid) -> subscription index
        self.sub_of: dict[tuple[int, int], int] = {}
        for j, (t, i, sub) in enumerate(pl.subs):
            box = self.boxes[id(sub)]

            def do_sub(b: Broker, now: float, j: int = j, box: Box = box) -> None:
                sid = system.subscribe(b, box, now)
                self.sub_of[(b.id, sid)] = j
                self.sub_called[sid] = now

            net.call(i, do_sub, t)
        self.say(f"installing {len(pl.subs):,} subscriptions")
        sim.run()
        self.setup_traffic = (sim.stats.messages, sim.stats.bytes)
        self.setup_delay_ms = sim.stats.delay_ms
        by_type = sim.stats.types_json()
        # Advertisements and, in OctopiA, the CIB_SET replies they cause (set-up's controls).
        self.ad_messages = sum(
            by_type.get(k, {}).get("messages", 0)
            for k in ("Advertise", *(("Control",) if p.system == "octopia" else ()))
        )
        self.setup_pubs = by_type.get("Publish", {}).get("messages", 0)
        system.layout.update(system.after_setup())
        self.srt = [b.srt_size() for _, b in sorted(net.brokers.items())]
        self.setup_load = [
            sim.stats.sent_messages[v] + sim.stats.received_messages[v] for v in range(n)
        ]
        self.phases["install"] = time.perf_counter() - mark

        mark = time.perf_counter()
        self.oracle = MatchOracle(self.schema, [s for _, _, s in pl.subs])
        self.published: list[float] = []
        self.event_of: dict[int, int] = {}
        #: The steady window's first event, and the counters when it is published.
        self.steady_from = round(p.warmup * len(pl.pubs)) if p.warmup else -1
        self.steady_mark: tuple[int, int, int, dict[int, float]] = (0, 0, 0, {})
        #: Each broker's busy time when the event phase begins (the steady window's: its mark).
        self.busy_mark = self.bnet.busy()
        self.hrp_node = self._hrp_node()
        if self.hrp_node is not None:
            self.hrp_node.queue_max = 0
            self.hrp_mark = self.hrp_node.queue_area_at(sim.now)
        t = sim.now
        for k, (gap, i) in enumerate(pl.pubs):
            t += gap
            sim.call_at(t, self._client_publish, k, n + i)
        self.say(f"publishing {len(pl.pubs):,} events")
        sim.run()
        self.phases["publish"] = time.perf_counter() - mark

    def _hrp_node(self) -> BrokerNode | None:
        """The adapter of the broker hosting the burst workload's high-rate publisher."""
        hrp = self.plan.marks.get("hrp")
        if hrp is None:
            return None
        host = self.ad_host.get(self.params.nodes + hrp)
        if host is None:
            host = self.bnet.clients.broker_of(self.params.nodes + hrp)
        return self.bnet.queues.nodes.get(host)

    def _setup_delays(self) -> tuple[dict[str, float], dict[str, float]]:
        """Advertisement and subscription delays (ms, mean and max): from the broker's call to
        the last Advertise / Subscribe message of it a broker processed (0 when none was
        needed). Subscriptions only where they travel under the client's own id (not Kyra's,
        whose trees carry the proxies' pieces, nor the K-means groups', which send none)."""
        settled = self.bnet.settled

        def delays(kind: int, called: dict[int, float]) -> dict[str, float]:
            ms = [(settled.get((kind, x), t) - t) * 1000.0 for x, t in sorted(called.items())]
            return mean_max(ms) if ms else {}

        subs = {} if self.params.system in ("kyra", "kmeans") else delays(1, self.sub_called)
        return delays(0, self.ad_called), subs

    def _client_publish(self, k: int, client: int) -> None:
        """The publisher sends event ``k`` to its broker (buffered while it migrates)."""
        net = self.bnet
        if k == self.steady_from:
            self.steady_mark = (
                self.sim.stats.messages,
                self.sim.stats.types_json().get("Publish", {}).get("messages", 0),
                self._migrations(),
                net.busy(),
            )
        self.published.append(self.sim.now)
        b = net.clients.broker_of(client)
        at = self.sim.now + net.client_delay(client, b)
        self.sim.call_at(at, self._arrive, k, client)

    def _arrive(self, k: int, client: int) -> None:
        net = self.bnet
        b = net.clients.publish(client, k)
        if b is not None:
            net.submit(b, ClientCall(client, k, self._publish))

    def _migrations(self) -> int:
        net = self.bnet
        return sum(
            s.migrations
            for s in (b.strategy for b in net.brokers.values())
            if isinstance(s, Relocation)
        )

    def _steady(self, got: dict[tuple[int, int], int], want: set[tuple[int, int]],
                lat: list[float], hops: list[int], end: float) -> dict[str, float]:  # fmt: skip
        """The figures from event ``steady_from`` on (``BrokerResult.steady``); ``end``: the
        last delivery."""
        k0, sim = self.steady_from, self.sim
        n = len(self.plan.events) - k0
        if k0 < 0 or n <= 0:
            return {}
        msgs, pubs, migs, busy = self.steady_mark
        end_pubs = sim.stats.types_json().get("Publish", {}).get("messages", 0)
        d = [
            (x, h)
            for (k, j), x, h in zip(got, lat, hops, strict=True)
            if k >= k0 and (k, j) in want
        ]
        return {
            "from_event": float(k0),
            "input_utilisation": self._utilisation(busy, self.published[k0], end)["mean"],
            "messages_per_event": (sim.stats.messages - msgs) / n,
            "publications_per_event": (end_pubs - pubs) / n,
            "broker_inputs_per_event": (sim.stats.messages - msgs) / n + 1.0,
            "publication_inputs_per_event": (end_pubs - pubs) / n + 1.0,
            "delay_mean_ms": sum(x for x, _ in d) / len(d) if d else 0.0,
            "hops_per_delivery": sum(h for _, h in d) / len(d) if d else 0.0,
            "migrations": float(self._migrations() - migs),
        }

    def _utilisation(self, mark: dict[int, float], start: float, end: float) -> dict[str, float]:
        """Each broker's busy time since ``mark`` over the time from ``start`` to ``end`` (the
        last delivery): mean and max over the brokers."""
        span = end - start
        busy = self.bnet.busy()
        return mean_max(
            [(busy[v] - mark.get(v, 0.0)) / span if span > 0 else 0.0 for v in sorted(busy)]
        )

    def _resume(self, b: Broker, client: int, k: Any, now: float) -> None:
        self._publish(b, client, k, now)

    def _publish(self, b: Broker, client: int, k: int, now: float) -> None:
        ad = self.ad_of.get(client, 0)
        self.event_of[self.system.publish(b, ad, self.plan.events[k], now)] = k

    # -- the check --------------------------------------------------------------------------

    def check(self) -> BrokerResult:
        p, sim, net, pl = self.params, self.sim, self.bnet, self.plan
        mark = time.perf_counter()
        n_events = len(pl.events)
        got: dict[tuple[int, int], int] = {}
        lat: list[float] = []
        hops: list[int] = []
        #: The delivering broker of each first receipt, and every stray (the run log's rows).
        at: list[int] = []
        stray_rows: list[tuple[int, int, int, float, int]] = []
        strays = 0
        owner = [i for _, i, _ in pl.subs]
        delay: dict[tuple[int, int], float] = {}
        for r in net.receipts:
            k = self.event_of.get(r.eid)
            for sid in r.sids:
                j = self.sub_of.get((r.broker, sid))
                if k is None or j is None:
                    strays += 1
                    stray_rows.append((-1 if k is None else k, r.broker, sid, r.now, r.hops))
                    continue
                key = (k, j)
                got[key] = got.get(key, 0) + 1
                if got[key] == 1:
                    dk = (owner[j], r.broker)
                    d = delay.get(dk)
                    if d is None:
                        d = delay[dk] = net.client_delay(owner[j], r.broker)
                    lat.append((r.now + d - self.published[k]) * 1000.0)
                    hops.append(r.hops)
                    at.append(r.broker)
        expected = missed = false = 0
        hit_lat: list[float] = []
        hit_hops: list[int] = []
        want_all: set[tuple[int, int]] = set()
        for k, values in enumerate(pl.events):
            for j in self.oracle.matches(values):
                want_all.add((k, int(j)))
        expected = len(want_all)
        for idx, key in enumerate(got):
            if key in want_all:
                hit_lat.append(lat[idx])
                hit_hops.append(hops[idx])
            else:
                false += 1
        missed = expected - len(hit_lat)
        duplicates = sum(c - 1 for c in got.values())
        false += strays
        brokers = sorted(net.brokers)
        stats = [net.brokers[v].stats for v in brokers]
        entries = net.table_entries()
        load = [
            sim.stats.sent_messages[v] + sim.stats.received_messages[v] - self.setup_load[v]
            for v in brokers
        ]
        mean_load = sum(load) / len(load) if load else 0.0
        self.logged = _Logged(got, lat, hops, at, want_all, stray_rows, brokers, load, entries)
        setup_messages, setup_bytes = self.setup_traffic
        vals = np.sort(np.asarray(hit_lat, dtype=np.float64))
        migrations = self._migrations()
        end = max((r.now for r in net.receipts), default=sim.now)
        steady = self._steady(got, want_all, lat, hops, end)
        ad_delay, sub_delay = self._setup_delays()
        hrp_queue: dict[str, float] = {}
        start = self.published[0] if self.published else sim.now
        if self.hrp_node is not None and end > start:
            area = self.hrp_node.queue_area_at(end) - self.hrp_mark
            hrp_queue = {"mean": area / (end - start), "max": float(self.hrp_node.queue_max)}
        self.phases["check"] = time.perf_counter() - mark
        return BrokerResult(
            ad_delay_ms=ad_delay,
            sub_delay_ms=sub_delay,
            hrp_queue=hrp_queue,
            system=p.system,
            workload=p.workload,
            nodes=p.nodes,
            brokers=len(brokers),
            subscriptions=len(pl.subs),
            events=n_events,
            verdict=Verdict(
                expected_deliveries=expected,
                deliveries=sum(got.values()) + strays,
                missed=missed,
                duplicates=duplicates,
                false_positives=false,
            ),
            messages_per_event=(sim.stats.messages - setup_messages) / n_events
            if n_events
            else 0.0,
            bytes_per_event=(sim.stats.bytes - setup_bytes) / n_events if n_events else 0.0,
            traffic_ms_per_event=(sim.stats.delay_ms - self.setup_delay_ms) / n_events
            if n_events
            else 0.0,
            matchings_per_event=sum(s.matchings for s in stats) / n_events if n_events else 0.0,
            hops_per_delivery=sum(hit_hops) / len(hit_hops) if hit_hops else 0.0,
            delivery_latency_ms={
                "mean": ordered_sum(vals) / len(vals) if len(vals) else 0.0,
                "p90": percentile(vals, 0.90),
                "max": float(vals[-1]) if len(vals) else 0.0,
            },
            false_positive_receptions=sum(s.false_positives for s in stats),
            pure_forwards=sum(s.pure_forwards for s in stats),
            table_entries=mean_max(entries),
            neighbours=mean_max(
                [
                    len({u for o in b.overlays for u in b.neighbours(o)})
                    for _, b in sorted(net.brokers.items())
                ]
            ),
            load_max_over_mean=max(load) / mean_load if mean_load else 0.0,
            input_utilisation=self._utilisation(
                self.busy_mark, self.published[0] if self.published else sim.now, end
            ),
            load_gini=gini(load),
            setup_messages=setup_messages,
            setup_bytes=setup_bytes,
            ad_messages=self.ad_messages,
            publications_per_event=(
                sim.stats.types_json().get("Publish", {}).get("messages", 0) - self.setup_pubs
            )
            / n_events
            if n_events
            else 0.0,
            srt_entries=mean_max(self.srt),
            messages_by_type=sim.stats.types_json(),
            migrations=migrations,
            layout=self.system.layout,
            sim_time_s=sim.now,
            steady=steady,
            **self.common_fields(),
        )

    def logged_params(self) -> dict[str, Any]:
        return {**super().logged_params(), "system": self.params.system}

    def write_more_logs(self, out_dir: Path) -> None:
        """Deliveries, events and the brokers' columns of ``nodes.parquet`` (docs/run-logs.md)."""
        lg, pl, net = self.logged, self.plan, self.bnet
        n = len(self.sim.cores)
        owner = [i for _, i, _ in pl.subs]
        runlog.write_table(
            out_dir / "events.parquet",
            {
                "eid": (pa.int64(), range(len(pl.pubs))),
                "publisher": (pa.int32(), (i for _, i in pl.pubs)),
                "published_s": (pa.float64(), self.published),
            },
        )
        # One row per (event, subscription) expected or received, in (eid, subscriber, sid)
        # order like the thesis' log; eid and sid are the workload's indices of the event and
        # the subscription (a broker's own ids are local to it).
        first = {key: idx for idx, key in enumerate(lg.got)}
        rows: dict[int, list[tuple[int, int, bool, float, int, float, int, int]]] = {}
        for k, j in sorted(lg.want | lg.got.keys(), key=lambda kj: (kj[0], owner[kj[1]], kj[1])):
            idx = first.get((k, j))
            t0 = self.published[k]
            if idx is None:
                row = (owner[j], j, True, math.nan, 0, math.nan, -1, -1)
            else:
                ms = lg.lat[idx]
                row = (
                    owner[j], j, (k, j) in lg.want, t0 + ms / 1000.0, lg.got[(k, j)], ms,
                    lg.at[idx], lg.hops[idx],
                )  # fmt: skip
            rows.setdefault(k, []).append(row)
        for k, broker, sid, now, hop in lg.strays:
            t0 = self.published[k] if k >= 0 else math.nan
            rows.setdefault(k, []).append(
                (broker, sid, False, now, 1, (now - t0) * 1000.0, broker, hop)
            )
        log = runlog.DeliveryLog(out_dir / "deliveries.parquet", runlog.BROKER_DELIVERY_COLUMNS)
        for k in sorted(rows):
            cols = list(zip(*rows[k], strict=True))
            publisher = pl.pubs[k][1] if k >= 0 else -1
            log.add(k, publisher, self.published[k] if k >= 0 else math.nan, *cols)
        log.close()
        broker_of = {v: i for i, v in enumerate(lg.brokers)}
        stats = {v: b.stats for v, b in net.brokers.items()}

        def per_broker(values: Sequence[int]) -> list[int]:
            return [values[broker_of[v]] if v in broker_of else -1 for v in range(n)]

        srt = per_broker(self.srt)
        runlog.write_nodes(
            out_dir,
            self.sim,
            extra={
                "broker": (pa.bool_(), (v in broker_of for v in range(n))),
                "event_load": (pa.int64(), per_broker(lg.load)),
                "table_entries": (pa.int64(), per_broker(lg.entries)),
                "srt_entries": (pa.int64(), srt),
                "false_positive_receptions": (
                    pa.int64(),
                    (stats[v].false_positives if v in stats else -1 for v in range(n)),
                ),
                "pure_forwards": (
                    pa.int64(),
                    (stats[v].pure_forwards if v in stats else -1 for v in range(n)),
                ),
            },
        )


@dataclass(slots=True)
class _Logged:
    """What ``check`` measured that the run log writes out (``write_more_logs``)."""

    #: (event index, subscription index) -> receipts; the first receipt's latency (ms),
    #: hops and broker, by the key's position in ``got``.
    got: dict[tuple[int, int], int]
    lat: list[float]
    hops: list[int]
    at: list[int]
    want: set[tuple[int, int]]
    #: Receipts of no known event or subscription: (event index or -1, broker, sid, time, hops).
    strays: list[tuple[int, int, int, float, int]]
    brokers: list[int]
    #: Per broker (``brokers``' order): event-phase messages sent + received, table entries.
    load: list[int]
    entries: list[int]


#: Each system's scenario (``rangecast sim run NAME``): its parameters (``system`` fixed) and
#: one line of help.
_SCENARIOS: dict[str, tuple[type[BrokerParams], str]] = {
    "siena": (SienaParams, "SIENA's filter-based broker tree on the thesis workload"),
    "padres": (PadresParams, "PADRES (advertisements) on the thesis workload"),
    "octopia": (OctopiaParams, "OctopiA's clustered SCOT (CIVs, SNR/IDR) on the thesis workload"),
    "kyra": (KyraParams, "Kyra's cliques, zones and trees on the thesis workload"),
    "kmeans": (
        KmeansParams,
        "Kyra's multicast-based baseline (K-means groups of cells) on the thesis workload",
    ),
    "pop": (PopParams, "POP publisher relocation on PADRES, thesis workload"),
    "grape": (GrapeParams, "GRAPE publisher relocation on PADRES, thesis workload"),
}


def _system_scenario(name: str) -> type[BrokerScenario]:
    params, help = _SCENARIOS[name]
    attrs = {
        "name": name,
        "command": ("run", name),
        "help": f"{help}, checked by the oracle",
        "params_type": params,
    }
    return type(name.capitalize(), (BrokerScenario,), attrs)


#: The scenario of each system.
BY_SYSTEM: dict[str, type[BrokerScenario]] = {name: _system_scenario(name) for name in SYSTEMS}
