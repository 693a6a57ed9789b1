"""Workloads: the thesis' synthetic events and subscriptions (Table 4.3), and real events from CSV.

Theory of operation: the thesis workload (SPEC 11, thesis Tables 4.2 and 4.3)
-----------------------------------------------------------------------------
Each attribute ``a`` with domain ``[min, max]`` (width ``W = max - min``) has an
``AttributeWorkload`` with five parameters:

``present_prob``  probability that a subscription constrains ``a``;
``subrange_skew`` Zipf skew ``s_v`` of the sub-range popularity;
``subrange_size`` width ``w`` of a sub-range, in attribute units;
``size_skew``     Zipf skew ``s_z`` of subscription range sizes;
``size_bound``    largest range size as a fraction of ``W``.

Sub-ranges. The domain is cut into ``N = ceil(W / w)`` sub-ranges ``[min + j*w, min + (j+1)*w]``,
``j = 0 .. N-1``; the last one is shorter when ``w`` does not divide ``W`` (a float quotient
within rounding of an integer counts as exact, so no sliver sub-range appears).

Zipf. ``Zipf(K, s)`` draws a rank ``k`` in ``1..K`` with ``P(k) = k^-s / H(K, s)``,
``H(K, s) = sum_{j=1..K} j^-s``; ``s = 0`` is uniform, and ``s < 1`` (all of Table 4.3) is a mild
skew. ``ZipfSampler`` precomputes the cumulative weights once and inverts the CDF with one
``rng.random()`` and a ``bisect``: exact up to float rounding, O(log K), deterministic.

Which sub-range is hot. Table 4.3 gives popularity ranks but not where rank 1 sits. We map
ranks to sub-ranges with a random permutation drawn at construction from ``seed_rng_layout``
(one ``shuffle`` per attribute, in schema order): rank ``k`` is sub-range ``perm[k-1]``. So the
hot sub-ranges are scattered over the domain (putting rank 1 at ``min`` would pile all hot points
into the lower-left corner of every attribute's logic space and confound the load-balancing
results with an artefact of the layout), and the layout is the same for a given seed. The layout
rng is used only here; the draws below use the rng passed to each call.

Values (events, and subscription centre points). ``value(a, rng)``: rank ``k ~ Zipf(N, s_v)``,
sub-range ``j = perm[k-1]``, then ``v ~ Uniform[lo_j, hi_j]``; int attributes round ``v`` to the
nearest integer; the result is clamped to ``[min, max]``. Draws: one for the rank, one for ``v``.

Events. ``event(rng)`` draws ``value(a)`` for every attribute in schema order: the thesis' events
carry all attributes.

Subscriptions. ``subscription(rng)``:

1. Presence: one ``rng.random()`` per attribute in schema order; ``a`` is constrained if it is
   below ``present_prob``. If no attribute came out present, one attribute is picked uniformly
   among those with ``present_prob > 0`` (one ``randrange``), so no subscription is empty.
   This fallback raises the effective presence rate a little: for Table 4.3 (four attributes at
   0.5) ``P(none) = 1/16``, so each attribute is present with probability
   ``0.5 + (1/16)/4 = 0.515625`` and a subscription has 2.0625 predicates on average.
2. For each present attribute, in schema order: centre ``p = value(a, rng)``; size
   ``z = k * w`` with ``k ~ Zipf(K, s_z)`` and ``K = max(1, floor(size_bound * W / w))``;
   range ``[max(min, p - z/2), min(max, p + z/2)]``, closed at both ends (clipping at the domain
   edges makes ranges there shorter than ``z``). For int attributes the ends are rounded inwards
   (``ceil`` / ``floor``), which still contains ``p``.

Table 4.3 gives ``K`` = 50, 400, 90, 40 for Attr1..Attr4, and ``N`` = 100, 1000, 300, 200.

Theory of operation: CSV events
-------------------------------
``CsvEvents.load(path, missing, columns)`` turns a table of readings into a schema and an event
list. The delimiter is the most frequent of ``,``, ``;`` and tab in the header line (``,`` on
ties). With a non-comma delimiter, decimal commas (``2,6``) are accepted, as in the original UCI
AirQuality export; ``shared/data/airquality_uci.csv`` itself is comma separated with decimal
points. Any header is accepted: a header that is not a valid attribute name is renamed by
``attribute_name`` (``temp C`` -> ``temp_C``, ``0`` -> ``_0``, ``and`` -> ``and_``; a repeat gets
``_2``), and ``renamed()`` lists the mapping. ``columns`` (``"temp C=temp,RH"``) selects columns
by header or renamed name, in its order, optionally naming them; the others are skipped.
Cells that are empty or equal to ``missing`` (a number such as ``-200``, compared as a number,
or a word such as ``NA``, compared as text) become ``None``. A column is numeric when every
other cell parses as a finite float; a column where none does (``Date``, ``Time``) is skipped,
and so is one that mixes numbers and words, with the first word and its line in the reason
(``--missing WORD`` turns such cells into absent values); a selected column that is not numeric
is an error naming the line. Columns with a blank header are skipped (and listed so). Every
numeric column
becomes a float attribute, whose domain is the observed ``[min, max]`` of its present values
(widened to ``[v - 0.5, v + 0.5]`` when all values are equal, since a domain needs
``min < max``); a column with no present value at all is skipped, and one whose range a float
cannot divide into sub-ranges (``-1e308 .. 1e308``) is an error naming the file, line and
column. A file with a header and no data rows is an error. A row with no present value carries
no information and is dropped (``skipped_rows``). The schema is named after the file stem and
uses the default ``strict`` partial rule; use ``csv.schema.with_partial("lenient")`` for the
other one. ``describe()`` and ``notes()`` report what was used, skipped (and why) and renamed.

``default_params(schema)`` is a generic workload for such schemas: ``present_prob =
min(0.5, 2 / n)`` for ``n`` attributes, so subscriptions have about two predicates (plus the
fallback: 2.1 on average for AirQuality's 13 attributes); sub-ranges of 1 % of the domain (100
sub-ranges; at least 1 for int attributes); ``subrange_skew`` 0.5, ``size_skew`` 0.6 and
``size_bound`` 0.3 (mid-table values of Table 4.3).

Nothing here touches the global ``random`` functions or the clock.
"""

from __future__ import annotations

import csv
import math
import os
import random
import re
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path
from typing import Any

from rangecast.pubsub.schema import KEYWORDS, THESIS_SCHEMA, Attribute, Schema, SchemaError
from rangecast.pubsub.subscription import Range, Subscription

__all__ = [
    "THESIS_PARAMS",
    "THESIS_WORKLOAD",
    "AttributeWorkload",
    "CsvEvents",
    "Workload",
    "ZipfSampler",
    "default_params",
    "thesis_workload",
]


@dataclass(frozen=True, slots=True)
class AttributeWorkload:
    """Per-attribute workload parameters (see the module docs for their exact use)."""

    present_prob: float
    subrange_skew: float
    subrange_size: float
    size_skew: float
    size_bound: float

    def __post_init__(self) -> None:
        def number(label: str, v: object) -> float:
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise SchemaError(f"AttributeWorkload.{label} must be a finite number, got {v!r}")
            return float(v)

        if not 0.0 <= number("present_prob", self.present_prob) <= 1.0:
            raise SchemaError(f"present_prob must be in [0, 1], got {self.present_prob!r}")
        for label in ("subrange_skew", "size_skew"):
            if number(label, getattr(self, label)) < 0.0:
                raise SchemaError(f"{label} must be >= 0, got {getattr(self, label)!r}")
        if number("subrange_size", self.subrange_size) <= 0.0:
            raise SchemaError(f"subrange_size must be > 0, got {self.subrange_size!r}")
        if not 0.0 < number("size_bound", self.size_bound) <= 1.0:
            raise SchemaError(
                f"size_bound is a fraction of the domain in (0, 1], got {self.size_bound!r}"
            )


# Thesis Table 4.3 (the sizes are in attribute units; size_bound is a fraction of the domain).
THESIS_WORKLOAD: dict[str, AttributeWorkload] = {
    "Attr1": AttributeWorkload(0.5, 0.6, 100, 0.8, 0.50),
    "Attr2": AttributeWorkload(0.5, 0.5, 20, 0.6, 0.40),
    "Attr3": AttributeWorkload(0.5, 0.4, 10, 0.5, 0.30),
    "Attr4": AttributeWorkload(0.5, 0.3, 1, 0.4, 0.20),
}
# Same table under the name the experiment code uses; formulas in the module docstring.
THESIS_PARAMS = THESIS_WORKLOAD


class ZipfSampler:
    """Ranks ``1..k`` with ``P(r)`` proportional to ``r ** -s`` (any ``s >= 0``), by inverse CDF
    over a precomputed cumulative table."""

    __slots__ = ("_cum", "_total", "k", "s")

    def __init__(self, k: int, s: float) -> None:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise SchemaError(f"Zipf needs k >= 1 ranks, got {k!r}")
        if isinstance(s, bool) or not isinstance(s, int | float) or not (s >= 0 and s < math.inf):
            raise SchemaError(f"Zipf skew must be a finite number >= 0, got {s!r}")
        self.k = k
        self.s = float(s)
        self._cum = list(accumulate(r**-self.s for r in range(1, k + 1)))
        self._total = self._cum[-1]

    def sample(self, rng: random.Random) -> int:
        # random() < 1, but random() * total can round up to total: clamp to the last rank.
        i = bisect_right(self._cum, rng.random() * self._total)
        return i + 1 if i < self.k else self.k

    def probability(self, rank: int) -> float:
        if not 1 <= rank <= self.k:
            return 0.0
        return rank**-self.s / self._total


def _subrange_count(width: float, size: float) -> int:
    n = max(1, math.ceil(width / size))
    # Float division can land just above an integer (e.g. 0.7 / 0.1): no sliver sub-range.
    if n > 1 and (n - 1) * size >= width * (1.0 - 1e-12):
        n -= 1
    return n


class _AttributeState:
    __slots__ = (
        "attr",
        "hi",
        "is_int",
        "lo",
        "n_sub",
        "params",
        "perm",
        "size_zipf",
        "subrange_size",
        "value_zipf",
    )

    def __init__(self, attr: Attribute, params: AttributeWorkload, layout: random.Random) -> None:
        self.attr = attr
        self.params = params
        self.lo = attr.min
        self.hi = attr.max
        self.is_int = attr.type == "int"
        width = attr.max - attr.min
        self.subrange_size = float(params.subrange_size)
        self.n_sub = _subrange_count(width, self.subrange_size)
        perm = list(range(self.n_sub))
        layout.shuffle(perm)
        self.perm = perm
        self.value_zipf = ZipfSampler(self.n_sub, params.subrange_skew)
        # The 1e-9 keeps e.g. 0.3 * 3000 / 10 = 89.99999999999999 from losing a size class.
        k_sizes = max(1, math.floor(params.size_bound * width / self.subrange_size + 1e-9))
        self.size_zipf = ZipfSampler(k_sizes, params.size_skew)


class Workload:
    """The thesis workload generator over any schema (see the module docs for the formulas)."""

    __slots__ = ("_eligible", "_present", "_states", "params", "schema")

    def __init__(
        self,
        schema: Schema,
        params: Mapping[str, AttributeWorkload],
        seed_rng_layout: random.Random,
    ) -> None:
        if not isinstance(schema, Schema):
            raise SchemaError(f"Workload needs a Schema, got {schema!r}")
        for name in params:
            if not schema.has(name):
                raise SchemaError(
                    "workload parameters: " + schema.unknown_attribute_message(str(name))
                )
        missing = [n for n in schema.names() if n not in params]
        if missing:
            raise SchemaError(
                f"workload parameters for schema {schema.name!r} lack attribute(s) "
                f"{', '.join(missing)} (default_params(schema) gives a generic set)"
            )
        for name, p in params.items():
            if not isinstance(p, AttributeWorkload):
                raise SchemaError(
                    f"workload parameters for {name!r}: expected an AttributeWorkload, got {p!r}"
                )
        self.schema = schema
        self.params = {n: params[n] for n in schema.names()}
        self._states = tuple(
            _AttributeState(a, params[a.name], seed_rng_layout) for a in schema.attributes
        )
        self._present = tuple(s.params.present_prob for s in self._states)
        self._eligible = tuple(i for i, p in enumerate(self._present) if p > 0.0)
        if not self._eligible:
            raise SchemaError(
                f"workload for schema {schema.name!r}: every present_prob is 0, so no "
                "subscription could name any attribute"
            )

    def value(self, attr_index: int, rng: random.Random) -> float:
        """A value of attribute ``attr_index``: Zipf sub-range, uniform inside it."""
        st = self._states[attr_index]
        j = st.perm[st.value_zipf.sample(rng) - 1]
        a = st.lo + j * st.subrange_size
        b = min(a + st.subrange_size, st.hi)
        v = a + rng.random() * (b - a)
        if st.is_int:
            v = float(round(v))
        if v < st.lo:
            return st.lo
        if v > st.hi:
            return st.hi
        return v

    def event(self, rng: random.Random) -> tuple[float | None, ...]:
        """One value per attribute, in schema order."""
        value = self.value
        return tuple(value(i, rng) for i in range(len(self._states)))

    def subscription(self, rng: random.Random) -> Subscription:
        """A conjunction of closed ranges, centred on workload values, with Zipf sizes."""
        present = [i for i, p in enumerate(self._present) if rng.random() < p]
        if not present:
            present.append(self._eligible[rng.randrange(len(self._eligible))])
        ranges: list[tuple[int, Range]] = []
        for i in present:
            st = self._states[i]
            p = self.value(i, rng)
            half = st.size_zipf.sample(rng) * st.subrange_size / 2.0
            lo = max(st.lo, p - half)
            hi = min(st.hi, p + half)
            if st.is_int:
                lo, hi = float(math.ceil(lo)), float(math.floor(hi))
            ranges.append((i, Range(lo, hi)))
        return Subscription(self.schema.name, tuple(ranges))

    def describe(self) -> dict[str, Any]:
        return {
            "schema": self.schema.name,
            "attributes": [
                {
                    "name": st.attr.name,
                    "subranges": st.n_sub,
                    "size_classes": st.size_zipf.k,
                    "hottest_subranges": st.perm[:3],
                    "present_prob": st.params.present_prob,
                    "subrange_skew": st.params.subrange_skew,
                    "subrange_size": st.params.subrange_size,
                    "size_skew": st.params.size_skew,
                    "size_bound": st.params.size_bound,
                }
                for st in self._states
            ],
        }


def thesis_workload(seed_rng_layout: random.Random) -> Workload:
    """The thesis workload: ``THESIS_SCHEMA`` with ``THESIS_WORKLOAD`` (Tables 4.2, 4.3)."""
    return Workload(THESIS_SCHEMA, THESIS_WORKLOAD, seed_rng_layout)


def default_params(schema: Schema) -> dict[str, AttributeWorkload]:
    """A generic workload for any schema (e.g. one read from CSV); see the module docs."""
    present = min(0.5, 2.0 / len(schema))
    out: dict[str, AttributeWorkload] = {}
    for a in schema.attributes:
        size = (a.max - a.min) / 100.0
        if a.type == "int":
            size = max(1.0, math.floor(size))
        out[a.name] = AttributeWorkload(present, 0.5, size, 0.6, 0.3)
    return out


# --------------------------------------------------------------------------------------------
# CSV events
# --------------------------------------------------------------------------------------------

_STEM_BAD = re.compile(r"[^A-Za-z0-9_.\-]")
#: What an attribute name may not contain (pubsub.schema's rule: letters, digits, '_', '.', '('
#: and ')', starting with a letter or '_').
_NAME_BAD = re.compile(r"[^A-Za-z0-9_.()]+")


def _schema_name(stem: str) -> str:
    name = _STEM_BAD.sub("_", stem) or "csv"
    return name if re.match(r"[A-Za-z_]", name) else "_" + name


def attribute_name(header: str) -> str:
    """A valid attribute name for any CSV header: runs of other characters become ``_``
    (``temp C`` -> ``temp_C``), a name that does not start with a letter gets a leading ``_``
    (``0`` -> ``_0``), and a keyword of the subscription language a trailing one."""
    name = _NAME_BAD.sub("_", header.strip()).strip("_") or "_"
    if not re.match(r"[A-Za-z_]", name):
        name = "_" + name
    if name.casefold() in KEYWORDS:
        name += "_"
    return name


def _parse_columns(spec: str | Sequence[str]) -> list[tuple[str, str | None]]:
    """``"temp C=temp,RH"`` -> [("temp C", "temp"), ("RH", None)]."""
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    out: list[tuple[str, str | None]] = []
    for item in items:
        column, eq, attr = item.partition("=")
        if not column.strip() or (eq and not attr.strip()):
            raise SchemaError(
                f"--columns: {item!r} is not COLUMN or COLUMN=NAME (columns are separated by ',')"
            )
        out.append((column.strip(), attr.strip() if eq else None))
    return out


class CsvEvents:
    """Events read from a CSV table (see the module docs); build with ``CsvEvents.load``."""

    __slots__ = (
        "columns",
        "decimal_comma",
        "delimiter",
        "events",
        "missing",
        "missing_counts",
        "path",
        "rows",
        "schema",
        "skipped_columns",
        "skipped_rows",
    )

    path: Path
    schema: Schema
    events: list[tuple[float | None, ...]]
    rows: int  # data rows read (blank lines excluded)
    skipped_rows: int  # rows without any present value
    missing: float | str | None
    missing_counts: tuple[int, ...]  # per attribute, over all data rows
    #: Per attribute, the CSV header it was read from (differs when the header was renamed).
    columns: tuple[str, ...]
    skipped_columns: list[tuple[str, str]]  # (column, reason)
    delimiter: str
    decimal_comma: bool

    def __len__(self) -> int:
        return len(self.events)

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        missing: float | str | None = None,
        columns: str | Sequence[str] | None = None,
    ) -> CsvEvents:
        p = Path(path)
        if isinstance(missing, str):
            word = missing
            try:
                missing = float(word)
            except ValueError:
                missing = word.strip()
                if not missing:
                    raise SchemaError("missing must be a number or a non-empty word") from None
        if (
            missing is not None
            and not isinstance(missing, str)
            and (
                isinstance(missing, bool)
                or not isinstance(missing, int | float)
                or not math.isfinite(missing)
            )
        ):
            raise SchemaError(f"missing must be a finite number, a word or None, got {missing!r}")
        try:
            with p.open(newline="", encoding="utf-8-sig") as f:
                header_line = f.readline()
                f.seek(0)
                delimiter = max((",", ";", "\t"), key=header_line.count)
                reader = csv.reader(f, delimiter=delimiter)
                header = next(reader, None)
                if header is None:
                    raise SchemaError(f"{p}: the file is empty (no header line)")
                rows: list[list[str]] = []
                lines: list[int] = []
                for row in reader:
                    if not any(cell.strip() for cell in row):
                        continue  # blank line, or a row of empty cells
                    if len(row) != len(header):
                        raise SchemaError(
                            f"{p}, line {reader.line_num}: expected {len(header)} fields like "
                            f"the header, found {len(row)}"
                        )
                    rows.append(row)
                    lines.append(reader.line_num)
        except FileNotFoundError:
            raise SchemaError(f"{p}: CSV file not found") from None
        except IsADirectoryError:
            raise SchemaError(f"{p}: is a directory, not a CSV file") from None
        except UnicodeDecodeError as exc:
            raise SchemaError(f"{p}: not a UTF-8 text file ({exc.reason})") from None
        except csv.Error as exc:
            raise SchemaError(f"{p}: malformed CSV: {exc}") from None
        except OSError as exc:
            raise SchemaError(f"{p}: cannot read CSV file: {exc.strerror}") from None
        if not rows:
            raise SchemaError(f"{p}: no data rows, only the header line")

        decimal_comma = delimiter != ","
        headers = [h.strip() for h in header]
        # Which columns to read, under which attribute names: all of them (names made valid),
        # or the --columns selection in its order.
        chosen: list[tuple[int, str, bool]] = []  # (index, attribute name, explicitly chosen)
        skipped_columns: list[tuple[str, str]] = []
        if columns is None:
            taken: set[str] = set()
            for j, h in enumerate(headers):
                if not h:
                    # Said, not silently dropped: a column without a name is not read.
                    skipped_columns.append((f"column {j + 1}", "blank header"))
                    continue
                name = base = attribute_name(h)
                k = 2
                while name in taken:
                    name = f"{base}_{k}"
                    k += 1
                taken.add(name)
                chosen.append((j, name, False))
        else:
            wanted = _parse_columns(columns)
            by_header = {h: j for j, h in reversed(list(enumerate(headers))) if h}
            by_name = {attribute_name(h): j for j, h in reversed(list(enumerate(headers))) if h}
            for column, attr in wanted:
                found = by_header.get(column, by_name.get(column))
                if found is None:
                    raise SchemaError(
                        f"{p}: --columns names {column!r}, which is not a column of the header "
                        f"(columns: {', '.join(repr(h) for h in headers if h)})"
                    )
                name = attr if attr is not None else attribute_name(headers[found])
                if any(name == n for _, n, _ in chosen):
                    raise SchemaError(f"{p}: --columns gives the name {name!r} twice")
                chosen.append((found, name, True))
            picked = {j for j, _, _ in chosen}
            skipped_columns += [
                (h, "not in --columns") for j, h in enumerate(headers) if h and j not in picked
            ]

        names: list[str] = []
        sources: list[str] = []
        data: list[list[float | None]] = []
        missing_counts: list[int] = []
        for j, name, explicit in chosen:
            column = headers[j]
            values: list[float | None] = []
            parsed = 0
            first_bad: int | None = None
            for r, row in enumerate(rows):
                cell = row[j].strip()
                if not cell or cell == missing:
                    values.append(None)
                    continue
                if decimal_comma:
                    cell = cell.replace(",", ".")
                try:
                    v = float(cell)
                except ValueError:
                    v = math.nan
                if not math.isfinite(v):
                    if first_bad is None:
                        first_bad = r
                    values.append(None)
                    continue
                parsed += 1
                values.append(None if v == missing else v)
            reason: str | None = None
            if first_bad is not None:
                bad = rows[first_bad][j].strip()
                hint = f"--missing {bad} marks such cells absent"
                reason = "not numeric"
                if parsed:
                    reason += (
                        f": {bad!r} on line {lines[first_bad]} among {parsed} "
                        f"number{'s' if parsed != 1 else ''}; {hint}"
                    )
                if explicit:
                    raise SchemaError(
                        f"{p}, line {lines[first_bad]}: column {column!r} (--columns) is "
                        f"not numeric: {bad!r}" + (f"; {hint}" if parsed else "")
                    )
            present = [v for v in values if v is not None]
            if reason is None and not present:
                reason = "no values (all missing)"
                if explicit:
                    raise SchemaError(f"{p}: column {column!r} (--columns) has no values")
            if reason is not None:
                skipped_columns.append((column, reason))
                continue
            lo, hi = min(present), max(present)
            if not math.isfinite(hi - lo) or (hi - lo) / 100.0 == 0.0 < hi - lo:
                # The workload cuts each domain into sub-ranges of 1% of its width.
                far = values.index(hi if abs(hi) >= abs(lo) else lo)
                raise SchemaError(
                    f"{p}, line {lines[far]}: column {column!r}: values from {lo:g} to {hi:g} "
                    "span a range a float cannot divide (too wide or too narrow); leave the "
                    "column out with --columns or rescale it"
                )
            names.append(name)
            sources.append(column)
            data.append(values)
            missing_counts.append(len(values) - len(present))

        if not names:
            raise SchemaError(
                f"{p}: no numeric columns (skipped: "
                f"{', '.join(f'{n} ({why})' for n, why in skipped_columns) or 'none'})"
            )

        attributes: list[Attribute] = []
        for name, column, values in zip(names, sources, data, strict=True):
            present = [v for v in values if v is not None]
            lo, hi = min(present), max(present)
            if lo == hi:
                lo, hi = lo - 0.5, hi + 0.5
                if lo == hi:  # huge magnitude: 0.5 is below the float spacing
                    lo, hi = math.nextafter(lo, -math.inf), math.nextafter(hi, math.inf)
            try:
                attributes.append(Attribute(name, "float", lo, hi))
            except SchemaError as exc:
                raise SchemaError(f"{p}, line 1: column {column!r}: {exc}") from None
        schema = Schema(_schema_name(p.stem), tuple(attributes))

        events: list[tuple[float | None, ...]] = []
        skipped = 0
        for event in zip(*data, strict=True):
            if all(v is None for v in event):
                skipped += 1
            else:
                events.append(event)

        self = cls.__new__(cls)
        self.path = p
        self.schema = schema
        self.events = events
        self.rows = len(rows)
        self.skipped_rows = skipped
        self.missing = missing if isinstance(missing, str) or missing is None else float(missing)
        self.missing_counts = tuple(missing_counts)
        self.columns = tuple(sources)
        self.skipped_columns = skipped_columns
        self.delimiter = delimiter
        self.decimal_comma = decimal_comma
        return self

    def renamed(self) -> list[tuple[str, str]]:
        """(CSV header, attribute name) of every column published under another name."""
        return [
            (c, a.name)
            for c, a in zip(self.columns, self.schema.attributes, strict=True)
            if c != a.name
        ]

    def notes(self) -> list[str]:
        """What was read, skipped and renamed, as readable lines (the run prints them)."""
        out = [
            f"{self.path}: {len(self.events):,} events of {len(self.columns)} columns "
            f"({self.rows:,} rows, {self.skipped_rows:,} without any value dropped)"
        ]
        if self.skipped_columns:
            out.append(
                "skipped columns: " + "; ".join(f"{c!r} ({why})" for c, why in self.skipped_columns)
            )
        if self.renamed():
            out.append("renamed columns: " + ", ".join(f"{c!r} -> {a}" for c, a in self.renamed()))
        return out

    def describe(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "schema": self.schema.name,
            "delimiter": self.delimiter,
            "decimal_comma": self.decimal_comma,
            "missing_value": self.missing,
            "rows": self.rows,
            "events": len(self.events),
            "skipped_rows": self.skipped_rows,
            "attributes": [
                {"name": a.name, "column": c, "min": a.min, "max": a.max, "missing": m}
                for a, c, m in zip(
                    self.schema.attributes, self.columns, self.missing_counts, strict=True
                )
            ],
            "columns_used": list(self.columns),
            "renamed_columns": [{"column": c, "attribute": a} for c, a in self.renamed()],
            "skipped_columns": [{"name": n, "reason": why} for n, why in self.skipped_columns],
        }
