"""Tests for sim.latency: the synthetic and measured-matrix latency models."""

from __future__ import annotations

import json
import math
import random
import statistics
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rangecast.sim.latency import (
    DEFAULT_SAME_HOST_MS,
    PLANETLAB_MEAN_RTT_MS,
    Delays,
    LatencyModel,
    LatencyModelError,
    MatrixLatency,
    SyntheticLatency,
    latency_model,
)

# The measured matrix ships with the package (sim/data/), so this never skips on a fresh clone.
PLANETLAB = Path(__file__).resolve().parents[1] / "sim" / "data" / "planetlab490_rtt_ms_slice1.txt"

# Small site counts keep property tests fast: the default 1024-site table takes ~0.3 s to build.
SMALL_SITES = st.integers(min_value=2, max_value=48)
SEEDS = st.integers(min_value=0, max_value=2**32 - 1)


@pytest.fixture(scope="module")
def planetlab() -> MatrixLatency:
    return MatrixLatency.load(PLANETLAB)


@pytest.fixture(scope="module")
def synthetic_default() -> SyntheticLatency:
    model = SyntheticLatency(seed=12345)
    model.place(4000, random.Random(99))
    return model


def _two_host_matrix() -> MatrixLatency:
    return MatrixLatency([[0.0, 100.0], [100.0, 0.0]], "two")


def write_matrix(tmp_path: Path, text: str, name: str = "rtt.txt") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def sample_pair_rtts(model: LatencyModel, pairs: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    n = len(model)
    out = []
    while len(out) < pairs:
        a, b = rng.randrange(n), rng.randrange(n)
        if a != b:
            out.append(model.rtt_ms(a, b))
    return out


def assert_metric(model: LatencyModel) -> None:
    """Symmetry, zero self-latency, positivity and rtt == 2 * one-way over all placed nodes."""
    n = len(model)
    for a in range(n):
        assert model.one_way_ms(a, a) == 0.0
        assert model.rtt_ms(a, a) == 0.0
        for b in range(a + 1, n):
            d = model.one_way_ms(a, b)
            assert d == model.one_way_ms(b, a)
            assert d > 0.0 and math.isfinite(d)
            assert model.rtt_ms(a, b) == 2.0 * d


# ---------------------------------------------------------------------------------------------
# Synthetic model
# ---------------------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(seed=SEEDS, sites=SMALL_SITES, count=st.integers(min_value=0, max_value=40))
def test_synthetic_is_a_symmetric_metric_with_zero_self_latency(
    seed: int, sites: int, count: int
) -> None:
    model = SyntheticLatency(seed, sites)
    model.place(count, random.Random(seed ^ 0x5EED))
    assert len(model) == count
    assert all(0 <= model.host_of(i) < sites for i in range(count))
    assert_metric(model)


@settings(max_examples=25, deadline=None)
@given(seed=SEEDS, sites=SMALL_SITES, place_seed=SEEDS)
def test_synthetic_is_deterministic_for_equal_seeds(seed: int, sites: int, place_seed: int) -> None:
    models = []
    for _ in range(2):
        model = SyntheticLatency(seed, sites)
        model.place(30, random.Random(place_seed))
        models.append(model)
    first, second = models
    assert first.describe() == second.describe()
    assert [first.host_of(i) for i in range(30)] == [second.host_of(i) for i in range(30)]
    assert all(
        first.one_way_ms(a, b) == second.one_way_ms(a, b) for a in range(30) for b in range(30)
    )


def test_synthetic_layout_depends_on_seed_and_placement_on_rng_only() -> None:
    a = SyntheticLatency(1, 64)
    b = SyntheticLatency(2, 64)
    assert a.describe()["ms_per_unit"] != b.describe()["ms_per_unit"]

    # Same seed, different placement rngs: same layout (describe), different placements.
    c, d = SyntheticLatency(1, 64), SyntheticLatency(1, 64)
    c.place(50, random.Random(10))
    d.place(50, random.Random(11))
    assert c.describe() | {"nodes": 0} == d.describe() | {"nodes": 0}
    assert [c.host_of(i) for i in range(50)] != [d.host_of(i) for i in range(50)]


@pytest.mark.parametrize(
    "factory", [lambda: SyntheticLatency(3, 32), _two_host_matrix], ids=["synthetic", "matrix"]
)
def test_incremental_placement_equals_one_shot(factory: Callable[[], LatencyModel]) -> None:
    # Node indices continue from len(self), and the rng is consumed node by node, so placing in
    # batches is equivalent to placing all at once from the same rng state.
    batched, whole = factory(), factory()
    rng = random.Random(5)
    batched.place(7, rng)
    batched.place(0, rng)
    batched.place(13, rng)
    whole.place(20, random.Random(5))
    assert len(batched) == len(whole) == 20
    assert all(
        batched.one_way_ms(a, b) == whole.one_way_ms(a, b) for a in range(20) for b in range(20)
    )


def test_placement_never_touches_global_random() -> None:
    random.seed(424242)
    state = random.getstate()
    model = SyntheticLatency(7, 16)
    model.place(100, random.Random(1))
    model.one_way_ms(0, 1)
    matrix = _two_host_matrix()
    matrix.place(100, random.Random(1))
    assert random.getstate() == state


def test_synthetic_mean_rtt_is_calibrated(synthetic_default: SyntheticLatency) -> None:
    # Model-level mean (distinct site pairs) hits the calibration target up to rounding.
    assert synthetic_default.mean_rtt_ms() == pytest.approx(PLANETLAB_MEAN_RTT_MS, rel=1e-9)
    # Mean over many random node pairs is within 10% of 147 ms (the PlanetLab mean).
    rtts = sample_pair_rtts(synthetic_default, 30_000, seed=2)
    assert statistics.fmean(rtts) == pytest.approx(147.0, rel=0.10)


def test_synthetic_distribution_has_a_long_tail(synthetic_default: SyntheticLatency) -> None:
    rtts = sorted(sample_pair_rtts(synthetic_default, 30_000, seed=3))
    mean = statistics.fmean(rtts)
    p95 = rtts[int(0.95 * len(rtts))]
    median = rtts[len(rtts) // 2]
    assert median < mean  # right-skewed, as measured Internet RTTs are
    assert 1.8 * mean < p95 < 3.0 * mean


def test_synthetic_same_site_nodes_pay_only_access_delay() -> None:
    model = SyntheticLatency(0, 2)
    model.place(40, random.Random(0))
    same = [
        (a, b) for a in range(40) for b in range(a + 1, 40) if model.host_of(a) == model.host_of(b)
    ]
    assert same
    for a, b in same:
        expected = model.access_ms(a) + model.access_ms(b)
        assert model.one_way_ms(a, b) == pytest.approx(expected)


def test_synthetic_describe_is_json_and_complete(synthetic_default: SyntheticLatency) -> None:
    info = json.loads(json.dumps(synthetic_default.describe()))
    assert info["name"] == "synthetic" == synthetic_default.name
    assert info["hosts"] == 1024
    assert info["nodes"] == len(synthetic_default) == 4000
    assert info["mean_rtt_ms"] == pytest.approx(PLANETLAB_MEAN_RTT_MS)
    assert sum(c["sites"] for c in info["clusters"]) == 1024
    for key in ("seed", "ms_per_unit", "access_median_ms", "access_sigma", "target_mean_rtt_ms"):
        assert key in info


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"sites": 1}, "sites"),
        ({"access_median_ms": 0.0}, "access_median_ms"),
        ({"access_sigma": -1.0}, "access_sigma"),
        ({"target_mean_rtt_ms": 5.0}, "cannot calibrate"),
    ],
)
def test_synthetic_rejects_bad_parameters(kwargs: dict[str, float], fragment: str) -> None:
    with pytest.raises(LatencyModelError, match=fragment):
        SyntheticLatency(0, **{"sites": 8, **kwargs})


def test_place_rejects_negative_count() -> None:
    with pytest.raises(LatencyModelError, match="count"):
        SyntheticLatency(0, 4).place(-1, random.Random(0))


# ---------------------------------------------------------------------------------------------
# Matrix model
# ---------------------------------------------------------------------------------------------


def test_planetlab_loads(planetlab: MatrixLatency) -> None:
    assert planetlab.name == "matrix:planetlab490_rtt_ms_slice1.txt"
    assert planetlab.hosts == 490
    assert abs(planetlab.mean_rtt_ms() - 146.84) < 0.01
    info = json.loads(json.dumps(planetlab.describe()))
    assert info["hosts"] == 490
    assert info["symmetrised"] is False  # the file is exactly symmetric


def test_planetlab_more_nodes_than_hosts(planetlab: MatrixLatency) -> None:
    # Fixture is module-scoped, so work on a private copy of the placement state.
    model = MatrixLatency.load(PLANETLAB)
    model.place(2000, random.Random(4))
    assert len(model) == 2000
    hosts = {model.host_of(i) for i in range(2000)}
    assert hosts <= set(range(490))
    assert len(hosts) > 450  # uniform placement reaches nearly every host
    rtts = sample_pair_rtts(model, 20_000, seed=5)
    assert statistics.fmean(rtts) == pytest.approx(planetlab.mean_rtt_ms(), rel=0.10)
    for a in range(0, 2000, 97):
        assert model.one_way_ms(a, a) == 0.0
        for b in range(1, 2000, 89):
            assert model.one_way_ms(a, b) == model.one_way_ms(b, a)


def test_matrix_one_way_is_half_rtt_and_colocated_nodes_get_same_host_delay() -> None:
    model = MatrixLatency([[0, 10, 30], [10, 0, 50], [30, 50, 0]], "tiny", same_host_ms=0.5)
    assert model.name == "matrix:tiny"
    model.place(60, random.Random(3))
    seen_same = seen_diff = False
    for a in range(60):
        assert model.one_way_ms(a, a) == 0.0
        for b in range(60):
            if a == b:
                continue
            ha, hb = model.host_of(a), model.host_of(b)
            if ha == hb:
                seen_same = True
                assert model.one_way_ms(a, b) == 0.5
            else:
                seen_diff = True
                rtt = [[0, 10, 30], [10, 0, 50], [30, 50, 0]][ha][hb]
                assert model.one_way_ms(a, b) == rtt / 2
                assert model.rtt_ms(a, b) == rtt
    assert seen_same and seen_diff
    assert model.mean_rtt_ms() == pytest.approx(30.0)
    assert model.describe()["same_host_ms"] == 0.5


def test_matrix_default_same_host_delay() -> None:
    model = MatrixLatency([[0, 8], [8, 0]], "matrix:pair")
    assert model.name == "matrix:pair"  # an explicit prefix is not doubled
    model.place(10, random.Random(0))
    same = [
        (a, b) for a in range(10) for b in range(a + 1, 10) if model.host_of(a) == model.host_of(b)
    ]
    assert same
    assert all(model.one_way_ms(a, b) == DEFAULT_SAME_HOST_MS for a, b in same)


def test_asymmetric_matrix_is_symmetrised_and_recorded(tmp_path: Path) -> None:
    path = write_matrix(tmp_path, "0 10 4\n20 0 6\n4 6 0\n")
    model = MatrixLatency.load(path)
    info = model.describe()
    assert info["symmetrised"] is True
    assert info["asymmetric_pairs"] == 1
    assert info["max_asymmetry_ms"] == 10.0
    assert model.mean_rtt_ms() == pytest.approx((15 + 4 + 6) / 3)
    model.place(200, random.Random(1))
    pair = next(
        (a, b)
        for a in range(200)
        for b in range(200)
        if {model.host_of(a), model.host_of(b)} == {0, 1}
    )
    assert model.one_way_ms(*pair) == 7.5 == model.one_way_ms(pair[1], pair[0])


@st.composite
def rtt_matrices(draw: st.DrawFn) -> list[list[float]]:
    n = draw(st.integers(min_value=2, max_value=8))
    value = st.floats(min_value=0.01, max_value=5000.0, allow_nan=False, allow_infinity=False)
    rows = [[0.0 if i == j else draw(value) for j in range(n)] for i in range(n)]
    return rows


@settings(max_examples=60, deadline=None)
@given(rows=rtt_matrices(), place_seed=SEEDS, count=st.integers(min_value=0, max_value=30))
def test_matrix_is_symmetric_with_zero_self_latency(
    rows: list[list[float]], place_seed: int, count: int
) -> None:
    original = [list(r) for r in rows]
    model = MatrixLatency(rows, "hyp")
    assert rows == original  # input is copied, never mutated
    model.place(count, random.Random(place_seed))
    assert_metric(model)
    for a in range(count):
        for b in range(count):
            ha, hb = model.host_of(a), model.host_of(b)
            if a != b and ha != hb:
                expected = (rows[ha][hb] + rows[hb][ha]) / 2 / 2
                assert model.one_way_ms(a, b) == pytest.approx(expected)


@settings(max_examples=20, deadline=None)
@given(rows=rtt_matrices(), place_seed=SEEDS)
def test_matrix_placement_is_deterministic(rows: list[list[float]], place_seed: int) -> None:
    first, second = MatrixLatency(rows, "a"), MatrixLatency(rows, "a")
    first.place(25, random.Random(place_seed))
    second.place(25, random.Random(place_seed))
    assert [first.host_of(i) for i in range(25)] == [second.host_of(i) for i in range(25)]


def test_load_accepts_tabs_spaces_and_blank_lines(tmp_path: Path) -> None:
    path = write_matrix(tmp_path, "\n0\t12.5  7\n\n12.5 0\t3e1\n7\t30 0.0\n\n")
    model = MatrixLatency.load(path)
    assert model.hosts == 3
    assert model.mean_rtt_ms() == pytest.approx((12.5 + 7 + 30) / 3)


# ---------------------------------------------------------------------------------------------
# Malformed input
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("", ["is empty"]),
        ("\n  \n\t\n", ["is empty"]),
        ("0 1 2\n1 0\n2 3 0\n", ["line 2", "expected 3 values", "found 2"]),
        ("0 1\n1 0\n2 3\n", ["line 1", "expected 3 values", "found 2"]),
        ("0 1 2\n1 0 3\n", ["line 1", "expected 2 values", "found 3"]),
        ("0 5\n-5 0\n", ["line 2, column 1", "hosts 1 and 0", ">= 0", "-5.0"]),
        ("0 5\n5 abc\n", ["line 2, column 2", "expected a number", "'abc'"]),
        ("0 5 1,5\n5 0 1\n1 1 0\n", ["line 1, column 3", "'1,5'"]),
        ("0 nan\nnan 0\n", ["line 1, column 2", "finite"]),
        ("0 inf\n1 0\n", ["line 1, column 2", "finite"]),
        ("0 0\n0 0\n", ["line 1, column 2", "> 0"]),
        ("0\n", ["at least 2 hosts"]),
    ],
    ids=[
        "empty",
        "blank",
        "short-row",
        "more-rows-than-columns",
        "more-columns-than-rows",
        "negative",
        "non-number",
        "comma-decimal",
        "nan",
        "inf",
        "zero-off-diagonal",
        "single-host",
    ],
)
def test_malformed_files_raise_helpful_errors(
    tmp_path: Path, text: str, fragments: list[str]
) -> None:
    path = write_matrix(tmp_path, text, name="bad_matrix.txt")
    with pytest.raises(LatencyModelError) as excinfo:
        MatrixLatency.load(path)
    message = str(excinfo.value)
    assert "bad_matrix.txt" in message  # every error names the file
    for fragment in fragments:
        assert fragment in message, message


def test_missing_and_binary_files(tmp_path: Path) -> None:
    with pytest.raises(LatencyModelError, match="not found"):
        MatrixLatency.load(tmp_path / "nope.txt")
    binary = tmp_path / "blob.bin"
    binary.write_bytes(b"\xff\xfe\x00\x01")
    with pytest.raises(LatencyModelError, match=r"blob\.bin"):
        MatrixLatency.load(binary)


@pytest.mark.parametrize(
    ("rows", "fragment"),
    [
        ([], "empty"),
        ([[0.0]], "at least 2 hosts"),
        ([[0.0, 1.0], [1.0]], "row 1"),
        ([[0.0, "x"], [1.0, 0.0]], "row 0, column 1"),
        ([[0.0, 1.0], [-1.0, 0.0]], "row 1, column 0"),
    ],
)
def test_in_memory_matrix_validation(rows: list[list[float]], fragment: str) -> None:
    with pytest.raises(LatencyModelError, match=fragment):
        MatrixLatency(rows, "mem")


def test_latency_model_errors_are_value_errors() -> None:
    assert issubclass(LatencyModelError, ValueError)


# ---------------------------------------------------------------------------------------------
# Spec factory
# ---------------------------------------------------------------------------------------------


def test_latency_model_factory(tmp_path: Path) -> None:
    synth = latency_model("synthetic", seed=3)
    assert isinstance(synth, SyntheticLatency)
    assert synth.describe()["seed"] == 3

    path = write_matrix(tmp_path, "0 4\n4 0\n", name="m.txt")
    matrix = latency_model(str(path), seed=3)
    assert isinstance(matrix, MatrixLatency)
    assert matrix.name == "matrix:m.txt"
    assert latency_model(f"matrix:{path}", seed=0).describe() == matrix.describe()


@pytest.mark.parametrize("spec", ["", "Synthetic-ish", "/no/such/latency/file.txt"])
def test_latency_model_rejects_unknown_specs(spec: str) -> None:
    with pytest.raises(LatencyModelError, match="synthetic"):
        latency_model(spec, seed=0)


@pytest.mark.parametrize("spec", ["synthetic", "planetlab"])
def test_the_engines_delays_are_the_models_own_bit_for_bit(spec: str) -> None:
    """``Delays`` (what the engine reads, in C when compiled) gives exactly the model's
    ``one_way_ms``, for every pair, and follows nodes placed after it was made."""
    model = latency_model(spec, seed=4)
    model.place(25, random.Random(1))
    delays = model.delays()
    model.place(15, random.Random(2))  # placed later (churn): the table grows under it
    n = len(model)
    for a in range(n):
        for b in range(n):
            assert delays.one_way_ms(a, b) == model.one_way_ms(a, b)


def test_a_model_without_a_table_is_asked_by_its_delays() -> None:
    class Flat(SyntheticLatency):
        def delays(self) -> Delays:
            return Delays(model=self)

    model = Flat(3)
    model.place(5, random.Random(0))
    delays = model.delays()
    assert [delays.one_way_ms(0, b) for b in range(5)] == [model.one_way_ms(0, b) for b in range(5)]
    with pytest.raises(ValueError):
        Delays()
