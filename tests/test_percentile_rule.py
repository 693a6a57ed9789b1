"""One definition of a percentile: nearest rank, numpy's ``inverted_cdf`` (sim.percentiles),
used by the simulator's summaries, the report's histograms (``plots.Dist``) and the benches;
the Spark side (the same rank over an ordered window) is checked in tests/test_report.py."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rangecast.sim.percentiles import percentile

values = st.lists(
    st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
    | st.integers(min_value=0, max_value=5).map(float),  # many ties
    min_size=1,
    max_size=200,
)
QS = (0.0, 0.01, 0.29, 0.5, 0.7, 0.9, 0.99, 0.995, 1.0)


@given(vals=values, q=st.sampled_from(QS) | st.floats(min_value=0.0, max_value=1.0))
def test_nearest_rank_is_numpys_inverted_cdf(vals: list[float], q: float) -> None:
    s = sorted(vals)
    rank = min(len(s), max(1, math.ceil(q * len(s))))
    assert percentile(vals, q) == s[rank - 1]  # any order in, a value that occurred out
    assert percentile(vals, q) == float(np.quantile(vals, q, method="inverted_cdf"))


@given(vals=values, q=st.sampled_from(QS))
def test_equals_np_percentile(vals: list[float], q: float) -> None:
    assert percentile(vals, q) == float(np.percentile(vals, 100 * q, method="inverted_cdf"))


@given(
    bins=st.lists(
        st.tuples(st.integers(0, 50).map(float), st.integers(1, 9)), min_size=1, max_size=30
    ),
    q=st.sampled_from(QS),
)
def test_counts_are_repeated_values(bins: list[tuple[float, int]], q: float) -> None:
    xs = [x for x, _ in bins]
    counts = [c for _, c in bins]
    expanded = [x for x, c in bins for _ in range(c)]
    assert percentile(xs, q, counts) == percentile(expanded, q)


def test_edges() -> None:
    assert percentile([], 0.5) == 0.0
    assert percentile([3.0], 0.99) == 3.0
    # q n an integer: that rank exactly (0.7 of 10: the 7th); 0.29 * 100 is 28.999999999999996
    # in floating point, whose ceiling is 29 all the same.
    assert percentile([float(i) for i in range(10)], 0.7) == 6.0
    assert percentile([float(i) for i in range(100)], 0.29) == 28.0
    assert percentile(np.array([5, 1, 3]), 0.5) == 3.0


def test_report_histogram_uses_the_rule() -> None:
    pytest.importorskip("matplotlib")
    from rangecast.analysis.report.plots import Dist

    d = Dist("x", [(0.0, 3), (10.0, 5), (20.0, 2)], bin_width=10.0)
    # 0.9 of 10 values: the 9th, in the bin starting at 20; a bin's end is its quantile.
    assert d.quantile(0.9) == 30.0
    assert d.quantile(0.5) == 20.0
    assert Dist("e", []).quantile(0.5) == 0.0


def test_bench_uses_the_rule() -> None:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "bench" / "runtime_swarm.py"
    spec = importlib.util.spec_from_file_location("runtime_swarm_bench", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # (its dataclasses look their module up)
    try:
        spec.loader.exec_module(mod)
    finally:
        del sys.modules[spec.name]
    assert not hasattr(mod, "quantile")  # no second definition
    got = mod.summarize_ms([0.001 * i for i in range(1, 101)])
    assert got["p50_ms"] == 50.0 and got["p99_ms"] == 99.0
