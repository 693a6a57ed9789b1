"""Subscriptions: conjunctions of one continuous range per attribute (SPEC 3), their matching rule,
and the small language users write them in.

Theory of operation
-------------------
A ``Subscription`` names its schema and holds ``(attribute index, Range)`` pairs sorted by index,
at most one per attribute (several predicates on one attribute are intersected when the
subscription is built). Attributes it does not name are unconstrained. Ranges carry their own
openness because the language has ``<`` and ``>``: ``Attr1 < 5`` is ``[min, 5)``, and the
matching and the logic-space mapping must honour that exactly (no epsilons).

Matching an event (a tuple in schema order, ``None`` for a missing attribute) is the hottest
operation of the overlay: every probed leaf runs it for every stored subscription. So
``matches`` walks a flat, precomputed tuple of ``(index, lo, hi, lo_open, hi_open)`` with plain
comparisons and allocates nothing. A missing value makes a predicate false under the ``strict``
rule and is skipped under ``lenient`` (SPEC 3). An event tuple shorter than the subscription's
highest index (published before an attribute was appended to the schema) counts the absent
trailing attributes as missing, which is what keeps old events and new subscriptions compatible.

The language
------------
::

    subscription := predicate ("and" predicate)*
    predicate    := ATTR OP NUMBER                    Attr1 >= 10
                  | NUMBER OP ATTR                    10 <= Attr1
                  | NUMBER LT ATTR LT NUMBER          -5 < Attr2 <= 5
                  | ATTR "between" NUMBER "and" NUMBER   (inclusive at both ends)
    OP := "=" | "==" | "<" | "<=" | ">" | ">="        LT := "<" | "<="

Keywords are case-insensitive; attribute names are case-sensitive and may contain ``.``, ``(``
and ``)`` (``PT08.S1(CO) > 1000``). Numbers are ints, decimals or exponent forms with an optional
sign. Within an attribute's domain ``[min, max]``: ``=`` gives ``[v, v]``, ``<`` ``[min, v)``,
``<=`` ``[min, v]``, ``>`` ``(v, max]``, ``>=`` ``[v, max]``.

Every number must lie inside its attribute's domain (a bound outside it is almost always a typo or
a wrong unit, so it is reported rather than clipped) and be integral for an int attribute. A
range that comes out empty is an error, including the subtle cases ``Attr1 < 0`` with
``min = 0`` (``[0, 0)``) and, for int attributes, an open range with no integer inside
(``n > 3 and n < 4``). Errors are ``SubscriptionSyntaxError``s that carry the text and the span
of the offending token and print the line with a caret under it.

``where(schema)`` is the same thing as a Python API (``where(s).ge("Attr1", 10).build()``); it
shares the validation code with the parser, so both accept and reject exactly the same
subscriptions, and it raises plain ``SchemaError``s naming the attribute.

``Subscription.describe(schema)`` renders a subscription back into the language; it round-trips
exactly (``parse_subscription(sub.describe(schema), schema) == sub``) because floats are written
with ``repr``, Python's shortest round-tripping form.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from rangecast.pubsub.schema import Attribute, Schema, SchemaError

__all__ = [
    "Range",
    "Subscription",
    "SubscriptionBuilder",
    "SubscriptionSyntaxError",
    "parse_subscription",
    "where",
]


class SubscriptionSyntaxError(SchemaError):
    """A subscription text that cannot be accepted; ``position``/``length`` span the culprit."""

    def __init__(self, message: str, text: str, position: int, length: int) -> None:
        # All four go into args so the exception pickles and re-raises intact.
        super().__init__(message, text, position, length)
        self.message = message
        self.text = text
        self.position = position
        self.length = length

    def __str__(self) -> str:
        # Tabs and newlines would throw the caret off; each is one character wide once replaced.
        line = re.sub(r"[\t\r\n\f\v]", " ", self.text)
        caret = " " * self.position + "^" * max(1, self.length)
        return f"{self.message}\n  {line}\n  {caret}"


# --------------------------------------------------------------------------------------------
# Ranges and subscriptions
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Range:
    """An interval of one attribute: ``lo``..``hi``, each end closed unless marked open."""

    lo: float
    hi: float
    lo_open: bool = False
    hi_open: bool = False

    def __post_init__(self) -> None:
        for label, v in (("lo", self.lo), ("hi", self.hi)):
            if not isinstance(v, int | float) or isinstance(v, bool) or math.isnan(v):
                raise SchemaError(f"Range.{label} must be a number, got {v!r}")
        if not (isinstance(self.lo_open, bool) and isinstance(self.hi_open, bool)):
            raise SchemaError("Range.lo_open and Range.hi_open must be bools")
        # Floats throughout, so that equal ranges render (and hash) identically.
        object.__setattr__(self, "lo", float(self.lo))
        object.__setattr__(self, "hi", float(self.hi))

    def contains(self, v: float) -> bool:
        if v < self.lo or (self.lo_open and v == self.lo):
            return False
        return not (v > self.hi or (self.hi_open and v == self.hi))

    def is_empty(self) -> bool:
        return self.lo > self.hi or (self.lo == self.hi and (self.lo_open or self.hi_open))

    def intersect(self, other: Range) -> Range:
        """The overlap of two ranges (possibly empty: check ``is_empty``)."""
        if self.lo > other.lo:
            lo, lo_open = self.lo, self.lo_open
        elif self.lo < other.lo:
            lo, lo_open = other.lo, other.lo_open
        else:
            lo, lo_open = self.lo, self.lo_open or other.lo_open
        if self.hi < other.hi:
            hi, hi_open = self.hi, self.hi_open
        elif self.hi > other.hi:
            hi, hi_open = other.hi, other.hi_open
        else:
            hi, hi_open = self.hi, self.hi_open or other.hi_open
        return Range(lo, hi, lo_open, hi_open)

    def interval(self) -> str:
        """Mathematical notation, e.g. ``[0, 3)``."""
        left = "(" if self.lo_open else "["
        right = ")" if self.hi_open else "]"
        return f"{left}{_fmt(self.lo)}, {_fmt(self.hi)}{right}"


def _has_integer(r: Range) -> bool:
    first = math.floor(r.lo) + 1 if r.lo_open else math.ceil(r.lo)
    last = math.ceil(r.hi) - 1 if r.hi_open else math.floor(r.hi)
    return first <= last


def _fmt(v: float) -> str:
    """Shortest text that parses back to exactly ``v``; integral values without '.0'."""
    if v.is_integer() and abs(v) < 1e16:
        return str(int(v))
    return repr(v)


#: One constrained attribute, flattened for matching: (index, lo, hi, lo_open, hi_open).
Flat = tuple[int, float, float, bool, bool]


def match_flat(flat: Sequence[Flat], values: Sequence[float | None], lenient: bool) -> bool:
    """Whether ``values`` satisfy every flattened range (``Subscription`` and the brokers'
    boxes keep theirs so); values past the end of a short event count as missing."""
    n = len(values)
    for i, lo, hi, lo_open, hi_open in flat:
        v = values[i] if i < n else None
        if v is None:
            if lenient:
                continue
            return False
        if v < lo or (lo_open and v == lo) or v > hi or (hi_open and v == hi):
            return False
    return True


@dataclass(frozen=True, slots=True)
class Subscription:
    """A conjunction of ranges over the attributes of schema ``schema`` (see the module docs)."""

    schema: str
    ranges: tuple[tuple[int, Range], ...]
    # Derived, for matches(): flat predicate tuples and the highest attribute index.
    _flat: tuple[Flat, ...] = field(init=False, repr=False, compare=False, hash=False)
    _last: int = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.schema, str) or not self.schema:
            raise SchemaError(f"Subscription.schema must be a schema name, got {self.schema!r}")
        ranges = tuple(self.ranges)
        if not ranges:
            raise SchemaError("a subscription needs at least one predicate")
        previous = -1
        flat: list[Flat] = []
        for item in ranges:
            if not (isinstance(item, tuple) and len(item) == 2):
                raise SchemaError(f"Subscription.ranges items are (index, Range), got {item!r}")
            i, r = item
            if isinstance(i, bool) or not isinstance(i, int) or i < 0:
                raise SchemaError(f"attribute index must be an int >= 0, got {i!r}")
            if i <= previous:
                raise SchemaError(
                    "Subscription.ranges must be sorted by attribute index with one range per "
                    f"attribute, got indices {[p[0] for p in ranges]}"
                )
            if not isinstance(r, Range):
                raise SchemaError(f"attribute {i}: expected a Range, got {r!r}")
            if r.is_empty():
                raise SchemaError(f"attribute {i}: the range {r.interval()} is empty")
            previous = i
            flat.append((i, r.lo, r.hi, r.lo_open, r.hi_open))
        object.__setattr__(self, "ranges", ranges)
        object.__setattr__(self, "_flat", tuple(flat))
        object.__setattr__(self, "_last", previous)

    def matches(self, values: Sequence[float | None], partial: str) -> bool:
        """Whether the event ``values`` (schema order, None = missing) satisfies every predicate,
        under the schema's partial-event rule ``partial`` ("strict" or "lenient")."""
        if partial == "strict":
            lenient = False
        elif partial == "lenient":
            lenient = True
        else:
            raise SchemaError(f"partial must be 'strict' or 'lenient', got {partial!r}")
        if self._last >= len(values):
            # The event predates attributes this subscription constrains: those are missing.
            return match_flat(self._flat, values, lenient)
        # Hot loop: plain comparisons on pre-flattened tuples, no allocation.
        for i, lo, hi, lo_open, hi_open in self._flat:
            v = values[i]
            if v is None:
                if lenient:
                    continue
                return False
            if lo_open:
                if v <= lo:
                    return False
            elif v < lo:
                return False
            if hi_open:
                if v >= hi:
                    return False
            elif v > hi:
                return False
        return True

    def attributes(self) -> tuple[int, ...]:
        return tuple(i for i, _ in self.ranges)

    def range_of(self, i: int) -> Range | None:
        for j, r in self.ranges:
            if j == i:
                return r
        return None

    def describe(self, schema: Schema) -> str:
        """The subscription in the language; ``parse_subscription`` turns it back into ``self``."""
        if schema.name != self.schema:
            raise SchemaError(f"subscription is for schema {self.schema!r}, not {schema.name!r}")
        return " and ".join(_render(schema.attribute(i), r) for i, r in self.ranges)


def _render(a: Attribute, r: Range) -> str:
    n = a.name
    lo, hi = _fmt(r.lo), _fmt(r.hi)
    if r.lo == r.hi:
        return f"{n} = {lo}"  # a non-empty degenerate range is closed at both ends
    if r.lo == a.min and not r.lo_open:
        return f"{n} {'<' if r.hi_open else '<='} {hi}"
    if r.hi == a.max and not r.hi_open:
        return f"{n} {'>' if r.lo_open else '>='} {lo}"
    if not (r.lo_open or r.hi_open):
        return f"{n} between {lo} and {hi}"
    return f"{lo} {'<' if r.lo_open else '<='} {n} {'<' if r.hi_open else '<='} {hi}"


# --------------------------------------------------------------------------------------------
# Validation shared by the parser and the builder
# --------------------------------------------------------------------------------------------


class _PredicateError(SchemaError):
    """A rejected predicate; ``culprit`` says which part to point at: "lo", "hi" (the numbers)
    or "predicate" (the whole predicate). The front ends turn it into their own error type."""

    def __init__(self, message: str, culprit: str) -> None:
        super().__init__(message)
        self.culprit = culprit


def _check_value(a: Attribute, v: float, culprit: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise _PredicateError(f"value for {a.name!r} must be a number, got {v!r}", culprit)
    if not math.isfinite(v):
        raise _PredicateError(f"value for {a.name!r} must be a finite number, got {v!r}", culprit)
    if not a.min <= v <= a.max:
        raise _PredicateError(
            f"value {_fmt(float(v))} for {a.name!r} is outside its domain {a.domain()}", culprit
        )
    if a.type == "int" and not float(v).is_integer():
        raise _PredicateError(
            f"{a.name!r} is an int attribute: {_fmt(float(v))} is not an integer", culprit
        )
    return float(v)


def _constrain(
    schema: Schema,
    ranges: dict[int, Range],
    i: int,
    lo: float | None,
    lo_open: bool,
    hi: float | None,
    hi_open: bool,
    pred_text: str,
) -> None:
    """Validate one predicate on attribute ``i`` (``None`` bound = the domain's own) and
    intersect it into ``ranges``; raises ``_PredicateError``."""
    a = schema.attributes[i]
    lo_v = a.min if lo is None else _check_value(a, lo, "lo")
    hi_v = a.max if hi is None else _check_value(a, hi, "hi")
    if lo is not None and hi is not None and lo_v > hi_v:
        raise _PredicateError(
            f"empty range for {a.name!r}: in '{pred_text}' the lower bound {_fmt(lo_v)} is "
            f"above the upper bound {_fmt(hi_v)}",
            "predicate",
        )
    r = Range(lo_v, hi_v, lo_open, hi_open)
    if r.is_empty() or (a.type == "int" and not _has_integer(r)):
        what = "contains no integer" if not r.is_empty() else "is empty"
        raise _PredicateError(
            f"empty range for {a.name!r}: '{pred_text}' leaves {r.interval()}, which {what} "
            f"(the domain is {a.domain()})",
            "predicate",
        )
    earlier = ranges.get(i)
    if earlier is not None:
        both = earlier.intersect(r)
        if both.is_empty():
            raise _PredicateError(
                f"empty range for {a.name!r}: '{pred_text}' gives {r.interval()}, which does "
                f"not overlap {earlier.interval()} from the earlier predicates on {a.name!r}",
                "predicate",
            )
        if a.type == "int" and not _has_integer(both):
            raise _PredicateError(
                f"empty range for {a.name!r}: '{pred_text}' gives {r.interval()}, which leaves "
                f"{both.interval()} with {earlier.interval()} from the earlier predicates, "
                "and that contains no integer",
                "predicate",
            )
        r = both
    ranges[i] = r


def _finish(schema: Schema, ranges: dict[int, Range]) -> Subscription:
    return Subscription(schema.name, tuple(sorted(ranges.items())))


# (lo given, lo_open, hi given, hi_open) for "attribute OP value".
_OPS: dict[str, tuple[bool, bool, bool, bool]] = {
    "=": (True, False, True, False),
    "==": (True, False, True, False),
    "<": (False, False, True, True),
    "<=": (False, False, True, False),
    ">": (True, True, False, False),
    ">=": (True, False, False, False),
}
# "value OP attribute" is "attribute MIRROR(OP) value".
_MIRROR = {"=": "=", "==": "==", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _apply_op(
    schema: Schema, ranges: dict[int, Range], i: int, op: str, v: float, pred_text: str
) -> None:
    has_lo, lo_open, has_hi, hi_open = _OPS[op]
    _constrain(
        schema,
        ranges,
        i,
        v if has_lo else None,
        lo_open,
        v if has_hi else None,
        hi_open,
        pred_text,
    )


# --------------------------------------------------------------------------------------------
# The parser
# --------------------------------------------------------------------------------------------

_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.()]*")
_OPERATOR = re.compile(r"==|<=|>=|=|<|>")
_SPACE = re.compile(r"\s+")
# Characters that may not directly follow a number (e.g. '5and', '1.2.3', '3x').
_GLUED = re.compile(r"[A-Za-z0-9_.()]+")

# Token kinds.
_NUM, _ID, _OP, _AND, _BETWEEN, _END = "number", "name", "operator", "and", "between", "end"


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str
    text: str
    pos: int
    value: float = 0.0

    def describe(self) -> str:
        return "the end of the subscription" if self.kind == _END else repr(self.text)


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos, n = 0, len(text)
    while pos < n:
        m = _SPACE.match(text, pos)
        if m:
            pos = m.end()
            continue
        m = _OPERATOR.match(text, pos)
        if m:
            tokens.append(_Token(_OP, m.group(), pos))
            pos = m.end()
            continue
        m = _NUMBER.match(text, pos)
        if m:
            end = m.end()
            glued = _GLUED.match(text, end)
            if glued:
                bad = text[pos : glued.end()]
                raise SubscriptionSyntaxError(f"malformed number {bad!r}", text, pos, len(bad))
            tokens.append(_Token(_NUM, m.group(), pos, float(m.group())))
            pos = end
            continue
        m = _IDENT.match(text, pos)
        if m:
            word = m.group()
            kind = {"and": _AND, "between": _BETWEEN}.get(word.casefold(), _ID)
            tokens.append(_Token(kind, word, pos))
            pos = m.end()
            continue
        ch = text[pos]
        hint = ""
        if ch in "()":
            hint = "; parentheses are only allowed inside attribute names"
        elif ch == "!":
            hint = "; '!=' is not supported (a subscription is one range per attribute)"
        elif ch in "+-":
            hint = "; a sign must be written directly before its number"
        raise SubscriptionSyntaxError(f"unexpected character {ch!r}{hint}", text, pos, 1)
    tokens.append(_Token(_END, "", n))
    return tokens


class _Parser:
    __slots__ = ("pos", "ranges", "schema", "text", "tokens")

    def __init__(self, text: str, schema: Schema) -> None:
        self.text = text
        self.schema = schema
        self.tokens = _tokenize(text)
        self.pos = 0
        self.ranges: dict[int, Range] = {}

    def error(self, message: str, start: int, end: int) -> SubscriptionSyntaxError:
        return SubscriptionSyntaxError(message, self.text, start, end - start)

    def at(self, tok: _Token, message: str) -> SubscriptionSyntaxError:
        return self.error(message, tok.pos, tok.pos + len(tok.text))

    def peek(self) -> _Token:
        return self.tokens[self.pos]

    def take(self) -> _Token:
        tok = self.tokens[self.pos]
        if tok.kind != _END:
            self.pos += 1
        return tok

    def expect(self, kind: str, after: _Token, what: str) -> _Token:
        tok = self.take()
        if tok.kind != kind:
            raise self.at(tok, f"expected {what} after {after.text!r}, found {tok.describe()}")
        return tok

    def attribute(self, tok: _Token) -> int:
        if not self.schema.has(tok.text):
            message = self.schema.unknown_attribute_message(tok.text, list_valid=False)
            raise self.at(tok, message)
        return self.schema.index(tok.text)

    def parse(self) -> Subscription:
        if not self.text.strip():
            raise self.error(
                "empty subscription: expected predicates such as 'Attr1 >= 10 and Attr2 < 5'",
                0,
                len(self.text),
            )
        self.predicate()
        while True:
            tok = self.take()
            if tok.kind == _END:
                return _finish(self.schema, self.ranges)
            if tok.kind != _AND:
                raise self.at(
                    tok, f"expected 'and' or the end of the subscription, found {tok.describe()}"
                )
            if self.peek().kind == _END:
                raise self.at(self.peek(), "expected a predicate after 'and', found the end")
            self.predicate()

    def predicate(self) -> None:
        first = self.take()
        if first.kind == _ID:
            self.attribute_first(first)
        elif first.kind == _NUM:
            self.number_first(first)
        else:
            raise self.at(
                first,
                f"expected an attribute name or a number to start a predicate, found "
                f"{first.describe()}",
            )

    def apply(
        self,
        i: int,
        lo: float | None,
        lo_open: bool,
        hi: float | None,
        hi_open: bool,
        spans: dict[str, _Token],
        start: _Token,
    ) -> None:
        last = self.tokens[self.pos - 1]
        end = last.pos + len(last.text)
        try:
            _constrain(
                self.schema, self.ranges, i, lo, lo_open, hi, hi_open, self.text[start.pos : end]
            )
        except _PredicateError as exc:
            tok = spans.get(exc.culprit)
            if tok is not None:
                raise self.at(tok, str(exc)) from None
            raise self.error(str(exc), start.pos, end) from None

    def apply_op(self, i: int, op: str, num: _Token, start: _Token) -> None:
        """Attribute ``i`` compared with one number by ``op`` (attribute on the left)."""
        has_lo, lo_open, has_hi, hi_open = _OPS[op]
        self.apply(
            i,
            num.value if has_lo else None,
            lo_open,
            num.value if has_hi else None,
            hi_open,
            {"lo": num, "hi": num},
            start,
        )

    def attribute_first(self, name: _Token) -> None:
        i = self.attribute(name)
        op = self.take()
        if op.kind == _BETWEEN:
            lo = self.expect(_NUM, op, "a number")
            self.expect(_AND, lo, "'and'")
            hi = self.expect(_NUM, self.tokens[self.pos - 1], "a number")
            self.apply(i, lo.value, False, hi.value, False, {"lo": lo, "hi": hi}, name)
            return
        if op.kind != _OP:
            raise self.at(
                op,
                f"expected a comparison (=, <, <=, >, >=) or 'between' after {name.text!r}, "
                f"found {op.describe()}",
            )
        num = self.expect(_NUM, op, "a number")
        self.apply_op(i, op.text, num, name)

    def number_first(self, num: _Token) -> None:
        op = self.take()
        if op.kind != _OP:
            raise self.at(
                op, f"expected a comparison after the number {num.text!r}, found {op.describe()}"
            )
        name = self.expect(_ID, op, "an attribute name")
        i = self.attribute(name)
        if self.peek().kind != _OP:
            self.apply_op(i, _MIRROR[op.text], num, num)
            return
        op2 = self.take()
        for o in (op, op2):
            if o.text not in ("<", "<="):
                raise self.at(
                    o,
                    "a chained comparison must read 'low <(=) attribute <(=) high', "
                    f"found {o.text!r}",
                )
        hi = self.expect(_NUM, op2, "a number")
        self.apply(
            i, num.value, op.text == "<", hi.value, op2.text == "<", {"lo": num, "hi": hi}, num
        )


def parse_subscription(text: str, schema: Schema) -> Subscription:
    """Parse the subscription language (see the module docs) against ``schema``."""
    if not isinstance(text, str):
        raise SchemaError(f"a subscription must be a string, got {type(text).__name__}")
    return _Parser(text, schema).parse()


# --------------------------------------------------------------------------------------------
# The Python API
# --------------------------------------------------------------------------------------------


class SubscriptionBuilder:
    """Builds a subscription predicate by predicate: ``where(s).ge("Attr1", 10).build()``.

    Each call validates at once (unknown attribute, value outside the domain, not an integer
    for an int attribute, empty range) and raises a ``SchemaError`` naming the attribute.
    """

    __slots__ = ("_ranges", "_schema")

    def __init__(self, schema: Schema) -> None:
        if not isinstance(schema, Schema):
            raise SchemaError(f"where() needs a Schema, got {schema!r}")
        self._schema = schema
        self._ranges: dict[int, Range] = {}

    def _op(self, name: str, op: str, v: float) -> SubscriptionBuilder:
        i = self._schema.index(name)
        try:
            _apply_op(self._schema, self._ranges, i, op, v, f"{name} {op} {v!r}")
        except _PredicateError as exc:
            raise SchemaError(str(exc)) from None
        return self

    def eq(self, name: str, v: float) -> SubscriptionBuilder:
        return self._op(name, "=", v)

    def lt(self, name: str, v: float) -> SubscriptionBuilder:
        return self._op(name, "<", v)

    def le(self, name: str, v: float) -> SubscriptionBuilder:
        return self._op(name, "<=", v)

    def gt(self, name: str, v: float) -> SubscriptionBuilder:
        return self._op(name, ">", v)

    def ge(self, name: str, v: float) -> SubscriptionBuilder:
        return self._op(name, ">=", v)

    def between(self, name: str, lo: float, hi: float) -> SubscriptionBuilder:
        """``lo <= name <= hi``."""
        i = self._schema.index(name)
        try:
            _constrain(
                self._schema,
                self._ranges,
                i,
                lo,
                False,
                hi,
                False,
                f"{name} between {lo!r} and {hi!r}",
            )
        except _PredicateError as exc:
            raise SchemaError(str(exc)) from None
        return self

    def build(self) -> Subscription:
        if not self._ranges:
            raise SchemaError("a subscription needs at least one predicate")
        return _finish(self._schema, self._ranges)


def where(schema: Schema) -> SubscriptionBuilder:
    """Start building a subscription over ``schema``."""
    return SubscriptionBuilder(schema)
