"""Schemas: attribute and schema validation, events, evolution, files and the registry."""

from __future__ import annotations

import json
import math
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rangecast.dht.errors import LocalProtocolError
from rangecast.pubsub.schema import (
    THESIS_SCHEMA,
    Attribute,
    Schema,
    SchemaError,
    SchemaRegistry,
    builtin_schemas,
    load_schema,
    suggest,
)

# --------------------------------------------------------------------------------------------
# Attribute
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["Attr1", "CO(GT)", "PT08.S1(CO)", "_x", "a.b", "T", "NOx(GT)", "x_1.2(y)"]
)
def test_attribute_names_accepted(name: str) -> None:
    assert Attribute(name, "float", 0, 1).name == name


@pytest.mark.parametrize(
    "name",
    ["", "a b", "a<b", "x>=1", "a=b", "1abc", ".x", "(x)", "and", "AND", "Between", "x-y", "é"],
)
def test_attribute_names_rejected(name: str) -> None:
    with pytest.raises(SchemaError, match="invalid attribute name"):
        Attribute(name, "float", 0, 1)


def test_attribute_name_must_be_str() -> None:
    with pytest.raises(SchemaError, match="invalid attribute name"):
        Attribute(3, "float", 0, 1)  # type: ignore[arg-type]


def test_attribute_keyword_message() -> None:
    with pytest.raises(SchemaError, match="keyword"):
        Attribute("between", "float", 0, 1)


@pytest.mark.parametrize(
    ("kind", "lo", "hi", "fragment"),
    [
        ("double", 0, 1, "type must be 'float' or 'int'"),
        ("float", math.nan, 1, "min must be a finite number"),
        ("float", 0, math.inf, "max must be a finite number"),
        ("float", True, 2, "min must be a finite number"),
        ("float", "0", 1, "min must be a finite number"),
        ("float", 1, 1, r"min must be < max, got \[1, 1\]"),
        ("float", 2, 1, "min must be < max"),
        ("int", 0.5, 3, "min of an int attribute must be integral"),
        ("int", 0, 3.25, "max of an int attribute must be integral"),
    ],
)
def test_attribute_validation(kind: str, lo: object, hi: object, fragment: str) -> None:
    with pytest.raises(SchemaError, match=fragment):
        Attribute("x", kind, lo, hi)  # type: ignore[arg-type]


def test_attribute_bounds_normalised_to_float() -> None:
    a = Attribute("n", "int", 0, 10)
    assert type(a.min) is float and type(a.max) is float
    assert a == Attribute("n", "int", 0.0, 10.0)
    assert hash(a) == hash(Attribute("n", "int", 0.0, 10.0))
    assert a.to_dict() == {"name": "n", "type": "int", "min": 0, "max": 10}
    assert type(a.to_dict()["min"]) is int
    assert Attribute("x", "float", -1, 2.5).to_dict()["min"] == -1.0
    assert Attribute("x", "float", -1, 2.5).domain() == "[-1, 2.5]"


def test_schema_error_is_local_protocol_error() -> None:
    assert issubclass(SchemaError, LocalProtocolError)
    assert issubclass(SchemaError, ValueError)


# --------------------------------------------------------------------------------------------
# Schema
# --------------------------------------------------------------------------------------------


def test_thesis_schema_is_table_4_2() -> None:
    s = THESIS_SCHEMA
    assert s.name == "thesis"
    assert s.partial == "strict"
    assert [(a.name, a.type, a.min, a.max) for a in s.attributes] == [
        ("Attr1", "float", 0, 10_000),
        ("Attr2", "float", -10_000, 10_000),
        ("Attr3", "float", 0, 3_000),
        ("Attr4", "float", 0, 200),
    ]
    assert len(s) == 4
    assert [s.index(n) for n in s.names()] == [0, 1, 2, 3]
    assert s.attribute(3).name == "Attr4"


def test_schema_validation() -> None:
    a = Attribute("x", "float", 0, 1)
    with pytest.raises(SchemaError, match="no attributes"):
        Schema("s", ())
    with pytest.raises(SchemaError, match="duplicate attribute name 'x'"):
        Schema("s", (a, Attribute("x", "int", 0, 5)))
    with pytest.raises(SchemaError, match="partial must be 'strict' or 'lenient'"):
        Schema("s", (a,), "loose")
    with pytest.raises(SchemaError, match="invalid schema name"):
        Schema("my schema", (a,))
    with pytest.raises(SchemaError, match="is not an Attribute"):
        Schema("s", (a, "y"))  # type: ignore[arg-type]
    # Lists are accepted and stored as tuples.
    s = Schema("s-1.v2", [a])  # type: ignore[arg-type]
    assert s.attributes == (a,)
    assert hash(s) == hash(Schema("s-1.v2", (a,)))


def test_index_errors_name_schema_and_suggest() -> None:
    with pytest.raises(SchemaError) as exc:
        THESIS_SCHEMA.index("Atr2")
    msg = str(exc.value)
    assert "unknown attribute 'Atr2' in schema 'thesis'" in msg
    assert "did you mean 'Attr2'?" in msg
    assert "Attr1, Attr2, Attr3, Attr4" in msg
    with pytest.raises(SchemaError) as exc:
        THESIS_SCHEMA.index("temperature")
    assert "did you mean" not in str(exc.value)
    assert "valid attributes: Attr1, Attr2, Attr3, Attr4" in str(exc.value)
    # A case slip is suggested even where difflib would not.
    assert suggest("attr1", THESIS_SCHEMA.names()) == "Attr1"
    assert suggest("zzz", THESIS_SCHEMA.names()) is None


@pytest.mark.parametrize("i", [-1, 4, True, "0", 1.0])
def test_attribute_index_out_of_range(i: object) -> None:
    with pytest.raises(SchemaError, match="out of range"):
        THESIS_SCHEMA.attribute(i)  # type: ignore[arg-type]


def test_with_attribute_appends_and_keeps_indices() -> None:
    extra = Attribute("CO(GT)", "float", 0.1, 11.9)
    s2 = THESIS_SCHEMA.with_attribute(extra)
    assert len(s2) == 5 and len(THESIS_SCHEMA) == 4
    assert [s2.index(n) for n in THESIS_SCHEMA.names()] == [0, 1, 2, 3]
    assert s2.index("CO(GT)") == 4
    assert s2.partial == THESIS_SCHEMA.partial and s2.name == THESIS_SCHEMA.name
    with pytest.raises(SchemaError, match="already has an attribute 'Attr1'"):
        THESIS_SCHEMA.with_attribute(Attribute("Attr1", "float", 0, 1))
    with pytest.raises(SchemaError, match="needs an Attribute"):
        THESIS_SCHEMA.with_attribute("Attr9")  # type: ignore[arg-type]
    lenient = THESIS_SCHEMA.with_partial("lenient")
    assert lenient.partial == "lenient" and lenient.attributes == THESIS_SCHEMA.attributes
    with pytest.raises(SchemaError):
        THESIS_SCHEMA.with_partial("sometimes")


def test_event_valid() -> None:
    s = THESIS_SCHEMA
    assert s.event({"Attr1": 5, "Attr4": 200.0}) == (5.0, None, None, 200.0)
    assert s.event({"Attr2": -10_000, "Attr3": None}) == (None, -10_000.0, None, None)
    ev = s.event({"Attr1": 0, "Attr2": 1.5, "Attr3": 3000, "Attr4": 7})
    assert ev == (0.0, 1.5, 3000.0, 7.0)
    assert all(type(v) is float for v in ev)


@pytest.mark.parametrize(
    ("values", "fragment"),
    [
        ({"Atr1": 5}, "unknown attribute 'Atr1' in schema 'thesis' (did you mean 'Attr1'?)"),
        ({"Attr4": 200.5}, "value 200.5 for attribute 'Attr4' is outside its domain [0, 200]"),
        ({"Attr2": -10_001}, "outside its domain"),
        ({"Attr1": math.nan}, "must be finite"),
        ({"Attr1": math.inf}, "must be finite"),
        ({"Attr1": "5"}, "must be a number"),
        ({"Attr1": True}, "must be a number"),
        ({}, "has no attribute values"),
        ({"Attr1": None}, "has no attribute values"),
    ],
)
def test_event_errors(values: dict[str, object], fragment: str) -> None:
    with pytest.raises(SchemaError) as exc:
        THESIS_SCHEMA.event(values)  # type: ignore[arg-type]
    assert fragment in str(exc.value), str(exc.value)


def test_event_int_attribute_and_not_mapping() -> None:
    s = Schema("c", (Attribute("n", "int", 0, 10),))
    assert s.event({"n": 3}) == (3.0,)
    assert s.event({"n": 3.0}) == (3.0,)
    with pytest.raises(SchemaError, match="int attribute"):
        s.event({"n": 2.5})
    with pytest.raises(SchemaError, match="mapping"):
        s.event([("n", 3)])  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# Dicts and files
# --------------------------------------------------------------------------------------------

_NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.()]{0,8}", fullmatch=True).filter(
    lambda n: n.casefold() not in ("and", "between")
)


@st.composite
def attributes(draw: st.DrawFn) -> Attribute:
    name = draw(_NAMES)
    if draw(st.booleans()):
        lo = draw(st.integers(-(10**6), 10**6))
        hi = lo + draw(st.integers(1, 10**6))
        return Attribute(name, "int", lo, hi)
    lo_f = draw(st.floats(-1e9, 1e9, allow_nan=False))
    hi_f = draw(st.floats(-1e9, 1e9, allow_nan=False).filter(lambda v: v > lo_f))
    return Attribute(name, "float", lo_f, hi_f)


schemas = st.builds(
    Schema,
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_.\-]{0,10}", fullmatch=True),
    st.lists(attributes(), min_size=1, max_size=6, unique_by=lambda a: a.name).map(tuple),
    st.sampled_from(["strict", "lenient"]),
)


@given(schemas)
def test_dict_round_trip(s: Schema) -> None:
    d = s.to_dict()
    assert Schema.from_dict(d) == s
    assert Schema.from_dict(json.loads(json.dumps(d))) == s
    assert pickle.loads(pickle.dumps(s)) == s


def test_from_dict_defaults_and_errors() -> None:
    s = Schema.from_dict({"name": "s", "attribute": [{"name": "x", "min": 0, "max": 1}]})
    assert s.partial == "strict" and s.attributes[0].type == "float"
    cases = [
        ([], "must be a table/object"),
        ({"attribute": []}, "schema has no 'name'"),
        ({"name": 3, "attribute": []}, "'name' must be a string"),
        ({"name": "s"}, "schema 's' has no 'attribute' list"),
        ({"name": "s", "attribute": "x"}, "'attribute' must be a list"),
        ({"name": "s", "attributes": []}, "unknown key 'attributes' (did you mean 'attribute'?)"),
        ({"name": "s", "attribute": [3]}, "attribute #1 must be a table/object"),
        (
            {"name": "s", "attribute": [{"name": "x", "min": 0}]},
            "schema 's', attribute #1 ('x'): missing 'max'",
        ),
        (
            {"name": "s", "attribute": [{"name": "x", "min": 0, "max": 1, "kind": "int"}]},
            "unknown key 'kind'",
        ),
        (
            {"name": "s", "attribute": [{"name": "ok", "min": 0, "max": 1}, {"name": "a b"}]},
            "attribute #2 ('a b'): missing 'min'",
        ),
        (
            {"name": "s", "attribute": [{"name": "x", "min": 5, "max": 1}]},
            "attribute #1 ('x'): attribute 'x': min must be < max",
        ),
    ]
    for data, fragment in cases:
        with pytest.raises(SchemaError) as exc:
            Schema.from_dict(data)  # type: ignore[arg-type]
        assert fragment in str(exc.value), (data, str(exc.value))


_TOML = """\
name = "sensors"
partial = "lenient"
[[attribute]]
name = "temp"
type = "float"
min = -40
max = 60
[[attribute]]
name = "CO(GT)"
type = "int"
min = 0
max = 12
"""


def test_load_schema_toml_and_json(tmp_path) -> None:
    expected = Schema(
        "sensors",
        (Attribute("temp", "float", -40, 60), Attribute("CO(GT)", "int", 0, 12)),
        "lenient",
    )
    toml_file = tmp_path / "sensors.toml"
    toml_file.write_text(_TOML, encoding="utf-8")
    assert load_schema(toml_file) == expected
    json_file = tmp_path / "sensors.json"
    json_file.write_text(json.dumps(expected.to_dict()), encoding="utf-8")
    assert load_schema(str(json_file)) == expected


def test_load_schema_errors_name_the_file(tmp_path) -> None:
    bad_toml = tmp_path / "bad.toml"
    bad_toml.write_text('name = "s"\n[[attribute]\n', encoding="utf-8")
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"name": "s", ', encoding="utf-8")
    wrong = tmp_path / "wrong.toml"
    wrong.write_text(_TOML.replace("max = 60", "max = -50"), encoding="utf-8")
    yaml = tmp_path / "s.yaml"
    yaml.write_text("name: s", encoding="utf-8")
    binary = tmp_path / "bin.json"
    binary.write_bytes(b"\xff\xfe\x00")
    cases = [
        (bad_toml, "invalid TOML"),
        (bad_json, "invalid JSON"),
        (wrong, "attribute #1 ('temp')"),
        (wrong, "min must be < max"),
        (yaml, "unsupported schema file type '.yaml'"),
        (tmp_path / "nope.toml", "schema file not found"),
        (binary, "not a UTF-8 text file"),
    ]
    for path, fragment in cases:
        with pytest.raises(SchemaError) as exc:
            load_schema(path)
        assert str(exc.value).startswith(str(path)), str(exc.value)
        assert fragment in str(exc.value), str(exc.value)


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------


def test_registry(tmp_path) -> None:
    reg = builtin_schemas()
    assert reg.names() == ("thesis",)
    assert reg.get("thesis") is THESIS_SCHEMA
    assert "thesis" in reg and len(reg) == 1
    # Fresh each time: adding to one does not leak into the next.
    other = Schema("other", (Attribute("x", "float", 0, 1),))
    reg.add(other)
    assert builtin_schemas().names() == ("thesis",)
    assert reg.names() == ("thesis", "other")
    # Identical re-add is fine; a different schema under the same name is not.
    reg.add(Schema("other", (Attribute("x", "float", 0, 1),)))
    with pytest.raises(SchemaError, match="different schema named 'other'"):
        reg.add(Schema("other", (Attribute("x", "float", 0, 2),)))
    with pytest.raises(SchemaError, match="needs a Schema"):
        reg.add("thesis")  # type: ignore[arg-type]
    with pytest.raises(SchemaError) as exc:
        reg.get("thesys")
    assert "unknown schema 'thesys' (did you mean 'thesis'?)" in str(exc.value)
    assert "registered schemas: thesis, other" in str(exc.value)


def test_registry_resolve(tmp_path) -> None:
    reg = SchemaRegistry()
    with pytest.raises(SchemaError, match="none registered"):
        reg.resolve("thesis")
    reg = builtin_schemas()
    assert reg.resolve("thesis") is THESIS_SCHEMA
    f = tmp_path / "sensors.toml"
    f.write_text(_TOML, encoding="utf-8")
    s = reg.resolve(f)
    assert s.name == "sensors" and reg.get("sensors") == s
    assert reg.resolve(str(f)) == s  # loading again is fine: identical schema
    with pytest.raises(SchemaError, match=r"not a registered schema .* and not a schema file"):
        reg.resolve(tmp_path / "missing.toml")
    with pytest.raises(SchemaError, match="did you mean 'sensors'"):
        reg.resolve("sensor")
