"""Pastry's routing state: peers, the leaf set and the prefix routing table.

These are plain data structures with no I/O and no clock; ``dht.node`` decides when to change
them. Both keep ``Peer`` objects, which compare and hash by id so that two records of the same node
(learnt from different messages) are the same entry.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator

from rangecast.dht.ids import IdSpace
from rangecast.dht.wire import Handle


class Peer:
    """A remote node: int id for arithmetic, opaque transport address, cached wire handle."""

    __slots__ = ("addr", "handle", "id")

    def __init__(self, ident: int, addr: bytes, handle: Handle) -> None:
        self.id = ident
        self.addr = addr
        self.handle = handle

    @classmethod
    def make(cls, space: IdSpace, ident: int, addr: bytes) -> Peer:
        return cls(ident, addr, Handle(space.to_bytes(ident), addr))

    @classmethod
    def from_handle(cls, space: IdSpace, handle: Handle) -> Peer:
        """Build from a received handle; a wrong id length raises ``RemoteProtocolError``."""
        return cls(space.from_bytes(handle.id), handle.addr, handle)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Peer) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        return f"Peer({self.id:#x}, {self.addr!r})"


class LeafSet:
    """The ``half`` numerically closest nodes on each side of ``own`` on the ring.

    ``left`` is counter-clockwise (smaller ids), ``right`` clockwise; both nearest first. In a
    network of at most ``2 * half + 1`` nodes a node appears on both sides, and the set then
    covers the whole ring (``wraps``).
    """

    __slots__ = (
        "_ids",
        "_left_span",
        "_right_span",
        "_ring",
        "_ring_peers",
        "_size",
        "half",
        "left",
        "own",
        "right",
        "space",
        "wraps",
    )

    def __init__(self, space: IdSpace, own: int, half: int) -> None:
        self.space = space
        #: ``space.size``, read on every hop (``in_range``, ``closest``).
        self._size = space.size
        self.own = own
        self.half = half
        self.left: list[Peer] = []
        self.right: list[Peer] = []
        self._ids: dict[int, Peer] = {}
        self._ring: list[int] = [own]
        self._ring_peers: list[Peer | None] = [None]
        self.wraps = True
        self._left_span = self._right_span = 0

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, ident: int) -> bool:
        return ident in self._ids

    def get(self, ident: int) -> Peer | None:
        return self._ids.get(ident)

    def members(self) -> list[Peer]:
        """Distinct members, right side first, nearest first (deterministic order)."""
        return list(self._ids.values())

    def _refresh(self) -> None:
        ids: dict[int, Peer] = {}
        for p in self.right:
            ids[p.id] = p
        for p in self.left:
            ids.setdefault(p.id, p)
        self._ids = ids
        # Members and ourselves in id order: the closest of them to any key is one of the two
        # that bracket it on the ring, so ``closest`` needs a bisection, not a scan.
        ring = sorted([*ids, self.own])
        self._ring = ring
        self._ring_peers = [ids.get(i) for i in ring]
        # A side that is not full, or a node on both sides, means we know the whole ring.
        self.wraps = (
            len(self.left) < self.half
            or len(self.right) < self.half
            or len(ids) < len(self.left) + len(self.right)
        )
        # How far the leaf set reaches on each side, for ``in_range`` (once per routed hop).
        size, own = self.space.size, self.own
        self._right_span = (self.right[-1].id - own) % size if self.right else 0
        self._left_span = (own - self.left[-1].id) % size if self.left else 0

    def add(self, peer: Peer) -> tuple[bool, list[Peer]]:
        """Insert ``peer`` where it belongs. Returns (entered, evicted peers)."""
        if peer.id == self.own or (peer.id in self._ids and not self.wraps):
            # In a leaf set that does not wrap no node belongs on both sides, so a member is
            # where it belongs already. (When it wraps, a member of one side may still be due
            # on the other, e.g. after a removal left room there.)
            return False, []
        size, own, half = self.space.size, self.own, self.half
        entered = False
        pushed: list[Peer] = []
        for side, dist in (
            (self.right, (peer.id - own) % size),
            (self.left, (own - peer.id) % size),
        ):
            if any(p.id == peer.id for p in side):
                continue
            sign = 1 if side is self.right else -1
            pos = len(side)
            while pos > 0 and ((side[pos - 1].id - own) * sign) % size > dist:
                pos -= 1
            if pos < half:
                side.insert(pos, peer)
                entered = True
                if len(side) > half:
                    pushed.append(side.pop())
        if not entered:
            return False, []
        self._refresh()
        evicted = [p for p in pushed if p.id not in self._ids]
        return True, evicted

    def would_enter(self, peer: Peer) -> bool:
        """Would ``add(peer)`` put it on a side it is not on yet?"""
        if peer.id == self.own:
            return False
        size, own, half = self.space.size, self.own, self.half
        for side, sign in ((self.right, 1), (self.left, -1)):
            if len(side) < half:
                if not any(p.id == peer.id for p in side):
                    return True
                continue
            if ((peer.id - own) * sign) % size < ((side[-1].id - own) * sign) % size and not any(
                p.id == peer.id for p in side
            ):
                return True
        return False

    def remove(self, ident: int) -> bool:
        if ident not in self._ids:
            return False
        self.left = [p for p in self.left if p.id != ident]
        self.right = [p for p in self.right if p.id != ident]
        self._refresh()
        return True

    def replace(self, left: list[Peer], right: list[Peer]) -> None:
        """Install sides computed elsewhere (the oracle bootstrap); nearest first."""
        self.left = left[: self.half]
        self.right = right[: self.half]
        self._refresh()

    def span(self) -> int:
        """The length of ring the leaf set covers, from its farthest left to its farthest right
        member (``span() / len(self)`` is the mean spacing of ids around this node)."""
        return self._left_span + self._right_span

    def in_range(self, key: int) -> bool:
        """Is ``key`` between the leftmost and rightmost leaf (so its root is a leaf or us)?"""
        if self.wraps:
            return True
        size, own = self._size, self.own
        return (key - own) % size <= self._right_span or (own - key) % size <= self._left_span

    def closest(self, key: int, exclude: int = -1) -> Peer | None:
        """The member numerically closest to ``key``, or None when we are closer ourselves.
        Ties go to the smaller id, the same rule as the simulator's oracle."""
        size = self._size
        if exclude < 0:
            ring = self._ring
            k = bisect_left(ring, key)
            n = len(ring)
            a, b = ring[k - 1], ring[k % n]
            da = (key - a) % size
            da = min(da, size - da)
            db = (b - key) % size
            db = min(db, size - db)
            pos = k - 1 if da < db or (da == db and a < b) else k % n
            return self._ring_peers[pos]
        d = (key - self.own) % size
        best_d = min(d, size - d)
        best_id = self.own
        best: Peer | None = None
        for p in self._ids.values():
            if p.id == exclude:
                continue
            d = (key - p.id) % size
            d = min(d, size - d)
            if d < best_d or (d == best_d and p.id < best_id):
                best_d, best_id, best = d, p.id, p
        return best

    def side_of(self, ident: int) -> tuple[bool, bool]:
        """(on left, on right)."""
        return any(p.id == ident for p in self.left), any(p.id == ident for p in self.right)


class RoutingTable:
    """Rows by shared-prefix length, one column per next digit; proximity picks among candidates."""

    __slots__ = ("own", "rows", "space")

    def __init__(self, space: IdSpace, own: int) -> None:
        self.space = space
        self.own = own
        self.rows: list[list[Peer | None]] = []

    @property
    def own_digits(self) -> list[int]:
        # Computed when asked, not stored: a list of 40 ints per node is ~0.4 KB, which at a
        # million simulated nodes is 0.4 GB nobody on the routing path reads.
        return [self.space.digit(self.own, r) for r in range(self.space.digits)]

    def get(self, row: int, digit: int) -> Peer | None:
        return self.rows[row][digit] if row < len(self.rows) else None

    def add(self, peer: Peer, proximity: Callable[[Peer], float]) -> bool:
        """Offer ``peer`` for its slot; keep whichever of it and the incumbent is nearer."""
        space = self.space
        row = space.shared_prefix(self.own, peer.id)
        if row >= space.digits:
            return False
        col = space.digit(peer.id, row)
        while len(self.rows) <= row:
            self.rows.append([None] * space.radix)
        cur = self.rows[row][col]
        if cur is None:
            self.rows[row][col] = peer
            return True
        if cur.id == peer.id or proximity(peer) >= proximity(cur):
            return False
        self.rows[row][col] = peer
        return True

    def remove(self, ident: int) -> tuple[int, int] | None:
        """Drop ``ident`` if present; returns its (row, column) so the slot can be repaired."""
        space = self.space
        row = space.shared_prefix(self.own, ident)
        if row >= len(self.rows):
            return None
        col = space.digit(ident, row)
        cur = self.rows[row][col]
        if cur is None or cur.id != ident:
            return None
        self.rows[row][col] = None
        return row, col

    def install(self, rows: list[list[Peer | None]]) -> None:
        self.rows = rows

    def row(self, r: int) -> list[Peer]:
        if r >= len(self.rows):
            return []
        return [p for p in self.rows[r] if p is not None]

    def entries(self) -> Iterator[Peer]:
        for row in self.rows:
            for p in row:
                if p is not None:
                    yield p

    def __len__(self) -> int:
        return sum(1 for _ in self.entries())


def closest_of(space: IdSpace, key: int, peers: Iterable[Peer], k: int) -> list[Peer]:
    """The ``k`` peers numerically closest to ``key`` (ties to the smaller id)."""
    return sorted(peers, key=lambda p: (space.distance(p.id, key), p.id))[:k]
