"""What the pub/sub scenarios share (crash-root, churn, thesis): ``PubSubScenario``.

A ``PubSubScenario`` runs a pub/sub peer (``OverlayPeer``) on every simulated node and keeps the
bookkeeping of a checked workload: the subscriptions placed and their owners ``(peer, sid)``,
the receipts of installs and deliveries (``Receipts``), and, for each event published, the
subscriptions the brute-force oracle (``MatchOracle``) says it must reach among the live
subscribers. A scenario then reads as its story: ``install`` N thesis-workload subscriptions,
``publish_events`` K events, ``crash`` some peers and let them repair, and ``verdict()`` /
``lost()`` at the end. The thesis keeps its own, faster delivery bookkeeping (``prepare_workload``
is its hook) and shares the peers, the tables and the oracle.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import numpy as np

from rangecast.pubsub.node import EventDelivered, OverlayConfig, SubscriptionInstalled
from rangecast.pubsub.peer import OverlayPeer
from rangecast.pubsub.schema import THESIS_SCHEMA, Schema, SchemaRegistry
from rangecast.pubsub.subscription import Subscription
from rangecast.sim.scenario import Result, Scenario, SubstrateResult, Verdict
from rangecast.sim.workload import THESIS_WORKLOAD, Workload

#: A subscription's owner: (peer index, subscription id).
Owner = tuple[int, int]


class MatchOracle:
    """Brute force: which subscriptions match an event. Independent of the overlay.

    Subscriptions are columns of bound arrays, one row per attribute; an event is one
    vectorised comparison per attribute over all of them. An open bound is stored as the next
    float inward (``v > lo`` is ``v >= nextafter(lo, +inf)`` for every float ``v``), so each
    attribute costs two comparisons instead of the four an open/closed flag would need; an
    empty open bound at infinity becomes NaN, which nothing satisfies.
    """

    def __init__(self, schema: Schema, subs: Sequence[Subscription]) -> None:
        n_attr = len(schema.attributes)
        n = len(subs)
        self.strict = schema.partial == "strict"
        present = np.zeros((n_attr, n), dtype=bool)
        lo = np.full((n_attr, n), -np.inf)
        hi = np.full((n_attr, n), np.inf)
        lo_open = np.zeros((n_attr, n), dtype=bool)
        hi_open = np.zeros((n_attr, n), dtype=bool)
        for j, sub in enumerate(subs):
            for a, r in sub.ranges:
                present[a, j] = True
                lo[a, j] = r.lo
                hi[a, j] = r.hi
                lo_open[a, j] = r.lo_open
                hi_open[a, j] = r.hi_open
        with np.errstate(invalid="ignore"):
            self.lo = np.where(lo_open, np.nextafter(lo, np.inf), lo)
            self.hi = np.where(hi_open, np.nextafter(hi, -np.inf), hi)
        self.lo[lo_open & (lo == np.inf)] = np.nan
        self.hi[hi_open & (hi == -np.inf)] = np.nan
        self.absent = ~present
        self.n = n

    def matches(self, values: Sequence[float | None]) -> np.ndarray:
        """Indices (ascending) of the subscriptions ``values`` matches."""
        ok = np.ones(self.n, dtype=bool)
        for a, v in enumerate(values):
            if v is None:
                if self.strict:
                    ok &= self.absent[a]
                continue
            ok &= ((self.lo[a] <= v) & (v <= self.hi[a])) | self.absent[a]
        return np.flatnonzero(ok)


class Receipts:
    """The application events of a run: installs, and who received which event (a second
    receipt of the same event by the same subscription is a repeat)."""

    def __init__(self) -> None:
        self.installed: dict[Owner, float] = {}
        #: (eid) -> {(subscriber index, sid)}
        self.received: dict[int, set[Owner]] = {}
        self.repeats = 0

    def __call__(self, i: int, events: list[Any]) -> None:
        for ev in events:
            if isinstance(ev, EventDelivered):
                got = self.received.setdefault(ev.event.eid, set())
                for sid in ev.sids:
                    if (i, sid) in got:
                        self.repeats += 1
                    else:
                        got.add((i, sid))
            elif isinstance(ev, SubscriptionInstalled):
                self.installed[(i, ev.sid)] = ev.now


def lost_subscriptions(peers: list[OverlayPeer], crashed: set[int], owners: list[Owner]) -> int:
    """Live subscribers' subscriptions with a piece no live peer holds at a leaf."""
    held: set[tuple[bytes, int, int, int]] = set()
    for i, p in enumerate(peers):
        if i in crashed:
            continue
        for table in (p.overlay.nodes, p.overlay.replicas):
            for node in table.values():
                if node.index is not None:
                    for s in node.index:
                        held.add((s.subscriber.id, s.sid, s.gen, s.piece))
    lost = 0
    for i, sid in owners:
        if i in crashed:
            continue
        ov = peers[i].overlay
        rec = ov._subs.get(sid)
        if rec is None:
            continue
        me = ov.dht.me.handle.id
        if any((me, sid, piece.gen, piece.piece) not in held for piece in rec.pieces):
            lost += 1
    return lost


@dataclass(kw_only=True, slots=True)
class ReplicatedResult(SubstrateResult):
    """A run of ``nodes`` pub/sub peers keeping ``replicas`` copies of every tree node."""

    nodes: int
    replicas: int


P = TypeVar("P")
R = TypeVar("R", bound=Result)


class PubSubScenario(Scenario[P, R]):
    """A scenario whose nodes are pub/sub peers, its workload checked by ``MatchOracle``."""

    tables = OverlayPeer.TABLES
    #: The schema of the workload (the thesis sets its own).
    schema: Schema = THESIS_SCHEMA

    @property
    def peers(self) -> list[OverlayPeer]:
        """The pub/sub peer of every node (``stack`` put one on each)."""
        return cast(list[OverlayPeer], self.net.cores)

    def stack(self) -> dict[str, Any]:
        return self.pubsub_stack(SchemaRegistry((self.schema,)), self.overlay_config())

    def overlay_config(self) -> OverlayConfig:
        """The pub/sub configuration of every peer (replicating scenarios set ``replicas``)."""
        return OverlayConfig()

    def setup(self) -> None:
        super().setup()
        self.prepare_workload()

    def prepare_workload(self) -> None:
        """The workload's generator and bookkeeping, once the network is built."""
        self.gen = Workload(self.schema, THESIS_WORKLOAD, self.stream("workload-layout"))
        self.got = Receipts()
        self.sim.on_events = self.got
        self.subs: list[Subscription] = []
        self.owners: list[Owner] = []
        #: eid -> the owners the oracle says the event must reach.
        self.expected: dict[int, set[Owner]] = {}
        #: Peers crashed so far: their subscriptions are expected nowhere, they publish nothing.
        self.dead: set[int] = set()
        self.oracle_over_live()

    # ---- the workload

    def subscribe(self, i: int, sub: Subscription) -> None:
        """Peer ``i`` subscribes ``sub`` now."""
        self.owners.append((i, self.peers[i].overlay.subscribe(sub, self.sim.now)))
        self.subs.append(sub)
        self.sim.poke(i)

    def install(
        self, count: int, rng: random.Random, gap_s: float = 0.02, settle_s: float = 30.0
    ) -> None:
        """``count`` workload subscriptions from random peers, ``gap_s`` apart, then
        ``settle_s`` for installs, splits and replicas to settle."""
        sim = self.sim
        for _ in range(count):
            i, sub = rng.randrange(self.size()), self.gen.subscription(rng)
            self.subscribe(i, sub)
            sim.run(until=sim.now + gap_s)
        sim.run(until=sim.now + settle_s)

    def oracle_over_live(self) -> None:
        """Events published from now on are expected at the live subscribers' matches."""
        self.live_subs = [j for j, (i, _) in enumerate(self.owners) if i not in self.dead]
        self.oracle = MatchOracle(self.schema, [self.subs[j] for j in self.live_subs])

    def publish(self, i: int, values: tuple[float | None, ...]) -> None:
        """Peer ``i`` publishes ``values`` now; the oracle records whom it must reach."""
        eid = self.peers[i].overlay.publish(self.schema.name, values, self.sim.now)
        self.expected[eid] = {self.owners[self.live_subs[j]] for j in self.oracle.matches(values)}
        self.sim.poke(i)

    def publish_events(
        self, count: int, rng: random.Random, gap_s: float = 0.05, settle_s: float = 30.0
    ) -> None:
        """``count`` workload events from random live peers, ``gap_s`` apart, then ``settle_s``
        for the deliveries."""
        sim = self.sim
        self.oracle_over_live()
        live = [i for i in range(self.size()) if i not in self.dead]
        for _ in range(count):
            i, values = rng.choice(live), self.gen.event(rng)
            self.publish(i, values)
            sim.run(until=sim.now + gap_s)
        sim.run(until=sim.now + settle_s)

    def crash(self, victims: Iterable[int], repair_s: float) -> None:
        """Crash ``victims`` at once (no goodbye), then ``repair_s`` of failure detection,
        repair and replica promotion."""
        sim = self.sim
        for i in sorted(victims):
            sim.crash(i)
            self.dead.add(i)
        t0 = sim.now
        self.say.phase("repairing", repair_s, lambda: sim.now - t0, "sim s")
        sim.run(until=sim.now + repair_s)
        self.say.end()

    # ---- the check

    def verdict(self) -> Verdict:
        """The oracle's verdict on every event published through ``publish``."""
        want = hit = extra = 0
        for eid, expected in self.expected.items():
            have = self.got.received.get(eid, set())
            want += len(expected)
            hit += len(expected & have)
            extra += len(have - expected)
        return Verdict(
            expected_deliveries=want,
            deliveries=hit,
            missed=want - hit,
            duplicates=self.got.repeats,
            false_positives=extra,
        )

    def lost(self) -> int:
        """Live subscribers' subscriptions with a piece no live peer holds any more."""
        return lost_subscriptions(self.peers, self.dead, self.owners)


__all__ = [
    "MatchOracle",
    "Owner",
    "PubSubScenario",
    "Receipts",
    "ReplicatedResult",
    "lost_subscriptions",
]
