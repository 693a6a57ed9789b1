"""Tests for dht.routing: the leaf set and the prefix routing table, against brute force."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rangecast.dht.ids import DEFAULT_SPACE, IdSpace
from rangecast.dht.routing import LeafSet, Peer, RoutingTable, closest_of

#: A tiny ring makes ties, wrap-around and full sides common; the default one is the real shape.
TINY = IdSpace(bits=8, b=4)
SMALL = IdSpace(bits=16, b=2)
SPACES = st.sampled_from([TINY, SMALL, DEFAULT_SPACE])


def peer(space: IdSpace, ident: int) -> Peer:
    return Peer.make(space, ident, b"addr" + ident.to_bytes(space.nbytes, "big"))


def ids_in(space: IdSpace) -> st.SearchStrategy[int]:
    return st.integers(min_value=0, max_value=space.size - 1)


def expected_sides(space: IdSpace, own: int, present: set[int], half: int):
    others = [i for i in present if i != own]
    right = sorted(others, key=lambda i: space.cw(own, i))[:half]
    left = sorted(others, key=lambda i: space.ccw(own, i))[:half]
    return left, right


def brute_closest(space: IdSpace, key: int, candidates: set[int]) -> int:
    return min(candidates, key=lambda i: (space.distance(i, key), i))


def check_structure(ls: LeafSet) -> None:
    """Invariants that hold after any sequence of operations."""
    space, own, half = ls.space, ls.own, ls.half
    left = [p.id for p in ls.left]
    right = [p.id for p in ls.right]
    assert len(left) <= half and len(right) <= half
    assert own not in left and own not in right and own not in ls
    assert len(set(left)) == len(left) and len(set(right)) == len(right)
    cw = [space.cw(own, i) for i in right]
    ccw = [space.ccw(own, i) for i in left]
    assert cw == sorted(cw) and ccw == sorted(ccw)  # nearest first
    members = [p.id for p in ls.members()]
    assert sorted(members) == sorted(set(left) | set(right))
    assert len(ls) == len(members)
    for i in members:
        assert ls.get(i) is not None and ls.get(i).id == i
        assert ls.side_of(i) == (i in left, i in right)
    overlap = len(set(left) & set(right)) > 0
    assert ls.wraps == (len(left) < half or len(right) < half or overlap)


# --------------------------------------------------------------------------------- leaf set


@st.composite
def leafset_case(draw: st.DrawFn, removals: bool):
    space = draw(SPACES, label="space")
    half = draw(st.integers(min_value=1, max_value=6), label="half")
    own = draw(ids_in(space), label="own")
    # Ids cluster near ``own`` sometimes, so both sides fill and overflow.
    near = st.integers(min_value=-3 * half, max_value=3 * half).map(
        lambda d: (own + d) % space.size
    )
    ident = st.one_of(ids_in(space), near)
    if removals:
        op = st.tuples(st.sampled_from(["add", "add", "remove"]), ident)
    else:
        op = st.tuples(st.just("add"), ident)
    ops = draw(st.lists(op, max_size=40), label="ops")
    return space, half, own, ops


@given(case=leafset_case(removals=False), data=st.data())
def test_leafset_equals_brute_force_for_pure_additions(case, data: st.DataObject) -> None:
    space, half, own, ops = case
    ls = LeafSet(space, own, half)
    present: set[int] = set()
    for _, ident in ops:
        before = {p.id for p in ls.members()}
        entered, evicted = ls.add(peer(space, ident))
        if ident != own:
            present.add(ident)
        left, right = expected_sides(space, own, present, half)
        assert [p.id for p in ls.left] == left
        assert [p.id for p in ls.right] == right
        after = {p.id for p in ls.members()}
        assert entered == (ident in after and ident not in before)
        assert {p.id for p in evicted} == before - after
        check_structure(ls)
    assert ls.wraps == (len(present) < 2 * half)
    # A leaf that fails and comes back takes its old place again.
    for ident in data.draw(
        st.lists(st.sampled_from(sorted(present)), max_size=3) if present else st.just([]),
        label="bounce",
    ):
        left, right = [p.id for p in ls.left], [p.id for p in ls.right]
        ls.remove(ident)
        ls.add(peer(space, ident))
        assert ([p.id for p in ls.left], [p.id for p in ls.right]) == (left, right)


@given(case=leafset_case(removals=True))
def test_leafset_invariants_under_additions_and_removals(case) -> None:
    space, half, own, ops = case
    ls = LeafSet(space, own, half)
    present: set[int] = set()
    for op, ident in ops:
        if op == "add":
            ls.add(peer(space, ident))
            if ident != own:
                present.add(ident)
        else:
            was = ident in ls
            assert ls.remove(ident) == was
            assert ident not in ls
            present.discard(ident)
        check_structure(ls)
        assert {p.id for p in ls.members()} <= present


def test_relearning_a_member_fills_the_side_that_lost_its_leaf() -> None:
    space = TINY
    ls = LeafSet(space, 0, 1)
    ls.add(peer(space, 1))
    ls.add(peer(space, 2))  # 2 is nearer counter-clockwise: it takes the left side from 1
    assert ([p.id for p in ls.left], [p.id for p in ls.right]) == ([2], [1])
    ls.remove(2)  # 2 fails: 1 is now our only neighbour, on both sides
    ls.add(peer(space, 1))  # and it is re-learnt (e.g. from its leaf-set reply)
    assert ([p.id for p in ls.left], [p.id for p in ls.right]) == ([1], [1])


@given(case=leafset_case(removals=False), data=st.data())
def test_closest_and_in_range_against_brute_force(case, data: st.DataObject) -> None:
    space, half, own, ops = case
    ls = LeafSet(space, own, half)
    added = {own}
    for _, ident in ops:
        ls.add(peer(space, ident))
        added.add(ident)
    members = {p.id for p in ls.members()}
    # Keys: anywhere, on members, and exactly between two members (ties).
    between = [(a + space.cw(a, c) // 2) % space.size for a in members for c in members if a != c]
    key_strategy = st.one_of(
        ids_in(space),
        st.sampled_from(sorted(members | {own})),
        *([st.sampled_from(between)] if between else []),
    )
    keys = data.draw(st.lists(key_strategy, min_size=1, max_size=10), label="keys")
    exclude = data.draw(st.sampled_from([-1, *sorted(members)]), label="exclude")
    for key in keys:
        best = brute_closest(space, key, members | {own})
        got = ls.closest(key)
        assert (got.id if got is not None else own) == best
        best_ex = brute_closest(space, key, (members - {exclude}) | {own})
        got_ex = ls.closest(key, exclude=exclude)
        assert (got_ex.id if got_ex is not None else own) == best_ex
        # in_range: the key lies on the arc from the leftmost to the rightmost leaf through us.
        if ls.wraps:
            assert ls.in_range(key)
        else:
            lo, hi = ls.left[-1].id, ls.right[-1].id
            assert ls.in_range(key) == (space.cw(lo, key) <= space.cw(lo, hi))
        # What in_range promises: the key's root among everything ever added is ours to find.
        if ls.in_range(key):
            assert best == brute_closest(space, key, added)


def test_leafset_small_example() -> None:
    space = TINY
    ls = LeafSet(space, 100, 2)
    for i in (90, 95, 105, 110, 120, 80):
        ls.add(peer(space, i))
    assert [p.id for p in ls.right] == [105, 110]
    assert [p.id for p in ls.left] == [95, 90]
    assert not ls.wraps
    assert ls.in_range(90) and ls.in_range(110) and ls.in_range(100)
    assert not ls.in_range(111) and not ls.in_range(89)
    assert ls.closest(102) is None  # we are nearest
    assert ls.closest(103).id == 105
    assert ls.closest(0).id == 90  # out of range: still the nearest member
    assert ls.closest(100) is None
    assert ls.closest(93).id == 95
    assert ls.closest(92).id == 90  # 2 away from 90, 3 from 95
    entered, evicted = ls.add(peer(space, 101))
    assert entered and [p.id for p in evicted] == [110]
    assert ls.add(peer(space, 101)) == (False, [])
    assert ls.add(peer(space, 100)) == (False, [])  # never ourselves
    assert ls.remove(101) and not ls.remove(101)
    assert [p.id for p in ls.right] == [105]  # the evicted 110 is forgotten
    assert ls.wraps


def test_closest_ties_go_to_the_smaller_id() -> None:
    space = TINY
    ls = LeafSet(space, 0, 2)
    ls.add(peer(space, 10))
    ls.add(peer(space, 20))
    assert ls.closest(15).id == 10  # 10 and 20 both 5 away
    assert ls.closest(5) is None  # ourselves (0) and 10 both 5 away: we are smaller
    high = LeafSet(space, 20, 2)
    high.add(peer(space, 10))
    assert high.closest(15).id == 10  # 10 and ourselves (20) both 5 away: 10 is smaller
    assert high.closest(15, exclude=10) is None


def test_leafset_wraps_on_a_tiny_ring() -> None:
    space = TINY
    ls = LeafSet(space, 10, 2)
    for i in (20, 250):
        ls.add(peer(space, i))
    # Two others and half=2: each is on both sides.
    assert {p.id for p in ls.left} == {p.id for p in ls.right} == {20, 250}
    assert [p.id for p in ls.right] == [20, 250]
    assert [p.id for p in ls.left] == [250, 20]
    assert len(ls) == 2 and ls.wraps
    assert all(ls.in_range(k) for k in range(256))


def test_replace_truncates_to_half() -> None:
    space = TINY
    ls = LeafSet(space, 0, 2)
    ls.replace([peer(space, 250), peer(space, 240), peer(space, 230)], [peer(space, 5)])
    assert [p.id for p in ls.left] == [250, 240]
    assert [p.id for p in ls.right] == [5]
    assert ls.wraps  # right side not full


# ---------------------------------------------------------------------------- routing table


@given(
    space=SPACES,
    data=st.data(),
)
def test_routing_table_keeps_the_nearest_candidate_per_slot(space: IdSpace, data) -> None:
    own = data.draw(ids_in(space), label="own")
    cand_ids = data.draw(st.lists(ids_in(space), max_size=40), label="ids")
    # Candidates often share a long prefix with us, so deeper rows get used too.
    deep = data.draw(
        st.lists(st.integers(min_value=0, max_value=255).map(lambda x: own ^ x), max_size=10)
    )
    cand_ids += deep
    rtt = data.draw(
        st.lists(
            st.floats(min_value=0, max_value=500), min_size=len(cand_ids), max_size=len(cand_ids)
        ),
        label="rtt",
    )
    rtt_of = {}
    for i, r in zip(cand_ids, rtt, strict=True):
        rtt_of.setdefault(i, r)
    table = RoutingTable(space, own)
    for i in cand_ids:
        p = peer(space, i)
        slot_before = None
        row = space.shared_prefix(own, i)
        if row < space.digits:
            slot_before = table.get(row, space.digit(i, row))
        changed = table.add(p, lambda q: rtt_of[q.id])
        if i == own:
            assert not changed
            continue
        col = space.digit(i, row)
        now = table.get(row, col)
        assert now is not None
        if slot_before is None:
            assert changed and now.id == i
        elif slot_before.id == i or rtt_of[i] >= rtt_of[slot_before.id]:
            assert not changed and now.id == slot_before.id  # ties keep the incumbent
        else:
            assert changed and now.id == i
    # Brute force: per slot, the candidate with the smallest RTT (the first one on ties).
    best: dict[tuple[int, int], int] = {}
    for i in cand_ids:
        if i == own:
            continue
        row = space.shared_prefix(own, i)
        slot = (row, space.digit(i, row))
        if slot not in best or rtt_of[i] < rtt_of[best[slot]]:
            best[slot] = i
    got = {
        (r, c): p.id for r, row in enumerate(table.rows) for c, p in enumerate(row) if p is not None
    }
    assert got == best
    assert len(table) == len(best) == len(list(table.entries()))
    for r, row in enumerate(table.rows):
        assert row[space.digit(own, r)] is None  # never a peer in our own column
        assert [p.id for p in table.row(r)] == [p.id for p in row if p is not None]
    assert table.row(len(table.rows)) == []
    # Removing each entry returns its slot and empties it; removing again finds nothing.
    for (r, c), i in sorted(best.items()):
        assert table.remove(i) == (r, c)
        assert table.get(r, c) is None
        assert table.remove(i) is None
    assert len(table) == 0


def test_routing_table_slots_by_example() -> None:
    space = IdSpace(bits=16, b=4)
    own = 0x1234
    table = RoutingTable(space, own)
    far = {0x5000: 50.0, 0x5FFF: 10.0, 0x1299: 1.0, 0x1235: 7.0, 0x1236: 3.0}

    def prox(p: Peer) -> float:
        return far[p.id]

    assert table.add(peer(space, 0x5000), prox)
    assert table.get(0, 5).id == 0x5000
    assert table.add(peer(space, 0x5FFF), prox)  # nearer: replaces
    assert table.get(0, 5).id == 0x5FFF
    assert not table.add(peer(space, 0x5000), prox)  # farther: refused
    assert table.add(peer(space, 0x1299), prox)
    assert table.get(2, 9).id == 0x1299
    assert table.add(peer(space, 0x1235), prox)
    assert table.get(3, 5).id == 0x1235
    assert table.get(9, 9) is None  # rows that do not exist yet read as empty
    assert not table.add(peer(space, own), prox)
    assert table.remove(0x5000) is None  # not the occupant of its slot
    assert table.get(0, 5).id == 0x5FFF
    assert table.remove(0x1236) is None  # never added
    assert table.remove(0x1235) == (3, 5)
    assert table.remove(0xFFFF) is None


def test_closest_of_breaks_ties_to_smaller_id() -> None:
    space = TINY
    peers = [peer(space, i) for i in (10, 20, 30, 250)]
    assert [p.id for p in closest_of(space, 15, peers, 2)] == [10, 20]
    assert [p.id for p in closest_of(space, 0, peers, 3)] == [250, 10, 20]
    assert closest_of(space, 0, peers, 0) == []
