"""``rangecast sim lbdd``: the LBDD topic mode in the simulator, against point-to-point.

Stages:

1. N + 1 nodes (node 0 the publisher, 1..N the subscribers) form a Pastry overlay (oracle
   bootstrap). Hosts get random IPv4 addresses (port 4000) from the seed, as the paper's
   simulation generated random IP addresses: LBDD digests are MD5s of addresses, and the
   simulator's default addresses (the node index) would give every seed the same tree.
2. The subscribers join the topic through its DHT rendezvous (joins spread over one second), the
   publisher attaches for the list; the run waits until every node holds the same list of all N.
3. Tree: every node's own view (its parent and children, computed from its own list) is
   collected and checked from the outside: every subscriber has exactly one parent, parent and
   child agree, no cycle, everyone reachable from the publisher; and it must equal the tree
   ``build_tree`` gives centrally. Figures: depth, bucket range, out-degrees, the publisher's
   copies and contribution (copies / N). The tree is the paper's rule by default, our
   near-bucket variant with ``--near-bucket on``; the same figures under the other rule are
   computed from the same list.
4. With ``--data-bytes``: every host gets the same uplink capacity (and, with ``--flow-mbps``,
   every sender -> receiver pair the same per-flow cap: our model of the paper's testbed,
   ``TESTBED_*`` below) and the publisher publishes; ``lbdd_time_s`` runs from the ``publish``
   call to the last subscriber holding every slice. The rates and the publisher's load (its
   uplink's busy fraction: the paper's Figs 2 and 3) come with the times.
   ``--churn F`` crashes F of the subscribers at 30% of the ideal transfer time (before the
   transfer if there is no data); the run then also waits for the repaired tree, checks it, and
   requires every live subscriber to get everything.
5. Point-to-point baseline: a separate run of the same network (same seed: same addresses,
   placement and uplinks), in which the publisher sends every slice to every subscriber itself
   (the star mode of the same code, same windows and acknowledgements): ``p2p_time_s``.

Delivery is checked per slice: every subscriber must get every slice index exactly once, with the
publisher's bytes (the very object, or equal bytes). Same seed, same JSON (but the ``wall_*``
fields).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rangecast.dht.errors import LocalProtocolError
from rangecast.dht.node import PastryConfig
from rangecast.multicast.lbdd import SOURCE, bucket_of, build_tree, check_views, digest, near_floor
from rangecast.multicast.messages import (
    MAX_SLICE_BYTES,
    MAX_SLICES,
    MODE_LBDD,
    MODE_LBDD_PAPER,
    MODE_STAR,
)
from rangecast.multicast.topic import PublicationComplete, SliceDelivered, TopicConfig, TopicPeer
from rangecast.sim.engine import PORT, Simulator
from rangecast.sim.latency import LatencyModel
from rangecast.sim.network import DhtConfig
from rangecast.sim.options import positive_float, require_finite
from rangecast.sim.progress import Progress
from rangecast.sim.scenario import LATENCY_HELP, Part, RunResult, Scenario, flat, optional, param
from rangecast.sim.streams import stream

TOPIC = "lbdd"

#: Our model of the LBDD paper's testbed. The paper states neither number: its hosts have
#: "Marvell Yukon 88E8057 PCI-E Gigabit Ethernet controller[s]" behind Gigabit switches, and
#: what its application achieved over them is derived from two of its sentences:
#:
#: * U, a host's sending capacity: "In the point-to-point approach, the data distribution delay
#:   from the publisher to all subscribers lasts 7 810 s" -- the publisher sent 11 copies of
#:   8 GiB, so U = 11 x 8 x 2^30 x 8 bit / 7,810 s = 96.8 Mbit/s;
#: * f, one flow's rate (one sender -> receiver connection of the paper's application, whose
#:   transport the paper does not name): "With the LBDD method, the data distribution rate
#:   remains around 24 Mbit/s, as shown in Fig.2" -- LBDD's rate is min(f, U / max
#:   out-degree), flat at f while the busiest forwarder has at most U / f = 4 children.
TESTBED_UPLINK_MBPS = 96.8
TESTBED_FLOW_MBPS = 24.0


@dataclass(frozen=True, slots=True)
class LbddParams:
    subscribers: int = param(11, "number of subscribers N")
    seed: int = param(1, "seed of every random stream")
    data_bytes: int = param(0, "bytes to publish (0: tree figures only)")
    slice_bytes: int = param(64 * 1024, "slice size")
    #: The defaults are our model of the paper's testbed (TESTBED_*, derived above from the
    #: paper's own numbers), so that ``sim lbdd`` runs the paper's setting unless told otherwise.
    uplink_mbps: float = param(
        TESTBED_UPLINK_MBPS,
        "every host's sending capacity, Mbit/s (ours, derived from the paper's 7,810 s "
        "point-to-point time; the paper states no rate)",
        type=positive_float,
    )
    churn: float = param(0.0, "fraction of subscribers to crash mid-transfer")
    latency: str = param("synthetic", LATENCY_HELP)
    #: Our variant (off: the paper's exact bucket rule, Algorithm 2).
    near_bucket: bool = param(
        False,
        "our variant: merge sparse low buckets and widen crowded ones (off: the paper's rule)",
        style="on-off",
    )
    #: Our model of the paper's testbed: each sender -> receiver pair paced at this rate on top
    #: of the uplinks, as one connection of the paper's application (0: no cap).
    flow_mbps: float = param(
        TESTBED_FLOW_MBPS,
        "per-flow cap: each sender->receiver pair paced at F Mbit/s (ours, derived from the "
        "paper's 'around 24 Mbit/s'; 0: no cap)",
    )
    #: Slices a node may have unacknowledged (its send buffer).
    window_slices: int = param(64, "slices a node may have unacknowledged", flag="--window")
    #: Run the point-to-point baseline when there is data.
    p2p: bool = param(True, "skip the point-to-point baseline", style="negated")

    def check(self) -> None:
        require_finite(
            {
                "--uplink-mbps": self.uplink_mbps,
                "--churn": self.churn,
                "--flow-mbps": self.flow_mbps,
            }
        )
        if self.flow_mbps < 0:
            raise LocalProtocolError("--flow-mbps must be >= 0 (0: no per-flow cap)")
        if self.subscribers < 1:
            raise LocalProtocolError("--subscribers must be at least 1")
        if self.data_bytes < 0:
            raise LocalProtocolError("--data-bytes must be >= 0")
        if not 1 <= self.slice_bytes <= MAX_SLICE_BYTES:
            raise LocalProtocolError(f"--slice-bytes must be in [1, {MAX_SLICE_BYTES}]")
        if self.data_bytes and math.ceil(self.data_bytes / self.slice_bytes) > MAX_SLICES:
            raise LocalProtocolError(f"at most {MAX_SLICES} slices per publication")
        if self.uplink_mbps <= 0:
            raise LocalProtocolError("--uplink-mbps must be positive")
        if not 0.0 <= self.churn < 1.0:
            raise LocalProtocolError("--churn must be in [0, 1)")
        if self.window_slices < 1:
            raise LocalProtocolError("--window must be at least 1")

    @property
    def mode(self) -> int:
        return MODE_LBDD if self.near_bucket else MODE_LBDD_PAPER


class _AddressedSimulator(Simulator):
    """The simulator with random IPv4 host addresses instead of index-based ones."""

    def __init__(
        self, latency: LatencyModel, net_rng: random.Random, *, addr_rng: random.Random, **kw: Any
    ) -> None:
        super().__init__(latency, net_rng, **kw)
        self._addr_rng = addr_rng

    def add_nodes(self, count: int, place_rng: random.Random) -> range:
        indices = super().add_nodes(count, place_rng)
        for i in indices:
            del self.index_of[self.addrs[i]]
            addr = self._addr_rng.getrandbits(32).to_bytes(4, "big") + PORT
            while addr in self.index_of:
                addr = self._addr_rng.getrandbits(32).to_bytes(4, "big") + PORT
            self.addrs[i] = addr
            self.index_of[addr] = i
        return indices


def _tree_stats(source: bytes, members: list[bytes], near_bucket: bool) -> dict[str, Any]:
    """Figures of the tree ``build_tree`` gives (computed centrally)."""
    tree = build_tree(source, members, near_bucket=near_bucket)
    degrees = tree.out_degrees()
    forwarding = [d for d in degrees if d > 0]
    n = len(members)
    return {
        "depth": tree.depth,
        "mean_out_degree": sum(forwarding) / len(forwarding) if forwarding else 0.0,
        "max_out_degree": max(degrees),
        "publisher_copies": degrees[0],
        "publisher_contribution": degrees[0] / n if n else 0.0,
        "forwarders": len(forwarding),
        "out_degree_histogram": {str(d): degrees.count(d) for d in sorted(set(degrees))},
    }


def check_tree(net: Lbdd, mode: int) -> dict[str, Any]:
    """Verify the tree the live nodes actually use (each from its own list), from outside."""
    addrs = net.addrs
    publisher = addrs[0]
    live = net.live(net.subscribers)
    views = {i: net.peers[i].topic.tree_view(TOPIC, publisher, mode) for i in [0, *live]}
    versions = {v.version for v in views.values()}
    problems, depth = check_views(
        publisher,
        {addrs[i]: views[i].parent for i in live},
        {addrs[i]: v.children for i, v in views.items()},
    )
    if len(versions) != 1:
        problems.append(f"nodes hold {len(versions)} different list versions")
    if mode != MODE_STAR:
        # And it is the tree LBDD defines on that list.
        members = [addrs[i] for i in live]
        tree = build_tree(publisher, members, near_bucket=mode == MODE_LBDD)
        for k, i in enumerate(live):
            p = tree.parent[k]
            if views[i].parent != (publisher if p == SOURCE else members[p]):
                problems.append(f"subscriber {i}'s parent differs from build_tree's")
                break
    degrees = [len(views[i].children) for i in [0, *live]]
    forwarding = [d for d in degrees if d > 0]
    return {
        "valid": not problems,
        "problems": problems[:10],
        "version": min(versions) if versions else 0,
        "depth": depth,
        "out_degrees": degrees,
        "mean_out_degree": sum(forwarding) / len(forwarding) if forwarding else 0.0,
        "max_out_degree": max(degrees),
        "publisher_copies": degrees[0],
    }


def _ideal_s(data_bytes: int, out_degree: int, params: LbddParams) -> float:
    """The time a sender with ``out_degree`` children needs to send them ``data_bytes`` each:
    each child gets min(flow cap, uplink / out-degree)."""
    per_child = params.uplink_mbps * 1e6 / out_degree
    if params.flow_mbps:
        per_child = min(per_child, params.flow_mbps * 1e6)
    return data_bytes * 8.0 / per_child


def _slices(params: LbddParams) -> tuple[list[bytes], Callable[[int], bytes]]:
    """The publication: ``data_bytes`` cut in slices. Slices are drawn from a pool of 1,021
    distinct objects (slice k is pool[k % 1021], each with its own header), so a 256 MiB run
    does not hold 256 MiB of distinct bytes, yet a slice delivered under the wrong index is
    still caught."""
    size = params.slice_bytes
    total = max(1, math.ceil(params.data_bytes / size))
    rng = stream(params.seed, "data")
    base = rng.randbytes(size)
    pool = [j.to_bytes(4, "big") + base[4:] if size >= 4 else base for j in range(min(total, 1021))]
    last_len = params.data_bytes - (total - 1) * size
    last = (total - 1).to_bytes(4, "big")[:last_len] + base[4:last_len] if last_len else b""
    slices = [pool[k % len(pool)] for k in range(total - 1)]
    slices.append(last if last_len < size else pool[(total - 1) % len(pool)])
    return slices, slices.__getitem__


def _transfer(
    net: Lbdd,
    params: LbddParams,
    mode: int,
    churn: float,
    say: Progress,
    ideal_s: float,
) -> dict[str, Any]:
    """Publish and run until every live subscriber has everything (or the time limit)."""
    sim = net.sim
    slices, expected = _slices(params)
    net.expected = expected
    net.total = len(slices)
    net.got = [bytearray(len(slices)) for _ in net.addrs]
    net.complete_at = {}
    t0 = sim.now
    sent0 = sim.stats.sent_bytes[0]
    pub = net.peers[0].topic
    pid_box: list[int] = []

    def start() -> None:
        pid_box.append(pub.publish_slices(TOPIC, slices, sim.now, mode=mode))
        sim.poke(0)

    sim.call_at(t0, start)
    crashed: list[int] = []
    if churn > 0:
        victims = sorted(
            stream(params.seed, "churn").sample(net.subscribers, round(churn * params.subscribers))
        )

        def crash() -> None:
            for i in victims:
                sim.crash(i)
            crashed.extend(victims)
            say(f"crashed {len(victims)} subscribers at t+{sim.now - t0:.1f}s")

        sim.call_at(t0 + 0.3 * ideal_s, crash)
    limit = t0 + 20.0 * ideal_s + 300.0

    def done() -> bool:
        if churn > 0 and not crashed:
            return False  # judge only after the crash
        return all(i in net.complete_at for i in net.live(net.subscribers))

    # Slices received by the subscribers (the publisher's own row stays empty).
    say.phase(
        "transfer",
        len(slices) * len(net.subscribers),
        lambda: sum(len(g) - g.count(0) for g in net.got),
        "slices",
    )
    finished = net.run_until(done, limit, step=max(0.5, ideal_s / 50))
    say.end()
    sent = sim.stats.sent_bytes[0] - sent0
    live = net.live(net.subscribers)
    times = [net.complete_at[i] - t0 for i in live if i in net.complete_at]
    time_s = max(times) if len(times) == len(live) else None
    once = all(all(c == 1 for c in net.got[i]) for i in live)
    info = [net.peers[i].topic.publication(TOPIC, net.addrs[0], pid_box[0]) for i in live]
    return {
        "finished": finished,
        "time_s": time_s,
        # The paper's Fig. 3 "network load for the publisher": the fraction of the transfer
        # its uplink was busy (bytes it sent over what the uplink could have sent meanwhile).
        "publisher_load": sent * 8.0 / (params.uplink_mbps * 1e6 * time_s) if time_s else None,
        "rate_mbps": params.data_bytes * 8.0 / time_s / 1e6 if time_s else None,
        "complete": len(times),
        "live": len(live),
        "crashed": crashed,
        "exactly_once": once and net.wrong_bytes == 0 and len(times) == len(live),
        "wrong_bytes": net.wrong_bytes,
        "duplicate_slices": sum(net.peers[i].topic.stats.duplicates for i in range(len(net.addrs))),
        "senders": [sorted(p.senders) if p is not None else [] for p in info],
        "pid": pid_box[0] if pid_box else None,
    }


@dataclass(kw_only=True, slots=True)
class Transfer(Part):
    """With ``--data-bytes``: the LBDD transfer."""

    lbdd_time_s: float | None
    lbdd_ideal_time_s: float
    all_bytes_exactly_once: bool
    subscribers_complete: int
    duplicate_slices: int
    data_bytes: int
    slice_bytes: int
    slices: int
    uplink_mbps: float
    #: The per-flow cap (0: none); see ``--flow-mbps``.
    flow_mbps: float
    window_slices: int
    #: The paper's "data distribution rate": bytes x 8 / time, Mbit/s.
    lbdd_rate_mbps: float | None
    #: The paper's Fig. 3: the publisher's uplink busy fraction over the LBDD transfer.
    lbdd_publisher_load: float | None
    #: Without churn: whether each subscriber took every slice from its own parent.
    received_only_from_parent: bool | None = optional()


@dataclass(kw_only=True, slots=True)
class Traffic(Part):
    """With data or churn: the LBDD network's traffic."""

    sim_messages: int
    sim_bytes: int
    messages_by_type: dict[str, Any]


@dataclass(kw_only=True, slots=True)
class Baseline(Part):
    """With data (and without ``--no-p2p``): the point-to-point baseline."""

    p2p_time_s: float | None
    p2p_all_bytes_exactly_once: bool
    p2p_rate_mbps: float | None
    #: The publisher's uplink busy fraction over the point-to-point transfer.
    p2p_publisher_load: float | None
    p2p_over_lbdd: float | None = optional()


@dataclass(kw_only=True, slots=True)
class LbddResult(RunResult):
    WALL_FIELDS = ("wall_s", "wall_phases_s")

    subscribers: int
    near_bucket: bool
    tree_valid: bool
    tree_problems: list[str]
    list_version: int
    depth: int
    bucket_min: int
    bucket_max: int
    near_floor: int | None
    mean_out_degree: float
    max_out_degree: int
    publisher_copies: int
    publisher_contribution: float
    out_degree_histogram: dict[str, int]
    other_rule: dict[str, Any]
    ideal_ratio: float
    ok: bool
    wall_phases_s: dict[str, float]
    transfer: Transfer | None = flat()
    #: With ``--churn``: the crash and the repaired tree.
    churn: dict[str, Any] | None = optional()
    traffic: Traffic | None = flat()
    baseline: Baseline | None = flat()

    def succeeded(self) -> bool:
        return self.ok

    def summary(self) -> str:
        r = self.json()
        rule = "our near-bucket variant" if r["near_bucket"] else "the paper's bucket rule"
        lines = [
            f"LBDD topic mode: 1 publisher, {r['subscribers']} subscribers, seed {r['seed']}, "
            f"{rule}, latency {r['latency_model']['name']}",
            f"  tree               valid: {r['tree_valid']}; depth {r['depth']}, buckets "
            f"{r['bucket_min']}..{r['bucket_max']}",
            f"  out-degree         mean {r['mean_out_degree']:.2f} over forwarders, "
            f"max {r['max_out_degree']}; publisher sends {r['publisher_copies']} "
            f"cop{'y' if r['publisher_copies'] == 1 else 'ies'} "
            f"(contribution {r['publisher_contribution']:.3f})",
        ]
        if "lbdd_time_s" in r:
            cap = f", flows capped at {r['flow_mbps']:g} Mbit/s" if r["flow_mbps"] else ""
            lines.append(
                f"  transfer           {r['data_bytes']:,} bytes, uplinks "
                f"{r['uplink_mbps']:g} Mbit/s{cap}: LBDD {_num(r['lbdd_time_s'])}s "
                f"(ideal {r['lbdd_ideal_time_s']:.1f}s)"
                + (f", point-to-point {r['p2p_time_s']:.1f}s" if r.get("p2p_time_s") else "")
            )
            rates = f"LBDD {_num(r['lbdd_rate_mbps'])} Mbit/s, publisher load " + _pct(
                r["lbdd_publisher_load"]
            )
            if "p2p_rate_mbps" in r:
                rates += f"; point-to-point {_num(r['p2p_rate_mbps'])} Mbit/s, " + _pct(
                    r["p2p_publisher_load"]
                )
            lines.append(f"  rate, load         {rates}")
            if "p2p_over_lbdd" in r:
                lines.append(
                    f"  speed-up           point-to-point / LBDD = {r['p2p_over_lbdd']:.2f} "
                    f"(ideal {r['ideal_ratio']:.2f}; the paper's 8 GB on its LAN: 2.59)"
                )
            lines.append(
                f"  delivery           every subscriber got every byte exactly once: "
                f"{r['all_bytes_exactly_once']} ({r['duplicate_slices']} duplicate slices "
                "dropped)"
            )
        if "churn" in r:
            c = r["churn"]
            lines.append(
                f"  churn              {c['crashed']} crashed, {c['live_subscribers']} live; "
                f"repaired tree valid: {c['repaired_tree_valid']}"
            )
        lines.append(f"  wall               {r['wall_s']:.1f} s")
        return "\n".join(lines)


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


class Lbdd(Scenario[LbddParams, LbddResult]):
    """The publisher (node 0) and N subscribers (1..N) on a Pastry overlay; the run log is the
    LBDD network's (the point-to-point baseline is a separate network and is not logged)."""

    name = "lbdd"
    command = ("lbdd",)
    tables = TopicPeer.TABLES
    help = "LBDD topic dissemination over the DHT, against point-to-point"
    params_type = LbddParams

    # ---- set-up: random IPv4 addresses, topic peers, delivery bookkeeping

    simulator_type = _AddressedSimulator

    def simulator_options(self) -> dict[str, Any]:
        return {"addr_rng": self.stream("addresses")}

    def dht_config(self) -> DhtConfig:
        return PastryConfig()

    def stack(self) -> dict[str, Any]:
        p = self.params
        cfg = TopicConfig(slice_bytes=p.slice_bytes, send_budget_slices=p.window_slices)
        return self.topic_stack(cfg)

    def size(self) -> int:
        return self.params.subscribers + 1

    def setup(self) -> None:
        super().setup()
        self.peers: list[TopicPeer] = self.net.cores  # type: ignore[assignment]
        self.addrs = list(self.sim.addrs)
        self.subscribers = list(range(1, self.size()))
        # Delivery bookkeeping, filled by the event hook.
        self.expected: Callable[[int], bytes] | None = None
        self.total = 0
        self.got: list[bytearray] = []
        self.wrong_bytes = 0
        self.complete_at: dict[int, float] = {}
        self.sim.on_events = self._on_events

    def _on_events(self, i: int, events: list[Any]) -> None:
        for e in events:
            if type(e) is SliceDelivered:
                if self.got:
                    self.got[i][e.index] += 1
                    want = self.expected(e.index) if self.expected else None
                    if want is not None and e.data is not want and e.data != want:
                        self.wrong_bytes += 1
            elif type(e) is PublicationComplete:
                self.complete_at.setdefault(i, e.now)

    def set_uplinks(self, mbps: float, flow_mbps: float = 0.0) -> None:
        for i in range(len(self.addrs)):
            self.sim.set_uplink(i, mbps * 1e6)
        if flow_mbps:
            self.sim.set_flow_cap(flow_mbps * 1e6)

    def join(self) -> None:
        sim = self.sim
        rng = stream(self.params.seed, "joins")
        t = sim.now
        sim.call_at(t, self._attach, 0)
        for i in self.subscribers:
            sim.call_at(t + rng.uniform(0.0, 1.0), self._join, i)

    def _attach(self, i: int) -> None:
        self.peers[i].topic.attach(TOPIC, self.sim.now)
        self.sim.poke(i)

    def _join(self, i: int) -> None:
        self.peers[i].topic.join(TOPIC, self.sim.now)
        self.sim.poke(i)

    def live(self, nodes: list[int]) -> list[int]:
        return [i for i in nodes if self.sim.alive[i]]

    def settled(self) -> int | None:
        """The version every live node holds, if they all hold the same list of exactly the
        live subscribers; else None."""
        want = {self.addrs[i] for i in self.live(self.subscribers)}
        version = None
        for i in self.live([0, *self.subscribers]):
            topic = self.peers[i].topic
            if TOPIC not in topic.topics():
                return None
            v, members = topic.members(TOPIC)
            if v == 0 or set(members) != want or len(members) != len(want):
                return None
            if version is None:
                version = v
            elif v != version:
                return None
        return version

    def run_until(self, done: Callable[[], bool], limit: float, step: float = 0.5) -> bool:
        sim = self.sim
        while not done():
            if sim.now >= limit:
                return False
            sim.run(until=min(limit, sim.now + step))
        return True

    # ---- the run

    def workload(self) -> None:
        params, say, sim = self.params, self.say, self.sim
        n = params.subscribers
        mode = params.mode
        say(f"{n} subscribers + 1 publisher placed ({self.model.name}); joining the topic")
        if params.data_bytes:
            self.set_uplinks(params.uplink_mbps, params.flow_mbps)
        self.join()
        if not self.run_until(lambda: self.settled() is not None, sim.now + 120.0):
            raise LocalProtocolError("the topic's membership did not settle within 120 s simulated")
        self.phases["join"] = self.elapsed()
        self.tree = tree = check_tree(self, mode)
        say(
            f"list version {tree['version']} settled at t={sim.now:.1f}s; tree valid: "
            f"{tree['valid']}, depth {tree['depth']}, max out-degree {tree['max_out_degree']}"
        )
        self.ok: bool = tree["valid"]
        self.transfer: Transfer | None = None
        self.churn: dict[str, Any] | None = None
        self.traffic: Traffic | None = None
        self.baseline: Baseline | None = None
        if not (params.data_bytes or params.churn):
            return
        # The slowest forwarder sets a pipelined transfer's pace: it sends each slice to its
        # children at min(flow cap, uplink / children) each.
        ideal = (
            _ideal_s(params.data_bytes, tree["max_out_degree"], params) if params.data_bytes else 0
        )
        mark = time.perf_counter()
        lb: dict[str, Any] = {}
        if params.data_bytes:
            say(
                f"LBDD: publishing {params.data_bytes:,} bytes in {params.slice_bytes:,}-byte "
                f"slices, uplinks {params.uplink_mbps:g} Mbit/s (ideal {ideal:.1f}s)"
            )
            lb = _transfer(self, params, mode, params.churn, say, ideal)
            self.phases["lbdd"] = time.perf_counter() - mark
            only_parent = None
            if not params.churn:
                # Without failures each subscriber takes every slice from its own parent.
                live = self.live(self.subscribers)
                publisher = self.addrs[0]
                views = {
                    i: self.peers[i].topic.tree_view(TOPIC, publisher, mode).parent for i in live
                }
                only_parent = all(
                    snd == [views[i]] for i, snd in zip(live, lb["senders"], strict=True)
                )
            self.transfer = Transfer(
                lbdd_time_s=lb["time_s"],
                lbdd_ideal_time_s=ideal,
                all_bytes_exactly_once=lb["exactly_once"],
                subscribers_complete=lb["complete"],
                duplicate_slices=lb["duplicate_slices"],
                data_bytes=params.data_bytes,
                slice_bytes=params.slice_bytes,
                slices=self.total,
                uplink_mbps=params.uplink_mbps,
                flow_mbps=params.flow_mbps,
                window_slices=params.window_slices,
                lbdd_rate_mbps=lb["rate_mbps"],
                lbdd_publisher_load=lb["publisher_load"],
                received_only_from_parent=only_parent,
            )
            self.ok = self.ok and lb["exactly_once"]
            done_s = "never" if lb["time_s"] is None else f"after {lb['time_s']:.1f} s"
            say(f"LBDD: last subscriber complete {done_s}")
        if params.churn:
            self.crash_and_repair(lb.get("crashed"))
        self.traffic = Traffic(
            sim_messages=sim.stats.messages,
            sim_bytes=sim.stats.bytes,
            messages_by_type=sim.stats.types_json(),
        )
        if params.data_bytes and params.p2p:
            self.point_to_point(_ideal_s(params.data_bytes, n, params))

    def crash_and_repair(self, crashed: list[int] | None) -> None:
        """Crash the churn fraction (unless the transfer did) and check the repaired tree."""
        params, sim = self.params, self.sim
        if crashed is None:
            crashed = sorted(
                self.stream("churn").sample(
                    self.subscribers, round(params.churn * params.subscribers)
                )
            )
            for i in crashed:
                sim.crash(i)
        repaired = self.run_until(lambda: self.settled() is not None, sim.now + 120.0)
        after = check_tree(self, params.mode)
        self.churn = {
            "fraction": params.churn,
            "crashed": len(crashed),
            "rendezvous_crashed": any(self.peers[i].topic.hosts(TOPIC) for i in crashed),
            "live_subscribers": len(self.live(self.subscribers)),
            "repaired": repaired,
            "repaired_tree_valid": repaired and after["valid"],
            "repaired_tree_problems": after["problems"],
            "repaired_depth": after["depth"],
            "repaired_max_out_degree": after["max_out_degree"],
            "list_version": after["version"],
        }
        self.ok = self.ok and repaired and after["valid"]
        self.tree["valid"] = self.tree["valid"] and repaired and after["valid"]
        self.say(f"churn: {len(crashed)} crashed; repaired tree valid: {after['valid']}")

    def point_to_point(self, ideal_s: float) -> None:
        """The baseline: a second network of the same seed, the publisher sending every copy."""
        params, say = self.params, self.say
        mark = time.perf_counter()
        say("point-to-point baseline: same network, the publisher sends every copy")
        self.sim.message_log = None
        base = Lbdd()
        base.prepare(params, say)
        base.set_uplinks(params.uplink_mbps, params.flow_mbps)
        base.join()
        if not base.run_until(lambda: base.settled() is not None, 120.0):
            raise LocalProtocolError("the baseline's membership did not settle")
        p2p = _transfer(base, params, MODE_STAR, 0.0, say, ideal_s)
        self.phases["p2p"] = time.perf_counter() - mark
        lbdd_time = self.transfer.lbdd_time_s if self.transfer is not None else None
        self.baseline = Baseline(
            p2p_time_s=p2p["time_s"],
            p2p_all_bytes_exactly_once=p2p["exactly_once"],
            p2p_rate_mbps=p2p["rate_mbps"],
            p2p_publisher_load=p2p["publisher_load"],
            p2p_over_lbdd=p2p["time_s"] / lbdd_time if p2p["time_s"] and lbdd_time else None,
        )
        self.ok = self.ok and p2p["exactly_once"]
        done_s = "never" if p2p["time_s"] is None else f"after {p2p['time_s']:.1f} s"
        say(f"point-to-point: last subscriber complete {done_s}")

    def check(self) -> LbddResult:
        params, tree = self.params, self.tree
        n = params.subscribers
        publisher = self.addrs[0]
        members = [self.addrs[i] for i in self.subscribers]
        s = digest(publisher)
        buckets = [bucket_of(s, digest(a)) for a in members]
        return LbddResult(
            subscribers=n,
            seed=params.seed,
            near_bucket=params.near_bucket,
            latency_model=self.model.describe(),
            tree_valid=tree["valid"],
            tree_problems=tree["problems"],
            list_version=tree["version"],
            depth=tree["depth"],
            bucket_min=min(buckets),
            bucket_max=max(buckets),
            near_floor=near_floor(n) if params.near_bucket and n > 1 else None,
            mean_out_degree=tree["mean_out_degree"],
            max_out_degree=tree["max_out_degree"],
            publisher_copies=tree["publisher_copies"],
            publisher_contribution=tree["publisher_copies"] / n,
            out_degree_histogram=_tree_stats(publisher, members, params.near_bucket)[
                "out_degree_histogram"
            ],
            other_rule={
                "near_bucket": not params.near_bucket,
                **_tree_stats(publisher, members, not params.near_bucket),
            },
            # N / max out-degree without a flow cap.
            ideal_ratio=n / tree["max_out_degree"]
            if not params.flow_mbps
            else _ideal_s(1, n, params) / _ideal_s(1, tree["max_out_degree"], params),
            ok=bool(self.ok),
            transfer=self.transfer,
            churn=self.churn,
            traffic=self.traffic,
            baseline=self.baseline,
            wall_phases_s=self.phases,
            wall_s=self.elapsed(),
        )


#: ``Lbdd().run(...)`` as JSON (tests, benchmarks).
run_lbdd = Lbdd.run_json


#: Fields that depend on the machine, not on the seed.
WALL_FIELDS = LbddResult.WALL_FIELDS
