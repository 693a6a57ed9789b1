"""The thesis experiment's bookkeeping at scale: the vectorised oracle, the flat record of
deliveries checked event by event, and run logs written in bounded row groups. Each is compared
with the straightforward version it replaces (plain Python over dicts and sets)."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rangecast.pubsub.schema import THESIS_SCHEMA
from rangecast.pubsub.subscription import Range, Subscription
from rangecast.sim import runlog
from rangecast.sim.deliveries import Deliveries
from rangecast.sim.percentiles import ordered_sum
from rangecast.sim.thesis_experiment import (
    MatchOracle,
    ThesisParams,
    _summary,
    run_thesis,
)
from rangecast.sim.workload import THESIS_WORKLOAD, Workload

# ------------------------------------------------------------------------------------ oracle


@st.composite
def _workload(draw: st.DrawFn) -> tuple[list[Subscription], list[tuple[float | None, ...]]]:
    """Random subscriptions (some from the thesis workload, some with open, closed, infinite
    and coinciding bounds) and events that hit their bounds exactly as well as in between."""
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    n_attr = len(THESIS_SCHEMA.attributes)
    workload = Workload(THESIS_SCHEMA, THESIS_WORKLOAD, rng)
    grid = [-math.inf, -1.0, 0.0, 0.5, 1.0, 2.0, math.inf]
    subs = [workload.subscription(rng) for _ in range(draw(st.integers(0, 12)))]
    for _ in range(draw(st.integers(0, 12))):
        ranges = []
        for a in sorted(rng.sample(range(n_attr), rng.randint(1, n_attr))):
            while True:
                lo, hi = sorted(rng.sample(grid, 2)) if rng.random() < 0.8 else (1.0, 1.0)
                r = Range(lo, hi, rng.random() < 0.5, rng.random() < 0.5)
                if not r.is_empty():
                    break
            ranges.append((a, r))
        subs.append(Subscription(THESIS_SCHEMA.name, tuple(ranges)))
    points = [*grid[1:-1], 0.25, 1.5]
    for s in subs:
        for _, r in s.ranges:
            points += [r.lo, r.hi]
    points = [p for p in points if math.isfinite(p)]
    events = []
    for _ in range(draw(st.integers(1, 20))):
        events.append(
            tuple(
                None if rng.random() < 0.15 else rng.choice([*points, workload.event(rng)[a]])
                for a in range(n_attr)
            )
        )
    return subs, events


@settings(max_examples=60, deadline=None)
@given(_workload(), st.sampled_from(["strict", "lenient"]))
def test_oracle_equals_brute_force(
    work: tuple[list[Subscription], list[tuple[float | None, ...]]], partial: str
) -> None:
    subs, events = work
    oracle = MatchOracle(THESIS_SCHEMA.with_partial(partial), subs)
    for values in events:
        want = [j for j, s in enumerate(subs) if s.matches(values, partial)]
        assert oracle.matches(values).tolist() == want


# --------------------------------------------------------------------- record of deliveries


def _reference(
    owners: list[tuple[int, int]],
    expected: dict[int, list[int]],
    published: dict[int, float],
    publisher: dict[int, int],
    receipts: list[tuple[int, int, tuple[int, ...], float]],
) -> tuple[dict[str, int], list[float], list[tuple[Any, ...]]]:
    """The experiment's check before the flat record: dicts of receipts, sets of pairs."""
    received: dict[int, dict[tuple[int, int], float]] = {}
    extra: dict[tuple[int, int, int], int] = {}
    repeats = 0
    for i, eid, sids, now in receipts:
        got = received.setdefault(eid, {})
        for sid in sids:
            if (i, sid) in got:
                repeats += 1
                extra[(eid, i, sid)] = extra.get((eid, i, sid), 0) + 1
            else:
                got[(i, sid)] = now
    want_of = {eid: {owners[j] for j in js} for eid, js in expected.items()}
    counts = dict.fromkeys(("expected", "received", "missed", "false_positives"), 0)
    counts["duplicates"] = repeats
    latencies = []
    for eid, want in want_of.items():
        got = received.get(eid, {})
        counts["expected"] += len(want)
        counts["received"] += len(got)
        for pair, first in got.items():
            if pair in want:
                latencies.append((first - published[eid]) * 1000.0)
            else:
                counts["false_positives"] += 1
        counts["missed"] += sum(1 for pair in want if pair not in got)
    counts["false_positives"] += sum(len(v) for e, v in received.items() if e not in want_of)
    rows = []
    for eid in sorted(set(want_of) | set(received)):
        want = want_of.get(eid, set())
        got = received.get(eid, {})
        t0 = published.get(eid, math.nan)
        for key in sorted(want | set(got)):
            first = got.get(key)
            rows.append(
                (
                    eid,
                    publisher.get(eid, -1),
                    t0,
                    *key,
                    key in want,
                    math.nan if first is None else first,
                    0 if first is None else 1 + extra.get((eid, *key), 0),
                    math.nan if first is None else (first - t0) * 1000.0,
                )
            )
    return counts, latencies, rows


class _Rows:
    """A stand-in for ``runlog.DeliveryLog`` that keeps the rows."""

    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []

    def add(self, eid: int, publisher: int, published_s: float, *cols: Any) -> None:
        for row in zip(*(np.asarray(c).tolist() for c in cols), strict=True):
            self.rows.append((eid, publisher, published_s, *row))


def _same(a: list[tuple[Any, ...]], b: list[tuple[Any, ...]]) -> bool:
    # NaN != NaN: compare through repr, which is exact for floats.
    return [tuple(map(repr, r)) for r in a] == [tuple(map(repr, r)) for r in b]


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_flat_record_equals_the_dicts(seed: int) -> None:
    rng = random.Random(seed)
    owners = rng.sample([(i, sid) for i in range(5) for sid in range(1, 5)], rng.randint(1, 12))
    eids = rng.sample([rng.getrandbits(63) for _ in range(8)], rng.randint(0, 6))
    expected = {
        e: sorted(rng.sample(range(len(owners)), rng.randint(0, len(owners)))) for e in eids
    }
    published = {e: rng.uniform(0, 10) for e in eids}
    publisher = {e: rng.randrange(5) for e in eids}
    # Receipts mostly of expected pairs, some repeated, some of pairs nobody expects, some of
    # subscriptions or events the run never made (strays).
    stray_eid = rng.getrandbits(63)
    receipts = []
    now = 10.0
    for _ in range(rng.randint(0, 40)):
        now += rng.random()
        eid = rng.choice([*eids, stray_eid]) if eids and rng.random() < 0.9 else stray_eid
        i = rng.randrange(6)
        sids = tuple(rng.sample(range(1, 6), rng.randint(1, 3)))
        if eid in expected and expected[eid] and rng.random() < 0.6:
            i, sid = owners[rng.choice(expected[eid])]
            sids = (sid,)
        receipts.append((i, eid, sids, now))

    record = Deliveries(len(owners))
    record.block = rng.choice([1, 3, 1 << 22])  # receipts sorted per block of events
    for i, sid in owners:
        record.subscribed(i, sid)
    for e in eids:
        record.published(e, np.asarray(expected[e], dtype=np.int64))
    for i, eid, sids, t in receipts:
        record.received(i, eid, sids, t)
    log = _Rows()
    counts, latencies = record.check(published, publisher, log)  # type: ignore[arg-type]

    want_counts, want_lat, want_rows = _reference(owners, expected, published, publisher, receipts)
    assert counts == want_counts
    assert sorted(latencies.tolist()) == sorted(want_lat)
    assert _same(log.rows, want_rows)


def test_summary_is_the_list_summary() -> None:
    """Mean to the last bit as ``sum(sorted list) / n``, across ``ordered_sum``'s chunks."""
    rng = random.Random(5)
    vals = [rng.lognormvariate(5, 1) for _ in range((1 << 16) * 2 + 7)]
    s = sorted(vals)
    assert _summary(np.asarray(vals), with_max=True)["mean"] == sum(s) / len(s)
    assert ordered_sum(np.asarray(s)) == sum(s)
    assert _summary([]) == {"mean": 0.0, "p50": 0.0, "p70": 0.0, "p90": 0.0, "p99": 0.0}


# ------------------------------------------------------------------------ bounded run logs


def _plain(table: pa.Table) -> pa.Table:
    """Dictionary columns decoded: each row group has its own dictionary (type names in the
    order they first appear), so equal rows need not have equal dictionaries."""
    cols = [
        c.cast(c.type.value_type) if pa.types.is_dictionary(c.type) else c for c in table.columns
    ]
    return pa.table(cols, names=table.column_names)


SMALL = ThesisParams(nodes=40, events=80, seed=2)


def test_run_log_streams_in_bounded_row_groups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a tiny row group the logs come out in many row groups, none larger, holding the
    same rows as with the default size; the summary does not change."""
    whole = run_thesis(SMALL, out=tmp_path / "whole")
    monkeypatch.setattr(runlog, "ROW_GROUP", 64)
    small = run_thesis(SMALL, out=tmp_path / "small")
    for k in ("wall_s", "sim_messages_per_s", "wall_phases_s"):
        whole.pop(k)
        small.pop(k)
    assert small == whole
    for name in ("messages", "deliveries"):
        meta = pq.ParquetFile(tmp_path / "small" / f"{name}.parquet").metadata
        sizes = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
        assert len(sizes) > 3 and max(sizes) <= 64, (name, sizes)
        a = _plain(pq.read_table(tmp_path / "whole" / f"{name}.parquet"))
        b = _plain(pq.read_table(tmp_path / "small" / f"{name}.parquet"))
        assert a.num_rows == sum(sizes) and a.equals(b)
    rows = pq.read_table(tmp_path / "small" / "deliveries.parquet").num_rows
    assert rows >= whole["expected_deliveries"] > 0
