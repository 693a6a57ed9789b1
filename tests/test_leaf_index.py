"""Properties of a leaf's subscription index and an internal node's leaf table (``pubsub.tree``):

* ``LeafIndex.match`` (sorted-by-x candidates) agrees with ``linear_match`` (the plain scan) for
  any stored pieces and any event, strict or lenient, with or without a cut-off;
* ``stored_matches`` is ``Subscription.matches`` for a whole-range piece, and the pieces of a
  load-balanced subscription together match exactly when the subscription does, exactly once;
* ``LeafTable`` (the LeafNodeRoutingTable) refined by split updates in any arrival order."""

from __future__ import annotations

import importlib
import itertools
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from hypothesis import Phase, assume, given, settings
from hypothesis import strategies as st

from rangecast.dht.wire import Handle
from rangecast.pubsub.space import AttributeSpace, TreeId
from rangecast.pubsub.subscription import Range, Subscription

if TYPE_CHECKING:
    from rangecast.pubsub.messages import Pred, StoredSub


class _Lazy:
    """A module imported on first use, at test time rather than at collection time.

    ``pubsub.tree`` imports ``pubsub.messages``, which registers the overlay's wire types, and
    this file is collected before ``tests/test_node_inputs.py``, whose fuzz strategies are built
    at import time from every registered message type and cover only the DHT's field types."""

    def __init__(self, name: str, *names: str) -> None:
        self._name = name
        self._names = frozenset(names)

    def __getattr__(self, attr: str) -> Any:
        if attr not in self._names:  # pytest probes module attributes while collecting
            raise AttributeError(attr)
        module: ModuleType = importlib.import_module(self._name)
        return getattr(module, attr)


pubsub_tree = _Lazy("rangecast.pubsub.tree", "LeafIndex", "LeafTable", "TreeNode", "stored_matches")
pubsub_messages = _Lazy("rangecast.pubsub.messages", "Pred", "StoredSub")

_BASE_EXAMPLES = settings().max_examples
MANY = settings(max_examples=max(50, _BASE_EXAMPLES * 3))
N_ATTRS = 4

# ----------------------------------------------------------------------------- strategies

#: A small grid of values, so that events hit range ends and stored points exactly.
grid_values = st.one_of(
    st.integers(0, 20).map(float),
    st.floats(0.0, 20.0, allow_nan=False),
)
event_values = st.lists(st.one_of(st.none(), grid_values), min_size=N_ATTRS, max_size=N_ATTRS)
cutoffs = st.one_of(st.none(), st.sampled_from([0.0, 1.0, 2.5, 5.0]), st.floats(0.0, 20.0))


def handle(n: int) -> Handle:
    return Handle(n.to_bytes(20, "big"), (n % 256).to_bytes(4, "big") + b"\x0f\xa0")


@st.composite
def ranges(draw: st.DrawFn) -> Range:
    a = draw(grid_values)
    b = draw(grid_values)
    lo, hi = min(a, b), max(a, b)
    lo_open = draw(st.booleans()) if lo < hi else False
    hi_open = draw(st.booleans()) if lo < hi else False
    r = Range(lo, hi, lo_open, hi_open)
    assume(not r.is_empty())
    return r


@st.composite
def subscriptions(draw: st.DrawFn) -> Subscription:
    attrs = draw(st.lists(st.integers(0, N_ATTRS - 1), min_size=1, max_size=N_ATTRS, unique=True))
    return Subscription("s", tuple((i, draw(ranges())) for i in sorted(attrs)))


def preds_of(sub: Subscription) -> list[Pred]:
    return [
        pubsub_messages.Pred(i, r.lo, r.hi, (1 if r.lo_open else 0) | (2 if r.hi_open else 0))
        for i, r in sub.ranges
    ]


def pieces_of(
    sub: Subscription, base: int, cuts: Sequence[float], owner: int, sid: int, gen: int = 0
) -> list[StoredSub]:
    """The load-balancing pieces of ``sub`` on ``base`` at the (sorted) cut points, placed at
    their own range (no widening): ``[lo, c1), [c1, c2), ..., [ck, hi]``."""
    r = sub.range_of(base)
    assert r is not None
    bounds = [r.lo, *sorted(c for c in cuts if r.lo <= c <= r.hi), r.hi]
    n = len(bounds) - 1
    return [
        pubsub_messages.StoredSub(
            handle(owner),
            sid,
            gen,
            preds_of(sub),
            base,
            k,
            n,
            bounds[k],
            bounds[k + 1],
            bounds[k],
            bounds[k + 1],
        )
        for k in range(n)
    ]


@st.composite
def stored_pieces(draw: st.DrawFn, owner: int, sid: int) -> list[StoredSub]:
    """The pieces one subscription leaves at a leaf: a whole range or several load-balancing
    pieces, at points that may be widened a little (so ``x``/``y`` differ from the range)."""
    sub = draw(subscriptions())
    base = draw(st.sampled_from(sub.attributes()))
    cuts = draw(st.lists(grid_values, max_size=3))
    pieces = pieces_of(sub, base, cuts, owner, sid, draw(st.integers(0, 3)))
    out = []
    for p in pieces:
        ex = draw(st.sampled_from([0.0, 0.0, 0.25, 1.0]))
        ey = draw(st.sampled_from([0.0, 0.0, 0.5, 1.0]))
        out.append(
            pubsub_messages.StoredSub(
                p.subscriber,
                p.sid,
                p.gen,
                p.preds,
                p.base,
                p.piece,
                p.pieces,
                p.piece_lo,
                p.piece_hi,
                p.x - ex,
                p.y + ey,
            )
        )
    # A leaf holds only some pieces of a subscription (its neighbours hold the others).
    keep = draw(st.lists(st.booleans(), min_size=len(out), max_size=len(out)))
    return [p for p, k in zip(out, keep, strict=True) if k] or out[:1]


@st.composite
def leaf_contents(draw: st.DrawFn, max_subs: int = 12) -> list[StoredSub]:
    n = draw(st.integers(0, max_subs))
    out: list[StoredSub] = []
    for k in range(n):
        out += draw(stored_pieces(owner=draw(st.integers(1, 4)), sid=k + 1))
    return out


def key(s: StoredSub) -> tuple[bytes, int, int, int]:
    return (s.subscriber.id, s.sid, s.gen, s.piece)


def keys(found: Sequence[StoredSub]) -> list[tuple[bytes, int, int, int]]:
    return sorted(key(s) for s in found)


# ------------------------------------------------------------------------- LeafIndex.match


@MANY
@given(
    entries=leaf_contents(),
    values=event_values,
    attr=st.integers(0, N_ATTRS - 1),
    cutoff=cutoffs,
    strict=st.booleans(),
)
def test_indexed_match_equals_the_linear_scan(
    entries: list[StoredSub],
    values: list[float | None],
    attr: int,
    cutoff: float | None,
    strict: bool,
) -> None:
    index = pubsub_tree.LeafIndex(entries)
    fast = index.match(values, attr, cutoff, strict)
    slow = index.linear_match(values, attr, cutoff, strict)
    # The same pieces in the same order: the order decides the order of the notifications.
    assert [key(s) for s in fast] == [key(s) for s in slow]
    assert len(fast) == len({key(s) for s in fast})  # no piece twice
    # And both are what their definition says.
    v = values[attr]
    for s in index:
        in_region = (v is None or s.x <= v <= s.y) and (cutoff is None or s.y - s.x <= cutoff)
        expected = in_region and pubsub_tree.stored_matches(s, values, strict)
        assert (key(s) in set(keys(fast))) == expected


@given(entries=leaf_contents(), values=event_values, attr=st.integers(0, N_ATTRS - 1))
def test_short_events_count_trailing_attributes_as_missing(
    entries: list[StoredSub], values: list[float | None], attr: int
) -> None:
    """An event published before attributes were appended to the schema is shorter."""
    short = values[: attr + 1]
    padded = short + [None] * (N_ATTRS - len(short))
    index = pubsub_tree.LeafIndex(entries)
    for strict in (True, False):
        for cutoff in (None, 3.0):
            assert keys(index.match(short, attr, cutoff, strict)) == keys(
                index.match(padded, attr, cutoff, strict)
            )
            assert keys(index.match(short, attr, cutoff, strict)) == keys(
                index.linear_match(short, attr, cutoff, strict)
            )


@given(entries=leaf_contents(max_subs=6))
def test_an_event_with_every_value_absent(
    entries: list[StoredSub],
) -> None:
    index = pubsub_tree.LeafIndex(entries)
    # Strict, everything absent: every subscription has a predicate, which fails.
    assert index.match([None] * N_ATTRS, 0, None, True) == []
    # Lenient, everything absent: every piece 0 matches (a subscription hears of it once).
    lenient = index.match([None] * N_ATTRS, 0, None, False)
    assert keys(lenient) == keys([s for s in index if s.piece == 0 or s.pieces == 1])


# -------------------------------------------------------------------------- bookkeeping


@MANY
@given(
    ops=st.lists(
        st.tuples(st.booleans(), st.integers(1, 3), st.integers(1, 4), st.integers(0, 2)),
        max_size=40,
    ),
    xs=st.lists(grid_values, min_size=1, max_size=5),
)
def test_add_and_remove_keep_the_index_consistent(
    ops: list[tuple[bool, int, int, int]], xs: list[float]
) -> None:
    index = pubsub_tree.LeafIndex()
    model: dict[tuple[bytes, int, int, int], StoredSub] = {}
    sub = Subscription("s", ((0, Range(1.0, 2.0)),))
    for n, (is_add, owner, sid, piece) in enumerate(ops):
        x = xs[n % len(xs)]
        s = pubsub_messages.StoredSub(
            handle(owner), sid, 0, preds_of(sub), 0, piece, 3, 0.0, 1.0, x, x + 1.0
        )
        k = key(s)
        if is_add:
            assert index.add(s) == (k not in model)
            model.setdefault(k, s)
        else:
            assert index.remove(s.subscriber.id, sid, 0, piece) == (k in model)
            model.pop(k, None)
        assert len(index) == len(model)
        listed = list(index)
        assert sorted(map(key, listed)) == sorted(model)
        assert [s.x for s in listed] == sorted(s.x for s in listed)
        # A retried insert keeps the first copy.
        for s in listed:
            assert s is model[key(s)]


def test_a_retried_insert_is_ignored_and_removal_of_an_absent_piece_is_reported() -> None:
    sub = Subscription("s", ((0, Range(1.0, 2.0)),))
    s = pubsub_messages.StoredSub(handle(1), 7, 0, preds_of(sub), 0, 0, 1, 1.0, 2.0, 1.0, 2.0)
    index = pubsub_tree.LeafIndex([s, s])
    assert len(index) == 1
    assert not index.add(s)
    assert not index.remove(s.subscriber.id, 7, 1, 0)  # other generation
    assert not index.remove(s.subscriber.id, 7, 0, 1)  # other piece
    assert index.remove(s.subscriber.id, 7, 0, 0)
    assert len(index) == 0 and list(index) == []
    assert not index.remove(s.subscriber.id, 7, 0, 0)


# ---------------------------------------------------------------------- stored_matches


@MANY
@given(sub=subscriptions(), values=event_values, base_pick=st.integers(0, 3))
def test_a_whole_range_piece_matches_as_its_subscription_does(
    sub: Subscription, values: list[float | None], base_pick: int
) -> None:
    base = sub.attributes()[base_pick % len(sub.attributes())]
    (piece,) = pieces_of(sub, base, [], owner=1, sid=1)
    assert piece.pieces == 1
    for partial in ("strict", "lenient"):
        assert pubsub_tree.stored_matches(piece, values, partial == "strict") == sub.matches(
            values, partial
        )
        short = values[:2]
        assert pubsub_tree.stored_matches(piece, short, partial == "strict") == sub.matches(
            short, partial
        )


@MANY
@given(
    sub=subscriptions(),
    values=event_values,
    base_pick=st.integers(0, 3),
    cuts=st.lists(grid_values, min_size=1, max_size=5),
)
def test_load_balancing_pieces_match_exactly_once_when_the_subscription_does(
    sub: Subscription,
    values: list[float | None],
    base_pick: int,
    cuts: list[float],
) -> None:
    """The pieces partition the base range (SPEC 8), so an event is matched by one piece at
    most: no duplicate notification; with the base value absent (lenient) piece 0 stands for
    them all."""
    base = sub.attributes()[base_pick % len(sub.attributes())]
    r = sub.range_of(base)
    assert r is not None
    inner = [c for c in cuts if r.lo <= c <= r.hi]
    pieces = pieces_of(sub, base, [*inner, r.lo, r.hi], owner=1, sid=1)
    for partial in ("strict", "lenient"):
        strict = partial == "strict"
        hits = [p.piece for p in pieces if pubsub_tree.stored_matches(p, values, strict)]
        assert len(hits) == (1 if sub.matches(values, partial) else 0), (hits, pieces)
        if hits and values[base] is None:
            assert hits == [0]
        if hits and values[base] is not None:
            p = pieces[hits[0]]
            assert p.piece_lo <= values[base] <= p.piece_hi


def test_piece_boundaries_go_to_the_upper_piece_except_the_last() -> None:
    sub = Subscription("s", ((0, Range(0.0, 10.0)),))
    pieces = pieces_of(sub, 0, [4.0, 8.0], owner=1, sid=1)
    assert [(p.piece_lo, p.piece_hi) for p in pieces] == [(0, 4), (4, 8), (8, 10)]
    for v, piece in ((0.0, 0), (3.9, 0), (4.0, 1), (8.0, 2), (10.0, 2)):
        assert [p.piece for p in pieces if pubsub_tree.stored_matches(p, [v], True)] == [piece]
    assert [p.piece for p in pieces if pubsub_tree.stored_matches(p, [10.5], True)] == []


# --------------------------------------------------------------------------- LeafTable


SPACE = AttributeSpace("s", "a", 0, 0.0, 64.0)


@st.composite
def subtrees(draw: st.DrawFn, max_splits: int = 12) -> tuple[TreeId, list[TreeId]]:
    """A holder and the splits below it, in the order they happened (a parent before its
    children): each split turns a current leaf into an internal node."""
    holder = draw(st.sampled_from([SPACE.root, SPACE.root.child(1), TreeId(0, 3, 0b011)]))
    leaves = [holder.child(0), holder.child(1)]
    splits: list[TreeId] = []
    for _ in range(draw(st.integers(0, max_splits))):
        leaf = leaves.pop(draw(st.integers(0, len(leaves) - 1)))
        splits.append(leaf)
        leaves += [leaf.child(0), leaf.child(1)]
    return holder, splits


def leaves_of(holder: TreeId, splits: Sequence[TreeId]) -> set[TreeId]:
    internal = {holder, *splits}
    return {c for n in internal for c in (n.child(0), n.child(1)) if c not in internal}


def sample_points(holder: TreeId) -> list[tuple[float, float]]:
    z = SPACE.zone(holder)
    n = 16
    xs = [z.x_lo + (z.x_hi - z.x_lo) * (k + 0.5) / n for k in range(n)] + [z.x_lo]
    ys = [z.y_lo + (z.y_hi - z.y_lo) * (k + 0.5) / n for k in range(n)] + [z.y_lo]
    return list(itertools.product(xs, ys))


def deepest_containing(rows: Sequence[TreeId], x: float, y: float) -> list[TreeId]:
    holding = [r for r in rows if SPACE.zone(r).contains(x, y)]
    if not holding:
        return []
    best = max(r.depth for r in holding)
    return [r for r in holding if r.depth == best]


@MANY
@given(tree=subtrees(), order=st.randoms(use_true_random=False), dups=st.integers(0, 3))
def test_leaf_table_converges_to_the_leaves_under_any_arrival_order(
    tree: tuple[TreeId, list[TreeId]], order: object, dups: int
) -> None:
    """Whatever order the split updates arrive in (and with repeats), once all have arrived the
    rows are exactly the leaves below the holder: an antichain covering its zone."""
    holder, splits = tree
    arrivals = list(splits) + [splits[k % len(splits)] for k in range(dups)] if splits else []
    order.shuffle(arrivals)  # type: ignore[attr-defined]
    table = pubsub_tree.LeafTable((holder.child(0), holder.child(1)))
    for s in arrivals:
        table.apply_split(s)
        for r in table.rows:
            assert holder.is_ancestor_of(r) and r != holder
    assert set(table.rows) == leaves_of(holder, splits)
    for a, b in itertools.permutations(table.rows, 2):
        assert not a.is_ancestor_of(b)
    for x, y in sample_points(holder):
        found = table.locate(SPACE, x, y)
        assert found is not None and SPACE.zone(found).contains(x, y)
    # Repeating any update now changes nothing.
    for s in splits:
        assert not table.apply_split(s)
    assert set(table.rows) == leaves_of(holder, splits)


@MANY
@given(tree=subtrees())
def test_leaf_table_in_causal_order_is_always_the_current_leaves(
    tree: tuple[TreeId, list[TreeId]],
) -> None:
    holder, splits = tree
    table = pubsub_tree.LeafTable((holder.child(0), holder.child(1)))
    for k, s in enumerate(splits):
        assert table.apply_split(s)
        assert set(table.rows) == leaves_of(holder, splits[: k + 1])


@MANY
@given(tree=subtrees(), order=st.randoms(use_true_random=False))
def test_leaf_table_locate_returns_the_deepest_row_holding_the_point(
    tree: tuple[TreeId, list[TreeId]], order: object
) -> None:
    holder, splits = tree
    arrivals = list(splits)
    order.shuffle(arrivals)  # type: ignore[attr-defined]
    table = pubsub_tree.LeafTable((holder.child(0), holder.child(1)))
    for s in arrivals:
        table.apply_split(s)
        for x, y in sample_points(holder)[::7]:
            found = table.locate(SPACE, x, y)
            best = deepest_containing(list(table.rows), x, y)
            if best:
                assert found in best
            else:
                assert found is None


#: The LeafTable coverage bug (see the two tests below and the report): ``apply_split`` skips a
#: child when some row lies below it, but that row may cover only part of the child's zone.
COVERAGE_BUG = (
    "pubsub/tree.py LeafTable.apply_split: a child is skipped when a deeper row lies below it, "
    "but that row may cover only part of the child's zone; after an overtaking update the rows "
    "no longer cover the holder's zone, so locate() returns None (the ProbeSub is dropped as "
    "malformed) and overlapping() misses the gap (events are lost)"
)


@settings(
    max_examples=max(50, _BASE_EXAMPLES * 3),
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # a known failure: skip shrinking
)
@given(tree=subtrees(), order=st.randoms(use_true_random=False))
def test_leaf_table_rows_cover_the_holders_zone_after_every_update(
    tree: tuple[TreeId, list[TreeId]], order: object
) -> None:
    """Soft state may be stale (extra hops) but must never lose part of the zone: every point
    of the holder's zone lies in some row at every moment, whatever the arrival order."""
    holder, splits = tree
    arrivals = list(splits)
    order.shuffle(arrivals)  # type: ignore[attr-defined]
    table = pubsub_tree.LeafTable((holder.child(0), holder.child(1)))
    for s in arrivals:
        table.apply_split(s)
        for x, y in sample_points(holder):
            assert table.locate(SPACE, x, y) is not None, (arrivals, s, x, y)


def test_leaf_table_has_no_gap_after_an_overtaking_update() -> None:
    """Minimal reproduction: the root's table gets the update of a great-grandchild split
    before those of its grandparent and parent (they travel different routes)."""
    root = SPACE.root
    n0 = root.child(0)
    n01 = n0.child(1)
    table = pubsub_tree.LeafTable((root.child(0), root.child(1)))
    table.apply_split(n01.child(0))  # the deepest update overtakes ...
    table.apply_split(n0)  # ... that of n0; n01's own update is still on its way
    gap = SPACE.zone(n01.child(1))  # x in [16, 32), y in [32, 64]: now in no row at all
    x, y = (gap.x_lo + gap.x_hi) / 2, (gap.y_lo + gap.y_hi) / 2
    found = table.locate(SPACE, x, y)
    probed = [r for r in table.overlapping(SPACE, root, x, None) if SPACE.zone(r).contains(x, y)]
    table.apply_split(n01)  # the late update closes the gap
    assert table.locate(SPACE, x, y) == n01.child(1)
    assert found is not None, f"rows {sorted(table.rows, key=repr)} leave ({x}, {y}) uncovered"
    assert probed


@given(tree=subtrees(max_splits=8), value=st.one_of(st.none(), st.floats(0.0, 64.0)))
def test_leaf_table_overlapping_finds_every_leaf_meeting_the_region(
    tree: tuple[TreeId, list[TreeId]], value: float | None
) -> None:
    holder, splits = tree
    table = pubsub_tree.LeafTable((holder.child(0), holder.child(1)))
    for s in splits:
        table.apply_split(s)
    for cutoff in (None, 8.0):
        found = set(table.overlapping(SPACE, holder, value, cutoff))
        assert found <= set(table.rows)
        for leaf in leaves_of(holder, splits):
            z = SPACE.zone(leaf)
            pts = [
                (x, y)
                for x, y in itertools.product(
                    [z.x_lo, (z.x_lo + z.x_hi) / 2, z.x_hi], [z.y_lo, (z.y_lo + z.y_hi) / 2, z.y_hi]
                )
                if y >= x
                and (value is None or x <= value <= y)
                and (cutoff is None or y - x <= cutoff)
            ]
            if pts:
                assert leaf in found
        # A narrower scope: only rows inside it (or holding it).
        scope = holder.child(1)
        for r in table.overlapping(SPACE, scope, value, cutoff):
            assert scope.is_ancestor_of(r) or r.is_ancestor_of(scope)


# ---------------------------------------------------------------------------- TreeNode


def test_tree_node_becomes_internal_and_remembers_events_once() -> None:
    tid = SPACE.root.child(1)
    node = pubsub_tree.TreeNode(tid)
    assert node.is_leaf and node.index is not None and node.table is None
    assert node.remember(5, 1.0, 10.0)
    assert not node.remember(5, 2.0, 10.0)
    node.become_internal()
    assert not node.is_leaf and node.index is None
    assert node.table is not None and set(node.table.rows) == {tid.child(0), tid.child(1)}
    assert node.seen == {}


def test_tree_node_forgets_events_past_the_window() -> None:
    node = pubsub_tree.TreeNode(SPACE.root)
    for eid in range(255):
        assert node.remember(eid, 0.0, 10.0)
    assert node.remember(1000, 100.0, 10.0)  # the 256th triggers the sweep
    assert 0 not in node.seen and 1000 in node.seen
    assert node.remember(0, 100.0, 10.0)
