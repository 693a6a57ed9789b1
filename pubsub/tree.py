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

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Sequence

try:
    import cython
except ImportError:  # interpreted, without Cython installed
    from rangecast import _nocython as cython  # type: ignore[no-redef]

from sortedcontainers import SortedKeyList

from rangecast.pubsub.messages import StoredSub
from rangecast.pubsub.space import AttributeSpace, TreeId, zone_overlaps

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
    """A leaf's stored subscription pieces, ordered by their point's x (ties: insertion order).

    Matching runs on a bitmask index built from the entries on the first match after a change
    (leaves are written rarely and read once per probing event). Bit ``k`` stands for the entry
    at position ``k`` of that order. Per attribute, the predicates' bounds are sorted, so the
    predicates an event value fails are a prefix or suffix of each sorted list: one bisection
    and one precomputed mask each. The matches are the entries in the target region whose
    predicates fail nowhere, read off the mask in position order, which is the order the plain
    scan (``linear_match``) finds them in. Pieces of a load-balanced subscription (``pieces >
    1``) are checked one by one with ``stored_matches``.

    Compiled (docs/simulator.md, "Two speeds"), a leaf matches with ``_Flat`` instead: the same
    predicates in flat C arrays, scanned entry by entry, which at a leaf's few dozen entries
    costs less than the bisections and big-integer masks; interpreted, the masks cost less. Both
    find what ``linear_match`` finds, in its order."""

    __slots__ = ("_by_owner", "_entries", "_flat", "_masks", "bytes", "bytes_of")

    def __init__(self, entries: Iterable[StoredSub] = ()) -> None:
        self._entries: SortedKeyList = SortedKeyList(key=_point_x)
        self._by_owner: dict[tuple[bytes, int, int, int], StoredSub] = {}
        self._masks: _Masks | None = None
        self._flat: _Flat | None = None
        #: ``piece_bytes`` of the entries, summed: what they weigh on the wire at most; and per
        #: subscriber (its id), for the share one subscriber may hold.
        self.bytes = 0
        self.bytes_of: dict[bytes, int] = {}
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
        self._entries.add(s)  # after any equal x: insertion order among ties
        self._masks = None
        self._flat = None
        b = piece_bytes(s)
        self.bytes += b
        who = s.subscriber.id
        self.bytes_of[who] = self.bytes_of.get(who, 0) + b
        return True

    def get(self, subscriber: bytes, sid: int, gen: int, piece: int) -> StoredSub | None:
        return self._by_owner.get((subscriber, sid, gen, piece))

    def remove(self, subscriber: bytes, sid: int, gen: int, piece: int) -> bool:
        s = self._by_owner.pop((subscriber, sid, gen, piece), None)
        if s is None:
            return False
        entries = self._entries
        pos = entries.bisect_key_left(s.x)
        while entries[pos] is not s:
            pos += 1
        del entries[pos]
        self._masks = None
        self._flat = None
        b = piece_bytes(s)
        self.bytes -= b
        left = self.bytes_of[subscriber] - b
        if left:
            self.bytes_of[subscriber] = left
        else:
            del self.bytes_of[subscriber]
        return True

    def candidates(self, value: float | None, cutoff: float | None) -> Iterator[StoredSub]:
        """Entries whose point lies in the target region of ``value`` (None: everywhere)."""
        entries = list(self._entries)
        if value is None:
            for s in entries:
                if cutoff is None or s.y - s.x <= cutoff:
                    yield s
            return
        for s in entries[: self._entries.bisect_key_right(value)]:
            if s.y >= value and (cutoff is None or s.y - s.x <= cutoff):
                yield s

    def match(
        self, values: Sequence[float | None], attr: int, cutoff: float | None, strict: bool
    ) -> list[StoredSub]:
        if cython.compiled:
            flat = self._flat
            if flat is None:
                flat = self._flat = _Flat(list(self._entries))
            return flat.match(values, attr, cutoff, strict)
        masks = self._masks
        if masks is None:
            masks = self._masks = _Masks(list(self._entries))
        return masks.match(values, attr, cutoff, strict)

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


def piece_bytes(s: StoredSub) -> int:
    """An upper bound on a stored piece's MessagePack size: 80 bytes of fixed fields and
    headers (ints and floats at their widest), the subscriber's id and address, and 21 per
    predicate (an index, two float64 bounds, the flags)."""
    return 80 + len(s.subscriber.id) + len(s.subscriber.addr) + 21 * len(s.preds)


def _point_x(s: StoredSub) -> float:
    return s.x


class _Bounds:
    """One attribute's predicate bounds of the entries, for one side and one openness: sorted
    bound values and, for each cut of that order, the mask of the entries on the failing side."""

    __slots__ = ("bounds", "fail")

    def __init__(self, pairs: list[tuple[float, int]], lower: bool) -> None:
        pairs.sort()
        self.bounds = [b for b, _ in pairs]
        bits = [1 << k for _, k in pairs]
        n = len(pairs)
        # Lower bounds fail when above the value (a suffix of the order); upper bounds when
        # below it (a prefix). fail[i] is the mask of the suffix from i / the prefix up to i.
        fail = [0] * (n + 1)
        if lower:
            for i in range(n - 1, -1, -1):
                fail[i] = fail[i + 1] | bits[i]
        else:
            for i in range(n):
                fail[i + 1] = fail[i] | bits[i]
        self.fail = fail


class _Masks:
    """The bitmask index of ``LeafIndex`` (see there), built from the entries in x order."""

    __slots__ = (
        "by_attr",
        "entries",
        "full",
        "has_attr",
        "pieced",
        "wide",
        "wide_cutoff",
        "xs",
        "ys",
        "ys_fail",
    )

    def __init__(self, entries: list[StoredSub]) -> None:
        self.entries = entries
        self.xs = [s.x for s in entries]
        n = len(entries)
        self.full = (1 << n) - 1
        pieced = 0
        # (attribute) -> [closed lower, open lower, closed upper, open upper] bound lists
        raw: dict[int, list[list[tuple[float, int]]]] = {}
        has_attr: dict[int, int] = {}
        y_pairs = []
        for k, s in enumerate(entries):
            bit = 1 << k
            y_pairs.append((s.y, k))
            if s.pieces > 1:
                pieced |= bit
                continue
            for p in s.preds:
                lists = raw.get(p.attr)
                if lists is None:
                    lists = raw[p.attr] = [[], [], [], []]
                lists[p.flags & 1].append((p.lo, k))
                lists[2 + ((p.flags >> 1) & 1)].append((p.hi, k))
                has_attr[p.attr] = has_attr.get(p.attr, 0) | bit
        self.pieced = pieced
        self.has_attr = has_attr
        self.by_attr = {
            a: (
                _Bounds(ls[0], True),
                _Bounds(ls[1], True),
                _Bounds(ls[2], False),
                _Bounds(ls[3], False),
            )
            for a, ls in sorted(raw.items())
        }
        ys = _Bounds(y_pairs, False)  # entries with y below the value are outside the region
        self.ys = ys.bounds
        self.ys_fail = ys.fail
        self.wide = 0
        self.wide_cutoff: float | None = None

    def _too_wide(self, cutoff: float) -> int:
        """Entries whose point is more than ``cutoff`` above the diagonal (cached per cutoff)."""
        if self.wide_cutoff != cutoff:
            wide = 0
            for k, s in enumerate(self.entries):
                if s.y - s.x > cutoff:
                    wide |= 1 << k
            self.wide, self.wide_cutoff = wide, cutoff
        return self.wide

    def match(
        self, values: Sequence[float | None], attr: int, cutoff: float | None, strict: bool
    ) -> list[StoredSub]:
        entries = self.entries
        n = len(values)
        v = values[attr] if attr < n else None
        ok = self.full
        if v is not None:
            # The region: x <= v (a prefix of the x order) and y >= v.
            ok &= (1 << bisect_right(self.xs, v)) - 1
            ok &= ~self.ys_fail[bisect_left(self.ys, v)]
        if cutoff is not None:
            ok &= ~self._too_wide(cutoff)
        if not ok:
            return []
        pieced = ok & self.pieced
        ok &= ~pieced
        has_attr = self.has_attr
        for a, (lo_closed, lo_open, hi_closed, hi_open) in self.by_attr.items():
            if not ok:
                break
            w = values[a] if a < n else None
            if w is None:
                if strict:
                    ok &= ~has_attr[a]
                continue
            ok &= ~(
                lo_closed.fail[bisect_right(lo_closed.bounds, w)]
                | lo_open.fail[bisect_left(lo_open.bounds, w)]
                | hi_closed.fail[bisect_left(hi_closed.bounds, w)]
                | hi_open.fail[bisect_right(hi_open.bounds, w)]
            )
        if pieced:
            for k in _bits(pieced):
                if stored_matches(entries[k], values, strict):
                    ok |= 1 << k
        return [entries[k] for k in _bits(ok)]


class _Flat:
    """The compiled matcher of ``LeafIndex`` (see there): the entries' points and, for each entry
    not a piece of a load-balanced subscription, its predicates, in flat arrays (entry ``k``'s
    are ``first[k]`` to ``first[k + 1]``). ``match`` tests each entry as ``stored_matches`` does,
    in C once compiled."""

    __slots__ = ("attrs", "entries", "first", "flags", "his", "los", "pieced", "xs", "ys")

    def __init__(self, entries: list[StoredSub]) -> None:
        self.entries = entries
        xs, ys, los, his = array("d"), array("d"), array("d"), array("d")
        first, attrs, flags, pieced = array("l", [0]), array("l"), array("l"), array("b")
        for s in entries:
            xs.append(s.x)
            ys.append(s.y)
            pieced.append(s.pieces > 1)
            if s.pieces <= 1:
                for p in s.preds:
                    attrs.append(p.attr)
                    los.append(p.lo)
                    his.append(p.hi)
                    flags.append(p.flags)
            first.append(len(attrs))
        self.xs, self.ys, self.los, self.his = xs, ys, los, his
        self.first, self.attrs, self.flags, self.pieced = first, attrs, flags, pieced

    def match(
        self, values: Sequence[float | None], attr: int, cutoff: float | None, strict: bool
    ) -> list[StoredSub]:
        vals = values if isinstance(values, list) else list(values)
        n = len(vals)
        xs, ys, first, attrs = self.xs, self.ys, self.first, self.attrs
        los, his, flags, pieced = self.los, self.his, self.flags, self.pieced
        entries = self.entries
        vo = vals[attr] if attr < n else None
        has_v = vo is not None
        v = vo if vo is not None else 0.0
        has_cut = cutoff is not None
        cut = cutoff if cutoff is not None else 0.0
        out: list[StoredSub] = []
        for k in range(len(entries)):
            x = xs[k]
            y = ys[k]
            if has_v and not (x <= v and v <= y):
                continue  # outside the target region
            if has_cut and y - x > cut:
                continue
            if pieced[k]:
                if stored_matches(entries[k], vals, strict):
                    out.append(entries[k])
                continue
            ok = True
            for j in range(first[k], first[k + 1]):
                a = attrs[j]
                wo = vals[a] if a < n else None
                if wo is None:
                    if strict:
                        ok = False
                        break
                    continue
                w = wo
                f = flags[j]
                lo = los[j]
                hi = his[j]
                if w < lo or w > hi or (f & 1 and w == lo) or (f & 2 and w == hi):
                    ok = False
                    break
            if ok:
                out.append(entries[k])
        return out


def _bits(mask: int) -> Iterator[int]:
    """Positions of the set bits, lowest first."""
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


class LeafTable:
    """LeafNodeRoutingTable: the leaves below an internal node that it has heard of.

    Soft state: a row may name a leaf that has split since (it forwards again with its own
    table). Updates refine rows (a leaf is replaced by its two children); if a deeper update
    overtakes a shallower one, both the old row and the deeper rows are kept for a while, and
    lookups prefer the deepest row, so nothing is lost and duplicates are dropped at the leaves."""

    __slots__ = ("max_depth", "rows", "splits")

    def __init__(self, rows: Iterable[TreeId] = ()) -> None:
        self.rows: dict[TreeId, None] = dict.fromkeys(rows)
        #: The depth of the deepest row ever listed (rows only get deeper).
        self.max_depth = max((r.depth for r in self.rows), default=0)
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
        self.max_depth = max(self.max_depth, split.depth + 1)
        return True

    def locate(self, space: AttributeSpace, x: float, y: float) -> TreeId | None:
        """The deepest row whose zone holds the point.

        The zones of one depth partition the square, so the rows holding a point all lie on
        the point's own path down the tree: walk that path (``AttributeSpace.path``) and keep
        the deepest row met. That is one dictionary lookup per
        level, where a scan of the rows grew with the tree (an internal node's table lists
        every leaf below it)."""
        rows = self.rows
        best: TreeId | None = None
        for tid in space.path(x, y, self.max_depth):
            if tid in rows:
                best = tid
        # Outside the square the walk still ends somewhere; no zone holds such a point.
        if best is None or not space.zone(best).contains(x, y):
            return None
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
