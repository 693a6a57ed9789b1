"""Schemas: the named attribute sets that events and subscriptions are written against (SPEC 3).

Theory of operation
-------------------
A ``Schema`` is an ordered tuple of ``Attribute``s, each a numeric dimension with a closed domain
``[min, max]``. Everything downstream refers to an attribute by its *index* in that tuple, never by
name: events are plain tuples ``(v0, v1, ...)`` with ``None`` for a missing attribute, and
subscriptions store ``(index, Range)`` pairs. Tuples keep the hot paths (matching, the logic-space
mapping) free of dictionary look-ups.

Indices are stable by construction: ``with_attribute`` only ever *appends*, so adding an attribute
to a live schema leaves every installed subscription meaningful (SPEC 3: "attributes can be added
to a schema later without touching installed subscriptions"). Removing or reordering attributes is
deliberately not offered.

The schema also states the rule for partial events (``partial``): ``strict`` (a predicate on a
missing attribute is false) or ``lenient`` (it is ignored). Matching itself lives in
``pubsub.subscription``.

Attribute names are identifier-like but also admit ``.``, ``(`` and ``)`` because CSV headers
become attribute names (``CO(GT)``, ``PT08.S1(CO)``); a name must start with a letter or ``_`` so
that the subscription tokenizer can tell names from numbers, and it may not be one of the
language's keywords (``and``, ``between``).

Schemas come from code (``THESIS_SCHEMA``), from TOML or JSON files (``load_schema``), or from a
CSV header (``sim.workload.CsvEvents``). Several live side by side in a ``SchemaRegistry``.

All validation failures raise ``SchemaError``, a ``LocalProtocolError``: a bad schema or a bad
event is the caller's (or the user's) mistake, reported where it is made, with the schema, the
file and the attribute named.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rangecast.dht.errors import LocalProtocolError

__all__ = [
    "ATTRIBUTE_TYPES",
    "KEYWORDS",
    "PARTIAL_RULES",
    "THESIS_SCHEMA",
    "Attribute",
    "Schema",
    "SchemaError",
    "SchemaRegistry",
    "builtin_schemas",
    "load_schema",
    "suggest",
]

ATTRIBUTE_TYPES = ("float", "int")
PARTIAL_RULES = ("strict", "lenient")
# Keywords of the subscription language; an attribute so named could not be parsed unambiguously.
KEYWORDS = frozenset({"and", "between"})

# Starts with a letter or '_' (so a name never looks like a number to the tokenizer); '.', '(' and
# ')' are allowed because CSV headers such as 'PT08.S1(CO)' become attribute names.
_ATTRIBUTE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.()]*\Z")
# Schema names end up in tree-node identifiers and file stems; '-' is common in file names.
_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*\Z")


class SchemaError(LocalProtocolError, ValueError):
    """A schema, a schema file, an event or a subscription is invalid for its schema."""


def suggest(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate closest to ``name`` ("did you mean"), or None when nothing is close.

    A case-insensitive exact match wins (``attr1`` -> ``Attr1``); otherwise difflib's ratio with
    its usual 0.6 cut-off decides.
    """
    pool = list(candidates)
    folded = name.casefold()
    for c in pool:
        if c.casefold() == folded:
            return c
    close = difflib.get_close_matches(name, pool, n=1, cutoff=0.6)
    return close[0] if close else None


def _is_number(v: object) -> bool:
    # bool is an int subclass, but True as a domain bound or a reading is always a mistake.
    return isinstance(v, int | float) and not isinstance(v, bool)


@dataclass(frozen=True, slots=True)
class Attribute:
    """One numeric dimension: ``name``, ``type`` ("float" or "int") and the closed domain
    ``[min, max]`` (``min < max``, both finite; integral for "int"). Bounds are stored as floats.
    """

    name: str
    type: str
    min: float
    max: float

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _ATTRIBUTE_NAME.match(self.name):
            raise SchemaError(
                f"invalid attribute name {self.name!r}: it must start with a letter or '_' and "
                "contain only letters, digits, '_', '.', '(' and ')' (no spaces or operators)"
            )
        if self.name.casefold() in KEYWORDS:
            raise SchemaError(
                f"invalid attribute name {self.name!r}: it is a keyword of the subscription "
                "language"
            )
        if self.type not in ATTRIBUTE_TYPES:
            raise SchemaError(
                f"attribute {self.name!r}: type must be 'float' or 'int', got {self.type!r}"
            )
        for label, bound in (("min", self.min), ("max", self.max)):
            if not _is_number(bound) or not math.isfinite(bound):
                raise SchemaError(
                    f"attribute {self.name!r}: {label} must be a finite number, got {bound!r}"
                )
            if self.type == "int" and not float(bound).is_integer():
                raise SchemaError(
                    f"attribute {self.name!r}: {label} of an int attribute must be integral, "
                    f"got {bound!r}"
                )
        if not self.min < self.max:
            raise SchemaError(
                f"attribute {self.name!r}: min must be < max, got [{self.min!r}, {self.max!r}]"
            )
        # Normalise to float so that equal domains compare and hash equal however they were
        # spelt (TOML gives ints for '-40'); frozen dataclasses need object.__setattr__.
        object.__setattr__(self, "min", float(self.min))
        object.__setattr__(self, "max", float(self.max))

    def to_dict(self) -> dict[str, Any]:
        bound: type[int] | type[float] = int if self.type == "int" else float
        return {
            "name": self.name,
            "type": self.type,
            "min": bound(self.min),
            "max": bound(self.max),
        }

    def domain(self) -> str:
        """The domain as text for messages, e.g. ``[0, 200]``."""
        return f"[{_fmt(self.min)}, {_fmt(self.max)}]"


def _fmt(v: float) -> str:
    """A number for messages: integral floats without the '.0'."""
    return str(int(v)) if v.is_integer() and abs(v) < 1e16 else repr(v)


_SCHEMA_KEYS = ("name", "partial", "attribute")
_ATTRIBUTE_KEYS = ("name", "type", "min", "max")


@dataclass(frozen=True, slots=True)
class Schema:
    """A named, ordered set of attributes plus the partial-event rule (see the module docs)."""

    name: str
    attributes: tuple[Attribute, ...]
    partial: str = "strict"
    # name -> index, built once; not part of equality or the hash (it is derived).
    _index: dict[str, int] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _SCHEMA_NAME.match(self.name):
            raise SchemaError(
                f"invalid schema name {self.name!r}: it must start with a letter or '_' and "
                "contain only letters, digits, '_', '.' and '-'"
            )
        attrs = self.attributes
        if isinstance(attrs, str | bytes) or not isinstance(attrs, Iterable):
            raise SchemaError(f"schema {self.name!r}: attributes must be a sequence of Attribute")
        attrs = tuple(attrs)
        if not attrs:
            raise SchemaError(f"schema {self.name!r} has no attributes; it needs at least one")
        index: dict[str, int] = {}
        for i, a in enumerate(attrs):
            if not isinstance(a, Attribute):
                raise SchemaError(
                    f"schema {self.name!r}: attribute #{i + 1} is not an Attribute: {a!r}"
                )
            if a.name in index:
                raise SchemaError(f"schema {self.name!r}: duplicate attribute name {a.name!r}")
            index[a.name] = i
        if self.partial not in PARTIAL_RULES:
            raise SchemaError(
                f"schema {self.name!r}: partial must be 'strict' or 'lenient', got {self.partial!r}"
            )
        object.__setattr__(self, "attributes", attrs)
        object.__setattr__(self, "_index", index)

    # -- look-ups ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.attributes)

    def names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.attributes)

    def has(self, name: str) -> bool:
        return name in self._index

    def unknown_attribute_message(self, name: str, *, list_valid: bool = True) -> str:
        """``unknown attribute 'x' in schema 's' (did you mean 'y'?)``, listing the valid names
        when asked to, or when there is no suggestion to offer."""
        msg = f"unknown attribute {name!r} in schema {self.name!r}"
        close = suggest(name, self._index)
        if close is not None:
            msg += f" (did you mean {close!r}?)"
        if list_valid or close is None:
            msg += f"; valid attributes: {', '.join(self.names())}"
        return msg

    def index(self, name: str) -> int:
        """Index of the attribute called ``name`` (a SchemaError with suggestions otherwise)."""
        try:
            return self._index[name]
        except (KeyError, TypeError):
            raise SchemaError(self.unknown_attribute_message(str(name))) from None

    def attribute(self, i: int) -> Attribute:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(self.attributes):
            raise SchemaError(
                f"schema {self.name!r}: attribute index {i!r} out of range "
                f"0..{len(self.attributes) - 1}"
            )
        return self.attributes[i]

    # -- evolution --------------------------------------------------------------------------

    def with_attribute(self, attr: Attribute) -> Schema:
        """A copy with ``attr`` appended. Existing indices never change, so subscriptions
        installed against this schema stay valid against the new one."""
        if not isinstance(attr, Attribute):
            raise SchemaError(f"with_attribute needs an Attribute, got {attr!r}")
        if attr.name in self._index:
            raise SchemaError(f"schema {self.name!r} already has an attribute {attr.name!r}")
        return Schema(self.name, (*self.attributes, attr), self.partial)

    def with_partial(self, rule: str) -> Schema:
        return Schema(self.name, self.attributes, rule)

    # -- events -----------------------------------------------------------------------------

    def event(self, values: Mapping[str, float | int | None]) -> tuple[float | None, ...]:
        """Validate an event given by attribute name; return it as a tuple in schema order.

        Unknown names are errors; values must be finite numbers within the attribute's domain
        (integral for int attributes); absent names, or ``None`` values, become ``None``
        (a partial event); at least one attribute must be present. Values come back as floats.
        """
        if not isinstance(values, Mapping):
            raise SchemaError(
                f"schema {self.name!r}: an event is a mapping of attribute name to value, "
                f"got {type(values).__name__}"
            )
        out: list[float | None] = [None] * len(self.attributes)
        present = 0
        for name, v in values.items():
            i = self._index.get(name) if isinstance(name, str) else None
            if i is None:
                raise SchemaError(
                    "event: " + self.unknown_attribute_message(str(name), list_valid=False)
                )
            if v is None:
                continue
            a = self.attributes[i]
            if not _is_number(v):
                raise SchemaError(
                    f"event: attribute {name!r} of schema {self.name!r} must be a number, got {v!r}"
                )
            if not math.isfinite(v):
                raise SchemaError(f"event: attribute {name!r} must be finite, got {v!r}")
            if a.type == "int" and not float(v).is_integer():
                raise SchemaError(f"event: attribute {name!r} is an int attribute, got {v!r}")
            if not a.min <= v <= a.max:
                raise SchemaError(
                    f"event: value {v!r} for attribute {name!r} is outside its domain {a.domain()}"
                )
            out[i] = float(v)
            present += 1
        if present == 0:
            raise SchemaError(
                f"event for schema {self.name!r} has no attribute values; at least one of "
                f"{', '.join(self.names())} is needed"
            )
        return tuple(out)

    # -- serialisation ----------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The file structure: ``{"name", "partial", "attribute": [{name, type, min, max}]}``."""
        return {
            "name": self.name,
            "partial": self.partial,
            "attribute": [a.to_dict() for a in self.attributes],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Schema:
        """Inverse of ``to_dict``; ``partial`` defaults to "strict" and an attribute's ``type``
        to "float". Unknown keys are errors (they are usually typos such as 'attributes')."""
        if not isinstance(data, Mapping):
            raise SchemaError(f"a schema must be a table/object, got {type(data).__name__}")
        _reject_unknown_keys(data, _SCHEMA_KEYS, "schema")
        if "name" not in data:
            raise SchemaError("schema has no 'name'")
        name = data["name"]
        if not isinstance(name, str):
            raise SchemaError(f"schema 'name' must be a string, got {name!r}")
        partial = data.get("partial", "strict")
        raw_attrs = data.get("attribute")
        if raw_attrs is None:
            raise SchemaError(f"schema {name!r} has no 'attribute' list")
        if not isinstance(raw_attrs, Sequence) or isinstance(raw_attrs, str | bytes):
            raise SchemaError(f"schema {name!r}: 'attribute' must be a list of tables/objects")
        attrs: list[Attribute] = []
        for n, raw in enumerate(raw_attrs, start=1):
            if not isinstance(raw, Mapping):
                raise SchemaError(f"schema {name!r}: attribute #{n} must be a table/object")
            label = f"schema {name!r}, attribute #{n}"
            if isinstance(raw.get("name"), str):
                label += f" ({raw['name']!r})"
            _reject_unknown_keys(raw, _ATTRIBUTE_KEYS, label)
            for key in ("name", "min", "max"):
                if key not in raw:
                    raise SchemaError(f"{label}: missing '{key}'")
            try:
                attrs.append(
                    Attribute(raw["name"], raw.get("type", "float"), raw["min"], raw["max"])
                )
            except SchemaError as exc:
                raise SchemaError(f"{label}: {exc}") from None
        return cls(name, tuple(attrs), partial)


def _reject_unknown_keys(data: Mapping[str, Any], allowed: Sequence[str], where: str) -> None:
    for key in data:
        if key not in allowed:
            close = suggest(str(key), allowed)
            hint = f" (did you mean {close!r}?)" if close else ""
            raise SchemaError(
                f"{where}: unknown key {key!r}{hint}; allowed keys: {', '.join(allowed)}"
            )


# Thesis Table 4.2. The thesis' events carry all four attributes, so "strict" loses nothing.
THESIS_SCHEMA = Schema(
    "thesis",
    (
        Attribute("Attr1", "float", 0, 10_000),
        Attribute("Attr2", "float", -10_000, 10_000),
        Attribute("Attr3", "float", 0, 3_000),
        Attribute("Attr4", "float", 0, 200),
    ),
    "strict",
)


def load_schema(path: str | os.PathLike[str]) -> Schema:
    """Load a schema from a ``.toml`` or ``.json`` file (structure: see ``Schema.to_dict``).

    Errors are SchemaErrors that start with the file name and say what is wrong.
    """
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in (".toml", ".json"):
        raise SchemaError(
            f"{p}: unsupported schema file type {p.suffix or '(none)'!r}; use .toml or .json"
        )
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise SchemaError(f"{p}: schema file not found") from None
    except OSError as exc:
        raise SchemaError(f"{p}: cannot read schema file: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SchemaError(f"{p}: not a UTF-8 text file ({exc.reason})") from None
    try:
        data = tomllib.loads(text) if suffix == ".toml" else json.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SchemaError(f"{p}: invalid TOML: {exc}") from None
    except json.JSONDecodeError as exc:
        raise SchemaError(
            f"{p}: invalid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    try:
        return Schema.from_dict(data)
    except SchemaError as exc:
        raise SchemaError(f"{p}: {exc}") from None


class SchemaRegistry:
    """Several schemas side by side, by name."""

    __slots__ = ("_schemas",)

    def __init__(self, schemas: Iterable[Schema] = ()) -> None:
        self._schemas: dict[str, Schema] = {}
        for s in schemas:
            self.add(s)

    def add(self, schema: Schema) -> Schema:
        """Register ``schema``. Re-adding an identical schema is a no-op; a different schema
        under a registered name is an error (silently replacing it would re-interpret every
        installed subscription). Returns the registered schema."""
        if not isinstance(schema, Schema):
            raise SchemaError(f"SchemaRegistry.add needs a Schema, got {schema!r}")
        known = self._schemas.get(schema.name)
        if known is not None and known != schema:
            raise SchemaError(
                f"a different schema named {schema.name!r} is already registered "
                f"(registered: {known.to_dict()}; new: {schema.to_dict()})"
            )
        self._schemas[schema.name] = schema
        return schema

    def get(self, name: str) -> Schema:
        try:
            return self._schemas[name]
        except (KeyError, TypeError):
            close = suggest(str(name), self._schemas)
            hint = f" (did you mean {close!r}?)" if close else ""
            raise SchemaError(
                f"unknown schema {name!r}{hint}; registered schemas: "
                f"{', '.join(self._schemas) or '(none)'}"
            ) from None

    def resolve(self, name_or_path: str | os.PathLike[str]) -> Schema:
        """A registered schema by name, else a schema file (loaded with ``load_schema`` and then
        registered, so later ``get`` calls by its name work)."""
        key = os.fspath(name_or_path)
        if key in self._schemas:
            return self._schemas[key]
        if Path(key).is_file():
            return self.add(load_schema(key))
        close = suggest(key, self._schemas)
        hint = f" (did you mean {close!r}?)" if close else ""
        raise SchemaError(
            f"unknown schema {key!r}{hint}: not a registered schema "
            f"({', '.join(self._schemas) or 'none registered'}) and not a schema file"
        )

    def names(self) -> tuple[str, ...]:
        return tuple(self._schemas)

    def __contains__(self, name: object) -> bool:
        return name in self._schemas

    def __len__(self) -> int:
        return len(self._schemas)


def builtin_schemas() -> SchemaRegistry:
    """A fresh registry holding the built-in schemas (``thesis``)."""
    return SchemaRegistry((THESIS_SCHEMA,))
