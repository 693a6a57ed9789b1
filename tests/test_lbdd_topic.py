"""The LBDD topic mode end to end in the simulator, and its wire messages under fuzzing.

The randomized test drives a small overlay through joins, leaves, crashes and publications
(Hypothesis picks the sequence), lets it settle, and checks from outside:

* every live member holds the same list, of exactly the live members, and the tree each node
  computes from it (for every live attached node as a publisher) is valid: one parent each,
  parent and child agree, no cycle, everyone reached, and it is ``build_tree``'s tree;
* a publication reaches every live member that was a member when it was published (and stayed
  one) completely, and no member gets any slice twice.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from rangecast.dht.errors import WireError
from rangecast.dht.ids import DEFAULT_SPACE
from rangecast.dht.node import PastryConfig, PastryNode
from rangecast.dht.wire import Handle, Message, codec_for
from rangecast.multicast.lbdd import SOURCE, build_tree, check_views
from rangecast.multicast.messages import (
    MODE_LBDD,
    MODE_LBDD_PAPER,
    MODE_STAR,
    TOPIC_MESSAGES,
    TopicAck,
    TopicBeat,
    TopicData,
    TopicHandoff,
    TopicHeartbeat,
    TopicJoin,
    TopicLeave,
    TopicMember,
    TopicMembers,
    TopicOffer,
    TopicPull,
    TopicStop,
)
from rangecast.multicast.topic import (
    PublicationComplete,
    SliceDelivered,
    TopicConfig,
    TopicPeer,
    topic_key,
)
from rangecast.sim.engine import Simulator
from rangecast.sim.latency import SyntheticLatency
from rangecast.sim.network import SimNetwork
from rangecast.sim.streams import stream

TOPIC = "news"
EXAMPLES = settings().max_examples

CODEC = codec_for(*TopicPeer.TABLES)


@dataclass
class Published:
    publisher: int
    pid: int
    slices: list[bytes]
    mode: int
    at: float
    #: Members (index -> epoch) that must get it completely.
    required: dict[int, int]


class TopicNet:
    """A simulated overlay of ``TopicPeer`` cores, with every application event recorded."""

    def __init__(self, n: int, seed: int, *, uplink_bps: float | None = None) -> None:
        self.sim = Simulator(SyntheticLatency(seed, sites=64), stream(seed, "network"), codec=CODEC)
        rng = stream(seed, "topic")
        cfg = TopicConfig(slice_bytes=512, send_budget_slices=16)
        self.overlay = SimNetwork(
            self.sim,
            seed,
            config=PastryConfig(),
            core_factory=lambda i, node: TopicPeer(node, rng, cfg),
        )
        self.overlay.create(n)
        self.overlay.oracle_bootstrap(range(n))
        self.peers: list[TopicPeer] = self.overlay.cores  # type: ignore[assignment]
        self.addrs = list(self.sim.addrs)
        if uplink_bps:
            for i in range(n):
                self.sim.set_uplink(i, uplink_bps)
        self.n = n
        self.member = [False] * n  # joined as a receiver (current epoch)
        self.attached = [False] * n  # member, or publisher that attached by publishing
        self.epoch = [0] * n
        self.pubs: list[Published] = []
        self.rendezvous_crashed = False
        self.slices: Counter[tuple[int, int, int, int, int]] = Counter()
        self.completes: Counter[tuple[int, int, int, int]] = Counter()
        self.sim.on_events = self._on_events
        self.rng = stream(seed, "test-data")

    def _on_events(self, i: int, events: list[Any]) -> None:
        by = {a: k for k, a in enumerate(self.addrs)}
        for e in events:
            if isinstance(e, SliceDelivered):
                self.slices[(i, self.epoch[i], by[e.publisher], e.pid, e.index)] += 1
            elif isinstance(e, PublicationComplete):
                self.completes[(i, self.epoch[i], by[e.publisher], e.pid)] += 1

    def live(self) -> list[int]:
        return [i for i in range(self.n) if self.sim.alive[i]]

    # ----------------------------------------------------------------------------- actions

    def join(self, i: int) -> None:
        self.epoch[i] += 1
        self.member[i] = self.attached[i] = True
        self.peers[i].topic.join(TOPIC, self.sim.now)
        self.sim.poke(i)

    def leave(self, i: int) -> None:
        self.member[i] = self.attached[i] = False
        self.epoch[i] += 1
        self.peers[i].topic.leave(TOPIC, self.sim.now)
        self.sim.poke(i)
        for p in self.pubs:
            p.required.pop(i, None)
            if p.publisher == i:
                p.required.clear()  # leaving drops our own publications too

    def crash(self, i: int) -> None:
        self.rendezvous_crashed |= self.peers[i].topic.hosts(TOPIC)
        self.sim.crash(i)
        self.member[i] = self.attached[i] = False
        for p in self.pubs:
            p.required.pop(i, None)
            if p.publisher == i:
                p.required.clear()

    def publish(self, i: int, count: int, mode: int) -> None:
        slices = [self.rng.randbytes(self.rng.randint(1, 512)) for _ in range(count)]
        pid = self.peers[i].topic.publish_slices(TOPIC, slices, self.sim.now, mode=mode)
        self.sim.poke(i)
        self.attached[i] = True
        required = {j: self.epoch[j] for j in self.live() if self.member[j] and j != i}
        self.pubs.append(Published(i, pid, slices, mode, self.sim.now, required))

    def run(self, seconds: float) -> None:
        self.sim.run(until=self.sim.now + seconds)

    # ------------------------------------------------------------------------------ checks

    def settled(self) -> bool:
        want = {self.addrs[i] for i in self.live() if self.member[i]}
        versions = set()
        for i in self.live():
            if not self.attached[i]:
                continue
            version, members = self.peers[i].topic.members(TOPIC)
            if set(members) != want or len(members) != len(want):
                return False
            versions.add(version)
        return len(versions) <= 1 and all(self.delivered(p) for p in self.pubs)

    def report(self) -> str:
        """What has not converged, for a failing assertion's message."""
        lines = [f"t={self.sim.now:.1f} live={self.live()} members={self.members()}"]
        for i in self.live():
            if self.attached[i]:
                v, ms = self.peers[i].topic.members(TOPIC)
                lines.append(f"  node {i}: version {v}, {sorted(self._index(a) for a in ms)}")
        for p in self.pubs:
            for j, e in p.required.items():
                if (
                    self.member[j]
                    and self.epoch[j] == e
                    and not self.completes[(j, e, p.publisher, p.pid)]
                ):
                    info = self.peers[j].topic.publication(TOPIC, self.addrs[p.publisher], p.pid)
                    lines.append(
                        f"  pub {p.publisher}/{p.pid % 1000} mode {p.mode} at {p.at:.1f}: "
                        f"node {j} has {info}"
                    )
        return "\n".join(lines)

    def members(self) -> list[int]:
        return [i for i in self.live() if self.member[i]]

    def _index(self, addr: bytes) -> int:
        return self.addrs.index(addr)

    def delivered(self, p: Published) -> bool:
        return all(
            self.completes[(j, e, p.publisher, p.pid)] == 1
            for j, e in p.required.items()
            if self.member[j] and self.epoch[j] == e
        )

    def settle(self, limit: float = 300.0) -> None:
        end = self.sim.now + limit
        while not self.settled() and self.sim.now < end:
            self.run(1.0)

    def check_trees(self) -> None:
        live_members = [i for i in self.live() if self.member[i]]
        for src in [i for i in self.live() if self.attached[i]]:
            for mode in (MODE_LBDD, MODE_LBDD_PAPER, MODE_STAR):
                receivers = [i for i in live_members if i != src]
                views = {
                    i: self.peers[i].topic.tree_view(TOPIC, self.addrs[src], mode)
                    for i in [src, *receivers]
                }
                problems, _ = check_views(
                    self.addrs[src],
                    {self.addrs[i]: views[i].parent for i in receivers},
                    {self.addrs[i]: v.children for i, v in views.items()},
                )
                assert problems == [], (src, mode, problems)
                if mode == MODE_STAR:
                    continue
                ms = [self.addrs[i] for i in receivers]
                tree = build_tree(self.addrs[src], ms, near_bucket=mode == MODE_LBDD)
                for k, i in enumerate(receivers):
                    p = tree.parent[k]
                    assert views[i].parent == (self.addrs[src] if p == SOURCE else ms[p])

    def check_deliveries(self) -> None:
        for key, count in self.slices.items():
            assert count == 1, f"slice delivered {count} times: {key}"
        for key, count in self.completes.items():
            assert count == 1, f"publication completed {count} times: {key}"
        for p in self.pubs:
            for j, e in p.required.items():
                if not (self.member[j] and self.epoch[j] == e and self.sim.alive[j]):
                    continue
                got = [self.slices[(j, e, p.publisher, p.pid, k)] for k in range(len(p.slices))]
                assert got == [1] * len(p.slices), (j, p.publisher, got)
                assert self.completes[(j, e, p.publisher, p.pid)] == 1


@settings(max_examples=EXAMPLES)
@given(st.integers(6, 14), st.integers(0, 2**32), st.data())
def test_joins_leaves_failures_keep_tree_and_delivery(n: int, seed: int, data: st.DataObject):
    net = TopicNet(n, seed, uplink_bps=400_000.0)
    first = data.draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=n, unique=True))
    for i in first:
        net.join(i)
    net.run(2.0)
    crashes_left = n // 3
    for _ in range(data.draw(st.integers(1, 14))):
        live = net.live()
        kind = data.draw(
            st.sampled_from(["join", "leave", "crash", "crash-rendezvous", "publish", "publish"])
        )
        if kind == "join":
            cands = [i for i in live if not net.member[i]]
            if cands:
                net.join(data.draw(st.sampled_from(cands)))
        elif kind == "leave":
            cands = [i for i in live if net.attached[i]]
            if cands:
                net.leave(data.draw(st.sampled_from(cands)))
        elif kind.startswith("crash") and crashes_left and len(live) > 3:
            crashes_left -= 1
            hosts = [i for i in live if net.peers[i].topic.hosts(TOPIC)]
            if kind == "crash-rendezvous" and hosts:
                net.crash(hosts[0])
            else:
                net.crash(data.draw(st.sampled_from(live)))
        elif kind == "publish":
            i = data.draw(st.sampled_from(live))
            mode = data.draw(st.sampled_from([MODE_LBDD, MODE_LBDD, MODE_LBDD_PAPER, MODE_STAR]))
            net.publish(i, data.draw(st.integers(1, 24)), mode)
        net.run(data.draw(st.floats(0.0, 3.0)))
    net.settle()
    assert net.settled(), net.report()
    net.check_trees()
    net.check_deliveries()
    # What the example exercised (shown by --hypothesis-show-statistics).
    event(f"publications with required receivers: {sum(bool(p.required) for p in net.pubs)}")
    event(f"rendezvous crashed: {net.rendezvous_crashed}")
    event(f"duplicate slices dropped: {sum(p.topic.stats.duplicates for p in net.peers) > 0}")


def test_publication_without_failures_sends_no_slice_twice() -> None:
    net = TopicNet(16, 7, uplink_bps=1e6)
    for i in range(1, 16):
        net.join(i)
    net.run(3.0)
    net.publish(0, 40, MODE_LBDD)  # node 0 is not a member: it attaches as a publisher
    net.publish(5, 30, MODE_LBDD)  # a member publishes to the others
    net.settle()
    assert net.settled()
    net.check_trees()
    net.check_deliveries()
    assert sum(p.topic.stats.duplicates for p in net.peers) == 0
    # Each receiver took every slice from its own parent and nobody else.
    for p in net.pubs:
        for j in p.required:
            info = net.peers[j].topic.publication(TOPIC, net.addrs[p.publisher], p.pid)
            parent = net.peers[j].topic.tree_view(TOPIC, net.addrs[p.publisher], p.mode).parent
            assert info is not None and list(info.senders) == [parent]


def test_complete_payload_is_assembled() -> None:
    net = TopicNet(8, 3)
    for i in range(1, 8):
        net.join(i)
    net.run(3.0)
    payloads: list[bytes | None] = []
    record = net.sim.on_events

    def hook(i: int, events: list[Any]) -> None:
        assert record is not None
        record(i, events)
        payloads.extend(e.payload for e in events if isinstance(e, PublicationComplete))

    net.sim.on_events = hook
    data = bytes(range(256)) * 9  # 2,304 bytes: five 512-byte slices
    net.peers[0].topic.publish(TOPIC, data, net.sim.now)
    net.sim.poke(0)
    net.run(10.0)
    assert payloads == [data] * 7


def test_rendezvous_crash_is_taken_over() -> None:
    net = TopicNet(12, 11)
    for i in range(12):
        net.join(i)
    net.run(3.0)
    host = [i for i in range(12) if net.peers[i].topic.hosts(TOPIC)]
    assert len(host) == 1
    net.crash(host[0])
    net.settle(120.0)
    assert net.settled()
    new_host = [i for i in net.live() if net.peers[i].topic.hosts(TOPIC)]
    assert len(new_host) == 1 and new_host != host
    net.publish(net.live()[0], 10, MODE_LBDD)
    net.settle(60.0)
    net.check_trees()
    net.check_deliveries()


def test_rendezvous_hands_over_to_a_closer_new_node() -> None:
    """A node that joins the DHT closer to the topic's key becomes its root: the old rendezvous
    hands the lists over and the members follow the new one."""
    n = 10
    sim = Simulator(SyntheticLatency(5, sites=64), stream(5, "network"), codec=CODEC)
    rng = stream(5, "topic")
    overlay = SimNetwork(
        sim, 5, config=PastryConfig(), core_factory=lambda i, node: TopicPeer(node, rng)
    )
    overlay.create(n)
    peers: list[TopicPeer] = overlay.cores  # type: ignore[assignment]
    space = overlay.space
    newcomer = n - 1
    # A topic whose key the newcomer is closest to.
    topic = next(
        t
        for t in (f"topic-{k}" for k in range(10_000))
        if min(range(n), key=lambda i: space.distance(overlay.peers[i].id, topic_key_of(t)))
        == newcomer
    )
    overlay.oracle_bootstrap(range(n - 1))
    for i in range(n - 1):
        peers[i].topic.join(topic, sim.now)
        sim.poke(i)
    sim.run(until=sim.now + 3.0)
    old_host = [i for i in range(n) if peers[i].topic.hosts(topic)]
    assert len(old_host) == 1 and old_host[0] != newcomer
    peers[newcomer].dht.join(sim.addrs[0], sim.now)
    sim.poke(newcomer)
    sim.run(until=sim.now + 20.0)
    assert peers[newcomer].topic.hosts(topic) and not peers[old_host[0]].topic.hosts(topic)
    version, members = peers[newcomer].topic.hosted_members(topic)
    assert sorted(members) == sorted(sim.addrs[i] for i in range(n - 1))
    for i in range(n - 1):
        assert peers[i].topic.rendezvous(topic) == sim.addrs[newcomer]
        assert peers[i].topic.members(topic)[0] == version


def topic_key_of(topic: str) -> int:
    return DEFAULT_SPACE.hash_key("topic:" + topic)


# ------------------------------------------------------------------------------ the experiment


def test_experiment_with_churn_is_deterministic() -> None:
    from rangecast.sim.lbdd_experiment import WALL_FIELDS, LbddParams, run_lbdd

    params = LbddParams(subscribers=24, seed=3, data_bytes=2_000_000, churn=0.25)
    a = run_lbdd(params)
    b = run_lbdd(params)
    for f in WALL_FIELDS:
        a.pop(f)
        b.pop(f)
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert a["ok"] and a["tree_valid"] and a["all_bytes_exactly_once"]
    assert a["churn"]["repaired_tree_valid"] and a["churn"]["crashed"] == 6


def test_cli_json(capsys: Any) -> None:
    from rangecast.cli.main import main

    assert main(["sim", "lbdd", "--subscribers", "30", "--seed", "2", "--json", "--quiet"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["tree_valid"] and r["subscribers"] == 30
    assert r["near_bucket"] is False  # the paper's rule by default
    assert r["other_rule"]["near_bucket"] is True
    assert r["publisher_contribution"] == r["publisher_copies"] / 30
    argv = ["sim", "lbdd", "--subscribers", "30", "--seed", "2", "--near-bucket", "on"]
    assert main([*argv, "--json", "--quiet"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["tree_valid"] and r["near_bucket"] is True
    assert r["depth"] <= 5  # floor(log2 30) + 1 with our near-bucket merge


# -------------------------------------------------------------------------------- the wire

handles = st.builds(
    Handle,
    id=st.one_of(st.binary(min_size=20, max_size=20), st.binary(max_size=24)),
    addr=st.binary(max_size=8),
)
members = st.builds(TopicMember, handles, st.integers(0, 2**63 - 1))
names = st.sampled_from([TOPIC, "other"]) | st.text(min_size=1, max_size=20)
u63 = st.integers(0, 2**63 - 1)
small = st.integers(0, 40)
modes = st.integers(0, 4)
pub_addr = st.binary(max_size=8)


def _messages(self_addr: bytes, topic_pid: int) -> st.SearchStrategy[Message]:
    pubs = st.sampled_from([self_addr]) | pub_addr
    pids = st.sampled_from([topic_pid]) | u63
    return st.one_of(
        st.builds(TopicJoin, names, handles, u63, st.booleans(), u63, u63),
        st.builds(TopicLeave, names, handles),
        st.builds(TopicMembers, names, u63, st.lists(members, max_size=6)),
        st.builds(TopicHeartbeat, names, handles, u63, st.booleans(), u63, u63),
        st.builds(TopicBeat, names, u63),
        st.builds(
            TopicData,
            names,
            pubs,
            pids,
            small,
            st.integers(1, 40),
            st.integers(0, 10**6),
            modes,
            u63,
            st.binary(max_size=64),
        ),
        st.builds(TopicAck, names, pubs, pids, small),
        st.builds(TopicPull, names, pubs, pids, modes, small, st.lists(small, max_size=5)),
        st.builds(TopicStop, names, pubs, pids),
        st.builds(TopicHandoff, names, u63, st.lists(members, max_size=4), st.lists(members)),
        st.builds(TopicOffer, names, pubs, pids, st.integers(1, 40), st.integers(0, 10**6), modes),
    )


def _lone_peer() -> TopicPeer:
    node = PastryNode(
        DEFAULT_SPACE.hash_key("lone"), b"\x01\x02\x03\x04\x0f\xa0", stream(1, "p"), codec=CODEC
    )
    peer = TopicPeer(node, stream(1, "t"), TopicConfig(slice_bytes=16))
    node.start_alone(0.0)
    peer.topic.join(TOPIC, 0.0)  # it is the root: the rendezvous and the only member
    return peer


@settings(max_examples=settings().max_examples * 2)
@given(st.data())
def test_malformed_messages_never_raise_out_of_the_core(data: st.DataObject) -> None:
    peer = _lone_peer()
    pid = peer.topic.publish(TOPIC, b"x" * 100, 0.1)
    now = 0.2
    for _ in range(data.draw(st.integers(1, 12))):
        msg = data.draw(_messages(peer.dht.me.addr, pid))
        try:
            frame = CODEC.encode(msg)
        except Exception:  # the codec refuses to build it: it could not be on the wire
            continue
        msg = CODEC.decode(frame)  # what a real peer would see
        src = data.draw(st.sampled_from([b"\x09\x09\x09\x09\x0f\xa0", peer.dht.me.addr]))
        if isinstance(msg, (TopicJoin, TopicLeave, TopicHandoff)) and data.draw(st.booleans()):
            key = data.draw(st.sampled_from([topic_key(peer.dht, msg.topic), 0]))
            peer.topic.deliver(key, frame, peer.dht.me.handle, 1, now)
        else:
            peer.receive(msg, src, now)
        now += data.draw(st.floats(0.0, 5.0))
        peer.handle_timer(now)
        peer.take_messages()
        peer.take_events()
    # Still serving: it can publish, and its timers run.
    peer.topic.publish(TOPIC, b"still alive", now)
    peer.handle_timer(now + 100.0)


@given(st.data())
def test_garbage_and_truncated_frames_raise_only_wire_error(data: st.DataObject) -> None:
    msg = data.draw(_messages(b"\x01\x02\x03\x04\x0f\xa0", 5))
    try:
        frame = CODEC.encode(msg)
    except Exception:
        return
    cut = data.draw(st.integers(0, len(frame) - 1))
    for bad in (
        frame[:cut],
        frame[:cut] + data.draw(st.binary(max_size=8)) + frame[cut + 1 :],
        data.draw(st.binary(max_size=64)),
    ):
        with contextlib.suppress(WireError):
            CODEC.decode(bad)
    # Truncation of a whole frame is always an error, never a different message.
    try:
        CODEC.decode(frame[:cut])
        raise AssertionError("a truncated frame decoded")
    except WireError:
        pass
    peer = _lone_peer()
    peer.receive_frame(frame[:cut], b"\x09\x09\x09\x09\x0f\xa0", 1.0)  # counted, not raised
    assert peer.topic.stats.malformed == 1


def test_every_topic_message_is_registered_in_its_range() -> None:
    tags = sorted(m.__struct_config__.tag for m in TOPIC_MESSAGES)
    assert all(40 <= t <= 63 for t in tags)
    assert len(set(tags)) == len(tags)
