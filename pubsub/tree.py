"""The state a peer keeps for the 2d-tree nodes it hosts: leaves with their subscription index,
internal nodes with their LeafNodeRoutingTable.

Matching at a leaf
------------------
An event value ``v`` on attribute ``a`` must find every stored point ``(x, y)`` with
``x <= v <= y`` (and ``y - x <= c`` under load balancing). The leaf keeps its entries sorted by
``x``, so the candidates are a prefix of that order (with load balancing, the
slice ``v - c <= x <= v``); each candidate is then checked exactly against its whole subscription.
``LeafIndex.linear_match`` is the plain scan the index must agree with.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Sequence

from pubsub.messages import StoredSub
from pubsub.space import AttributeSpace, TreeId, zone_overlaps

STRICT, LENIENT = "strict", "lenient"


def stored_matches(s: StoredSub, values: Sequence[float | None], strict: bool) -> bool:
    """Exact match of one stored subscription piece against an event.

    Every predicate must hold; an absent value fails the predicate (strict) or is ignored
    (lenient). Under load balancing a subscription is stored as pieces that partition its base
    range, and only the piece holding the event's base value matches, so no subscriber hears of an
    event twice; when the base value is absent (lenient), piece 0 alone stands for them all."""
    if s.pieces > 1:
        v = values[s.base] if s.base < len(values) else None
        if v is None:
            if s.piece != 0:
                return False
        elif v < s.piece_lo or v > s.piece_hi or (v == s.piece_hi and s.piece != s.pieces - 1):
            return False
    n = len(values)
    for p in s.preds:
        v = values[p.attr] if p.attr < n else None
        if v is None:
            if strict:
                return False
            continue
        flags = p.flags
        if v < p.lo or v > p.hi:
            return False
        if (flags & 1 and v == p.lo) or (flags & 2 and v == p.hi):
            return False
    return True


class LeafIndex:
    """A leaf's stored subscription pieces, ordered by their point's x.

    Two parallel lists (keys and entries) searched with ``bisect``: leaves hold tens of entries,
    where this beats a balanced structure's constant factors, and the candidate set for an
    event is still a bisected slice rather than a scan."""

    __slots__ = ("_by_owner", "_entries", "_keys")

    def __init__(self, entries: Iterable[StoredSub] = ()) -> None:
        self._keys: list[float] = []
        self._entries: list[StoredSub] = []
        self._by_owner: dict[tuple[bytes, int, int, int], StoredSub] = {}
        for s in entries:
            self.add(s)

    def __len__(self) -> int:
        return len(self._by_owner)

    def __iter__(self) -> Iterator[StoredSub]:
        return iter(list(self._entries))

    def add(self, s: StoredSub) -> bool:
        """Store a piece; a second copy of the same piece (a retried insert) is ignored."""
        key = (s.subscriber.id, s.sid, s.gen, s.piece)
        if key in self._by_owner:
            return False
        self._by_owner[key] = s
        pos = bisect_right(self._keys, s.x)
        self._keys.insert(pos, s.x)
        self._entries.insert(pos, s)
        return True

    def remove(self, subscriber: bytes, sid: int, gen: int, piece: int) -> bool:
        s = self._by_owner.pop((subscriber, sid, gen, piece), None)
        if s is None:
            return False
        pos = bisect_left(self._keys, s.x)
        while self._entries[pos] is not s:
            pos += 1
        del self._keys[pos]
        del self._entries[pos]
        return True

    def candidates(self, value: float | None, cutoff: float | None) -> Iterator[StoredSub]:
        """Entries whose point lies in the target region of ``value`` (None: everywhere)."""
        entries = self._entries
        if value is None:
            if cutoff is None:
                yield from list(entries)
            else:
                for s in list(entries):
                    if s.y - s.x <= cutoff:
                        yield s
            return
        keys = self._keys
        hi = bisect_right(keys, value)
        lo = 0 if cutoff is None else bisect_left(keys, value - cutoff, 0, hi)
        for s in entries[lo:hi]:
            if s.y >= value and (cutoff is None or s.y - s.x <= cutoff):
                yield s

    def match(
        self, values: Sequence[float | None], attr: int, cutoff: float | None, strict: bool
    ) -> list[StoredSub]:
        v = values[attr] if attr < len(values) else None
        return [s for s in self.candidates(v, cutoff) if stored_matches(s, values, strict)]

    def linear_match(
        self, values: Sequence[float | None], attr: int, cutoff: float | None, strict: bool
    ) -> list[StoredSub]:
        """Reference scan: the region test and the exact match over every entry."""
        v = values[attr] if attr < len(values) else None
        out = []
        for s in self._entries:
            if v is not None and not (s.x <= v <= s.y):
                continue
            if cutoff is not None and s.y - s.x > cutoff:
                continue
            if stored_matches(s, values, strict):
                out.append(s)
        return out


class LeafTable:
    """LeafNodeRoutingTable: the leaves below an internal node that it has heard of.

    Soft state: a row may name a leaf that has split since (it forwards again with its own
    table). Updates refine rows (a leaf is replaced by its two children); if a deeper update
    overtakes a shallower one, both the old row and the deeper rows are kept for a while, and
    lookups prefer the deepest row, so nothing is lost and duplicates are dropped at the leaves."""

    __slots__ = ("rows", "splits")

    def __init__(self, rows: Iterable[TreeId] = ()) -> None:
        self.rows: dict[TreeId, None] = dict.fromkeys(rows)
        #: Nodes known to have split. A child that is in here is internal, and its own update
        #: already put its children in; one that is not is (as far as we know) a leaf.
        self.splits: set[TreeId] = set()

    def __len__(self) -> int:
        return len(self.rows)

    def apply_split(self, split: TreeId) -> bool:
        """``split`` became internal with children ``split0`` and ``split1``."""
        if split in self.splits:
            return False
        self.splits.add(split)
        self.rows.pop(split, None)
        for child in (split.child(0), split.child(1)):
            if child not in self.splits:
                self.rows[child] = None
        return True

    def locate(self, space: AttributeSpace, x: float, y: float) -> TreeId | None:
        """The deepest row whose zone holds the point."""
        best: TreeId | None = None
        for r in self.rows:
            if (best is None or r.depth > best.depth) and space.zone(r).contains(x, y):
                best = r
        return best

    def overlapping(
        self, space: AttributeSpace, scope: TreeId, value: float | None, cutoff: float | None
    ) -> list[TreeId]:
        """Rows inside or around ``scope`` whose zone (within scope) meets the target region."""
        out = []
        for r in self.rows:
            if scope.is_ancestor_of(r):
                inner = r
            elif r.is_ancestor_of(scope):
                inner = scope
            else:
                continue
            if zone_overlaps(space.zone(inner), value, cutoff):
                out.append(r)
        return out


class TreeNode:
    """One hosted tree node: a leaf (``index`` set) or internal (``table`` set)."""

    __slots__ = ("index", "seen", "table", "tid")

    def __init__(self, tid: TreeId, entries: Iterable[StoredSub] = ()) -> None:
        self.tid = tid
        self.index: LeafIndex | None = LeafIndex(entries)
        self.table: LeafTable | None = None
        #: Events this leaf has matched, with the time: a leaf matches an event at most once.
        self.seen: dict[int, float] = {}

    @property
    def is_leaf(self) -> bool:
        return self.index is not None

    def become_internal(self) -> None:
        self.index = None
        self.table = LeafTable((self.tid.child(0), self.tid.child(1)))
        self.seen = {}

    def remember(self, eid: int, now: float, window: float) -> bool:
        """Record that ``eid`` was matched here; False if it already was."""
        seen = self.seen
        if eid in seen:
            return False
        seen[eid] = now
        if len(seen) % 256 == 0:
            horizon = now - window
            self.seen = {e: t for e, t in seen.items() if t >= horizon}
        return True
