"""Tests for dht.ids: digit, prefix and ring arithmetic of the Pastry id space."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rangecast.dht.errors import LocalProtocolError, RemoteProtocolError
from rangecast.dht.ids import DEFAULT_SPACE, IdSpace

# (bits, b) shapes that are valid: bits a multiple of 8 and of b, 1 <= b <= 8.
SHAPES = [(160, 4), (64, 4), (32, 2), (24, 3), (16, 8), (8, 1), (40, 5), (256, 4)]
SPACES = st.sampled_from([IdSpace(bits=bits, b=b) for bits, b in SHAPES])


def ids(space: IdSpace) -> st.SearchStrategy[int]:
    """Ids of ``space``, with the edges of the ring and near-misses over-represented."""
    edges = st.sampled_from([0, 1, space.size // 2, space.size - 2, space.size - 1])
    return st.one_of(st.integers(min_value=0, max_value=space.size - 1), edges)


def digit_string(space: IdSpace, ident: int) -> list[str]:
    """The id as a list of ``b``-bit digit strings, most significant first (independent of the
    shift arithmetic under test)."""
    bitstr = format(ident, f"0{space.bits}b")
    return [bitstr[i : i + space.b] for i in range(0, space.bits, space.b)]


def common_prefix_len(a: list[str], c: list[str]) -> int:
    n = 0
    for x, y in zip(a, c, strict=True):
        if x != y:
            break
        n += 1
    return n


# ------------------------------------------------------------------------------- the shape


def test_default_space_is_pastry_160_bit_hex() -> None:
    s = DEFAULT_SPACE
    assert (s.bits, s.b, s.digits, s.radix, s.nbytes, s.size) == (160, 4, 40, 16, 20, 1 << 160)


@pytest.mark.parametrize(("bits", "b"), SHAPES)
def test_derived_fields(bits: int, b: int) -> None:
    s = IdSpace(bits=bits, b=b)
    assert s.digits == bits // b
    assert s.size == 2**bits
    assert s.nbytes == bits // 8
    assert s.radix == 2**b


@pytest.mark.parametrize(
    ("bits", "b"),
    [
        (160, 0),  # b below 1
        (160, -4),
        (160, 9),  # b above 8
        (12, 4),  # bits not a multiple of 8
        (24, 5),  # bits not a multiple of b
        (64, 3),
        (0, 4),  # bits below b
        (4, 8),
        (-8, 4),
    ],
)
def test_bad_shapes_raise_local_protocol_error(bits: int, b: int) -> None:
    with pytest.raises(LocalProtocolError):
        IdSpace(bits=bits, b=b)


@pytest.mark.parametrize(("bits", "b"), [(32.0, 4), (32, 4.0)])
def test_non_integer_shape_raises_local_protocol_error(bits: float, b: float) -> None:
    with pytest.raises(LocalProtocolError):
        IdSpace(bits=bits, b=b)  # type: ignore[arg-type]


# ------------------------------------------------------------------------ digits and prefixes


def test_digits_match_hex_string_in_default_space() -> None:
    rng = random.Random(3)
    s = DEFAULT_SPACE
    for _ in range(200):
        x = s.random_id(rng)
        hexid = s.hexid(x)
        assert len(hexid) == 40
        assert [format(s.digit(x, r), "x") for r in range(s.digits)] == list(hexid)


@given(data=st.data(), space=SPACES)
def test_digit_and_shared_prefix_match_string_comparison(data: st.DataObject, space: IdSpace):
    a = data.draw(ids(space), label="a")
    # Bias the second id towards sharing a long prefix with the first.
    keep = data.draw(st.integers(min_value=0, max_value=space.bits), label="keep_bits")
    noise = data.draw(st.integers(min_value=0, max_value=(1 << (space.bits - keep)) - 1))
    c = data.draw(
        st.one_of(ids(space), st.just((a >> (space.bits - keep) << (space.bits - keep)) | noise)),
        label="c",
    )
    da, dc = digit_string(space, a), digit_string(space, c)
    assert [space.digit(a, r) for r in range(space.digits)] == [int(d, 2) for d in da]
    expected = common_prefix_len(da, dc)
    assert space.shared_prefix(a, c) == expected == space.shared_prefix(c, a)
    assert 0 <= expected <= space.digits
    assert (expected == space.digits) == (a == c)
    if expected < space.digits:
        assert space.digit(a, expected) != space.digit(c, expected)
    # Numeric order is lexicographic order of the fixed-width digit strings, which is what makes
    # ids with a common prefix contiguous.
    assert (a < c) == (da < dc)
    if space.b == 4:
        ha, hc = space.hexid(a), space.hexid(c)
        assert space.shared_prefix(a, c) == common_prefix_len(list(ha), list(hc))


@given(data=st.data(), space=SPACES)
def test_prefix_range_is_exactly_the_ids_with_that_prefix(data: st.DataObject, space: IdSpace):
    ident = data.draw(ids(space), label="ident")
    length = data.draw(st.integers(min_value=0, max_value=space.digits - 1), label="length")
    nd = data.draw(st.integers(min_value=0, max_value=space.radix - 1), label="next_digit")
    lo, hi = space.prefix_range(ident, length, nd)
    assert 0 <= lo < hi <= space.size
    assert hi - lo == 1 << (space.bits - space.b * (length + 1))

    def member(x: int) -> bool:
        return space.shared_prefix(x, ident) >= length and space.digit(x, length) == nd

    # Both ends inside, their neighbours outside.
    assert member(lo) and member(hi - 1)
    if lo > 0:
        assert not member(lo - 1)
    if hi < space.size:
        assert not member(hi)
    near = st.integers(min_value=max(0, lo - 3), max_value=min(space.size - 1, hi + 2))
    for x in data.draw(st.lists(st.one_of(ids(space), near), min_size=1, max_size=20), label="x"):
        assert (lo <= x < hi) == member(x)


# ---------------------------------------------------------------------------------- the ring


@given(data=st.data(), space=SPACES)
def test_ring_distances(data: st.DataObject, space: IdSpace) -> None:
    a, c, e = (data.draw(ids(space), label=name) for name in "ace")
    d = space.distance(a, c)
    assert d == space.distance(c, a)
    assert 0 <= d <= space.size // 2
    assert (d == 0) == (a == c)
    assert d == min(space.cw(a, c), space.ccw(a, c))
    assert space.cw(a, c) == space.ccw(c, a)
    assert 0 <= space.cw(a, c) < space.size
    if a != c:
        assert space.cw(a, c) + space.ccw(a, c) == space.size
    else:
        assert space.cw(a, c) == space.ccw(a, c) == 0
    # Clockwise distance is the numeric gap going up, modulo the ring.
    assert (a + space.cw(a, c)) % space.size == c
    assert space.distance(a, e) <= space.distance(a, c) + space.distance(c, e)


# ------------------------------------------------------------------------------- conversions


@given(data=st.data(), space=SPACES)
def test_bytes_round_trip(data: st.DataObject, space: IdSpace) -> None:
    x = data.draw(ids(space))
    raw = space.to_bytes(x)
    assert len(raw) == space.nbytes
    assert space.from_bytes(raw) == x
    assert raw.hex() == format(x, f"0{space.bits // 4}x")


@given(data=st.data(), space=SPACES)
def test_from_bytes_with_wrong_length_is_the_remote_side_fault(
    data: st.DataObject, space: IdSpace
) -> None:
    raw = data.draw(st.binary(max_size=space.nbytes + 8).filter(lambda r: len(r) != space.nbytes))
    with pytest.raises(RemoteProtocolError) as excinfo:
        space.from_bytes(raw)
    assert not isinstance(excinfo.value, LocalProtocolError)


@pytest.mark.parametrize("bad", [-1, 1 << 160, (1 << 160) + 5, 1.0, "00", None, b"\x00" * 20])
def test_check_rejects_local_misuse(bad: object) -> None:
    with pytest.raises(LocalProtocolError):
        DEFAULT_SPACE.check(bad)  # type: ignore[arg-type]


@given(space=SPACES, seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_random_id_and_hash_key_are_in_range(space: IdSpace, seed: int) -> None:
    x = space.random_id(random.Random(seed))
    assert space.check(x) == x
    assert space.random_id(random.Random(seed)) == x
    key = space.hash_key(f"topic-{seed}")
    assert 0 <= key < space.size
    assert key == space.hash_key(f"topic-{seed}".encode())


def test_hash_key_extends_digest_for_wide_ids() -> None:
    wide = IdSpace(bits=256, b=4)
    key = wide.hash_key("x")
    # SHA-1 gives 160 bits; the rest is filled by re-hashing, so the key is not zero-padded.
    assert key & ((1 << 96) - 1) != 0
    assert DEFAULT_SPACE.hash_key("x") == key >> 96
