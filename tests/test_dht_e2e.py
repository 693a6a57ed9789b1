"""End-to-end acknowledgements (``dht.e2e``): a node that acknowledges every hop and drops what
it should deliver or forward. Through the simulator, every message routed with it among the
nodes still reaches the honest root (the live honest node numerically closest to the key)
exactly once, the dropper is demoted by the nodes that caught it, and no honest node is ever
charged with a loss."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rangecast.dht.core import NodeStats
from rangecast.dht.messages import (
    DHT_TABLE,
    AckedDirect,
    Direct,
    HopAck,
    Route,
    RouteDone,
    RouteWait,
)
from rangecast.dht.node import Application, PastryConfig, PastryNode
from rangecast.dht.notary import KeyedNotary
from rangecast.dht.wire import Handle, Message, codec_for
from rangecast.sim.engine import Simulator
from rangecast.sim.latency import SyntheticLatency
from rangecast.sim.network import SimNetwork
from rangecast.sim.streams import stream

E2E = PastryConfig(e2e_acks=True, keepalive_s=math.inf)


class Dropper:
    """A node that acknowledges hops and then drops every routed and direct message."""

    def __init__(self, node: PastryNode) -> None:
        self.node = node
        self.out: list[tuple[bytes, Message]] = []
        self.dropped = 0

    def receive(self, msg: Message, src: bytes, now: float) -> None:
        if isinstance(msg, Route):
            self.out.append((src, HopAck(msg.uid)))
            self.dropped += 1
            return
        if isinstance(msg, (Direct, AckedDirect)):
            self.dropped += 1
            return
        self.node.receive(msg, src, now)

    def handle_timer(self, now: float) -> None:
        self.node.handle_timer(now)

    def get_timer(self) -> float | None:
        return self.node.get_timer()

    def take_messages(self) -> list[tuple[bytes, Message]]:
        out = self.node.take_messages() + self.out
        self.out = []
        return out


class Recorder(Application):
    def __init__(self, index: int, log: list[tuple[int, int]]) -> None:
        self.index = index
        self.log = log

    def deliver(self, key: int, payload: bytes, origin: Handle, hops: int, now: float) -> None:
        self.log.append((int.from_bytes(payload, "big"), self.index))


def build(
    n: int,
    seed: int,
    dropper: int,
    config: PastryConfig = E2E,
    signed: bool = False,
    kind: type[Dropper] = Dropper,
) -> tuple[Simulator, SimNetwork, list[tuple[int, int]], Dropper | None]:
    sim = Simulator(
        SyntheticLatency(seed, sites=64), stream(seed, "network"), codec=codec_for(DHT_TABLE)
    )
    log: list[tuple[int, int]] = []
    wrapped: list[Dropper] = []

    def core(i: int, node: Any) -> Any:
        if i != dropper:
            return node
        wrapped.append(kind(node))
        return wrapped[0]

    net = SimNetwork(
        sim, seed, config=config, app_factory=lambda i: Recorder(i, log), core_factory=core
    )
    net.oracle_bootstrap(net.create(n))
    if signed:
        secret = seed.to_bytes(8, "big")
        for node in net.nodes:
            node.notary = KeyedNotary(secret, node.me.handle.id)
    return sim, net, log, (wrapped[0] if wrapped else None)


def honest_root(net: SimNetwork, key: int, dropper: int) -> int:
    space = net.space
    honest = [i for i in range(len(net.nodes)) if i != dropper]
    return min(honest, key=lambda i: (space.distance(net.nodes[i].id, key), net.nodes[i].id))


def route_round(
    sim: Simulator,
    net: SimNetwork,
    log: list[tuple[int, int]],
    dropper: int,
    rng: random.Random,
    first: int,
    count: int,
    keys: list[int],
    origin: Callable[[int], int] | None = None,
) -> dict[int, list[int]]:
    """Route ``count`` messages (lids from ``first``) from random honest nodes (or from
    ``origin(key)``), to ``keys`` and random keys, run until quiet; check each was delivered
    once, at its honest root."""
    honest = [i for i in range(len(net.nodes)) if i != dropper]
    want: dict[int, int] = {}
    for k in range(count):
        lid = first + k
        key = keys[k] if k < len(keys) else net.space.random_id(rng)
        src = rng.choice(honest) if origin is None else origin(key)
        want[lid] = honest_root(net, key, dropper)
        net.nodes[src].route(key, lid.to_bytes(4, "big"), sim.now)
        sim.poke(src)
    sim.run()
    got: dict[int, list[int]] = {lid: [] for lid in want}
    for lid, where in log:
        if lid in got:
            got[lid].append(where)
    for lid, root in want.items():
        assert got[lid] == [root], f"message {lid}: delivered at {got[lid]}, root {root}"
    return got


def _stats(net: SimNetwork, dropper: int) -> list[NodeStats]:
    return [n.stats for i, n in enumerate(net.nodes) if i != dropper]


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(min_value=4, max_value=60),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
    data=st.data(),
)
def test_a_dropper_is_routed_around_and_demoted(n: int, seed: int, data: st.DataObject) -> None:
    dropper = data.draw(st.integers(0, n - 1), label="dropper")
    signed = data.draw(st.booleans(), label="signed")
    sim, net, log, bad = build(n, seed, dropper, signed=signed)
    rng = random.Random(seed)
    d_id = net.nodes[dropper].id
    space = net.space
    # Keys the dropper is root of (it would swallow every one), and beside its id.
    near = [d_id, (d_id + 1) % space.size, (d_id - 1) % space.size]
    # Detection: nothing is lost even while the dropper is being caught.
    route_round(sim, net, log, dropper, rng, 0, 60, near * 4)
    stats = _stats(net, dropper)
    assert sum(s.e2e_losses for s in stats) > 0
    assert sum(s.demoted for s in stats) > 0
    for i, node in enumerate(net.nodes):
        if i == dropper:
            continue
        e2e = node.end_to_end
        assert e2e is not None
        # Only the dropper is ever charged or demoted.
        assert set(e2e.losses) <= {d_id}
        assert set(e2e.quarantine) <= {d_id}
        if d_id in e2e.quarantine:
            assert d_id not in {p.id for p in node.known_peers()}
    # After detection: still exact.
    losses = sum(s.e2e_losses for s in stats)
    route_round(sim, net, log, dropper, rng, 1000, 60, near * 4)
    # Nodes that demoted it no longer lose anything to it; the others may still be catching it.
    assert sum(s.e2e_losses for s in _stats(net, dropper)) >= losses
    assert bad is not None and bad.dropped > 0


@pytest.mark.parametrize("signed", [False, True])
def test_an_honest_overlay_confirms_every_message_and_blames_nobody(signed: bool) -> None:
    n = 40
    sim, net, log, _ = build(n, 7, dropper=-1, signed=signed)
    rng = random.Random(7)
    route_round(sim, net, log, -1, rng, 0, 200, [])
    stats = [node.stats for node in net.nodes]
    assert sum(s.e2e_losses + s.demoted + s.e2e_retries + s.e2e_forged for s in stats) == 0
    # Every forwarded message came back confirmed (origins and hops alike).
    assert sum(s.e2e_done for s in stats) == sum(s.forwarded for s in stats)
    assert all(not node.end_to_end.tracks for node in net.nodes)


def test_off_by_default_sends_no_route_done() -> None:
    counts: dict[str, int] = {}
    sim, net, log, _ = build(30, 3, dropper=-1, config=PastryConfig(keepalive_s=math.inf))
    sim.message_log = lambda t, a, b, kind, size, msg, ok, delay: counts.__setitem__(
        kind, counts.get(kind, 0) + 1
    )
    route_round(sim, net, log, -1, random.Random(3), 0, 50, [])
    assert RouteDone.__name__ not in counts
    assert all(node.end_to_end is None for node in net.nodes)


class Waiter(Dropper):
    """A node that acknowledges every routed hop, never forwards, and keeps asking its
    upstream for more time (``RouteWait`` every ``every`` seconds)."""

    def __init__(self, node: PastryNode, every: float = 1.0) -> None:
        super().__init__(node)
        self.every = every
        self.held: list[tuple[int, bytes]] = []
        self.next_wait: float | None = None

    def receive(self, msg: Message, src: bytes, now: float) -> None:
        if isinstance(msg, Route):
            self.out.append((src, HopAck(msg.uid)))
            self.held.append((msg.uid, src))
            if self.next_wait is None:
                self.next_wait = now + self.every
            return
        super().receive(msg, src, now)

    def handle_timer(self, now: float) -> None:
        if self.next_wait is not None and now >= self.next_wait:
            me = self.node.me.handle.id
            self.out.extend((src, RouteWait(uid, me)) for uid, src in self.held)
            self.next_wait = now + self.every if now < 200.0 else None
        self.node.handle_timer(now)

    def get_timer(self) -> float | None:
        t = self.node.get_timer()
        if self.next_wait is not None and (t is None or self.next_wait < t):
            return self.next_wait
        return t


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**32 - 1), data=st.data())
def test_a_hop_that_keeps_asking_for_time_is_charged_not_its_upstream(
    seed: int, data: st.DataObject
) -> None:
    """A node that stalls with ``RouteWait`` forever exhausts the wait budget of the hop next
    to it, which charges it; the hops further up (their budgets nested larger) charge nobody
    honest, and every message still reaches its honest root."""
    n = 30
    bad = data.draw(st.integers(0, n - 1), label="waiter")
    sim = Simulator(
        SyntheticLatency(seed, sites=64), stream(seed, "network"), codec=codec_for(DHT_TABLE)
    )
    log: list[tuple[int, int]] = []
    wrapped: list[Waiter] = []

    def core(i: int, node: Any) -> Any:
        if i != bad:
            return node
        wrapped.append(Waiter(node))
        return wrapped[0]

    net = SimNetwork(
        sim, seed, config=E2E, app_factory=lambda i: Recorder(i, log), core_factory=core
    )
    net.oracle_bootstrap(net.create(n))
    rng = random.Random(seed)
    b_id = net.nodes[bad].id
    near = [b_id, (b_id + 1) % net.space.size, (b_id - 1) % net.space.size]
    route_round(sim, net, log, bad, rng, 0, 40, near * 4)
    for i, node in enumerate(net.nodes):
        if i == bad:
            continue
        e2e = node.end_to_end
        assert e2e is not None
        assert set(e2e.losses) <= {b_id} and set(e2e.quarantine) <= {b_id}
    assert wrapped and wrapped[0].held


class Forger(Dropper):
    """A node that acknowledges every routed hop, drops the message and answers ``RouteDone``
    itself, signed with its own key as if it were the key's root (``dht.notary``)."""

    def receive(self, msg: Message, src: bytes, now: float) -> None:
        if isinstance(msg, Route):
            node = self.node
            me = node.me.handle.id
            key = node.space.from_bytes(msg.key)
            assert node.notary is not None
            self.out.append((src, HopAck(msg.uid)))
            self.out.append((src, RouteDone(msg.uid, me, node.notary.sign(msg.uid, key))))
            self.dropped += 1
            return
        super().receive(msg, src, now)


class Impersonator(Dropper):
    """A node that acknowledges every routed hop, drops the message and answers ``RouteDone``
    in the name of the closest node to the key it knows, with a proof of its own making."""

    def receive(self, msg: Message, src: bytes, now: float) -> None:
        if isinstance(msg, Route):
            node = self.node
            key = node.space.from_bytes(msg.key)
            assert node.notary is not None
            root = min(node.known_peers(), key=lambda p: node.space.distance(p.id, key))
            proof = node.notary.sign(msg.uid, key)  # its own: not the named root's
            self.out.append((src, HopAck(msg.uid)))
            self.out.append((src, RouteDone(msg.uid, root.handle.id, proof)))
            self.dropped += 1
            return
        super().receive(msg, src, now)


def forged_keys(net: SimNetwork, forger: int, rng: random.Random, count: int) -> list[int]:
    """``count`` keys the forger is not a plausible root of, whoever judges: further from it
    than 16 mean spacings of the ids (``e2e_root_spread`` is 8), all sharing its first digit,
    where it is a next hop of many nodes (so ``n`` >= 600: the cell must reach that far)."""
    space = net.space
    f_id = net.nodes[forger].id
    far = 16 * space.size // len(net.nodes)
    prefix = space.size // 16
    keys: list[int] = []
    while len(keys) < count:
        key = f_id - f_id % prefix + rng.randrange(prefix)
        if space.distance(f_id, key) > far:
            keys.append(key)
    return keys


def through(net: SimNetwork, forger: int, key: int, rng: random.Random) -> int:
    """An honest node whose next hop towards ``key`` is the forger (else any honest one)."""
    f_id = net.nodes[forger].id
    honest = [i for i in range(len(net.nodes)) if i != forger]
    via = [i for i in honest if (nh := net.nodes[i].next_hop(key)) is not None and nh.id == f_id]
    return rng.choice(via or honest)


def forged_round(n: int, seed: int, forger: int, kind: type[Dropper] = Forger) -> int:
    """Route 40 messages past a forger; check each reaches its honest root exactly once and
    only the forger is charged; how many it forged (each refused: ``e2e_forged``)."""
    sim, net, log, bad = build(n, seed, forger, signed=True, kind=kind)
    f_id = net.nodes[forger].id
    rng = random.Random(seed)
    keys = forged_keys(net, forger, rng, 40)
    route_round(sim, net, log, forger, rng, 0, 40, keys, lambda k: through(net, forger, k, rng))
    stats = _stats(net, forger)
    for i, node in enumerate(net.nodes):
        if i != forger:
            e2e = node.end_to_end
            assert e2e is not None
            assert set(e2e.losses) <= {f_id} and set(e2e.quarantine) <= {f_id}
    assert bad is not None
    # What it forged was refused and charged.
    assert sum(s.e2e_forged for s in stats) >= bad.dropped
    assert sum(s.e2e_losses for s in stats) >= bad.dropped
    return bad.dropped


@settings(max_examples=10, deadline=None)
@given(
    n=st.sampled_from([1000, 2000]),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
    data=st.data(),
)
def test_a_hop_that_forges_the_roots_ack_is_charged_and_routed_around(
    n: int, seed: int, data: st.DataObject
) -> None:
    """A hop that drops what it should forward and answers ``RouteDone`` itself, signed as the
    key's root: every message for a key it cannot plausibly be the root of still reaches its
    honest root exactly once, and only the forger is charged or demoted (``dht.notary``)."""
    kind = data.draw(st.sampled_from([Forger, Impersonator]), label="kind")
    forged_round(n, seed, data.draw(st.integers(0, n - 1), label="forger"), kind)


@pytest.mark.parametrize("kind", [Forger, Impersonator])
def test_the_forger_case_is_exercised(kind: type[Dropper]) -> None:
    """A fixed case where the forger is a next hop of many: it forged, and was refused."""
    assert forged_round(1000, 0, 0, kind) > 0
