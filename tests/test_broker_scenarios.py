"""The broker systems on the simulator (sim.broker_experiment), ``sim compare`` (sim.compare)
and their commands: every system delivers exactly what the thesis' oracle expects, runs are
deterministic, and the comparison has one row per system with the documented keys."""

from __future__ import annotations

import contextlib
import io
import json
import math
import random
from dataclasses import fields, replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rangecast.brokers.filters import Box, matches
from rangecast.brokers.tables import LOCAL, VECTOR_MIN, Prt, SubEntry
from rangecast.cli.main import main
from rangecast.pubsub.schema import THESIS_SCHEMA
from rangecast.pubsub.subscription import Range
from rangecast.sim.broker_experiment import BY_SYSTEM, SYSTEMS, BrokerParams, BrokerResult, gini
from rangecast.sim.compare import ALL_SYSTEMS, Row, compare, inactive
from rangecast.sim.registry import SCENARIOS

SMALL = {"nodes": 40, "subs_per_node": 2.5, "events": 100}


def run(system: str, **kw: Any) -> BrokerResult:
    scenario = BY_SYSTEM[system]
    params = scenario.params_type(**{**SMALL, **kw})
    assert isinstance(params, BrokerParams)
    return scenario().run(params)


def stable(r: BrokerResult) -> dict[str, Any]:
    return {k: v for k, v in r.json().items() if k not in r.WALL_FIELDS}


@pytest.mark.parametrize("system", SYSTEMS)
def test_every_system_delivers_exactly_what_the_oracle_expects(system: str) -> None:
    r = run(system)
    v = r.verdict
    assert v.expected_deliveries > 0
    assert (v.missed, v.duplicates, v.false_positives) == (0, 0, 0)
    assert r.succeeded() and r.system == system and r.events == 100
    assert r.messages_per_event > 0 and r.hops_per_delivery > 0
    # kmeans' groups are built offline from the known subscriptions: a subscription is only a
    # local entry (brokers/kmeans.py), so its set-up sends nothing
    assert (r.setup_messages > 0) == (system != "kmeans")


@pytest.mark.parametrize(
    ("system", "kw"),
    [
        ("pop", {"threshold": 1}),
        ("grape", {"threshold": 1}),
        ("grape", {"threshold": 2, "priority": "delay", "weight": 50.0}),
        ("octopia", {"dynamic": True, "link_mbps": 0.05}),
        ("siena", {"tree": "kary", "arity": 3, "covering": False}),
        ("kyra", {"max_distance": 20.0, "max_size": 3, "trees": 2}),
        ("padres", {"link_mbps": 0.1}),
    ],
)
def test_variants_lose_and_duplicate_nothing(system: str, kw: dict[str, Any]) -> None:
    r = run(system, **kw)
    v = r.verdict
    assert (v.missed, v.duplicates, v.false_positives) == (0, 0, 0)
    if system in ("pop", "grape") and kw["threshold"] == 1:
        assert r.migrations > 0  # publishers moved while publishing: none lost, none twice


def test_same_seed_same_result_and_another_seed_differs() -> None:
    for system in ("kyra", "pop"):
        assert stable(run(system)) == stable(run(system))
    assert stable(run("siena")) != stable(run("siena", seed=2))


def test_every_system_sees_the_thesis_workload() -> None:
    """Same subscriptions and events: the oracle expects the same deliveries everywhere."""
    c = compare(("thesis", "siena", "octopia"), seed=3, **SMALL)  # type: ignore[arg-type]
    assert len({r.expected_deliveries for r in c.rows}) == 1
    assert c.succeeded()


def test_compare_json_has_one_row_per_system_with_the_documented_keys() -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(
            ["sim", "compare", "--systems", ",".join(ALL_SYSTEMS), "--nodes", "40",
             "--subs-per-node", "2.5", "--events", "60", "--json", "--quiet"]
        )  # fmt: skip
    assert code == 0
    doc = json.loads(out.getvalue())
    assert [r["system"] for r in doc["rows"]] == list(ALL_SYSTEMS)
    keys = {f.name for f in fields(Row)}
    for row in doc["rows"]:
        assert set(row) == keys
        assert row["missed"] == row["duplicates"] == 0
    assert doc["nodes"] == 40 and doc["events"] == 60 and doc["seed"] == 1


def test_compare_table_and_errors() -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["sim", "compare", "--systems", "siena,kyra", "--nodes", "30", "--events",
                     "20", "--quiet"])  # fmt: skip
    assert code == 0
    text = out.getvalue()
    assert "| siena |" in text and "| kyra |" in text and "msgs/event" in text
    with contextlib.redirect_stderr(io.StringIO()):
        assert main(["sim", "compare", "--systems", "siena,nope", "--quiet"]) == 2


def test_clustered_comparison_lets_every_mechanism_act() -> None:
    """POP/GRAPE's workload for every system, the thesis overlay included: the same deliveries
    expected everywhere, every run exact, the publishers moved, and a row whose own mechanism
    did not act says why."""
    c = compare(ALL_SYSTEMS, nodes=40, subs_per_node=2.5, events=400, workload="clustered")
    assert c.publishers == 2  # 400 events / (2 x the threshold of 100)
    assert len({r.expected_deliveries for r in c.rows}) == 1
    assert c.succeeded()
    rows = {r.system: r for r in c.rows}
    assert rows["pop"].migrations and rows["grape"].migrations
    assert rows["siena"].migrations is None and rows["thesis"].inactive is None
    assert all(r.traffic_ms_per_event > 0 and r.matchings_per_event > 0 for r in c.rows)
    # The same system on the thesis workload: no relocation, full-domain ads.
    t = {
        r.system: r for r in compare(("padres", "pop"), nodes=40, subs_per_node=2.5, events=60).rows
    }
    assert (
        t["pop"].migrations == 0
        and t["pop"].inactive
        and "no publisher migrated" in t["pop"].inactive
    )
    assert t["padres"].inactive and "full-domain" in t["padres"].inactive
    assert "did not act" in c.table() or not any(r.inactive for r in c.rows)


def test_kmeans_groups_that_prune_no_server_are_marked() -> None:
    every = {"group_members_min": 40, "servers": 40}
    assert "all 40 servers" in (inactive("kmeans", "thesis", None, every) or "")
    assert inactive("kmeans", "thesis", None, {**every, "group_members_min": 39}) is None


BURST = {"nodes": 35, "clusters": 5, "tree": "kary", "arity": 2, "workload": "burst",
         "publishers": 6, "subs_per_node": 4.0, "events": 300, "hrp_rate": 200.0,
         "hrp_subs": 8}  # fmt: skip


def test_setup_delays_and_the_high_rate_publishers_queue() -> None:
    """Advertisement and subscription delays end at the last broker that processed them; the
    HRP broker's input queue is measured only with a service time; TID routing reports how
    many PRT entries have another tree's last hop (none: each subscription here sinks one
    publisher, so is bound to one tree)."""
    o = run("octopia", **BURST, service_ms=2.0)
    t = run("padres", **BURST, service_ms=2.0, cyclic=True, covering=False)
    for r in (o, t):
        assert r.succeeded()
        assert 0 < r.ad_delay_ms["mean"] <= r.ad_delay_ms["max"]
        assert 0 < r.sub_delay_ms["mean"] <= r.sub_delay_ms["max"]
        assert r.hrp_queue["max"] >= r.hrp_queue["mean"] > 0
    # OctopiA's ad goes one hop, to the host's region peers; PADRES floods it over the SCOT.
    assert o.ad_delay_ms["max"] < t.ad_delay_ms["max"]
    assert t.layout["tid_entries"] > 0 and t.layout["tid_alternatives"] == 0
    plain = run("octopia", **BURST)
    assert plain.hrp_queue == {"mean": 0.0, "max": 0.0}
    k = run("kyra")
    assert k.sub_delay_ms == {} and k.ad_delay_ms == {} and k.hrp_queue == {}


@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 6), n=st.integers(1, 12), seed=st.integers(0, 2**16))
def test_latency_groups_partition_the_brokers_into_equal_groups(m: int, n: int, seed: int) -> None:
    from rangecast.sim.broker_experiment import latency_groups

    where = random.Random(seed)
    pos = {v: (where.random(), where.random()) for v in range(m * n + seed % m)}

    def rtt(a: int, b: int) -> float:
        return math.dist(pos[a], pos[b])

    groups = latency_groups(list(pos), m, rtt, random.Random(seed))
    assert [len(g) for g in groups] == [n] * m
    flat = [v for g in groups for v in g]
    assert len(set(flat)) == m * n  # each broker in one (region, cluster); beyond m x n: none
    assert latency_groups(list(pos), m, rtt, random.Random(seed)) == groups


def test_latency_placement_keeps_octopia_clusters_close() -> None:
    """The latency groups' links are shorter than the random placement's: lower delivery
    latency and latency-weighted traffic on the same workload, every delivery still exact."""
    near, far = run("octopia"), run("octopia", placement="random")
    assert near.layout["placement"] == "latency" and far.layout["placement"] == "random"
    assert near.verdict.succeeded() and far.verdict.succeeded()
    assert near.delivery_latency_ms["mean"] < far.delivery_latency_ms["mean"]
    assert near.traffic_ms_per_event < far.traffic_ms_per_event


def test_false_deliveries_fail_a_row() -> None:
    (row,) = compare(("siena",), **SMALL).rows  # type: ignore[arg-type]
    assert row.ok()
    assert not replace(row, false_deliveries=1).ok()


def test_clustered_comparison_errors() -> None:
    from rangecast.dht.errors import LocalProtocolError

    with pytest.raises(LocalProtocolError, match="--workload"):
        compare(("siena",), workload="burst", **SMALL)  # type: ignore[arg-type]
    with pytest.raises(LocalProtocolError, match="--publishers 30"):
        compare(("siena",), workload="clustered", publishers=30, **SMALL)  # type: ignore[arg-type]
    with pytest.raises(LocalProtocolError, match="multiple of its 5 clusters"):
        compare(("octopia",), workload="clustered", nodes=42, events=10)


@pytest.mark.parametrize("system", SYSTEMS)
def test_each_system_has_its_command(system: str) -> None:
    assert SCENARIOS[system] is BY_SYSTEM[system]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["sim", "run", system, "--nodes", "20", "--events", "10", "--json",
                     "--quiet"])  # fmt: skip
    assert code == 0
    doc = json.loads(out.getvalue())
    assert doc["system"] == system and doc["missed"] == doc["duplicates"] == 0


def test_params_are_checked() -> None:
    from rangecast.dht.errors import LocalProtocolError

    for bad in ({"nodes": 1}, {"clusters": 0}, {"weight": 101.0}, {"system": "x"}):
        with pytest.raises(LocalProtocolError):
            replace(BrokerParams(), **bad).check()


def test_gini() -> None:
    assert gini([1, 1, 1, 1]) == 0.0
    assert gini([0, 0, 0, 4]) == pytest.approx(0.75)
    assert gini([]) == 0.0


_bound = st.sampled_from([0.0, 1.0, 2.5, 5.0, 7.5, 10.0])


@st.composite
def boxes(draw: st.DrawFn) -> Box:
    ranges = {}
    for i, a in enumerate(THESIS_SCHEMA.attributes):
        if draw(st.booleans()):
            lo, hi = sorted((draw(_bound), draw(_bound)))
            lo_open, hi_open = draw(st.booleans()), draw(st.booleans())
            scale = (a.max - a.min) / 10
            lo, hi = a.min + lo * scale, a.min + hi * scale
            if lo == hi:
                lo_open = hi_open = False
            ranges[i] = Range(lo, hi, lo_open, hi_open)
    return Box.from_ranges(THESIS_SCHEMA, ranges)


@settings(max_examples=40, deadline=None)
@given(st.lists(boxes(), min_size=VECTOR_MIN + 1, max_size=80), st.integers(0, 2**32))
def test_prt_arrays_match_as_the_filter_algebra(bs: list[Box], seed: int) -> None:
    """The vectorised PRT matching answers ``filters.matches`` exactly, in PRT order, also
    after the PRT changes and for events missing attributes or sitting on the bounds."""
    rng = random.Random(seed)
    prt = Prt()
    for j, b in enumerate(bs):
        prt[j] = SubEntry(b, LOCAL, 0)
    for step in range(30):
        values: list[float | None] = []
        for a in THESIS_SCHEMA.attributes:
            r = rng.random()
            scale = (a.max - a.min) / 10
            values.append(
                None if r < 0.1 else a.min + scale * rng.choice([0, 1, 2.5, 5, 7.5, 10])
                if r < 0.6 else rng.uniform(a.min, a.max)
            )  # fmt: skip
        want = [sid for sid, e in prt.items() if matches(e.box, values)]
        assert [sid for sid, _ in prt.matching(values)] == want
        if step % 5 == 4 and len(prt) > VECTOR_MIN + 1:
            del prt[next(iter(prt))]
            prt[1000 + step] = SubEntry(bs[step % len(bs)], LOCAL, 0)
