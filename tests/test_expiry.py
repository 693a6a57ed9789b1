"""Soft state end to end: stored subscription pieces that no subscriber refreshes expire at their
tree host and at its replicas (``pubsub.expiry``); the pieces of live subscribers never do."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_churn_stateful import ChurnMachine

from rangecast.dht.errors import LocalProtocolError
from rangecast.dht.node import PastryConfig, PastryNode
from rangecast.dht.wire import codec_for
from rangecast.pubsub.expiry import Entry, ExpiryQueue
from rangecast.pubsub.node import OverlayConfig
from rangecast.pubsub.peer import OverlayPeer
from rangecast.pubsub.schema import THESIS_SCHEMA, SchemaRegistry
from rangecast.pubsub.space import TreeId
from rangecast.sim.churn_experiment import ChurnParams, run_churn
from rangecast.sim.engine import Simulator
from rangecast.sim.latency import SyntheticLatency
from rangecast.sim.network import SimNetwork
from rangecast.sim.streams import stream
from rangecast.sim.workload import THESIS_WORKLOAD, Workload

PEERS = 20


def entry(k: int) -> Entry:
    return (("s", TreeId(0, 0, 0)), bytes([k]), k, 0, 0)


# --------------------------------------------------------------------------- the queue


def test_the_config_asks_expiry_to_outlast_two_refreshes() -> None:
    OverlayConfig(refresh_s=30.0, expire_after_s=60.0)
    for bad in (59.0, 0.0, -1.0, math.nan):
        with pytest.raises(LocalProtocolError, match="expire_after_s"):
            OverlayConfig(refresh_s=30.0, expire_after_s=bad)
    with pytest.raises(LocalProtocolError, match="expire_after_s"):
        OverlayConfig(refresh_s=math.inf, expire_after_s=90.0)
    assert OverlayConfig().expire_after_s == math.inf  # off unless asked for


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["touch", "forget", "due"]), st.integers(0, 7), st.floats(0, 5)),
        max_size=80,
    )
)
def test_the_queue_gives_stale_entries_once_never_early_at_most_a_grain_late(
    ops: list[tuple[str, int, float]],
) -> None:
    """Against a plain dictionary of last refreshes: ``due`` never gives an entry refreshed
    less than ``ttl`` ago, gives every entry refreshed ``ttl + grain`` ago or more, each once."""
    ttl, grain = 3.0, 0.5
    q = ExpiryQueue(ttl, grain)
    last: dict[Entry, float] = {}
    now = 0.0
    for op, k, dt in ops:
        now += dt
        e = entry(k)
        if op == "touch":
            q.touch(e, now)
            last[e] = now
        elif op == "forget":
            q.forget(e)
            last.pop(e, None)
        else:
            got = q.due(now)
            assert len(got) == len(set(got))
            assert all(e in last and last[e] + ttl <= now + 1e-9 for e in got)  # never early
            late = {x for x, t in last.items() if t + ttl + grain <= now - 1e-9}
            assert late <= set(got)  # at most a grain late
            for x in got:
                del last[x]
        assert len(q) == len(last)
        # Each entry is filed once, in the bucket of its last refresh.
        filed = {x: b for b, es in q._buckets.items() for x in es}
        assert filed == {x: math.floor(t / grain) for x, t in last.items()}


def test_a_refresh_moves_its_piece_and_the_sweep_reads_only_stale_buckets() -> None:
    q = ExpiryQueue(64.0)  # buckets of 1 s
    assert q.grain == 1.0
    q.touch(entry(1), 0.0)
    q.touch(entry(2), 0.0)
    for t in range(1, 50):
        q.touch(entry(1), float(t))  # refreshed every second: never due
        assert q.due(float(t)) == []
    assert q.due(64.5) == []  # entry 2: refreshed in [0, 1), due from 65
    assert q.due(65.0) == [entry(2)]
    assert q.due(49 + 64.9) == []
    assert q.due(49 + 65.0) == [entry(1)]
    assert q.due(1000.0) == [] and len(q) == 0 and not q._buckets


# ---------------------------------------------------------------- a simulated overlay


class Overlay:
    """``PEERS`` peers with failure detection (keep-alives, hop acks), k = 3 replicas, a refresh
    every 10 s and, unless ``expire`` is inf, expiry after ``expire`` seconds."""

    def __init__(self, seed: int, expire: float) -> None:
        registry = SchemaRegistry((THESIS_SCHEMA,))
        self.sim = Simulator(
            SyntheticLatency(seed, sites=16),
            stream(seed, "network"),
            codec=codec_for(*OverlayPeer.TABLES),
        )
        cfg = OverlayConfig(replicas=3, refresh_s=10.0, expire_after_s=expire)
        proto = stream(seed, "overlay")

        def make(i: int, node: PastryNode) -> OverlayPeer:
            return OverlayPeer(node, schemas=registry, capacity=3, rng=proto, overlay=cfg)

        self.net = SimNetwork(self.sim, seed, config=PastryConfig(), core_factory=make)
        self.net.oracle_bootstrap(self.net.create(PEERS))
        self.peers: list[OverlayPeer] = self.net.cores  # type: ignore[assignment]
        self.ids = [self.net.space.to_bytes(p.id) for p in self.net.peers]
        workload = Workload(THESIS_SCHEMA, THESIS_WORKLOAD, random.Random(seed))
        rng = random.Random(seed + 1)
        for i in range(PEERS):
            for _ in range(2):
                self.peers[i].overlay.subscribe(workload.subscription(rng), self.sim.now)
            self.sim.poke(i)

    def run(self, seconds: float) -> None:
        self.sim.run(until=self.sim.now + seconds)

    def pieces_of(self, i: int, *, replicas: bool) -> int:
        """Pieces of subscriber ``i`` stored at live primaries (and their replicas)."""
        n = 0
        for j, p in enumerate(self.peers):
            if not self.sim.alive[j]:
                continue
            nodes = list(p.overlay.nodes.values())
            if replicas:
                nodes += p.overlay.replicas.values()
            for node in nodes:
                if node.index is not None:
                    n += sum(1 for s in node.index if s.subscriber.id == self.ids[i])
        return n

    def expected_pieces(self, i: int) -> int:
        return sum(len(rec.pieces) for rec in self.peers[i].overlay._subs.values())

    def expired(self) -> int:
        return sum(p.overlay.stats.expired for p in self.peers)


@pytest.mark.parametrize("seed", [1, 2])
def test_a_subscriber_that_stops_refreshing_loses_its_pieces_everywhere(seed: int) -> None:
    net = Overlay(seed, expire=30.0)
    net.run(40.0)
    quiet = 3
    for i in range(PEERS):  # everything is installed, at the primaries and their replicas
        assert net.pieces_of(i, replicas=False) == net.expected_pieces(i) > 0
    gone = net.expected_pieces(quiet)
    assert net.pieces_of(quiet, replicas=True) >= 3 * gone - 2  # k = 3 copies (some may lag)
    assert net.expired() == 0  # live subscribers' pieces never expire
    net.peers[quiet].overlay._subs.clear()  # alive, but it forgot them: no more refreshes
    net.run(40.0)  # expire_after_s, a sweep period, and time for the ReplicaOps
    assert net.pieces_of(quiet, replicas=True) == 0
    assert net.expired() == gone
    for i in range(PEERS):
        if i != quiet:
            assert net.pieces_of(i, replicas=False) == net.expected_pieces(i)
    net.run(100.0)  # many periods later the live ones are all still there
    assert net.expired() == gone
    for i in range(PEERS):
        if i != quiet:
            assert net.pieces_of(i, replicas=False) == net.expected_pieces(i)


def test_a_crashed_subscriber_and_a_crashed_host_lose_nothing_but_the_dead_ones_pieces() -> None:
    """The subscriber dies, and so does a peer hosting some of its pieces: a replica promoted
    meanwhile counts its copies fresh at promotion, then expires them like any other."""
    net = Overlay(5, expire=30.0)
    net.run(40.0)
    dead = 7
    host = next(
        j
        for j, p in enumerate(net.peers)
        if j != dead
        and any(
            n.index is not None and any(s.subscriber.id == net.ids[dead] for s in n.index)
            for n in p.overlay.nodes.values()
        )
    )
    net.sim.crash(dead)
    net.sim.crash(host)
    net.run(80.0)
    assert sum(p.overlay.stats.promoted for p in net.peers) > 0
    assert net.pieces_of(dead, replicas=True) == 0
    assert net.expired() >= net.expected_pieces(dead)
    for i in range(PEERS):
        if i not in (dead, host):
            assert net.pieces_of(i, replicas=False) == net.expected_pieces(i)


def test_without_expiry_the_pieces_of_a_silent_subscriber_stay() -> None:
    """The default (so the tests above do not pass by accident): soft state only one way."""
    net = Overlay(1, expire=math.inf)
    net.run(40.0)
    kept = net.expected_pieces(3)
    net.peers[3].overlay._subs.clear()
    net.run(80.0)
    assert net.pieces_of(3, replicas=False) == kept
    assert net.expired() == 0


# ------------------------------------------------------------------------------- churn


def test_under_continuous_churn_expiry_loses_no_live_subscription() -> None:
    """Sessions of median 5 minutes end in crashes, newcomers join (hand-offs and promotions
    restart ages): with expiry on, every live subscription still gets every event."""
    cfg = OverlayConfig(expire_after_s=60.0)
    r = run_churn(ChurnParams(nodes=100, session_median_s=300.0, duration_s=600.0, seed=1,
                              overlay=cfg))  # fmt: skip
    assert r["departures"] == r["arrivals"] > 100
    assert r["delivery_recall"] >= 0.99
    assert r["subscriptions_lost"] == 0
    assert r["duplicates"] == r["false_positives"] == 0


class ExpiringChurnMachine(ChurnMachine):
    """The churn sequences of ``test_churn_stateful`` with pieces expiring after 60 s: the
    live subscriptions still get exactly what they match, and once the final repair is over
    no piece of a crashed subscriber is stored anywhere."""

    overlay_config = OverlayConfig(replicas=3, refresh_s=30.0, expire_after_s=60.0)

    def teardown(self) -> None:
        if not hasattr(self, "sim"):
            return
        super().teardown()  # 120 s of repair and checks: past expire_after_s plus a sweep
        dead = {self.net.space.to_bytes(self.net.peers[i].id) for i in self.dead}
        for i in self._live():
            ov = self.peers[i].overlay
            for node in [*ov.nodes.values(), *ov.replicas.values()]:
                if node.index is not None:
                    assert not any(s.subscriber.id in dead for s in node.index)


ExpiringChurnMachine.TestCase.settings = settings(
    max_examples=6,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
test_churn_sequences_with_expiry_agree_with_the_oracle = ExpiringChurnMachine.TestCase
