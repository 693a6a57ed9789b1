"""Hypothesis strategies for Rangecast's data: schemas, subscriptions, events and workloads.

The corner cases the overlay has to get right come often: a subscription on a single value (a
point on the diagonal, often a domain end), one over a whole domain (the triangle's far corner),
many identical subscriptions (points that only the widening separates, ``subscription_lists``),
events on a subscription's bounds (``events_touching``) and partial events (absent values,
``events(..., missing=...)``). Every strategy shrinks towards small, plain examples: the first
attribute, the domain's low end, no absent value.

Needs hypothesis (``pip install rangecast[testing]``)."""

from __future__ import annotations

import random
from collections.abc import Sequence

from hypothesis import strategies as st

from rangecast.pubsub.schema import THESIS_SCHEMA, Attribute, Schema
from rangecast.pubsub.subscription import Range, Subscription
from rangecast.sim.workload import THESIS_WORKLOAD, Workload, default_params

#: Attribute names the generated schemas use (short, valid in the subscription language).
_NAMES = tuple(f"a{i}" for i in range(8))


@st.composite
def attributes(draw: st.DrawFn, name: str = "a0") -> Attribute:
    """An attribute with a finite domain: small or huge, integral or not, around zero or not."""
    kind = draw(st.sampled_from(["float", "int"]))
    lo = draw(st.sampled_from([0.0, -1.0, -1000.0, 1e6, -3.5]))
    width = draw(st.sampled_from([1.0, 10.0, 3000.0, 1e9, 0.5]))
    if kind == "int":
        lo, width = float(int(lo)), float(max(1, int(width)))
    return Attribute(name, kind, lo, lo + width)


@st.composite
def schemas(draw: st.DrawFn, max_attributes: int = 4, name: str = "gen") -> Schema:
    """A schema of 1..``max_attributes`` attributes, strict or lenient about absent values."""
    n = draw(st.integers(1, min(max_attributes, len(_NAMES))))
    attrs = tuple(draw(attributes(_NAMES[i])) for i in range(n))
    return Schema(name, attrs, draw(st.sampled_from(["strict", "lenient"])))


def values(attr: Attribute) -> st.SearchStrategy[float]:
    """A value of the domain; the ends and the middle come often (they sit on split lines)."""
    mid = (attr.min + attr.max) / 2.0
    inner = st.floats(attr.min, attr.max, allow_nan=False, allow_infinity=False)
    if attr.type == "int":
        inner = st.integers(int(attr.min), int(attr.max)).map(float)
    return st.one_of(st.sampled_from([attr.min, attr.max, mid]), inner)


@st.composite
def ranges(draw: st.DrawFn, attr: Attribute) -> Range:
    """A non-empty range of the domain: a point, the whole domain, one from an end, or any."""
    kind = draw(st.sampled_from(["any", "point", "whole", "from-end"]))
    if kind == "whole":
        return Range(attr.min, attr.max)
    if kind == "point":
        v = draw(values(attr))
        return Range(v, v)
    a, b = draw(values(attr)), draw(values(attr))
    lo, hi = min(a, b), max(a, b)
    if kind == "from-end":
        lo, hi = (attr.min, hi) if draw(st.booleans()) else (lo, attr.max)
    if lo == hi:
        return Range(lo, hi)
    return Range(lo, hi, draw(st.booleans()), draw(st.booleans()))


@st.composite
def subscriptions(
    draw: st.DrawFn, schema: Schema = THESIS_SCHEMA, max_attributes: int = 2
) -> Subscription:
    """A conjunction over 1..``max_attributes`` distinct attributes of ``schema``."""
    n = len(schema.attributes)
    picked = draw(
        st.lists(st.integers(0, n - 1), min_size=1, max_size=min(n, max_attributes), unique=True)
    )
    return Subscription(
        schema.name, tuple((i, draw(ranges(schema.attributes[i]))) for i in sorted(picked))
    )


@st.composite
def subscription_lists(
    draw: st.DrawFn, schema: Schema = THESIS_SCHEMA, max_size: int = 12
) -> list[Subscription]:
    """Subscriptions where some are copies of others (identical ranges: popular
    subscriptions stack up in one leaf, and only the widening separates their points)."""
    subs = draw(st.lists(subscriptions(schema), min_size=1, max_size=max_size))
    copies = draw(st.lists(st.integers(0, len(subs) - 1), max_size=max_size))
    return subs + [subs[i] for i in copies]


@st.composite
def events(
    draw: st.DrawFn, schema: Schema = THESIS_SCHEMA, missing: float = 0.3
) -> tuple[float | None, ...]:
    """One value per attribute; each absent (a partial event) when ``missing`` > 0 and the
    draw says so."""
    out: list[float | None] = []
    for a in schema.attributes:
        absent = missing > 0 and draw(st.integers(0, 99)) < missing * 100
        out.append(None if absent else draw(values(a)))
    return tuple(out)


@st.composite
def events_touching(
    draw: st.DrawFn, schema: Schema, subs: Sequence[Subscription]
) -> tuple[float | None, ...]:
    """An event whose values sit on the bounds of one of ``subs`` (where a closed or open end
    decides the match), the other values anywhere."""
    out = list(draw(events(schema, missing=0.0)))
    if subs:
        sub = draw(st.sampled_from(list(subs)))
        for i, r in sub.ranges:
            out[i] = draw(st.sampled_from([r.lo, r.hi]))
    return tuple(out)


@st.composite
def workloads(draw: st.DrawFn, schema: Schema = THESIS_SCHEMA) -> Workload:
    """The thesis workload generator (the thesis' parameters for its schema, generic ones
    otherwise) with a drawn layout seed."""
    params = THESIS_WORKLOAD if schema.name == THESIS_SCHEMA.name else default_params(schema)
    seed = draw(st.integers(0, 2**32 - 1))
    return Workload(schema, params, random.Random(seed))


__all__ = [
    "attributes",
    "events",
    "events_touching",
    "ranges",
    "schemas",
    "subscription_lists",
    "subscriptions",
    "values",
    "workloads",
]
