"""The work every system is given: the thesis workload's draws for the broker systems
(``plan``: the same subscriptions, events and publishers as ``sim run thesis``) and the broker
papers' workloads (``paper_plan``: OctopiA's burst, POP/GRAPE's clustered), which the thesis
overlay can run too (``sim run thesis --workload clustered``), so that ``sim compare`` sets every
system on the same work.

A paper workload is drawn from ``paper-workload:<name>`` and the seed's other named streams only,
from the parameters ``WorkloadSpec`` names, so every system that reads the same spec and node
list gets the same subscriptions, events and publishers.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rangecast.brokers.filters import Box
from rangecast.pubsub.schema import THESIS_SCHEMA
from rangecast.pubsub.subscription import Range, Subscription
from rangecast.sim.event_source import NO_CSV, EventSource
from rangecast.sim.streams import stream
from rangecast.sim.workload import THESIS_WORKLOAD, Workload

__all__ = ["PAPER_WORKLOADS", "Plan", "WorkloadSpec", "paper_plan", "plan"]

#: The broker papers' workloads (``paper_plan``).
PAPER_WORKLOADS = ("burst", "clustered", "random")
#: POP/GRAPE's random subscriber distribution: (share of the subscribers, share of their
#: publisher's events they sink): "70% of the subscribers are low-rated, meaning they sink about
#: 10% of their publisher's traffic, 25% are medium-rated, meaning they sink about 50% of their
#: publisher's traffic, and 5% are high-rated, meaning they sink *all* of their publisher's
#: traffic" (CSRG-597, 5.1).
RANDOM_RATINGS = ((0.70, 0.1), (0.25, 0.5), (0.05, 1.0))


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """What a paper workload is drawn from (the fields of a scenario's parameters by name:
    ``WorkloadSpec.of(params)``; a scenario without one keeps the default)."""

    seed: int
    workload: str
    events: int
    subs_per_node: float
    publishers: int = 10
    sub_brokers: int = 0
    hrp_subs: int = 40
    hrp_rate: float = 100.0
    sub_gap_ms: float = 2000.0
    pub_gap_ms: float = 1000.0

    @classmethod
    def of(cls, params: Any) -> WorkloadSpec:
        names = cls.__dataclass_fields__
        return cls(**{k: getattr(params, k) for k in names if hasattr(params, k)})


@dataclass(slots=True)
class Plan:
    """The thesis workload of a seed: subscriptions (time, subscriber node, subscription),
    events and, per event, (gap after the previous one in s, publisher node)."""

    subs: list[tuple[float, int, Subscription]]
    events: list[tuple[float | None, ...]]
    pubs: list[tuple[float, int]]
    gen: Workload
    #: Publisher node -> its ad box (the paper workloads); empty: full-domain ads.
    ads: dict[int, Box] = field(default_factory=dict)
    #: The paper workloads' special brokers: the high-rate publisher's or the hot broker.
    marks: dict[str, int] = field(default_factory=dict)


def plan(seed: int, nodes: int, subs_per_node: float, events: int,
         sub_gap_ms: float = 2000.0, pub_gap_ms: float = 1000.0,
         source: EventSource | None = None) -> Plan:  # fmt: skip
    """The draws of ``sim run thesis`` (sim.thesis_experiment), stream by stream and in the
    same order, so both see the same subscriptions, events and publishers. ``source``: the
    events' source (a CSV file's, loaded on the ``workload-layout`` stream of ``seed``); None,
    the thesis workload."""
    if source is None:
        source = EventSource.load(NO_CSV, stream(seed, "workload-layout"))
    gen = source.gen
    sub_rng = stream(seed, "subscriptions")
    t = 0.0
    subs = []
    for _ in range(max(1, round(nodes * subs_per_node))):
        t += sub_rng.expovariate(1000.0 / sub_gap_ms)
        i = sub_rng.randrange(nodes)
        subs.append((t, i, gen.subscription(sub_rng)))
    pub_rng = stream(seed, "events")
    values = source.events(events, pub_rng)
    pubs = []
    for _ in range(events):
        gap = pub_rng.expovariate(1000.0 / pub_gap_ms)
        pubs.append((gap, pub_rng.randrange(nodes)))
    return Plan(subs, values, pubs, gen)


def _symbols(publishers: int) -> list[tuple[float, float]]:
    """Publisher p's "stock symbol": a slice of Attr1, disjoint from the others (a gap of a
    tenth of a slice between two), so that ads of different publishers never overlap."""
    a = THESIS_SCHEMA.attributes[0]
    w = (a.max - a.min) / publishers
    return [(a.min + p * w, a.min + p * w + 0.9 * w) for p in range(publishers)]


def _symbol_sub(sym: tuple[float, float], share: float, rng: random.Random | None) -> Subscription:
    """A subscription to one symbol sinking ``share`` of its events: Attr1 = the symbol, and
    for share < 1 an Attr2 window of that share of its (uniform) domain. ``rng`` None: the
    window at the top of the domain, the same for every such subscriber (POP/GRAPE's rated
    subscribers, like "low < 18.5" on YHOO quotes, share one predicate: the events one sinks,
    all of its class sink); otherwise a random window (OctopiA's independent selectivity)."""
    ranges = [(0, Range(*sym))]
    if share < 1.0:
        a = THESIS_SCHEMA.attributes[1]
        w = (a.max - a.min) * share
        lo = a.max - w if rng is None else a.min + rng.random() * (a.max - a.min - w)
        ranges.append((1, Range(lo, lo + w)))
    return Subscription(THESIS_SCHEMA.name, tuple(ranges))


def _symbol_event(sym: tuple[float, float], rng: random.Random) -> tuple[float | None, ...]:
    attrs = THESIS_SCHEMA.attributes
    return (rng.uniform(*sym), *(rng.uniform(a.min, a.max) for a in attrs[1:]))


def _ad_box(sym: tuple[float, float]) -> Box:
    return Box.from_ranges(THESIS_SCHEMA, [(0, Range(*sym))])


def paper_plan(p: WorkloadSpec, nodes: Sequence[int]) -> Plan:
    """The papers' workloads over broker nodes ``nodes`` (module docs of the scenario):

    * ``burst`` (OctopiA): ``publishers`` background publishers, each its own symbol, publish
      one event per ``pub_gap_ms``; ``nodes * subs_per_node`` background subscriptions pick a
      background symbol and sink 2 % of it (the paper's selectivity); publisher 0 is the
      high-rate publisher (HRP): ``events`` events at ``hrp_rate`` per second, sunk entirely by
      ``hrp_subs`` subscribers at random brokers (over all clusters). The background runs for
      the HRP's duration.
    * ``clustered`` (POP/GRAPE): ``publishers`` publishers at distinct random brokers, one
      symbol each; ``nodes * subs_per_node`` subscribers, each to a random symbol: 5 % are
      high-rated (sink all of it), all at one broker; 95 % low-rated (the same top 10 % of
      Attr2) at random other brokers (with ``sub_brokers`` X: at X-1 other brokers drawn once,
      the paper's "X brokers"; X = 1: at the hot broker too). ``events`` events in all, round
      robin, each publisher one per ``pub_gap_ms`` on average.
    * ``random`` (POP/GRAPE): as ``clustered`` but 70 % low-rated (10 % of their symbol), 25 %
      medium-rated (50 %) and 5 % high-rated (all of it), every one at a random broker of the
      X drawn once (``sub_brokers``; 0: all): no hot broker."""
    rng = stream(p.seed, f"paper-workload:{p.workload}")
    gen = Workload(THESIS_SCHEMA, THESIS_WORKLOAD, stream(p.seed, "workload-layout"))
    syms = _symbols(p.publishers)
    where = rng.sample(list(nodes), p.publishers)
    ads = {v: _ad_box(syms[i]) for i, v in enumerate(where)}
    subs: list[tuple[float, int, Subscription]] = []
    timed: list[tuple[float, int, tuple[float | None, ...]]] = []
    n_subs = max(1, round(len(nodes) * p.subs_per_node))
    t = 0.0
    marks: dict[str, int] = {}
    if p.workload == "burst":
        hrp = where[0]
        marks["hrp"] = hrp
        for _ in range(p.hrp_subs):
            t += rng.expovariate(1000.0 / p.sub_gap_ms)
            subs.append((t, rng.choice(nodes), _symbol_sub(syms[0], 1.0, rng)))
        for _ in range(n_subs):
            t += rng.expovariate(1000.0 / p.sub_gap_ms)
            sym = syms[rng.randrange(1, p.publishers)] if p.publishers > 1 else syms[0]
            subs.append((t, rng.choice(nodes), _symbol_sub(sym, 0.02, rng)))
        span = p.events / p.hrp_rate
        for k in range(p.events):
            timed.append((k / p.hrp_rate, hrp, _symbol_event(syms[0], rng)))
        for i in range(1, p.publishers):
            at = rng.expovariate(1000.0 / p.pub_gap_ms)
            while at < span:
                timed.append((at, where[i], _symbol_event(syms[i], rng)))
                at += rng.expovariate(1000.0 / p.pub_gap_ms)
    elif p.workload == "random":
        homes = rng.sample(list(nodes), p.sub_brokers) if p.sub_brokers else list(nodes)
        for _ in range(n_subs):
            t += rng.expovariate(1000.0 / p.sub_gap_ms)
            sym = syms[rng.randrange(p.publishers)]
            u, share = rng.random(), 1.0
            for part, sinks in RANDOM_RATINGS:
                if u < part:
                    share = sinks
                    break
                u -= part
            subs.append((t, rng.choice(homes), _symbol_sub(sym, share, None)))
    else:
        hot = rng.choice(nodes)
        marks["hot"] = hot
        others = [v for v in nodes if v != hot]
        if p.sub_brokers:
            # X = 1: every subscriber at the hot broker (the paper's case where POP and GRAPE
            # choose alike)
            others = rng.sample(others, p.sub_brokers - 1) or [hot]
        for _ in range(n_subs):
            t += rng.expovariate(1000.0 / p.sub_gap_ms)
            sym = syms[rng.randrange(p.publishers)]
            if rng.random() < 0.05:
                subs.append((t, hot, _symbol_sub(sym, 1.0, None)))
            else:
                subs.append((t, rng.choice(others), _symbol_sub(sym, 0.1, None)))
    if p.workload != "burst":
        clock = [0.0] * p.publishers
        for k in range(p.events):
            i = k % p.publishers
            clock[i] += rng.expovariate(1000.0 / p.pub_gap_ms)
            timed.append((clock[i], where[i], _symbol_event(syms[i], rng)))
    timed.sort(key=lambda x: x[0])
    pubs, last = [], 0.0
    for at, v, _ in timed:
        pubs.append((at - last, v))
        last = at
    return Plan(subs, [e for _, _, e in timed], pubs, gen, ads, marks)
