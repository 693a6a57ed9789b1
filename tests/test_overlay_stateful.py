"""Stateful test of the content-based overlay, on the testing kit's machine
(``rangecast.testkit.machine.OverlayMachine``): on one small simulated overlay, Hypothesis
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
* the distributed tree is sound (every checker of ``rangecast.testkit.invariants``)."""

from __future__ import annotations

import random

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, rule

from rangecast.pubsub.node import OverlayConfig
from rangecast.pubsub.schema import THESIS_SCHEMA, Schema
from rangecast.pubsub.subscription import Subscription, parse_subscription, where
from rangecast.sim.workload import Workload
from rangecast.testkit import machine as kit

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


class OverlayMachine(kit.OverlayMachine):
    """The kit's machine with the overlay's own knobs drawn at the start, subscriptions and
    events of the kinds above, modifications, and time passing without a settle."""

    max_nodes = 20

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
    def start(  # type: ignore[override]
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
        self.schema = THESIS_SCHEMA.with_partial(partial)  # type: ignore[misc]
        config = OverlayConfig(
            load_balancing=lb, probe=probe, delivery=delivery, lbdd_min_subscribers=2
        )
        self.build(seed, min(n, self.max_nodes), capacity=cap, config=config, hop_acks=hop_acks)

    # ----------------------------------------------------------------------------- rules

    @rule(
        node=st.integers(0, 29),
        kind=SUB_KINDS,
        seed=SEEDS,
        count=st.sampled_from([1, 1, 4, 15, 40]),
    )
    def subscribe_kind(self, node: int, kind: str, seed: int, count: int) -> None:
        """``count`` subscriptions at once (from ``node`` and then random peers)."""
        net = self.overlay
        rng = random.Random(seed)
        assert self.workload is not None
        for k in range(count):
            sub = make_subscription(self.schema, self.workload, kind, seed + k)
            self.add((node if k == 0 else rng.randrange(net.n)) % net.n, sub)

    @rule(data=st.data(), kind=SUB_KINDS, seed=SEEDS, count=st.sampled_from([1, 1, 5, 20]))
    def modify(self, data: st.DataObject, kind: str, seed: int, count: int) -> None:
        assert self.workload is not None
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
    def publish_kind(
        self, node: int, kind: str, seed: int, missing: float, count: int, settled_only: bool
    ) -> None:
        """``count`` events from ``node`` and random peers; ``settled_only``: settle first."""
        net = self.overlay
        if settled_only:
            self.settle()
        rng = random.Random(seed)
        assert self.workload is not None
        for k in range(count):
            values: list[float | None] = list(self.workload.event(rng))
            if kind == "bounds" and self.desired:
                sub = self.desired[sorted(self.desired)[rng.randrange(len(self.desired))]]
                for a, r in sub.ranges:
                    values[a] = rng.choice([r.lo, r.hi])
            values = [None if rng.random() < missing else v for v in values]
            self.send((node if k == 0 else rng.randrange(net.n)) % net.n, tuple(values))

    @rule(dt=st.sampled_from([0.01, 0.05, 0.2, 1.0]))
    def advance(self, dt: float) -> None:
        self.overlay.run_for(dt)


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
