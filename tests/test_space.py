"""Properties of the logic space (SPEC 4): the 2d-tree's zone arithmetic, ``TreeId`` algebra, and
the overlap test between zones and target regions that RndRegionProbe relies on (SPEC 6, 8).

Zone arithmetic is pure and cheap, so these tests can afford many examples and deep trees."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from rangecast.dht.errors import LocalProtocolError
from rangecast.pubsub.space import (
    MAX_DEPTH,
    AttributeSpace,
    TreeId,
    Zone,
    point_in_region,
    zone_overlaps,
)

_BASE_EXAMPLES = settings().max_examples
MANY = settings(max_examples=max(50, _BASE_EXAMPLES * 3))

# ----------------------------------------------------------------------------- strategies


@st.composite
def spaces(draw: st.DrawFn) -> AttributeSpace:
    """An attribute's square with a realistic domain (negative, tiny, huge, integral)."""
    lo = draw(
        st.one_of(
            st.sampled_from([0.0, -10_000.0, -1.0, 1e-3]),
            st.floats(min_value=-1e6, max_value=1e6, allow_nan=False),
        )
    )
    width = draw(
        st.one_of(
            st.sampled_from([1.0, 200.0, 3_000.0, 10_000.0, 20_000.0]),
            st.floats(min_value=1e-3, max_value=1e6, allow_nan=False),
        )
    )
    hi = lo + width
    assume(lo < hi)
    return AttributeSpace("s", "a", draw(st.integers(0, 7)), lo, hi)


def tree_ids(attr: int, max_depth: int = MAX_DEPTH) -> st.SearchStrategy[TreeId]:
    return st.integers(0, max_depth).flatmap(
        lambda d: st.builds(TreeId, st.just(attr), st.just(d), st.integers(0, (1 << d) - 1))
    )


def coords(space: AttributeSpace) -> st.SearchStrategy[float]:
    """Values of the domain, with its ends and simple fractions (split lines) over-weighted."""
    lo, hi = space.min, space.max
    fractions = [lo + (hi - lo) * k / 16 for k in range(17)]
    return st.one_of(
        st.sampled_from([lo, hi, *fractions]),
        st.floats(min_value=lo, max_value=hi, allow_nan=False),
    )


def grid(zone: Zone, steps: int = 4) -> list[tuple[float, float]]:
    """Points of the closed rectangle of ``zone``: its corners, edges' midpoints and a grid."""
    xs = sorted({zone.x_lo + (zone.x_hi - zone.x_lo) * k / steps for k in range(steps + 1)})
    ys = sorted({zone.y_lo + (zone.y_hi - zone.y_lo) * k / steps for k in range(steps + 1)})
    xs = [min(max(x, zone.x_lo), zone.x_hi) for x in xs] + [zone.x_lo, zone.x_hi]
    ys = [min(max(y, zone.y_lo), zone.y_hi) for y in ys] + [zone.y_lo, zone.y_hi]
    return list(itertools.product(xs, ys))


# --------------------------------------------------------------------------- TreeId algebra


@MANY
@given(tid=tree_ids(3, MAX_DEPTH - 1), bit=st.integers(0, 1))
def test_child_parent_round_trip(tid: TreeId, bit: int) -> None:
    child = tid.child(bit)
    assert child.depth == tid.depth + 1
    assert child.attr == tid.attr
    assert child.parent() == tid
    assert child.path & 1 == bit
    assert child.ancestor(tid.depth) == tid
    assert tid.is_ancestor_of(child)
    assert not child.is_ancestor_of(tid)
    assert child.bits() == tid.bits() + str(bit)


@MANY
@given(data=st.data(), tid=tree_ids(2))
def test_ancestor_is_repeated_parent_and_defines_is_ancestor_of(
    data: st.DataObject, tid: TreeId
) -> None:
    d = data.draw(st.integers(0, tid.depth), label="depth")
    anc = tid.ancestor(d)
    walk = tid
    while walk.depth > d:
        walk = walk.parent()
    assert anc == walk
    assert anc.depth == d
    assert anc.bits() == tid.bits()[:d]
    assert anc.is_ancestor_of(tid)
    assert tid.ancestor(tid.depth) == tid
    assert tid.ancestor(0) == TreeId(tid.attr, 0, 0)
    # Ancestors of ancestors.
    e = data.draw(st.integers(0, d), label="depth2")
    assert anc.ancestor(e) == tid.ancestor(e)


@MANY
@given(a=tree_ids(1, 12), b=tree_ids(1, 12), c=tree_ids(1, 12))
def test_is_ancestor_of_is_a_partial_order_matching_bit_prefixes(
    a: TreeId, b: TreeId, c: TreeId
) -> None:
    for x, y in ((a, b), (b, c), (a, c)):
        expected = y.bits().startswith(x.bits())
        assert x.is_ancestor_of(y) == expected
        if x.is_ancestor_of(y):
            assert y.ancestor(x.depth) == x
        if x.is_ancestor_of(y) and y.is_ancestor_of(x):
            assert x == y  # antisymmetric
    assert a.is_ancestor_of(a)
    if a.is_ancestor_of(b) and b.is_ancestor_of(c):
        assert a.is_ancestor_of(c)  # transitive


@given(tid=tree_ids(0, 20), other_attr=st.integers(1, 5))
def test_nodes_of_different_attributes_are_never_related(tid: TreeId, other_attr: int) -> None:
    twin = TreeId(other_attr, tid.depth, tid.path)
    assert not tid.is_ancestor_of(twin)
    assert not twin.is_ancestor_of(tid)
    assert not TreeId(other_attr, 0, 0).is_ancestor_of(tid)


@given(tid=tree_ids(4, 30))
def test_bits_path_and_depth_agree(tid: TreeId) -> None:
    bits = tid.bits()
    assert len(bits) == tid.depth
    assert (int(bits, 2) if bits else 0) == tid.path
    assert 0 <= tid.path < (1 << tid.depth) or tid.depth == 0


def test_the_root_has_no_parent_and_ancestor_depths_are_checked() -> None:
    root = TreeId(0, 0, 0)
    with pytest.raises(LocalProtocolError):
        root.parent()
    node = TreeId(0, 3, 0b101)
    with pytest.raises(LocalProtocolError):
        node.ancestor(4)
    with pytest.raises(LocalProtocolError):
        node.ancestor(-1)
    assert repr(root) == "TreeId(0:root)"
    assert repr(node) == "TreeId(0:101)"


def test_identifier_is_schema_attribute_and_bits() -> None:
    space = AttributeSpace("thesis", "Attr1", 0, 0, 10_000)
    assert space.identifier(space.root) == "thesis/Attr1/"
    assert space.identifier(space.root.child(0).child(1)) == "thesis/Attr1/01"


def test_empty_domain_is_rejected() -> None:
    with pytest.raises(LocalProtocolError):
        AttributeSpace("s", "a", 0, 5.0, 5.0)
    with pytest.raises(LocalProtocolError):
        AttributeSpace("s", "a", 0, 6.0, 5.0)


# ----------------------------------------------------------------------------- zones


def test_root_zone_is_the_closed_square() -> None:
    space = AttributeSpace("s", "a", 0, -3.0, 7.0)
    z = space.zone(space.root)
    assert (z.x_lo, z.x_hi, z.y_lo, z.y_hi, z.x_top, z.y_top) == (-3, 7, -3, 7, True, True)
    for x, y in itertools.product([-3.0, 2.0, 7.0], repeat=2):
        assert z.contains(x, y)
    assert not z.contains(7.000001, 0.0)
    assert not z.contains(0.0, -3.1)


def test_split_axis_alternates_starting_with_x_and_mid_goes_up() -> None:
    space = AttributeSpace("s", "a", 0, 0.0, 8.0)
    root = space.root
    assert space.split_axis_is_x(root)
    assert space.split_mid(root) == 4.0
    assert space.child_for(root, 4.0, 0.0) == root.child(1)  # x == mid: upper half
    assert space.child_for(root, 3.999, 8.0) == root.child(0)
    one = root.child(1)
    assert not space.split_axis_is_x(one)
    assert space.split_mid(one) == 4.0
    assert space.child_for(one, 8.0, 4.0) == one.child(1)
    assert space.child_for(one, 8.0, 3.0) == one.child(0)
    z = space.zone(one.child(0))
    assert (z.x_lo, z.x_hi, z.y_lo, z.y_hi, z.x_top, z.y_top) == (4, 8, 0, 4, True, False)


@MANY
@given(data=st.data(), space=spaces())
def test_children_partition_the_parents_zone(data: st.DataObject, space: AttributeSpace) -> None:
    tid = data.draw(tree_ids(space.index, MAX_DEPTH - 1), label="tid")
    parent = space.zone(tid)
    lo, hi = space.zone(tid.child(0)), space.zone(tid.child(1))
    mid = space.split_mid(tid)
    # Structure: the split line is shared, the other axis is inherited, only the upper half
    # keeps the parent's inclusive top.
    if space.split_axis_is_x(tid):
        assert (lo.x_lo, lo.x_hi, hi.x_lo, hi.x_hi) == (parent.x_lo, mid, mid, parent.x_hi)
        assert not lo.x_top and hi.x_top == parent.x_top
        for z in (lo, hi):
            assert (z.y_lo, z.y_hi, z.y_top) == (parent.y_lo, parent.y_hi, parent.y_top)
    else:
        assert (lo.y_lo, lo.y_hi, hi.y_lo, hi.y_hi) == (parent.y_lo, mid, mid, parent.y_hi)
        assert not lo.y_top and hi.y_top == parent.y_top
        for z in (lo, hi):
            assert (z.x_lo, z.x_hi, z.x_top) == (parent.x_lo, parent.x_hi, parent.x_top)
    # Points: the parent's grid (corners, the split line, the far edges) plus random ones.
    points = grid(parent, 4)
    points += [(mid, mid), (parent.x_hi, parent.y_hi), (parent.x_lo, parent.y_lo)]
    for _ in range(4):
        points.append(
            (
                data.draw(st.floats(parent.x_lo, parent.x_hi), label="x"),
                data.draw(st.floats(parent.y_lo, parent.y_hi), label="y"),
            )
        )
    for x, y in points:
        inside = [lo.contains(x, y), hi.contains(x, y)]
        if parent.contains(x, y):
            assert inside.count(True) == 1, (x, y, tid)
            assert space.child_for(tid, x, y) == tid.child(inside.index(True))
        else:
            assert inside == [False, False], (x, y, tid)


@MANY
@given(data=st.data(), space=spaces(), depth=st.integers(0, MAX_DEPTH))
def test_locate_finds_the_zone_holding_the_point_consistently_with_child_for(
    data: st.DataObject, space: AttributeSpace, depth: int
) -> None:
    x = data.draw(coords(space), label="x")
    y = data.draw(coords(space), label="y")
    tid = space.locate(x, y, depth)
    assert tid.depth == depth and tid.attr == space.index
    assert space.zone(tid).contains(x, y)
    walk = space.root
    for d in range(depth):
        assert space.locate(x, y, d) == walk == tid.ancestor(d)
        assert space.zone(walk).contains(x, y)
        walk = space.child_for(walk, x, y)
    assert walk == tid


@MANY
@given(data=st.data(), space=spaces())
def test_every_point_lies_in_exactly_one_zone_per_depth(
    data: st.DataObject, space: AttributeSpace
) -> None:
    depth = data.draw(st.integers(0, 6), label="depth")
    x = data.draw(coords(space), label="x")
    y = data.draw(coords(space), label="y")
    holders = [
        TreeId(space.index, depth, p)
        for p in range(1 << depth)
        if space.zone(TreeId(space.index, depth, p)).contains(x, y)
    ]
    assert holders == [space.locate(x, y, depth)]


@given(data=st.data(), space=spaces())
def test_the_lower_left_corner_of_a_zone_locates_to_it(
    data: st.DataObject, space: AttributeSpace
) -> None:
    tid = data.draw(tree_ids(space.index, 24), label="tid")
    z = space.zone(tid)
    assume(z.x_lo < z.x_hi and z.y_lo < z.y_hi)  # not collapsed by float rounding
    assert z.contains(z.x_lo, z.y_lo)
    assert space.locate(z.x_lo, z.y_lo, tid.depth) == tid
    if z.x_top and z.y_top:
        assert space.locate(z.x_hi, z.y_hi, tid.depth) == tid


def test_locate_rejects_points_outside_the_square() -> None:
    space = AttributeSpace("s", "a", 0, 0.0, 10.0)
    for x, y in ((-1.0, 5.0), (5.0, 10.5), (math.nan, 1.0)):
        with pytest.raises(LocalProtocolError):
            space.locate(x, y, 3)


def test_has_triangle() -> None:
    space = AttributeSpace("s", "a", 0, 0.0, 8.0)
    root = space.root
    assert space.zone(root).has_triangle()
    # x in [4, 8], y in [0, 4): touches the diagonal only at its open corner (4, 4), which the
    # closed test counts (a spare probe at worst).
    assert space.zone(root.child(1).child(0)).has_triangle()
    below = root.child(1).child(0).child(1).child(0)  # x in [6, 8], y in [0, 2): under it
    assert not space.zone(below).has_triangle()
    assert space.zone(root.child(0).child(1)).has_triangle()


# --------------------------------------------------------------------- target regions


def values_and_cutoffs(space: AttributeSpace) -> st.SearchStrategy[tuple[float | None, ...]]:
    width = space.max - space.min
    value = st.one_of(st.none(), coords(space))
    cutoff = st.one_of(
        st.none(),
        st.sampled_from([0.0, width * 0.1, width / 16, width]),
        st.floats(0.0, width),
    )
    return st.tuples(value, cutoff)


@MANY
@given(data=st.data(), space=spaces())
def test_zone_overlaps_never_misses_a_point_of_the_region(
    data: st.DataObject, space: AttributeSpace
) -> None:
    tid = data.draw(tree_ids(space.index, 16), label="tid")
    value, cutoff = data.draw(values_and_cutoffs(space), label="value, cutoff")
    zone = space.zone(tid)
    points = grid(zone, 6)
    # Points on the region's own edges inside the zone: where misses would hide.
    if value is not None:
        for x, y in list(points):
            points += [(min(max(value, zone.x_lo), zone.x_hi), y)]
            points += [(x, min(max(value, zone.y_lo), zone.y_hi))]
        if cutoff is not None:
            points += [(value, value + cutoff), (value - cutoff, value)]
    if cutoff is not None:
        for x, _ in list(points):
            points.append((x, min(max(x + cutoff, zone.y_lo), zone.y_hi)))
    hit = [
        (x, y)
        for x, y in points
        if zone.x_lo <= x <= zone.x_hi
        and zone.y_lo <= y <= zone.y_hi
        and y >= x
        and point_in_region(x, y, value, cutoff)
    ]
    if hit:
        assert zone_overlaps(zone, value, cutoff), (zone, value, cutoff, hit[:3])


@MANY
@given(data=st.data(), space=spaces())
def test_zone_overlaps_is_true_for_every_zone_holding_a_region_point(
    data: st.DataObject, space: AttributeSpace
) -> None:
    """The converse direction of the search: take a point of the region, then every zone on
    its path from the root must overlap (so BFS from the root reaches the leaf holding it)."""
    value, cutoff = data.draw(values_and_cutoffs(space), label="value, cutoff")
    x = data.draw(coords(space), label="x")
    y = data.draw(coords(space), label="y")
    x, y = min(x, y), max(x, y)
    if value is not None:
        x, y = min(x, value), max(y, value)
    if cutoff is not None:
        assume(y - x <= cutoff)
    assert point_in_region(x, y, value, cutoff)
    for depth in range(0, 40, 3):
        tid = space.locate(x, y, depth)
        assert zone_overlaps(space.zone(tid), value, cutoff), (depth, x, y, value, cutoff)


def test_zone_overlaps_rejects_the_quadrants_outside_the_region() -> None:
    space = AttributeSpace("s", "a", 0, 0.0, 8.0)
    root = space.root
    lower_right = root.child(1).child(0).child(1).child(0)  # x >= 6, y < 2: under the diagonal
    assert not zone_overlaps(space.zone(lower_right), None, None)
    assert not zone_overlaps(space.zone(lower_right), 6.0, None)
    assert not zone_overlaps(space.zone(root.child(0).child(0)), 6.0, None)  # y < 4 < 6
    assert not zone_overlaps(space.zone(root.child(1).child(1)), 2.0, None)  # x >= 4 > 2
    # Upper-left quadrant x in [0, 4), y in [4, 8]: the band y - x <= 1 touches it only near
    # (4, 4), which the closed test counts; its lower-left eighth x in [0, 2) does not.
    assert zone_overlaps(space.zone(root.child(0).child(1)), None, 1.0)
    assert not zone_overlaps(space.zone(root.child(0).child(1).child(0)), None, 1.0)


@given(data=st.data(), space=spaces())
def test_zone_overlaps_rejects_zones_clearly_outside_the_region(
    data: st.DataObject, space: AttributeSpace
) -> None:
    """Not a requirement of correctness (spurious probes are allowed) but of usefulness: a zone
    whose closed rectangle is strictly away from the region is not probed."""
    tid = data.draw(tree_ids(space.index, 12), label="tid")
    value, cutoff = data.draw(values_and_cutoffs(space), label="value, cutoff")
    z = space.zone(tid)
    if value is not None and (z.x_lo > value or z.y_hi < value):
        assert not zone_overlaps(z, value, cutoff)
    if z.y_hi < z.x_lo:
        assert not zone_overlaps(z, None, cutoff)
    if cutoff is not None and z.y_lo - z.x_hi > cutoff:
        assert not zone_overlaps(z, value, cutoff)


@MANY
@given(
    x=st.floats(-1e6, 1e6),
    y=st.floats(-1e6, 1e6),
    value=st.one_of(st.none(), st.floats(-1e6, 1e6)),
    cutoff=st.one_of(st.none(), st.floats(0, 1e6)),
)
def test_point_in_region_is_the_exact_region_test(
    x: float, y: float, value: float | None, cutoff: float | None
) -> None:
    expected = (value is None or x <= value <= y) and (cutoff is None or y - x <= cutoff)
    assert point_in_region(x, y, value, cutoff) == expected


def test_point_in_region_bounds_are_inclusive() -> None:
    assert point_in_region(5.0, 5.0, 5.0, None)
    assert point_in_region(3.0, 5.0, 3.0, 2.0)
    assert point_in_region(3.0, 5.0, 5.0, 2.0)
    assert not point_in_region(3.0, 5.0, 5.0, 1.999)
    assert not point_in_region(3.0, 5.0, 5.0001, None)
    assert point_in_region(3.0, 50.0, None, None)
    assert not point_in_region(3.0, 50.0, None, 10.0)
