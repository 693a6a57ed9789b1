"""The filter algebra (brokers/filters.py): exact set relations on boxes, checked against the
events themselves. Bounds are drawn from {0..4} and events from the half-integer grid with
missing values, which decides every relation between such boxes exactly (open and closed ends
included), so the properties compare the algebra with brute force, not with itself."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rangecast.brokers.filters import Box, covers, intersect, matches, overlaps
from rangecast.brokers.messages import (
    Advertise,
    Publish,
    Subscribe,
    box_from_wire,
    box_to_wire,
    broker_codec,
)
from rangecast.pubsub.schema import Attribute, Schema, SchemaError
from rangecast.pubsub.subscription import Range, Subscription, parse_subscription

SCHEMA = Schema("s", (Attribute("x", "float", 0, 4), Attribute("n", "int", 0, 4)))
GRID = [None] + [k / 2 for k in range(9)]
EVENTS = list(itertools.product(GRID, GRID))


@st.composite
def ranges(draw: st.DrawFn) -> Range:
    lo = draw(st.integers(0, 4))
    hi = draw(st.integers(lo, 4))
    lo_open, hi_open = draw(st.booleans()), draw(st.booleans())
    if lo == hi:
        lo_open = hi_open = False
    return Range(lo, hi, lo_open, hi_open)


@st.composite
def boxes(draw: st.DrawFn) -> Box:
    while True:
        picked = {i: draw(ranges()) for i in range(2) if draw(st.booleans())}
        try:
            return Box.from_ranges(SCHEMA, picked)
        except SchemaError:
            continue  # an int range with no integer inside, e.g. (1, 2)


def _in(box: Box) -> set[tuple[float | None, ...]]:
    # Int attribute: only integral values (or missing) are valid events.
    return {e for e in EVENTS if (e[1] is None or float(e[1]).is_integer()) and matches(box, e)}


@given(boxes(), boxes())
def test_overlaps_and_intersect_are_the_set_intersection(a: Box, b: Box) -> None:
    both = _in(a) & _in(b)
    assert overlaps(a, b) == bool(both) == overlaps(b, a)
    c = intersect(a, b)
    assert c == intersect(b, a)
    assert (c is not None) == overlaps(a, b)
    for e in EVENTS:
        assert (c is not None and matches(c, e)) == (matches(a, e) and matches(b, e))


@given(boxes(), boxes())
def test_covers_is_set_inclusion(a: Box, b: Box) -> None:
    assert covers(a, b) == (_in(b) <= _in(a))
    if covers(a, b):
        assert overlaps(a, b)  # boxes are never empty
    assert covers(a, a)


@given(boxes())
def test_a_box_matches_as_its_subscription_does(b: Box) -> None:
    if not b.ranges():
        return
    sub = Subscription("s", b.ranges())
    for e in EVENTS:
        assert matches(b, e) == sub.matches(e, "strict")
    assert Box.from_subscription(sub, SCHEMA) == b


@given(boxes())
def test_a_box_survives_the_wire(b: Box) -> None:
    assert box_from_wire(box_to_wire(b), 2) == b


def test_free_is_not_the_whole_domain() -> None:
    free = Box.from_ranges(SCHEMA, {0: Range(1, 2)})
    pinned = Box.from_ranges(SCHEMA, {0: Range(1, 2), 1: Range(0, 4)})
    assert matches(free, (1.5, None)) and not matches(pinned, (1.5, None))
    assert covers(free, pinned) and not covers(pinned, free)
    assert intersect(free, pinned) == pinned


def test_open_ends_are_exact() -> None:
    s = Schema("one", (Attribute("x", "float", 0, 10),))
    below = Box.from_subscription(parse_subscription("x < 5", s), s)
    upto = Box.from_subscription(parse_subscription("x <= 5", s), s)
    above = Box.from_subscription(parse_subscription("x >= 5", s), s)
    assert not overlaps(below, above) and overlaps(upto, above)
    assert covers(upto, below) and not covers(below, upto)
    assert intersect(upto, above) == Box.from_ranges(s, {0: Range(5, 5)})
    assert matches(upto, (5,)) and not matches(below, (5,))


def test_int_attributes_are_normalised() -> None:
    s = Schema("i", (Attribute("n", "int", 0, 9),))
    assert Box.from_ranges(s, {0: Range(3, 7, True, True)}) == Box.from_ranges(s, {0: Range(4, 6)})
    with pytest.raises(SchemaError):
        Box.from_ranges(s, {0: Range(3, 4, True, True)})


def test_lenient_schemas_are_refused() -> None:
    with pytest.raises(SchemaError):
        Box.from_ranges(SCHEMA.with_partial("lenient"), {0: Range(1, 2)})


def test_box_size_on_the_wire() -> None:
    # BASELINES 4.6: a 4-attribute box is 64 B of bounds; MessagePack adds a marker per float,
    # the three masks and the array headers.
    s = Schema("four", tuple(Attribute(f"a{i}", "float", 0, 1000) for i in range(4)))
    w = box_to_wire(Box.from_ranges(s, {0: Range(1.5, 2.5)}))
    codec = broker_codec()
    assert len(codec.raw_encode(w)) == 64 + 8 + 3 + 3
    big = 17 << 32 | 5  # an id as brokers draw them
    assert codec.size(Subscribe(0, big, w, 17)) == 94
    assert codec.size(Advertise(0, big, w)) == 92
    assert codec.size(Publish(0, big, [1.5, 2.5, 3.5, 4.5])) == 52
    assert codec.decode(codec.encode(Subscribe(0, big, w, 17, [3]))).tids == [3]
