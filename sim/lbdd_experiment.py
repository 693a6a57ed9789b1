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
   copies and contribution (copies / N). The same figures under the other rule (near-bucket merge
   or the paper's exact rule) are computed from the same list.
4. With ``--data-bytes``: every host gets the same uplink capacity and the publisher publishes;
   ``lbdd_time_s`` runs from the ``publish`` call to the last subscriber holding every slice.
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

import argparse
import math
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rangecast.dht.errors import LocalProtocolError
from rangecast.dht.node import PastryConfig, PastryNode
from rangecast.dht.wire import codec_for
from rangecast.multicast.lbdd import SOURCE, bucket_of, build_tree, check_views, digest, near_floor
from rangecast.multicast.messages import (
    MAX_SLICE_BYTES,
    MAX_SLICES,
    MODE_LBDD,
    MODE_LBDD_PAPER,
    MODE_STAR,
)
from rangecast.multicast.topic import PublicationComplete, SliceDelivered, TopicConfig, TopicPeer
from rangecast.sim import runlog
from rangecast.sim.engine import PORT, Simulator
from rangecast.sim.latency import LatencyModel, latency_model
from rangecast.sim.network import SimNetwork
from rangecast.sim.options import add_out_option, finite_float, positive_float, require_finite
from rangecast.sim.outputs import emit_result
from rangecast.sim.progress import Progress, as_progress, progress_for
from rangecast.sim.streams import stream

TOPIC = "lbdd"
#: Fields that depend on the machine, not on the seed.
WALL_FIELDS = ("wall_s", "wall_phases_s")


@dataclass(frozen=True, slots=True)
class LbddParams:
    subscribers: int = 11
    seed: int = 1
    data_bytes: int = 0
    slice_bytes: int = 64 * 1024
    uplink_mbps: float = 100.0
    churn: float = 0.0
    latency: str = "synthetic"
    near_bucket: bool = True
    #: Slices a node may have unacknowledged (its send buffer).
    window_slices: int = 64
    #: Run the point-to-point baseline when there is data.
    p2p: bool = True

    def check(self) -> None:
        require_finite({"--uplink-mbps": self.uplink_mbps, "--churn": self.churn})
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
        self, latency: LatencyModel, net_rng: random.Random, addr_rng: random.Random, **kw
    ):
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


class _Net:
    """One simulated run: the overlay of topic peers and what their events said."""

    def __init__(self, params: LbddParams, progress: Progress) -> None:
        self.params = params
        seed = params.seed
        self.model = latency_model(params.latency, seed)
        self.sim = _AddressedSimulator(
            self.model,
            stream(seed, "network"),
            stream(seed, "addresses"),
            codec=codec_for(*TopicPeer.TABLES),
            progress=progress.engine_hook,
        )
        cfg = TopicConfig(slice_bytes=params.slice_bytes, send_budget_slices=params.window_slices)
        self.peers: list[TopicPeer] = []

        def make(i: int, node: PastryNode) -> TopicPeer:
            peer = TopicPeer(node, node.rng, cfg)
            self.peers.append(peer)
            return peer

        self.overlay = SimNetwork(sim=self.sim, seed=seed, config=PastryConfig(), core_factory=make)
        n = params.subscribers + 1
        self.overlay.create(n)
        self.overlay.oracle_bootstrap(range(n))
        self.addrs = list(self.sim.addrs)
        self.subscribers = list(range(1, n))
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

    def set_uplinks(self, mbps: float) -> None:
        for i in range(len(self.addrs)):
            self.sim.set_uplink(i, mbps * 1e6)

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


def check_tree(net: _Net, mode: int) -> dict[str, Any]:
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
    net: _Net,
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
    live = net.live(net.subscribers)
    times = [net.complete_at[i] - t0 for i in live if i in net.complete_at]
    once = all(all(c == 1 for c in net.got[i]) for i in live)
    info = [net.peers[i].topic.publication(TOPIC, net.addrs[0], pid_box[0]) for i in live]
    return {
        "finished": finished,
        "time_s": max(times) if len(times) == len(live) else None,
        "complete": len(times),
        "live": len(live),
        "crashed": crashed,
        "exactly_once": once and net.wrong_bytes == 0 and len(times) == len(live),
        "wrong_bytes": net.wrong_bytes,
        "duplicate_slices": sum(net.peers[i].topic.stats.duplicates for i in range(len(net.addrs))),
        "senders": [sorted(p.senders) if p is not None else [] for p in info],
        "pid": pid_box[0] if pid_box else None,
    }


def run_lbdd(
    params: LbddParams,
    progress: Callable[[str], None] | None = None,
    out: Path | str | None = None,
    *,
    force: bool = False,
) -> dict[str, Any]:
    """Run the topic experiment; with ``out``, also write the run log of the LBDD network (the
    point-to-point baseline is a separate network and is not logged) there."""
    params.check()
    out_dir = runlog.prepare_dir(out, force=force) if out is not None else None
    wall0 = time.perf_counter()
    say = as_progress(progress, "lbdd")
    phases: dict[str, float] = {}
    n = params.subscribers
    mode = params.mode

    net = _Net(params, say)
    messages_log = (
        runlog.MessageLog(out_dir / "messages.parquet", net.sim.codec) if out_dir else None
    )
    if messages_log is not None:
        net.sim.message_log = messages_log.record
    say(f"{n} subscribers + 1 publisher placed ({net.model.name}); joining the topic")
    if params.data_bytes:
        net.set_uplinks(params.uplink_mbps)
    net.join()
    settle_limit = net.sim.now + 120.0
    if not net.run_until(lambda: net.settled() is not None, settle_limit):
        raise LocalProtocolError("the topic's membership did not settle within 120 s simulated")
    phases["join"] = time.perf_counter() - wall0
    tree = check_tree(net, mode)
    publisher = net.addrs[0]
    members = [net.addrs[i] for i in net.subscribers]
    say(
        f"list version {tree['version']} settled at t={net.sim.now:.1f}s; tree valid: "
        f"{tree['valid']}, depth {tree['depth']}, max out-degree {tree['max_out_degree']}"
    )
    s = digest(publisher)
    buckets = [bucket_of(s, digest(a)) for a in members]
    result: dict[str, Any] = {
        "subscribers": n,
        "seed": params.seed,
        "near_bucket": params.near_bucket,
        "latency_model": net.model.describe(),
        "tree_valid": tree["valid"],
        "tree_problems": tree["problems"],
        "list_version": tree["version"],
        "depth": tree["depth"],
        "bucket_min": min(buckets),
        "bucket_max": max(buckets),
        "near_floor": near_floor(n) if params.near_bucket and n > 1 else None,
        "mean_out_degree": tree["mean_out_degree"],
        "max_out_degree": tree["max_out_degree"],
        "publisher_copies": tree["publisher_copies"],
        "publisher_contribution": tree["publisher_copies"] / n,
        "out_degree_histogram": _tree_stats(publisher, members, params.near_bucket)[
            "out_degree_histogram"
        ],
        "other_rule": {
            "near_bucket": not params.near_bucket,
            **_tree_stats(publisher, members, not params.near_bucket),
        },
        "ideal_ratio": n / tree["max_out_degree"],
    }
    ok = tree["valid"]
    if params.data_bytes or params.churn:
        bps = params.uplink_mbps * 1e6
        ideal = tree["max_out_degree"] * params.data_bytes * 8.0 / bps if params.data_bytes else 0
        mark = time.perf_counter()
        if params.data_bytes:
            say(
                f"LBDD: publishing {params.data_bytes:,} bytes in {params.slice_bytes:,}-byte "
                f"slices, uplinks {params.uplink_mbps:g} Mbit/s (ideal {ideal:.1f}s)"
            )
            lb = _transfer(net, params, mode, params.churn, say, ideal)
            phases["lbdd"] = time.perf_counter() - mark
            result.update(
                lbdd_time_s=lb["time_s"],
                lbdd_ideal_time_s=ideal,
                all_bytes_exactly_once=lb["exactly_once"],
                subscribers_complete=lb["complete"],
                duplicate_slices=lb["duplicate_slices"],
                data_bytes=params.data_bytes,
                slice_bytes=params.slice_bytes,
                slices=net.total,
                uplink_mbps=params.uplink_mbps,
                window_slices=params.window_slices,
            )
            ok = ok and lb["exactly_once"]
            if not params.churn:
                # Without failures each subscriber takes every slice from its own parent.
                live = net.live(net.subscribers)
                views = {
                    i: net.peers[i].topic.tree_view(TOPIC, publisher, mode).parent for i in live
                }
                result["received_only_from_parent"] = all(
                    snd == [views[i]] for i, snd in zip(live, lb["senders"], strict=True)
                )
            done_s = "never" if lb["time_s"] is None else f"after {lb['time_s']:.1f} s"
            say(f"LBDD: last subscriber complete {done_s}")
        if params.churn:
            if not params.data_bytes:
                victims = sorted(
                    stream(params.seed, "churn").sample(net.subscribers, round(params.churn * n))
                )
                for i in victims:
                    net.sim.crash(i)
                crashed = victims
            else:
                crashed = lb["crashed"]
            repaired = net.run_until(lambda: net.settled() is not None, net.sim.now + 120.0)
            after = check_tree(net, mode)
            result["churn"] = {
                "fraction": params.churn,
                "crashed": len(crashed),
                "rendezvous_crashed": any(net.peers[i].topic.hosts(TOPIC) for i in crashed),
                "live_subscribers": len(net.live(net.subscribers)),
                "repaired": repaired,
                "repaired_tree_valid": repaired and after["valid"],
                "repaired_tree_problems": after["problems"],
                "repaired_depth": after["depth"],
                "repaired_max_out_degree": after["max_out_degree"],
                "list_version": after["version"],
            }
            ok = ok and repaired and after["valid"]
            result["tree_valid"] = result["tree_valid"] and repaired and after["valid"]
            say(f"churn: {len(crashed)} crashed; repaired tree valid: {after['valid']}")
        result["sim_messages"] = net.sim.stats.messages
        result["sim_bytes"] = net.sim.stats.bytes
        result["messages_by_type"] = net.sim.stats.types_json()
        if params.data_bytes and params.p2p:
            mark = time.perf_counter()
            say("point-to-point baseline: same network, the publisher sends every copy")
            if messages_log is not None:
                net.sim.message_log = None
            p2p_net = _Net(params, say)
            p2p_net.set_uplinks(params.uplink_mbps)
            p2p_net.join()
            if not p2p_net.run_until(lambda: p2p_net.settled() is not None, 120.0):
                raise LocalProtocolError("the baseline's membership did not settle")
            p2p = _transfer(p2p_net, params, MODE_STAR, 0.0, say, n * params.data_bytes * 8 / bps)
            phases["p2p"] = time.perf_counter() - mark
            result["p2p_time_s"] = p2p["time_s"]
            result["p2p_all_bytes_exactly_once"] = p2p["exactly_once"]
            ok = ok and p2p["exactly_once"]
            if p2p["time_s"] and result.get("lbdd_time_s"):
                result["p2p_over_lbdd"] = p2p["time_s"] / result["lbdd_time_s"]
            done_s = "never" if p2p["time_s"] is None else f"after {p2p['time_s']:.1f} s"
            say(f"point-to-point: last subscriber complete {done_s}")
    result["ok"] = bool(ok)
    result["wall_phases_s"] = phases
    result["wall_s"] = time.perf_counter() - wall0
    if out_dir is not None and messages_log is not None:
        messages_log.close()
        runlog.write_nodes(out_dir, net.sim)
        runlog.write_run(out_dir, "lbdd", {**asdict(params), "scenario": "lbdd"}, result)
    return result


# ---------------------------------------------------------------------------------- the CLI


def _lbdd_cmd(args: argparse.Namespace) -> int:
    params = LbddParams(
        subscribers=args.subscribers,
        seed=args.seed,
        data_bytes=args.data_bytes,
        slice_bytes=args.slice_bytes,
        uplink_mbps=args.uplink_mbps,
        churn=args.churn,
        latency=args.latency,
        near_bucket=not args.no_near_bucket,
        window_slices=args.window,
        p2p=not args.no_p2p,
    )
    result = run_lbdd(
        params,
        progress=progress_for(args, "lbdd"),
        out=args.out,
        force=args.force,
    )
    emit_result(result, args.json, _print_summary)
    return 0 if result["ok"] else 1


def _print_summary(r: dict[str, Any]) -> None:
    rule = "near-bucket merge" if r["near_bucket"] else "paper's exact rule"
    lines = [
        f"LBDD topic mode: 1 publisher, {r['subscribers']} subscribers, seed {r['seed']}, "
        f"{rule}, latency {r['latency_model']['name']}",
        f"  tree               valid: {r['tree_valid']}; depth {r['depth']}, buckets "
        f"{r['bucket_min']}..{r['bucket_max']}",
        f"  out-degree         mean {r['mean_out_degree']:.2f} over forwarders, "
        f"max {r['max_out_degree']}; publisher sends {r['publisher_copies']} copies "
        f"(contribution {r['publisher_contribution']:.3f})",
    ]
    if "lbdd_time_s" in r:
        lines.append(
            f"  transfer           {r['data_bytes']:,} bytes, uplinks {r['uplink_mbps']:g} Mbit/s: "
            f"LBDD {r['lbdd_time_s']:.1f}s (ideal {r['lbdd_ideal_time_s']:.1f}s)"
            + (f", point-to-point {r['p2p_time_s']:.1f}s" if r.get("p2p_time_s") else "")
        )
        if "p2p_over_lbdd" in r:
            lines.append(
                f"  speed-up           point-to-point / LBDD = {r['p2p_over_lbdd']:.2f} "
                f"(ideal N / max out-degree = {r['ideal_ratio']:.2f}; paper LAN 2.59)"
            )
        lines.append(
            f"  delivery           every subscriber got every byte exactly once: "
            f"{r['all_bytes_exactly_once']} ({r['duplicate_slices']} duplicate slices dropped)"
        )
    if "churn" in r:
        c = r["churn"]
        lines.append(
            f"  churn              {c['crashed']} crashed, {c['live_subscribers']} live; "
            f"repaired tree valid: {c['repaired_tree_valid']}"
        )
    lines.append(f"  wall               {r['wall_s']:.1f} s")
    print("\n".join(lines))


def add_lbdd_parser(sims: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``sim lbdd``."""
    p = sims.add_parser(
        "lbdd",
        help="LBDD topic dissemination over the DHT, against point-to-point",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--subscribers", type=int, default=11, help="number of subscribers N")
    p.add_argument("--seed", type=int, default=1, help="seed of every random stream")
    p.add_argument(
        "--data-bytes", type=int, default=0, help="bytes to publish (0: tree figures only)"
    )
    p.add_argument("--slice-bytes", type=int, default=64 * 1024, help="slice size")
    p.add_argument(
        "--uplink-mbps", type=positive_float, default=100.0, help="every host's uplink, Mbit/s"
    )
    p.add_argument(
        "--churn",
        type=finite_float,
        default=0.0,
        help="fraction of subscribers to crash mid-transfer",
    )
    p.add_argument(
        "--latency",
        default="synthetic",
        help="'synthetic', 'planetlab' (the measured 490-host matrix shipped with Rangecast) or "
        "the path of a square RTT matrix (ms)",
    )
    p.add_argument(
        "--no-near-bucket",
        action="store_true",
        help="the paper's exact bucket rule (no merging of sparse low buckets)",
    )
    p.add_argument("--window", type=int, default=64, help="slices a node may have unacknowledged")
    p.add_argument("--no-p2p", action="store_true", help="skip the point-to-point baseline")
    add_out_option(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=_lbdd_cmd)
