"""Filter algebra over boxes and points: ``matches``, ``overlaps``, ``covers``, ``intersect``.

Theory of operation
-------------------
A broker filter (a subscription, an advertisement, a Kyra zone) is a ``Box``: one interval per
schema attribute, each end open or closed, exactly as the subscription language writes them
(``rangecast.pubsub.subscription.Range``); no epsilons anywhere, so ``x < 5`` and ``x <= 5`` are
different boxes and ``[1, 5)`` does not overlap ``[5, 9]``.

An attribute a subscription does not name is *free*: its interval is the attribute's whole domain
and it also accepts a missing value. Events are tuples in schema order with ``None`` for a missing
attribute, matched under the schema's ``strict`` rule: a constrained attribute rejects a missing
value, a free one accepts it. So a free attribute is not the same set as a constrained
``[min, max]`` (the latter rejects a missing value), and the box records which attributes are free
in a bit mask (``free``, bit ``i`` for attribute ``i``). A box is thus a set of events over the
domain extended with "missing", and the four operations are exact set relations on it:

- ``matches(b, e)``: ``e`` is in ``b``;
- ``overlaps(a, b)``: some valid event is in both (the interval of every attribute meets);
- ``covers(a, b)``: every event in ``b`` is in ``a`` (``b`` free where ``a`` is not: never);
- ``intersect(a, b)``: the box of events in both, ``None`` when empty (Kyra's clipping).

Int attributes are normalised on construction to closed intervals with integral ends
(``3 < n < 7`` is ``[4, 6]``): over the integers the two are the same set, and with closed
integral ends emptiness, overlap and covering need no integrality test afterwards. Intervals are
clipped to the attribute's domain, which does not change the set of valid events (the schema
refuses an event outside the domain).

Only the ``strict`` partial-event rule is supported: under ``lenient`` every constrained attribute
would accept a missing value, so any two boxes would overlap through the event that misses that
attribute, and a broker overlay could not prune anything. ``Box.from_subscription`` refuses a
lenient schema rather than route wrongly.

Matching is the brokers' hot loop (every publication is matched against every routing entry it
meets), so ``matches`` walks a flat tuple of the constrained attributes only, with plain
comparisons, and allocates nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from rangecast.pubsub.schema import Schema, SchemaError
from rangecast.pubsub.subscription import Flat, Range, Subscription, match_flat

__all__ = ["Box", "Dim", "covers", "intersect", "matches", "overlaps", "split"]

#: One attribute of a box: (lo, hi, lo_open, hi_open).
Dim = tuple[float, float, bool, bool]


class Box:
    """An immutable box: ``dims[i]`` is attribute ``i``'s interval, ``free`` the bit mask of the
    attributes the filter leaves unconstrained (their interval is the whole domain).

    Build it with ``from_subscription``, ``from_ranges`` or ``whole``; the plain constructor
    trusts its input (normalised, non-empty intervals, as the factories and ``intersect`` make)."""

    __slots__ = ("_flat", "_hash", "dims", "free")

    dims: tuple[Dim, ...]
    free: int

    def __init__(self, dims: tuple[Dim, ...], free: int = 0) -> None:
        self.dims = dims
        self.free = free
        self._flat: tuple[Flat, ...] = tuple(
            (i, *d) for i, d in enumerate(dims) if not free >> i & 1
        )
        self._hash = hash((dims, free))

    # -- factories ---------------------------------------------------------------------------

    @classmethod
    def whole(cls, schema: Schema) -> Box:
        """Every event of the schema, including events that miss attributes (a full-domain ad)."""
        dims = tuple((a.min, a.max, False, False) for a in schema.attributes)
        return cls(dims, (1 << len(dims)) - 1)

    @classmethod
    def from_ranges(
        cls, schema: Schema, ranges: Mapping[int, Range] | Iterable[tuple[int, Range]]
    ) -> Box:
        """The box constraining attribute ``i`` to ``ranges[i]`` and leaving the others free."""
        if schema.partial != "strict":
            raise SchemaError(
                f"schema {schema.name!r}: broker filters support the 'strict' partial rule only"
            )
        items = ranges.items() if isinstance(ranges, Mapping) else ranges
        attrs = schema.attributes
        dims: list[Dim] = [(a.min, a.max, False, False) for a in attrs]
        free = (1 << len(attrs)) - 1
        for i, r in items:
            a = schema.attribute(i)
            if not free >> i & 1:
                raise SchemaError(f"attribute {a.name!r} constrained twice")
            whole: Dim = (a.min, a.max, False, False)
            d = _meet(whole, (r.lo, r.hi, r.lo_open, r.hi_open))
            if d is not None and a.type == "int":
                d = _integral(d)
            if d is None:
                raise SchemaError(
                    f"attribute {a.name!r}: {r.interval()} leaves no value in {a.domain()}"
                )
            dims[i] = d
            free &= ~(1 << i)
        return cls(tuple(dims), free)

    @classmethod
    def from_subscription(cls, sub: Subscription, schema: Schema) -> Box:
        if sub.schema != schema.name:
            raise SchemaError(f"subscription is for schema {sub.schema!r}, not {schema.name!r}")
        return cls.from_ranges(schema, sub.ranges)

    # -- value semantics ----------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Box):
            return NotImplemented
        return self.free == other.free and self.dims == other.dims

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        parts = []
        for i, (lo, hi, lo_open, hi_open) in enumerate(self.dims):
            if self.free >> i & 1:
                parts.append("*")
            else:
                parts.append(f"{'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}")
        return f"Box({' x '.join(parts)})"

    def __len__(self) -> int:
        return len(self.dims)

    def is_free(self, i: int) -> bool:
        return bool(self.free >> i & 1)

    def ranges(self) -> tuple[tuple[int, Range], ...]:
        """The constrained attributes as (index, Range): the box as a subscription's ranges."""
        return tuple((i, Range(lo, hi, lo_o, hi_o)) for i, lo, hi, lo_o, hi_o in self._flat)


def _meet(a: Dim, b: Dim) -> Dim | None:
    """The intersection of two intervals, None when empty."""
    alo, ahi, alo_o, ahi_o = a
    blo, bhi, blo_o, bhi_o = b
    if alo > blo:
        lo, lo_o = alo, alo_o
    elif alo < blo:
        lo, lo_o = blo, blo_o
    else:
        lo, lo_o = alo, alo_o or blo_o
    if ahi < bhi:
        hi, hi_o = ahi, ahi_o
    elif ahi > bhi:
        hi, hi_o = bhi, bhi_o
    else:
        hi, hi_o = ahi, ahi_o or bhi_o
    if lo > hi or (lo == hi and (lo_o or hi_o)):
        return None
    return (lo, hi, lo_o, hi_o)


def _integral(d: Dim) -> Dim | None:
    """An interval of an int attribute as closed integral ends (the same set of integers)."""
    lo, hi, lo_o, hi_o = d
    first = math.floor(lo) + 1 if lo_o else math.ceil(lo)
    last = math.ceil(hi) - 1 if hi_o else math.floor(hi)
    if first > last:
        return None
    return (float(first), float(last), False, False)


def matches(box: Box, event: Sequence[float | None]) -> bool:
    """Whether ``event`` (schema order, None = missing) is in ``box``, under the strict rule (an
    event shorter than the schema predates the trailing attributes: they are missing)."""
    return match_flat(box._flat, event, lenient=False)


def overlaps(a: Box, b: Box) -> bool:
    """Whether some event is in both boxes."""
    return all(_meet(da, db) is not None for da, db in zip(a.dims, b.dims, strict=True))


def covers(a: Box, b: Box) -> bool:
    """Whether every event in ``b`` is in ``a`` (``a`` is at least as wide as ``b``)."""
    if b.free & ~a.free:
        return False  # b accepts a missing value where a does not
    afree = a.free
    for i, ((alo, ahi, alo_o, ahi_o), (blo, bhi, blo_o, bhi_o)) in enumerate(
        zip(a.dims, b.dims, strict=True)
    ):
        if afree >> i & 1:
            continue
        if alo > blo or (alo == blo and alo_o and not blo_o):
            return False
        if ahi < bhi or (ahi == bhi and ahi_o and not bhi_o):
            return False
    return True


def intersect(a: Box, b: Box) -> Box | None:
    """The box of the events in both ``a`` and ``b``, or None when there is none."""
    dims: list[Dim] = []
    for da, db in zip(a.dims, b.dims, strict=True):
        d = _meet(da, db)
        if d is None:
            return None
        dims.append(d)
    # Free only where both are free; int ends stay integral because both inputs' ends are.
    return Box(tuple(dims), a.free & b.free)


def split(box: Box, i: int, cut: float, integral: bool = False) -> tuple[Box | None, Box | None]:
    """``box`` cut on attribute ``i`` at ``cut``: (the part with values ``<= cut``, the part
    with values ``> cut``), either None when empty; the two never share a point (Kyra's zones).
    A free attribute becomes constrained (its whole domain split in two: a zone partitions the
    values, an event missing the attribute is in neither). ``integral``: an int attribute,
    whose upper part then starts at the next integer."""
    parts: list[Box | None] = []
    for half in ((-math.inf, cut, False, False), (cut, math.inf, True, False)):
        d = _meet(box.dims[i], half)
        if d is not None and integral:
            d = _integral(d)
        if d is None:
            parts.append(None)
            continue
        dims = list(box.dims)
        dims[i] = d
        parts.append(Box(tuple(dims), box.free & ~(1 << i)))
    return parts[0], parts[1]
