"""Subscriptions: ranges, matching (against a reference), the language and the builder."""

from __future__ import annotations

import math
import pickle
import random
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rangecast.pubsub.schema import THESIS_SCHEMA, Attribute, Schema, SchemaError
from rangecast.pubsub.subscription import (
    Range,
    Subscription,
    SubscriptionSyntaxError,
    parse_subscription,
    where,
)

T = THESIS_SCHEMA
# Names as in the AirQuality CSV header, an int attribute, a negative domain.
MIXED = Schema(
    "mixed",
    (
        Attribute("CO(GT)", "float", 0.1, 11.9),
        Attribute("PT08.S1(CO)", "float", 647.25, 2039.75),
        Attribute("count", "int", -5, 100),
        Attribute("T", "float", -1.8999999761581, 44.60000038147),
    ),
    "lenient",
)


def parse(text: str, schema: Schema = T) -> Subscription:
    return parse_subscription(text, schema)


def sub(schema: Schema, *ranges: tuple[int, Range]) -> Subscription:
    return Subscription(schema.name, tuple(ranges))


# --------------------------------------------------------------------------------------------
# Range
# --------------------------------------------------------------------------------------------


def test_range_contains_honours_openness() -> None:
    r = Range(1, 2)
    assert r.contains(1) and r.contains(2) and r.contains(1.5)
    assert not r.contains(0.999) and not r.contains(2.0001)
    r = Range(1, 2, lo_open=True, hi_open=True)
    assert not r.contains(1) and not r.contains(2) and r.contains(math.nextafter(1, 2))
    assert Range(1, 2, hi_open=True).contains(1) and not Range(1, 2, hi_open=True).contains(2)


def test_range_is_empty() -> None:
    assert not Range(1, 1).is_empty()
    assert Range(1, 1, lo_open=True).is_empty()
    assert Range(1, 1, hi_open=True).is_empty()
    assert Range(2, 1).is_empty()
    assert not Range(1, 2, True, True).is_empty()


def test_range_validation_and_normalisation() -> None:
    with pytest.raises(SchemaError):
        Range(math.nan, 1)
    with pytest.raises(SchemaError):
        Range(0, "1")  # type: ignore[arg-type]
    with pytest.raises(SchemaError):
        Range(0, 1, 1, 0)  # type: ignore[arg-type]
    assert type(Range(0, 1).lo) is float
    assert Range(0, 3, False, True).interval() == "[0, 3)"
    assert Range(0.5, 3, True, False).interval() == "(0.5, 3]"


_pts = st.sampled_from([-2.0, -1.0, 0.0, 0.5, 1.0, 2.0, 3.0])
ranges = st.builds(Range, _pts, _pts, st.booleans(), st.booleans())


@given(ranges, ranges, _pts)
def test_intersect_is_conjunction(a: Range, b: Range, v: float) -> None:
    both = a.intersect(b)
    assert both.contains(v) == (a.contains(v) and b.contains(v))
    assert both == b.intersect(a)
    if both.is_empty():
        assert not any(a.contains(x) and b.contains(x) for x in (-2, -1, 0, 0.5, 1, 2, 3, 0.25))


# --------------------------------------------------------------------------------------------
# Parser: accepted forms
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Attr1 = 5", Range(5, 5)),
        ("Attr1 == 5", Range(5, 5)),
        ("Attr1 < 5", Range(0, 5, False, True)),
        ("Attr1 <= 5", Range(0, 5)),
        ("Attr1 > 5", Range(5, 10_000, True, False)),
        ("Attr1 >= 5", Range(5, 10_000)),
        ("Attr1 between 5 and 7.5", Range(5, 7.5)),
        ("Attr1 BETWEEN 5 AND 5", Range(5, 5)),
        ("5 <= Attr1", Range(5, 10_000)),
        ("5 < Attr1", Range(5, 10_000, True, False)),
        ("5 > Attr1", Range(0, 5, False, True)),
        ("5 >= Attr1", Range(0, 5)),
        ("5 = Attr1", Range(5, 5)),
        ("5 < Attr1 <= 7", Range(5, 7, True, False)),
        ("5 <= Attr1 < 7", Range(5, 7, False, True)),
        ("Attr1>=5", Range(5, 10_000)),
        ("  Attr1\t>=\n5  ", Range(5, 10_000)),
        ("Attr1 >= 1e3", Range(1000, 10_000)),
        ("Attr1 >= 1.5E+2", Range(150, 10_000)),
        ("Attr1 >= +5", Range(5, 10_000)),
        ("Attr1 >= .5", Range(0.5, 10_000)),
        ("Attr1 >= 5.", Range(5, 10_000)),
        ("Attr1 >= 0 and Attr1 <= 10000", Range(0, 10_000)),
        ("Attr1 > 5 and Attr1 < 7 and Attr1 >= 6", Range(6, 7, False, True)),
        ("Attr1 between 1 and 9 And 2 < Attr1", Range(2, 9, True, False)),
    ],
)
def test_parse_single_attribute(text: str, expected: Range) -> None:
    s = parse(text)
    assert s.schema == "thesis"
    assert s.ranges == ((0, expected),)


def test_parse_several_attributes_sorted() -> None:
    s = parse("Attr4 < 7 and Attr1 >= 10 and Attr2 between -5 and 5")
    assert s.ranges == (
        (0, Range(10, 10_000)),
        (1, Range(-5, 5)),
        (3, Range(0, 7, False, True)),
    )
    assert s.attributes() == (0, 1, 3)
    assert s.range_of(1) == Range(-5, 5)
    assert s.range_of(2) is None


def test_parse_csv_style_names() -> None:
    s = parse("PT08.S1(CO) > 1000 and CO(GT) <= 2.5 and count = -3", MIXED)
    assert s.ranges == (
        (0, Range(0.1, 2.5)),
        (1, Range(1000, 2039.75, True, False)),
        (2, Range(-3, -3)),
    )


# --------------------------------------------------------------------------------------------
# Parser: errors point at the culprit
# --------------------------------------------------------------------------------------------


def test_error_rendering_example() -> None:
    with pytest.raises(SubscriptionSyntaxError) as exc:
        parse("Attr1 >= 10 and Atr2 < 5")
    e = exc.value
    assert (e.position, e.length) == (16, 4)
    assert e.text == "Attr1 >= 10 and Atr2 < 5"
    assert str(e) == (
        "unknown attribute 'Atr2' in schema 'thesis' (did you mean 'Attr2'?)\n"
        "  Attr1 >= 10 and Atr2 < 5\n"
        "                  ^^^^"
    )
    assert isinstance(e, SchemaError)
    again = pickle.loads(pickle.dumps(e))
    assert str(again) == str(e) and again.position == 16


@pytest.mark.parametrize(
    ("text", "culprit", "fragment"),
    [
        ("Attr1 >= 10 and Atr2 < 5", "Atr2", "did you mean 'Attr2'?"),
        ("temperature > 3", "temperature", "valid attributes: Attr1, Attr2, Attr3, Attr4"),
        ("Attr1 > 5 and Attr1 < 3", "Attr1 < 3", "does not overlap (5, 10000]"),
        ("Attr1 between 5 and 3", "Attr1 between 5 and 3", "lower bound 5 is above"),
        ("Attr1 < 0", "Attr1 < 0", "leaves [0, 0), which is empty (the domain is [0, 10000])"),
        ("Attr1 > 10000", "Attr1 > 10000", "(10000, 10000], which is empty"),
        ("0 < Attr1 < 0", "0 < Attr1 < 0", "which is empty"),
        ("Attr4 < 300", "300", "value 300 for 'Attr4' is outside its domain [0, 200]"),
        ("Attr2 >= -10000.5", "-10000.5", "outside its domain [-10000, 10000]"),
        ("Attr4 between 1 and 201", "201", "outside its domain"),
        ("Attr1 > 1e999", "1e999", "must be a finite number"),
        ("Attr1 > 5 Attr2", "Attr2", "expected 'and' or the end of the subscription"),
        ("Attr1 > 5 and", "", "expected a predicate after 'and'"),
        ("Attr1 >=", "", "expected a number after '>=', found the end"),
        ("Attr1 >= and Attr2 < 3", "and", "expected a number after '>=', found 'and'"),
        ("Attr1 between 1 Attr2", "Attr2", "expected 'and' after '1'"),
        ("Attr1 between 1 and", "", "expected a number after 'and'"),
        ("Attr1", "", "expected a comparison (=, <, <=, >, >=) or 'between'"),
        ("Attr1 5", "5", "expected a comparison"),
        ("5 Attr1", "Attr1", "expected a comparison after the number '5'"),
        ("5 < 6", "6", "expected an attribute name after '<'"),
        ("> 5", ">", "expected an attribute name or a number to start a predicate"),
        ("and Attr1 > 5", "and", "expected an attribute name or a number"),
        ("1 < Attr1 > 0", ">", "chained comparison must read"),
        ("9 > Attr1 > 1", ">", "chained comparison must read"),
        ("Attr1 > 5and Attr2 < 3", "5and", "malformed number '5and'"),
        ("Attr1 > 1.2.3", "1.2.3", "malformed number"),
        ("Attr1 != 3", "!", "'!=' is not supported"),
        ("(Attr1 > 3)", "(", "parentheses are only allowed inside attribute names"),
        ("Attr1 > - 3", "-", "a sign must be written directly before its number"),
        ("Attr1 > 3 ; Attr2 < 1", ";", "unexpected character ';'"),
        ("", "", "empty subscription"),
    ],
)
def test_parse_errors(text: str, culprit: str, fragment: str) -> None:
    with pytest.raises(SubscriptionSyntaxError) as exc:
        parse(text)
    e = exc.value
    assert fragment in e.message, e.message
    assert e.text == text
    if culprit:
        assert text[e.position : e.position + e.length] == culprit, str(e)
    else:
        assert e.position == len(text.rstrip()) or text == ""
    # The caret line sits under the culprit.
    lines = str(e).split("\n")
    assert lines[0] == e.message
    caret = lines[2][2:]
    assert caret.index("^") == e.position
    assert caret.count("^") == max(1, e.length)


def test_blank_subscription_spans_the_whitespace() -> None:
    with pytest.raises(SubscriptionSyntaxError, match="empty subscription") as exc:
        parse("   ")
    assert (exc.value.position, exc.value.length) == (0, 3)


def test_caret_aligned_with_tabs_and_newlines() -> None:
    with pytest.raises(SubscriptionSyntaxError) as exc:
        parse("Attr1 > 1 and\n\tAtr2 < 5")
    lines = str(exc.value).split("\n")
    assert len(lines) == 3
    assert lines[1][2:][exc.value.position :].startswith("Atr2")
    assert lines[2][2:].index("^") == exc.value.position == 15


def test_int_attribute_errors() -> None:
    with pytest.raises(SubscriptionSyntaxError) as exc:
        parse("count > 2.5", MIXED)
    assert "'count' is an int attribute: 2.5 is not an integer" in exc.value.message
    assert exc.value.text[exc.value.position :].startswith("2.5")
    with pytest.raises(SubscriptionSyntaxError, match="contains no integer") as exc:
        parse("count > 3 and count < 4", MIXED)
    with pytest.raises(SubscriptionSyntaxError, match="contains no integer"):
        parse("3 < count < 4", MIXED)
    assert parse("3 < count < 5", MIXED).ranges == ((2, Range(3, 5, True, True)),)
    assert parse("count >= 1e1", MIXED).ranges == ((2, Range(10, 100)),)


def test_non_string_input() -> None:
    with pytest.raises(SchemaError, match="must be a string"):
        parse_subscription(None, T)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# Round trip through describe()
# --------------------------------------------------------------------------------------------


@st.composite
def range_for(draw: st.DrawFn, a: Attribute) -> Range:
    if a.type == "int":
        point = st.integers(int(a.min), int(a.max)).map(float)
    else:
        point = st.one_of(
            st.sampled_from([a.min, a.max]),
            st.floats(a.min, a.max, allow_nan=False),
            st.integers(math.ceil(a.min), math.floor(a.max)).map(float),
        )
    x, y = sorted([draw(point), draw(point)])
    lo_open, hi_open = draw(st.booleans()), draw(st.booleans())
    r = Range(x, y, lo_open, hi_open)
    if r.is_empty() or (a.type == "int" and y - x < 2 and lo_open and hi_open):
        r = Range(x, y)
    return r


@st.composite
def subscriptions(draw: st.DrawFn, schema: Schema) -> Subscription:
    idx = sorted(draw(st.sets(st.integers(0, len(schema) - 1), min_size=1)))
    return sub(schema, *((i, draw(range_for(schema.attributes[i]))) for i in idx))


@given(st.sampled_from([T, MIXED]).flatmap(lambda s: st.tuples(st.just(s), subscriptions(s))))
def test_describe_round_trips(case: tuple[Schema, Subscription]) -> None:
    schema, s = case
    text = s.describe(schema)
    assert parse_subscription(text, schema) == s, text


def test_describe_forms() -> None:
    assert parse("Attr1 = 5").describe(T) == "Attr1 = 5"
    assert parse("Attr1 < 5").describe(T) == "Attr1 < 5"
    assert parse("Attr1 >= 0").describe(T) == "Attr1 <= 10000"
    assert parse("Attr1 > 2.5").describe(T) == "Attr1 > 2.5"
    assert parse("Attr1 between 1 and 2").describe(T) == "Attr1 between 1 and 2"
    assert parse("1 < Attr1 <= 2").describe(T) == "1 < Attr1 <= 2"
    assert parse("Attr1 > 0 and Attr1 < 1e-7").describe(T) == "0 < Attr1 < 1e-07"
    text = "CO(GT) between 0.5 and 2 and PT08.S1(CO) > 1000 and count = 7"
    assert parse(text, MIXED).describe(MIXED) == text
    with pytest.raises(SchemaError, match="for schema 'thesis', not 'mixed'"):
        parse("Attr1 = 5").describe(MIXED)


# --------------------------------------------------------------------------------------------
# Matching
# --------------------------------------------------------------------------------------------


def reference_matches(s: Subscription, values: Sequence[float | None], partial: str) -> bool:
    """The definition, spelt out plainly (SPEC 3)."""
    for i, r in s.ranges:
        v = values[i] if i < len(values) else None
        if v is None:
            if partial == "lenient":
                continue
            return False
        above = v > r.lo if r.lo_open else v >= r.lo
        below = v < r.hi if r.hi_open else v <= r.hi
        if not (above and below):
            return False
    return True


@st.composite
def events_near(draw: st.DrawFn, schema: Schema, s: Subscription) -> tuple[float | None, ...]:
    # Values at, next to and away from the bounds, so openness is really exercised.
    out: list[float | None] = []
    for i, a in enumerate(schema.attributes):
        r = s.range_of(i)
        marks = [a.min, a.max] if r is None else [r.lo, r.hi]
        near = [
            m for x in marks for m in (x, math.nextafter(x, -math.inf), math.nextafter(x, 1e300))
        ]
        out.append(
            draw(
                st.one_of(
                    st.none(),
                    st.sampled_from(near),
                    st.floats(a.min, a.max, allow_nan=False),
                )
            )
        )
    return tuple(out)


@given(
    st.sampled_from([T, MIXED])
    .flatmap(lambda sc: st.tuples(st.just(sc), subscriptions(sc)))
    .flatmap(lambda c: st.tuples(st.just(c[0]), st.just(c[1]), events_near(c[0], c[1]))),
)
def test_matches_equals_reference(case: tuple[Schema, Subscription, tuple]) -> None:
    _, s, ev = case
    for partial in ("strict", "lenient"):
        assert s.matches(ev, partial) == reference_matches(s, ev, partial)


def test_matches_equals_reference_bulk() -> None:
    # Many random pairs from a fixed seed, complementing the shrinking Hypothesis test above.
    from rangecast.sim.workload import THESIS_WORKLOAD, Workload

    rng = random.Random(7)
    w = Workload(T, THESIS_WORKLOAD, random.Random(1))
    subs = [w.subscription(rng) for _ in range(300)]
    events = []
    for _ in range(200):
        ev = list(w.event(rng))
        for i in range(len(ev)):
            if rng.random() < 0.25:
                ev[i] = None
        events.append(tuple(ev))
    hits = 0
    for s in subs:
        for ev in events:
            for partial in ("strict", "lenient"):
                got = s.matches(ev, partial)
                assert got == reference_matches(s, ev, partial)
                hits += got
    assert hits > 0


def test_partial_rules() -> None:
    s = parse("Attr1 >= 10 and Attr3 < 5")
    assert s.matches((10.0, None, 4.0, None), "strict")
    assert not s.matches((10.0, None, None, None), "strict")
    assert s.matches((10.0, None, None, None), "lenient")
    assert s.matches((None, None, None, None), "lenient")  # every predicate ignored
    assert not s.matches((10.0, None, 5.0, None), "lenient")
    with pytest.raises(SchemaError, match="partial must be"):
        s.matches((10.0, 0.0, 0.0, 0.0), "loose")


def test_matches_events_from_before_an_added_attribute() -> None:
    wider = T.with_attribute(Attribute("Attr5", "float", 0, 1))
    old = parse("Attr1 >= 10")  # installed before Attr5 existed
    new = parse("Attr1 >= 10 and Attr5 <= 0.5", wider)
    old_event = (20.0, 0.0, 0.0, 0.0)
    assert old.matches(old_event, "strict")
    assert old.matches((20.0, 0.0, 0.0, 0.0, 0.9), "strict")
    assert not new.matches(old_event, "strict")
    assert new.matches(old_event, "lenient")
    assert new.matches((20.0, 0.0, 0.0, 0.0, 0.5), "strict")
    assert parse_subscription(old.describe(wider.with_partial("strict")), wider) == old


# --------------------------------------------------------------------------------------------
# Subscription validation
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ranges", "fragment"),
    [
        ((), "at least one predicate"),
        (((1, Range(0, 1)), (0, Range(0, 1))), "sorted by attribute index"),
        (((0, Range(0, 1)), (0, Range(0, 2))), "sorted by attribute index"),
        (((0, Range(1, 1, True)),), "is empty"),
        (((-1, Range(0, 1)),), "int >= 0"),
        (((True, Range(0, 1)),), "int >= 0"),
        (((0, (0, 1)),), "expected a Range"),
        (((0,),), "(index, Range)"),
    ],
)
def test_subscription_validation(ranges: tuple, fragment: str) -> None:
    with pytest.raises(SchemaError) as exc:
        Subscription("thesis", ranges)
    assert fragment in str(exc.value)


def test_subscription_value_semantics() -> None:
    a = parse("Attr1 >= 10 and Attr2 < 5")
    b = Subscription("thesis", [(0, Range(10, 10_000)), (1, Range(-10_000, 5, False, True))])  # type: ignore[arg-type]
    assert a == b and hash(a) == hash(b)
    assert isinstance(b.ranges, tuple)
    assert pickle.loads(pickle.dumps(a)) == a
    assert pickle.loads(pickle.dumps(a)).matches((10.0, 4.0, None, None), "strict")
    with pytest.raises(SchemaError):
        Subscription("", ((0, Range(0, 1)),))


# --------------------------------------------------------------------------------------------
# The builder
# --------------------------------------------------------------------------------------------


def test_builder_matches_parser() -> None:
    built = where(T).ge("Attr1", 10).between("Attr2", -5, 5).lt("Attr4", 7).build()
    assert built == parse("Attr1 >= 10 and Attr2 between -5 and 5 and Attr4 < 7")
    built = where(MIXED).gt("count", 3).le("count", 9).eq("T", 20).build()
    assert built == parse("3 < count <= 9 and T = 20", MIXED)


def test_builder_errors_name_the_attribute() -> None:
    with pytest.raises(SchemaError, match=r"unknown attribute 'Atr1' .*did you mean 'Attr1'"):
        where(T).ge("Atr1", 10)
    with pytest.raises(
        SchemaError, match=r"value 300 for 'Attr4' is outside its domain \[0, 200\]"
    ):
        where(T).lt("Attr4", 300)
    with pytest.raises(SchemaError, match="empty range for 'Attr1'"):
        where(T).gt("Attr1", 5).lt("Attr1", 3)
    with pytest.raises(SchemaError, match="empty range for 'Attr1'"):
        where(T).lt("Attr1", 0)
    with pytest.raises(SchemaError, match=r"empty range for 'Attr1'.*above the upper bound"):
        where(T).between("Attr1", 5, 3)
    with pytest.raises(SchemaError, match="'count' is an int attribute"):
        where(MIXED).eq("count", 2.5)
    with pytest.raises(SchemaError, match="must be a number"):
        where(T).eq("Attr1", "5")  # type: ignore[arg-type]
    with pytest.raises(SchemaError, match="must be a finite number"):
        where(T).eq("Attr1", math.nan)
    with pytest.raises(SchemaError, match="at least one predicate"):
        where(T).build()
    with pytest.raises(SchemaError, match="needs a Schema"):
        where("thesis")  # type: ignore[arg-type]
    # Builder errors are not syntax errors: there is no text to point into.
    with pytest.raises(SchemaError) as exc:
        where(T).lt("Attr4", 300)
    assert not isinstance(exc.value, SubscriptionSyntaxError)


_OP_TEXT = {"eq": "=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_values = st.sampled_from([-10_001, -5, 0, 0.5, 3, 7, 200, 201, 10_000])


@st.composite
def predicate_lists(draw: st.DrawFn) -> list[tuple]:
    out = []
    for _ in range(draw(st.integers(1, 4))):
        name = draw(st.sampled_from(["Attr1", "Attr2", "Attr4"]))
        if draw(st.booleans()):
            out.append(("between", name, draw(_values), draw(_values)))
        else:
            out.append((draw(st.sampled_from(sorted(_OP_TEXT))), name, draw(_values)))
    return out


@given(predicate_lists())
def test_builder_agrees_with_parser(preds: list[tuple]) -> None:
    texts = []
    for p in preds:
        if p[0] == "between":
            texts.append(f"{p[1]} between {p[2]} and {p[3]}")
        else:
            texts.append(f"{p[1]} {_OP_TEXT[p[0]]} {p[2]}")
    try:
        parsed: Subscription | None = parse(" and ".join(texts))
    except SubscriptionSyntaxError:
        parsed = None
    try:
        b = where(T)
        for p in preds:
            getattr(b, p[0])(*p[1:])
        built: Subscription | None = b.build()
    except SchemaError:
        built = None
    assert parsed == built
