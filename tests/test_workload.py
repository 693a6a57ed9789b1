"""The thesis workload generator, the Zipf sampler and the CSV event source."""

from __future__ import annotations

import hashlib
import math
import random
from collections import Counter
from pathlib import Path

import pytest

from rangecast.pubsub.schema import THESIS_SCHEMA, Attribute, Schema, SchemaError
from rangecast.pubsub.subscription import parse_subscription
from rangecast.sim.workload import (
    THESIS_PARAMS,
    THESIS_WORKLOAD,
    AttributeWorkload,
    CsvEvents,
    Workload,
    ZipfSampler,
    default_params,
    thesis_workload,
)

DATA = Path(__file__).resolve().parents[1] / "data"
AIRQUALITY = DATA / "airquality_uci.csv"
AIR_HEADER = (
    "CO(GT)",
    "PT08.S1(CO)",
    "NMHC(GT)",
    "C6H6(GT)",
    "PT08.S2(NMHC)",
    "NOx(GT)",
    "PT08.S3(NOx)",
    "NO2(GT)",
    "PT08.S4(NO2)",
    "PT08.S5(O3)",
    "T",
    "RH",
    "AH",
)


# --------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------


def test_thesis_table_4_3() -> None:
    assert THESIS_PARAMS is THESIS_WORKLOAD
    table_4_3 = {
        "Attr1": AttributeWorkload(0.5, 0.6, 100, 0.8, 0.50),
        "Attr2": AttributeWorkload(0.5, 0.5, 20, 0.6, 0.40),
        "Attr3": AttributeWorkload(0.5, 0.4, 10, 0.5, 0.30),
        "Attr4": AttributeWorkload(0.5, 0.3, 1, 0.4, 0.20),
    }
    assert table_4_3 == THESIS_WORKLOAD
    d = thesis_workload(random.Random(0)).describe()
    assert [a["subranges"] for a in d["attributes"]] == [100, 1000, 300, 200]
    assert [a["size_classes"] for a in d["attributes"]] == [50, 400, 90, 40]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ((1.5, 0.5, 1, 0.5, 0.5), "present_prob must be in [0, 1]"),
        ((0.5, -0.1, 1, 0.5, 0.5), "subrange_skew must be >= 0"),
        ((0.5, 0.5, 0, 0.5, 0.5), "subrange_size must be > 0"),
        ((0.5, 0.5, 1, -1, 0.5), "size_skew must be >= 0"),
        ((0.5, 0.5, 1, 0.5, 0), "size_bound is a fraction"),
        ((0.5, 0.5, 1, 0.5, 1.5), "size_bound is a fraction"),
        ((0.5, math.nan, 1, 0.5, 0.5), "must be a finite number"),
        ((True, 0.5, 1, 0.5, 0.5), "must be a finite number"),
    ],
)
def test_attribute_workload_validation(args: tuple, fragment: str) -> None:
    with pytest.raises(SchemaError) as exc:
        AttributeWorkload(*args)
    assert fragment in str(exc.value)


def test_workload_params_must_cover_the_schema() -> None:
    params = dict(THESIS_WORKLOAD)
    del params["Attr3"]
    with pytest.raises(SchemaError, match="lack attribute"):
        Workload(THESIS_SCHEMA, params, random.Random(0))
    params = {**THESIS_WORKLOAD, "Atr5": THESIS_WORKLOAD["Attr1"]}
    with pytest.raises(SchemaError, match="unknown attribute 'Atr5'"):
        Workload(THESIS_SCHEMA, params, random.Random(0))
    with pytest.raises(SchemaError, match="expected an AttributeWorkload"):
        Workload(THESIS_SCHEMA, {**THESIS_WORKLOAD, "Attr1": (0.5,)}, random.Random(0))  # type: ignore[dict-item]
    zero = {n: AttributeWorkload(0.0, 0.5, 100, 0.5, 0.5) for n in THESIS_SCHEMA.names()}
    with pytest.raises(SchemaError, match="every present_prob is 0"):
        Workload(THESIS_SCHEMA, zero, random.Random(0))


# --------------------------------------------------------------------------------------------
# Zipf
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("k", "s"), [(10, 0.6), (10, 0.0), (50, 1.2), (3, 0.3)])
def test_zipf_frequencies_match_theory(k: int, s: float) -> None:
    z = ZipfSampler(k, s)
    h = math.fsum(r**-s for r in range(1, k + 1))
    assert math.isclose(math.fsum(z.probability(r) for r in range(1, k + 1)), 1.0)
    for r in (1, 2, k):
        assert math.isclose(z.probability(r), r**-s / h)
    assert z.probability(0) == 0.0 and z.probability(k + 1) == 0.0
    n = 100_000
    rng = random.Random(12345)
    counts = Counter(z.sample(rng) for _ in range(n))
    assert set(counts) <= set(range(1, k + 1))
    for r in range(1, k + 1):
        p = z.probability(r)
        sigma = math.sqrt(p * (1 - p) / n)
        assert abs(counts[r] / n - p) < 5 * sigma + 1e-9, (r, counts[r] / n, p)


class _FixedRandom(random.Random):
    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


def test_zipf_extremes_and_errors() -> None:
    z = ZipfSampler(5, 0.8)
    assert z.sample(_FixedRandom(0.0)) == 1
    assert z.sample(_FixedRandom(1.0 - 2**-53)) == 5
    assert ZipfSampler(1, 2.0).sample(random.Random(1)) == 1
    for k, s in [(0, 0.5), (True, 0.5), (5, -0.1), (5, math.nan), (5, math.inf)]:
        with pytest.raises(SchemaError):
            ZipfSampler(k, s)


# --------------------------------------------------------------------------------------------
# Thesis workload
# --------------------------------------------------------------------------------------------


def test_values_and_events_inside_domains() -> None:
    w = thesis_workload(random.Random(1))
    rng = random.Random(2)
    for _ in range(2000):
        ev = w.event(rng)
        assert len(ev) == 4
        for v, a in zip(ev, THESIS_SCHEMA.attributes, strict=True):
            assert v is not None and a.min <= v <= a.max


def test_value_distribution_follows_the_permuted_zipf() -> None:
    w = thesis_workload(random.Random(3))
    rng = random.Random(4)
    n = 40_000
    counts = Counter(int(w.value(0, rng) // 100) for _ in range(n))  # Attr1: 100-wide sub-ranges
    z = ZipfSampler(100, 0.6)
    hottest = w.describe()["attributes"][0]["hottest_subranges"]
    for rank, subrange in enumerate(hottest, start=1):
        p = z.probability(rank)
        assert abs(counts[subrange] / n - p) < 5 * math.sqrt(p * (1 - p) / n)
    # Scattered: the three hottest sub-ranges are not simply 0, 1, 2.
    assert hottest != [0, 1, 2]


def test_determinism() -> None:
    def run(layout_seed: int, draw_seed: int) -> list:
        w = thesis_workload(random.Random(layout_seed))
        rng = random.Random(draw_seed)
        return [w.event(rng) for _ in range(50)] + [w.subscription(rng) for _ in range(50)]

    assert run(1, 2) == run(1, 2)
    assert run(1, 2) != run(1, 3)
    assert run(1, 2) != run(5, 2)  # another layout scatters the hot sub-ranges elsewhere
    a = thesis_workload(random.Random(1)).describe()
    b = thesis_workload(random.Random(1)).describe()
    assert a == b


def test_subscriptions_shape() -> None:
    w = thesis_workload(random.Random(1))
    rng = random.Random(9)
    n = 20_000
    present = Counter()
    widths_inside: list[float] = []
    for _ in range(n):
        s = w.subscription(rng)
        assert s.schema == "thesis" and s.ranges
        for i, r in s.ranges:
            a = THESIS_SCHEMA.attributes[i]
            p = THESIS_WORKLOAD[a.name]
            present[i] += 1
            assert not r.lo_open and not r.hi_open
            assert a.min <= r.lo < r.hi <= a.max
            width = r.hi - r.lo
            k_max = math.floor(p.size_bound * (a.max - a.min) / p.subrange_size + 1e-9)
            assert width <= k_max * p.subrange_size + 1e-6
            if a.min < r.lo and r.hi < a.max:  # not clipped: a whole number of sub-ranges
                k = width / p.subrange_size
                assert abs(k - round(k)) < 1e-6 and round(k) >= 1
                widths_inside.append(k)
    # present_prob 0.5 plus the no-empty-subscription fallback: 0.5 + (1/16) / 4.
    for i in range(4):
        assert abs(present[i] / n - 0.515625) < 0.015, present
    # Zipf sizes with skew < 1 over up to 50..400 classes: small sizes are the most common.
    sizes = Counter(round(k) for k in widths_inside)
    assert sizes[1] == max(sizes.values())


def test_subscriptions_parse_back() -> None:
    w = thesis_workload(random.Random(1))
    rng = random.Random(5)
    for _ in range(300):
        s = w.subscription(rng)
        assert parse_subscription(s.describe(THESIS_SCHEMA), THESIS_SCHEMA) == s


def test_fallback_picks_an_eligible_attribute() -> None:
    params = {n: AttributeWorkload(0.0, 0.5, 100, 0.5, 0.5) for n in THESIS_SCHEMA.names()}
    params["Attr3"] = AttributeWorkload(1e-9, 0.5, 10, 0.5, 0.3)
    w = Workload(THESIS_SCHEMA, params, random.Random(0))
    rng = random.Random(1)
    assert all(w.subscription(rng).attributes() == (2,) for _ in range(200))


def test_int_attributes_and_short_last_subrange() -> None:
    schema = Schema(
        "mix",
        (
            Attribute("n", "int", -3, 17),
            Attribute("x", "float", 0, 10),  # 4 sub-ranges of 3: the last one is [9, 10]
            Attribute("y", "float", 0, 0.7),  # 0.7 / 0.1 = 6.999999999999999: 7 sub-ranges
        ),
    )
    params = {
        "n": AttributeWorkload(0.9, 0.5, 3, 0.5, 0.5),
        "x": AttributeWorkload(0.9, 0.0, 3, 0.5, 1.0),
        "y": AttributeWorkload(0.9, 0.5, 0.1, 0.5, 0.5),
    }
    w = Workload(schema, params, random.Random(0))
    assert [a["subranges"] for a in w.describe()["attributes"]] == [7, 4, 7]
    rng = random.Random(2)
    xs = [w.value(1, rng) for _ in range(4000)]
    assert all(0 <= x <= 10 for x in xs)
    # Uniform over 4 sub-ranges (skew 0), the last one 1 wide instead of 3.
    assert 0.2 < sum(x >= 9 for x in xs) / len(xs) < 0.3
    for _ in range(500):
        ev = w.event(rng)
        assert ev[0] is not None and ev[0].is_integer() and -3 <= ev[0] <= 17
        s = w.subscription(rng)
        r = s.range_of(0)
        if r is not None:
            assert r.lo.is_integer() and r.hi.is_integer() and -3 <= r.lo <= r.hi <= 17
        assert parse_subscription(s.describe(schema), schema) == s


def test_default_params() -> None:
    many = Schema("many", tuple(Attribute(f"a{i}", "float", 0, 50) for i in range(13)))
    p = default_params(many)
    assert set(p) == set(many.names())
    assert p["a0"] == AttributeWorkload(2 / 13, 0.5, 0.5, 0.6, 0.3)
    two = Schema("two", (Attribute("a", "float", -1, 1), Attribute("n", "int", 0, 50)))
    p = default_params(two)
    assert p["a"].present_prob == 0.5 and p["a"].subrange_size == 0.02
    assert p["n"].subrange_size == 1.0  # at least 1 for an int attribute
    assert default_params(THESIS_SCHEMA)["Attr2"].subrange_size == 200.0


# --------------------------------------------------------------------------------------------
# CSV events: the real file
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def airquality() -> CsvEvents:
    # Shipped in data/ (a fresh clone has it): the file data/README.md describes, unchanged.
    digest = hashlib.sha256(AIRQUALITY.read_bytes()).hexdigest()
    assert digest == "1075efde89b8c1cfc54e1941fc1f177ba8808c95e890ac42a8290b8f3f4a38da"
    return CsvEvents.load(AIRQUALITY, missing=-200)


def test_airquality_loads(airquality: CsvEvents) -> None:
    c = airquality
    assert c.schema.name == "airquality_uci"
    assert c.schema.names() == AIR_HEADER
    assert all(a.type == "float" for a in c.schema.attributes)
    assert c.delimiter == "," and not c.decimal_comma
    assert c.rows == 9357
    # 31 rows have every sensor at -200: they carry nothing and are dropped.
    assert c.skipped_rows == 31
    assert len(c.events) == len(c) == 9357 - 31
    assert all(len(ev) == 13 for ev in c.events)
    assert all(any(v is not None for v in ev) for ev in c.events)
    d = c.describe()
    assert [col["name"] for col in d["skipped_columns"]] == ["Date", "Time"]
    missing = {a["name"]: a["missing"] for a in d["attributes"]}
    # The counts quoted in data/README.md (over all 9,357 rows).
    assert missing["NMHC(GT)"] == 8443
    assert missing["CO(GT)"] == 1683
    assert missing["NOx(GT)"] == 1639
    assert missing["T"] == 366


def test_airquality_values(airquality: CsvEvents) -> None:
    c = airquality
    # First data row: 2004-03-10,18:00:00,2.6,1360.0,150,11.88...,...,0.7577538251293606
    first = c.events[0]
    assert first[:3] == (2.6, 1360.0, 150.0)
    assert first[-1] == 0.7577538251293606
    # Last row has NMHC(GT) = -200: missing.
    last = c.events[-1]
    assert last[2] is None and last[0] == 2.2
    assert not any(v == -200 for ev in c.events for v in ev)
    # Domains are the observed ranges of the present values.
    for i, a in enumerate(c.schema.attributes):
        present = [ev[i] for ev in c.events if ev[i] is not None]
        assert (a.min, a.max) == (min(present), max(present))
    co = c.schema.attributes[0]
    assert (co.min, co.max) == (0.1, 11.9)
    nmhc = c.schema.attributes[2]
    assert (nmhc.min, nmhc.max) == (7.0, 1189.0)


def test_airquality_without_missing_marker(airquality: CsvEvents) -> None:
    raw = CsvEvents.load(AIRQUALITY)
    assert len(raw.events) == 9357 and raw.skipped_rows == 0
    assert raw.schema.attributes[0].min == -200.0


def test_airquality_workload(airquality: CsvEvents) -> None:
    schema = airquality.schema
    w = Workload(schema, default_params(schema), random.Random(1))
    rng = random.Random(2)
    subs = [w.subscription(rng) for _ in range(200)]
    for s in subs:
        assert parse_subscription(s.describe(schema), schema) == s
    mean = sum(len(s.ranges) for s in subs) / len(subs)
    assert 1.5 < mean < 2.8
    # Real events do match generated subscriptions (the workload is not degenerate).
    lenient = schema.with_partial("lenient").partial
    events = airquality.events[::50]
    assert any(s.matches(ev, lenient) for s in subs for ev in events)


# --------------------------------------------------------------------------------------------
# CSV events: small files
# --------------------------------------------------------------------------------------------


def _write(tmp_path: Path, name: str, text: str, encoding: str = "utf-8") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding=encoding, newline="")
    return p


def test_csv_small_file(tmp_path: Path) -> None:
    p = _write(
        tmp_path,
        "my readings.csv",
        "\ufeffDate,temp,n,label,flat,,gone\r\n"
        "2024-01-01,1.5,3,a,7,,-1\r\n"
        "\r\n"
        "2024-01-02,,-1,b,7,,\r\n"
        "2024-01-03,-1,-1,c,,,-1\r\n"
        ",,,,,,\r\n"
        "2024-01-04,2.5e1,10,d,7,,-1\r\n",
    )
    c = CsvEvents.load(p, missing=-1)
    assert c.schema.name == "my_readings"
    assert c.schema.names() == ("temp", "n", "flat")
    assert c.rows == 4  # blank line and the all-empty row are not records
    assert c.skipped_rows == 1  # 2024-01-03 has nothing present
    assert c.events == [(1.5, 3.0, 7.0), (None, None, 7.0), (25.0, 10.0, 7.0)]
    temp, n, flat = c.schema.attributes
    assert (temp.min, temp.max) == (1.5, 25.0)
    assert (n.min, n.max) == (3.0, 10.0)
    assert (flat.min, flat.max) == (6.5, 7.5)  # constant column widened by 1
    d = c.describe()
    assert d["skipped_columns"] == [
        {"name": "column 6", "reason": "blank header"},
        {"name": "Date", "reason": "not numeric"},
        {"name": "label", "reason": "not numeric"},
        {"name": "gone", "reason": "no values (all missing)"},
    ]
    assert [a["missing"] for a in d["attributes"]] == [2, 2, 1]


def test_csv_semicolons_and_decimal_commas(tmp_path: Path) -> None:
    # The original UCI export: ';' separated, decimal commas, two empty trailing columns.
    p = _write(
        tmp_path,
        "AirQualityUCI.csv",
        "Date;Time;CO(GT);T;;\n10/03/2004;18.00.00;2,6;13,6;;\n10/03/2004;19.00.00;-200;13,3;;\n"
        ";;;;;\n",
    )
    c = CsvEvents.load(p, missing=-200)
    assert c.delimiter == ";" and c.decimal_comma
    assert c.schema.names() == ("CO(GT)", "T")
    assert c.events == [(2.6, 13.6), (None, 13.3)]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("a,b\n1,2\n3\n", ", line 3: expected 2 fields like the header, found 1"),
        ("a,b\n1,2\n3,4,5\n", ", line 3: expected 2 fields"),
        ("Date,label\nx,y\n", ": no numeric columns (skipped: Date (not numeric), label"),
        ("a,b\n", ": no data rows, only the header line"),
        ("", ": the file is empty"),
        ("a,b\n1e308,1\n-1e308,2\n", ", line 2: column 'a': values from -1e+308 to 1e+308"),
        ("a,b\n1,2\n", ": --columns names 'c', which is not a column of the header"),
        ("a,b\nx,2\n", ", line 2: column 'a' (--columns) is not numeric: 'x'"),
    ],
)
def test_csv_errors_name_file_and_line(tmp_path: Path, text: str, fragment: str) -> None:
    p = _write(tmp_path, "bad.csv", text)
    columns = "c" if "'c'" in fragment else "a,b" if "(--columns)" in fragment else None
    with pytest.raises(SchemaError) as exc:
        CsvEvents.load(p, columns=columns)
    msg = str(exc.value)
    assert msg.startswith(str(p)), msg
    assert fragment in msg, msg


def test_csv_io_errors(tmp_path: Path) -> None:
    with pytest.raises(SchemaError, match="CSV file not found"):
        CsvEvents.load(tmp_path / "none.csv")
    p = tmp_path / "latin1.csv"
    p.write_bytes("a,b\n1,\xe9\n".encode("latin-1"))
    with pytest.raises(SchemaError, match="not a UTF-8 text file"):
        CsvEvents.load(p)
    with pytest.raises(SchemaError, match="missing must be a finite number"):
        CsvEvents.load(p, missing=math.nan)
    with pytest.raises(SchemaError, match="is a directory"):
        CsvEvents.load(tmp_path)


def test_csv_any_header_is_renamed_and_reported(tmp_path: Path) -> None:
    # A common export: columns named 0, 1, ...; a header with a space, a keyword, a repeat.
    p = _write(tmp_path, "export.csv", "0,1,temp C,and,temp-C,when\n1,2,3,4,5,x\n6,7,8,9,10,y\n")
    c = CsvEvents.load(p)
    assert c.schema.names() == ("_0", "_1", "temp_C", "and_", "temp_C_2")
    assert c.columns == ("0", "1", "temp C", "and", "temp-C")
    assert c.renamed() == [
        ("0", "_0"),
        ("1", "_1"),
        ("temp C", "temp_C"),
        ("and", "and_"),
        ("temp-C", "temp_C_2"),
    ]
    assert c.events == [(1.0, 2.0, 3.0, 4.0, 5.0), (6.0, 7.0, 8.0, 9.0, 10.0)]
    d = c.describe()
    assert d["columns_used"] == ["0", "1", "temp C", "and", "temp-C"]
    assert d["renamed_columns"][2] == {"column": "temp C", "attribute": "temp_C"}
    assert d["skipped_columns"] == [{"name": "when", "reason": "not numeric"}]
    notes = c.notes()
    assert "renamed columns: '0' -> _0" in notes[-1]
    assert "skipped columns: 'when' (not numeric)" in notes[1]


def test_csv_blank_and_repeated_headers_are_reported(tmp_path: Path) -> None:
    """Issue 30 item 6: ``a,,a`` used to drop the blank column without a word."""
    c = CsvEvents.load(_write(tmp_path, "h.csv", "a,,a\n1,2,3\n4,5,6\n"))
    assert c.schema.names() == ("a", "a_2")
    assert c.skipped_columns == [("column 2", "blank header")]
    assert c.renamed() == [("a", "a_2")]
    assert c.events == [(1.0, 3.0), (4.0, 6.0)]


def test_csv_columns_option_selects_orders_and_names(tmp_path: Path) -> None:
    p = _write(tmp_path, "sel.csv", "date,temp C,RH,x\nd1,1,50,7\nd2,2,60,8\n")
    c = CsvEvents.load(p, columns="RH, temp C=temp")
    assert c.schema.names() == ("RH", "temp")
    assert c.events == [(50.0, 1.0), (60.0, 2.0)]
    assert c.skipped_columns == [("date", "not in --columns"), ("x", "not in --columns")]
    # Sanitised names work as well as the header's own.
    assert CsvEvents.load(p, columns=["temp_C"]).schema.names() == ("temp_C",)
    with pytest.raises(SchemaError, match="is not COLUMN or COLUMN=NAME"):
        CsvEvents.load(p, columns="temp C=")
    with pytest.raises(SchemaError, match="invalid attribute name 'two words'"):
        CsvEvents.load(p, columns="RH=two words")


def test_csv_mixed_column_is_skipped_with_a_note_and_missing_words(tmp_path: Path) -> None:
    p = _write(tmp_path, "na.csv", "a,b,c\n1,2,3\n4,NA,\n5,6,7\n")
    c = CsvEvents.load(p)
    assert c.schema.names() == ("a", "c")
    assert c.skipped_columns == [
        ("b", "not numeric: 'NA' on line 3 among 2 numbers; --missing NA marks such cells absent")
    ]
    assert c.events == [(1.0, 3.0), (4.0, None), (5.0, 7.0)]
    # The word as --missing: the column is back, its NA cell absent like an empty one.
    c = CsvEvents.load(p, missing="NA")
    assert c.schema.names() == ("a", "b", "c")
    assert c.events == [(1.0, 2.0, 3.0), (4.0, None, None), (5.0, 6.0, 7.0)]
    assert c.missing_counts == (0, 1, 1)
    # A number given as text is a number: "-200" and "-200.0" cells both match.
    q = _write(tmp_path, "num.csv", "a\n1\n-200.0\n-200\n")
    assert CsvEvents.load(q, missing="-200").events == [(1.0,)]
