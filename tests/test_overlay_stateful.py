"""Stateful test of the content-based overlay: on one small simulated overlay, Hypothesis
subscribes, unsubscribes, modifies, publishes (partial events too), lets time pass and settles,
in any order. Whenever the overlay has settled:

* every event published since the last check reached exactly the subscriptions that were active
  (installed and untouched) when it was published, and only those whose predicates it satisfies
  (a brute-force oracle over ``Subscription.matches``); a subscription that was being installed,
  modified or removed while the event was in flight gets it at most once, and only if it matches
  the subscription's old or new form;
* the stored pieces are exactly those of the active subscriptions, in their current form;
* every subscription ends installed or removed as asked, and ``SubscriptionRemoved`` only ever
  arrives once no piece of the subscription is stored any more;
* the distributed tree is sound (``overlay_harness.Net.check_tree``)."""

from __future__ import annotations

import random

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    rule,
)
from overlay_harness import Key, Net, Published, brute_force

from rangecast.pubsub.node import OverlayConfig
from rangecast.pubsub.schema import THESIS_SCHEMA, Schema
from rangecast.pubsub.subscription import Subscription, parse_subscription, where
from rangecast.sim.streams import stream
from rangecast.sim.workload import THESIS_WORKLOAD, Workload

_BASE_EXAMPLES = settings().max_examples
SEEDS = st.integers(min_value=0, max_value=2**32 - 1)

#: Subscriptions many subscribers share: identical points that only widening separates.
POPULAR = (
    "Attr1 between 10 and 20",
    "Attr4 = 0",
    "Attr4 = 200",
    "Attr2 >= -10000",
    "Attr3 between 1499.5 and 1500.5 and Attr4 <= 100",
)
SUB_KINDS = st.sampled_from(["workload", "workload", "popular", "wide", "point"])
EVENT_KINDS = st.sampled_from(["workload", "bounds", "bounds"])


def make_subscription(schema: Schema, workload: Workload, kind: str, seed: int) -> Subscription:
    rng = random.Random(seed)
    if kind == "workload":
        return workload.subscription(rng)
    if kind == "popular":
        return parse_subscription(POPULAR[seed % len(POPULAR)], schema)
    b = where(schema)
    for a in rng.sample(schema.attributes, rng.randint(1, 2)):
        if kind == "wide":
            lo = rng.uniform(a.min, a.max)
            b = b.between(a.name, lo, min(a.max, lo + (a.max - a.min) * rng.random()))
        else:  # a single value, often a domain end
            b = b.eq(a.name, rng.choice([a.min, a.max, rng.uniform(a.min, a.max)]))
    return b.build()


class OverlayMachine(RuleBasedStateMachine):
    max_nodes = 20

    def __init__(self) -> None:
        super().__init__()
        self.net: Net | None = None
        #: Subscriptions meant to be active (not unsubscribed), in their latest form.
        self.desired: dict[Key, Subscription] = {}
        self.doomed: set[Key] = set()
        #: Subscriptions touched since the last settle, with every form they had meanwhile.
        self.changing: dict[Key, list[Subscription]] = {}
        self.pending: list[Published] = []
        self.checks = 0

    # ---------------------------------------------------------------------------- set-up

    @initialize(
        seed=SEEDS,
        n=st.integers(10, 30),
        cap=st.sampled_from([(2, 3), (2, 5), (3, 5)]),
        lb=st.booleans(),
        partial=st.sampled_from(["strict", "lenient"]),
        hop_acks=st.booleans(),
        probe=st.sampled_from(["unicast", "multicast"]),
        delivery=st.sampled_from(["unicast", "multicast", "lbdd"]),
    )
    def setup(
        self,
        seed: int,
        n: int,
        cap: tuple[int, int],
        lb: bool,
        partial: str,
        hop_acks: bool,
        probe: str,
        delivery: str,
    ) -> None:
        n = min(n, self.max_nodes)
        self.schema = THESIS_SCHEMA.with_partial(partial)
        config = OverlayConfig(
            load_balancing=lb, probe=probe, delivery=delivery, lbdd_min_subscribers=2
        )
        self.net = Net(n, seed, self.schema, capacity=cap, config=config, hop_acks=hop_acks)
        self.workload = Workload(self.schema, THESIS_WORKLOAD, stream(seed, "layout"))

    # ---------------------------------------------------------------------------- helpers

    @property
    def overlay(self) -> Net:
        assert self.net is not None
        return self.net

    def changeable(self) -> list[Key]:
        """Subscriptions the API lets us change now (not being removed)."""
        net = self.overlay
        return sorted(k for k in self.desired if k[1] in net.peers[k[0]].overlay.subscriptions())

    def touched(self, key: Key, new: Subscription | None) -> None:
        """``key`` changes to ``new`` (None: removed): events in flight may or may not see it."""
        forms = self.changing.setdefault(key, [self.desired[key]] if key in self.desired else [])
        if new is not None:
            forms.append(new)
        for ev in self.pending:
            ev.expected.discard(key)
            ev.unsure[key] = list(forms)

    # ----------------------------------------------------------------------------- rules

    @rule(
        node=st.integers(0, 29),
        kind=SUB_KINDS,
        seed=SEEDS,
        count=st.sampled_from([1, 1, 4, 15, 40]),
    )
    def subscribe(self, node: int, kind: str, seed: int, count: int) -> None:
        """``count`` subscriptions at once (from ``node`` and then random peers)."""
        net = self.overlay
        rng = random.Random(seed)
        for k in range(count):
            sub = make_subscription(self.schema, self.workload, kind, seed + k)
            key = net.subscribe((node if k == 0 else rng.randrange(net.n)) % net.n, sub)
            self.touched(key, sub)
            self.desired[key] = sub

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

    @rule(data=st.data(), kind=SUB_KINDS, seed=SEEDS, count=st.sampled_from([1, 1, 5, 20]))
    def modify(self, data: st.DataObject, kind: str, seed: int, count: int) -> None:
        for k in range(count):
            keys = self.changeable()
            if not keys:
                return
            key = data.draw(st.sampled_from(keys), label="modify")
            sub = make_subscription(self.schema, self.workload, kind, seed + k)
            self.overlay.modify(key, sub)
            self.touched(key, sub)
            self.desired[key] = sub

    @rule(
        node=st.integers(0, 29),
        kind=EVENT_KINDS,
        seed=SEEDS,
        missing=st.sampled_from([0.0, 0.0, 0.3, 0.7]),
        count=st.sampled_from([1, 5, 20]),
        settled_only=st.booleans(),
    )
    def publish(
        self, node: int, kind: str, seed: int, missing: float, count: int, settled_only: bool
    ) -> None:
        """``count`` events from ``node`` and random peers; ``settled_only``: settle first."""
        net = self.overlay
        if settled_only:
            self.settle()
        rng = random.Random(seed)
        stable = {k: s for k, s in self.desired.items() if k not in self.changing}
        for k in range(count):
            values: list[float | None] = list(self.workload.event(rng))
            if kind == "bounds" and self.desired:
                sub = self.desired[sorted(self.desired)[rng.randrange(len(self.desired))]]
                for a, r in sub.ranges:
                    values[a] = rng.choice([r.lo, r.hi])
            values = [None if rng.random() < missing else v for v in values]
            publisher = (node if k == 0 else rng.randrange(net.n)) % net.n
            eid = net.publish(publisher, values)
            self.pending.append(
                Published(
                    eid,
                    tuple(values),
                    publisher,
                    brute_force(stable, values, self.schema.partial),
                    {key: list(forms) for key, forms in self.changing.items()},
                )
            )

    @rule(dt=st.sampled_from([0.01, 0.05, 0.2, 1.0]))
    def advance(self, dt: float) -> None:
        self.overlay.run_for(dt)

    @rule()
    def settle(self) -> None:
        net = self.overlay
        net.settle()
        self.check()

    def teardown(self) -> None:
        if self.net is not None:
            self.settle()

    # ---------------------------------------------------------------------------- checks

    def check(self) -> None:
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
        net.check_tree(samples=150, seed=self.checks)
        net.check_deliveries(self.pending)
        assert net.stat("malformed") == 0
        assert net.stat("lost") == 0
        assert net.stat("park_timeouts") == 0
        self.pending = []
        self.changing = {}

    def _cutoff(self) -> float | None:
        net = self.overlay
        if not net.config.load_balancing:
            return None
        return max(net.config.cutoff * (sp.max - sp.min) for sp in net.spaces)


OverlayMachine.TestCase.settings = settings(
    max_examples=max(10, _BASE_EXAMPLES // 2),
    stateful_step_count=40,
    deadline=None,
)
TestOverlayStateful = OverlayMachine.TestCase


class LongOverlayMachine(OverlayMachine):
    """The same machine on bigger overlays with longer histories."""

    max_nodes = 30


LongOverlayMachine.TestCase.settings = settings(
    max_examples=max(60, _BASE_EXAMPLES * 4),
    stateful_step_count=80,
    deadline=None,
)
TestOverlayStatefulLong = pytest.mark.slow(LongOverlayMachine.TestCase)
