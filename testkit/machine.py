"""A hypothesis rule-based state machine over a simulated overlay, checked against the oracle.

``OverlayMachine`` starts a ``SimOverlay`` and lets hypothesis interleave its rules: subscribe,
unsubscribe, publish and settle; with ``churn`` on also join and crash (failure detection,
replication and repair at work). A subclass adds rules or swaps a policy: ``node_class`` (a
subclass of ``PubSubNode``: a split rule, say), ``overlay_config`` (probe, delivery, load
balancing, replicas), ``schema``, ``capacity``, ``dht`` (docs/testing.md has a worked example).

What ``settle`` checks:

* failure-free (``churn`` off): the overlay runs until it is quiet, then every event published
  since the last check reached exactly the subscriptions that were active when it was published
  and match it (the brute-force oracle ``brute_force``), once; a subscription being changed
  meanwhile at most once, and only if it matches; the stored pieces are exactly the active
  subscriptions'; every subscription ended installed or removed as asked; every tree invariant
  holds (``rangecast.testkit.invariants``, tables exact);
* with churn: after ``repair_s`` of simulated time, every tree invariant holds on the live peers
  (but the checkers in ``churn_skip``) and a batch of fresh events reaches exactly the live
  peers' installed subscriptions that match it; and at every step, no event ever reached a
  subscription twice or one it does not match.

Needs hypothesis (``pip install rangecast[testing]``)."""

from __future__ import annotations

import random
from typing import Any, ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from rangecast.dht.node import PastryConfig
from rangecast.pubsub.node import OverlayConfig, PubSubNode
from rangecast.pubsub.schema import THESIS_SCHEMA, Schema
from rangecast.pubsub.subscription import Subscription
from rangecast.sim.streams import stream
from rangecast.sim.workload import THESIS_WORKLOAD, Workload
from rangecast.testkit import strategies as rs
from rangecast.testkit.invariants import assert_tree
from rangecast.testkit.simnet import Key, Published, SimOverlay, brute_force

SEEDS = st.integers(min_value=0, max_value=2**32 - 1)


class OverlayMachine(RuleBasedStateMachine):
    """Subclass it; its ``TestCase`` is the test (``TestMine = MyMachine.TestCase``)."""

    #: The schema every subscription and event uses.
    schema: ClassVar[Schema] = THESIS_SCHEMA
    #: The overlay core's class: a subclass of ``PubSubNode`` swaps a policy.
    node_class: ClassVar[type[PubSubNode]] = PubSubNode
    #: Peers at the start (drawn in this range) and at most (``join``).
    start_peers: ClassVar[tuple[int, int]] = (10, 20)
    max_peers: ClassVar[int] = 40
    #: Leaf capacity of each peer, drawn in this range: small, so that leaves split often.
    capacity: ClassVar[tuple[int, int]] = (2, 5)
    #: Failure detection on, ``join`` and ``crash`` enabled, and a check after repair.
    churn: ClassVar[bool] = False
    #: The DHT's configuration under churn (``PastryConfig()``, ``KademliaConfig()``, ...).
    dht: ClassVar[Any] = PastryConfig
    #: Simulated seconds ``settle`` gives repair under churn, and most peers crashed at once.
    repair_s: ClassVar[float] = 90.0
    max_crashed: ClassVar[int] = 6
    #: Checkers left out under churn (``invariants.CHECKS`` names).
    churn_skip: ClassVar[tuple[str, ...]] = ()
    #: Under churn, more copies of a node than configured pass: a peer that a join pushed out
    #: of a replica set keeps its stale copy (harmless: it is never promoted while the
    #: primary lives, and the next ``ReplicaPut`` overwrites it).
    allow_extra_replicas: ClassVar[bool] = True
    #: Partition sample points per check.
    samples: ClassVar[int] = 150

    def __init__(self) -> None:
        super().__init__()
        self.net: SimOverlay | None = None
        #: Subscriptions meant to be active (not unsubscribed), in their latest form.
        self.desired: dict[Key, Subscription] = {}
        self.doomed: set[Key] = set()
        #: Subscriptions touched since the last settle, with every form they had meanwhile.
        self.changing: dict[Key, list[Subscription]] = {}
        self.pending: list[Published] = []
        #: Every subscription ever made (the mid-sequence check under churn).
        self.every: dict[Key, Subscription] = {}
        self.checks = 0

    def overlay_config(self, seed: int) -> OverlayConfig:
        """The overlay's configuration (override to swap probe, delivery, replication...)."""
        return OverlayConfig()

    # ---------------------------------------------------------------------------- set-up

    @initialize(seed=SEEDS, n=st.integers(0, 1000))
    def start(self, seed: int, n: int) -> None:
        lo, hi = self.start_peers
        self.build(seed, lo + n % (hi - lo + 1))

    def build(self, seed: int, n: int, **net_options: Any) -> SimOverlay:
        """Start the overlay (a subclass' own ``start`` calls this with its options)."""
        if self.churn:
            net_options.setdefault("dht", self.dht())
            net_options.setdefault("sites", 32)
        net_options.setdefault("capacity", self.capacity)
        net_options.setdefault("config", self.overlay_config(seed))
        self.net = SimOverlay(n, seed, self.schema, node_class=self.node_class, **net_options)
        self.rng = random.Random(seed)
        params = THESIS_WORKLOAD if self.schema.name == THESIS_SCHEMA.name else None
        self.workload = (
            Workload(self.schema, params, stream(seed, "layout")) if params is not None else None
        )
        return self.net

    # ---------------------------------------------------------------------------- helpers

    @property
    def overlay(self) -> SimOverlay:
        assert self.net is not None
        return self.net

    def changeable(self) -> list[Key]:
        """Subscriptions the API lets us change now (on a live peer, not being removed)."""
        net = self.overlay
        return sorted(
            k
            for k in self.desired
            if k[0] not in net.crashed and k[1] in net.peers[k[0]].overlay.subscriptions()
        )

    def touched(self, key: Key, new: Subscription | None) -> None:
        """``key`` changes to ``new`` (None: removed): events in flight may or may not see it."""
        forms = self.changing.setdefault(key, [self.desired[key]] if key in self.desired else [])
        if new is not None:
            forms.append(new)
        for ev in self.pending:
            ev.expected.discard(key)
            ev.unsure[key] = list(forms)

    def peer(self, index: int) -> int:
        """A live, joined peer picked by ``index`` (any int: taken modulo)."""
        ready = self.overlay.ready()
        return ready[index % len(ready)]

    def add(self, i: int, sub: Subscription) -> Key:
        key = self.overlay.subscribe(i, sub)
        self.touched(key, sub)
        self.desired[key] = sub
        self.every[key] = sub
        return key

    def step(self) -> None:
        """Let a little time pass after a rule under churn (failure-free: nothing)."""
        if self.churn:
            self.overlay.run_for(0.5)

    # ----------------------------------------------------------------------------- rules

    @rule(peer=st.integers(0, 63), data=st.data())
    def subscribe(self, peer: int, data: st.DataObject) -> None:
        """A few drawn subscriptions (corner cases, identical copies) from one peer."""
        i = self.peer(peer)
        for sub in data.draw(rs.subscription_lists(self.schema, max_size=4), label="subs"):
            self.add(i, sub)
        self.step()

    @rule(data=st.data(), count=st.sampled_from([1, 1, 5, 20]))
    def unsubscribe(self, data: st.DataObject, count: int) -> None:
        for _ in range(count):
            keys = self.changeable()
            if not keys:
                return
            key = data.draw(st.sampled_from(keys), label="unsubscribe")
            self.overlay.unsubscribe(key)
            self.touched(key, None)
            del self.desired[key]
            self.doomed.add(key)
        self.step()

    @rule(peer=st.integers(0, 63), data=st.data(), count=st.integers(1, 5))
    def publish(self, peer: int, data: st.DataObject, count: int) -> None:
        """Drawn events (partial ones, ones on a subscription's bounds) from one peer."""
        subs = [self.desired[k] for k in sorted(self.desired)][:50]
        for _ in range(count):
            values = data.draw(
                st.one_of(rs.events(self.schema), rs.events_touching(self.schema, subs)),
                label="event",
            )
            self.send(self.peer(peer), values)
        self.step()

    def send(self, i: int, values: tuple[float | None, ...]) -> int:
        """Publish from peer ``i``, with what the oracle expects of it."""
        stable = {k: s for k, s in self.desired.items() if k not in self.changing}
        eid = self.overlay.publish(i, values)
        expected = brute_force(stable, values, self.schema.partial)
        unsure = {key: list(forms) for key, forms in self.changing.items()}
        self.pending.append(Published(eid, tuple(values), i, expected, unsure))
        return eid

    @precondition(lambda self: self.churn and self.net is not None)
    @rule(via=st.integers(0, 63))
    def join(self, via: int) -> None:
        if self.overlay.n >= self.max_peers:
            return
        self.overlay.join(self.peer(via))
        self.overlay.run_for(2.0)

    @precondition(lambda self: self.churn and self.net is not None)
    @rule(peer=st.integers(0, 63))
    def crash(self, peer: int) -> None:
        net = self.overlay
        if len(net.crashed) >= self.max_crashed:
            return
        i = self.peer(peer)
        net.crash(i)
        for key in [k for k in self.desired if k[0] == i]:
            del self.desired[key]
            self.changing.pop(key, None)
        self.doomed = {k for k in self.doomed if k[0] != i}
        net.run_for(1.0)

    @rule()
    def settle(self) -> None:
        if self.churn:
            self.overlay.run_for(self.repair_s)
            self.check_after_repair()
        else:
            self.overlay.settle()
            self.check()

    def teardown(self) -> None:
        if self.net is not None:
            self.settle()

    # ---------------------------------------------------------------------------- checks

    @invariant()
    def never_duplicated_or_false(self) -> None:
        """At any moment: no event reached a subscription twice, or one it does not match
        (in any form it had)."""
        if self.net is None or not self.churn:
            return  # failure-free, the settle check says all of it
        by_eid = {ev.eid: ev for ev in self.pending}
        for (i, sid, eid), count in self.overlay.received.items():
            ev = by_eid.get(eid)
            if ev is None:
                continue
            assert count == 1, f"{(i, sid)} got event {eid} {count} times"
            forms = ev.unsure.get((i, sid), [self.every[(i, sid)]])
            assert any(f.matches(ev.values, self.schema.partial) for f in forms), (
                f"{(i, sid)} got event {eid} {ev.values}, which it does not match"
            )

    def check(self) -> None:
        """The failure-free check (the overlay is quiet)."""
        net = self.overlay
        self.checks += 1
        for key in self.desired:
            assert net.last_event.get(key) == "installed", f"{key} not installed"
        for key in self.doomed:
            assert net.last_event.get(key) == "removed", f"{key} not removed"
            assert net.removed[key] == 1
        for i, peer in enumerate(net.peers):
            subs = peer.overlay.subscriptions()
            mine = {sid: s for (j, sid), s in self.desired.items() if j == i}
            assert subs == mine, f"peer {i}: {subs} != {mine}"
        assert not net.leftovers, f"pieces left after SubscriptionRemoved: {net.leftovers}"
        net.check_pieces(dict(self.desired), lb_cutoff=self._cutoff())
        net.check_tree(samples=self.samples, seed=self.checks)
        net.check_deliveries(self.pending)
        assert net.stat("malformed") == 0
        assert net.stat("lost") == 0
        assert net.stat("park_timeouts") == 0
        self.pending = []
        self.changing = {}

    def check_after_repair(self) -> None:
        """The check under churn: the tree on the live peers, then fresh events."""
        net = self.overlay
        self.checks += 1
        assert_tree(
            net.snapshot(),
            samples=self.samples,
            seed=self.checks,
            allow_extra_replicas=self.allow_extra_replicas,
            skip=self.churn_skip,
        )
        active = {k: s for k, s in self.desired.items() if net.last_event.get(k) == "installed"}
        unsure = set(self.desired) - set(active) | self.doomed
        fresh = []
        for _ in range(10):
            if self.workload is not None:
                values = self.workload.event(self.rng)
            else:
                values = tuple(self.rng.uniform(a.min, a.max) for a in self.schema.attributes)
            fresh.append((net.publish(self.peer(self.rng.randrange(1 << 16)), values), values))
            net.run_for(0.2)
        net.run_for(30.0)
        for eid, values in fresh:
            want = brute_force(active, values, self.schema.partial)
            got = {(i, sid) for (i, sid, e) in net.received if e == eid}
            got -= unsure
            got = {k for k in got if k[0] not in net.crashed}
            assert got == want, (eid, sorted(want - got)[:5], sorted(got - want)[:5])
        self.pending = []
        self.changing = {}

    def _cutoff(self) -> float | None:
        cfg = self.overlay.config
        if not cfg.load_balancing:
            return None
        return max(cfg.cutoff * (sp.max - sp.min) for sp in self.overlay.spaces)


__all__ = ["SEEDS", "OverlayMachine"]
