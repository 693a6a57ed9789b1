"""Logic space and zone arithmetic for the distributed 2d-tree.

Theory of operation
-------------------
Each attribute ``[min, max]`` gets its own square ``[min, max] x [min, max]``. A range
``[v1, v2]`` is the point ``(x=v1, y=v2)``, on or above the diagonal. An event value ``v`` is
searched in its *target region* ``x <= v <= y``: every range holding ``v`` lies there. With load
balancing (thesis 3.5) every stored point is at most ``c`` above the diagonal, and the region
shrinks to ``x <= v <= y, y - x <= c``.

A 2d-tree decomposes the square. A tree node is a ``TreeId``: the attribute, a depth and the path
of halving decisions (one bit per level, most significant first). The root has depth 0; a node at
even depth splits on x, at odd depth on y (thesis Program 3.1, ``level % 2``). Halves are
half-open: the lower child takes ``[lo, mid)``, the upper ``[mid, hi]``, and the domain maximum
stays inclusive, so every point of the square lies in exactly one zone per depth (Program 3.2's
``mid = minx + maxx / 2`` is an OCR slip for ``(minx + maxx) / 2``; a value equal to ``mid`` goes
up). The zone of any ``TreeId`` and the ``TreeId`` of the zone holding a point at any depth are
computed locally, from the schema alone.

Overlap tests between zones and target regions treat zone bounds as closed. That can only make
a zone look overlapping when it touches a region at a boundary it does not own: a spare probe at
worst, never a missed one. Storing (which zone holds a point) is exact.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import NamedTuple

from rangecast.dht.errors import LocalProtocolError

#: Deepest tree node; paths travel as 63-bit integers. Splitting stops here even when a leaf
#: overflows (the last resort for points that widening cannot separate).
MAX_DEPTH = 60


#: ``tuple.__new__``: a ``TreeId`` built in C (``tree_id``).
_new_tuple = tuple.__new__


class TreeId(NamedTuple):
    """A node of one attribute's 2d-tree.

    A named tuple rather than a frozen dataclass: tree ids are built, hashed and compared on
    every probe, and a tuple does all three in C."""

    attr: int
    depth: int
    path: int

    def child(self, bit: int) -> TreeId:
        return tree_id(self.attr, self.depth + 1, (self.path << 1) | bit)

    def parent(self) -> TreeId:
        if self.depth == 0:
            raise LocalProtocolError("the root has no parent")
        return tree_id(self.attr, self.depth - 1, self.path >> 1)

    def ancestor(self, depth: int) -> TreeId:
        if not 0 <= depth <= self.depth:
            raise LocalProtocolError(f"no ancestor at depth {depth} of a depth-{self.depth} node")
        return tree_id(self.attr, depth, self.path >> (self.depth - depth))

    def is_ancestor_of(self, other: TreeId) -> bool:
        """True when ``other`` is this node or lies below it."""
        return (
            other.attr == self.attr
            and other.depth >= self.depth
            and other.path >> (other.depth - self.depth) == self.path
        )

    def bits(self) -> str:
        return format(self.path, f"0{self.depth}b") if self.depth else ""

    def __repr__(self) -> str:
        return f"TreeId({self.attr}:{self.bits() or 'root'})"


def tree_id(attr: int, depth: int, path: int) -> TreeId:
    """``TreeId(attr, depth, path)``, the same tuple, built in C: a named tuple's own
    ``__new__`` is generated Python code, which a compiled caller (docs/simulator.md, "Two
    speeds") would otherwise run for every tree id it builds on a probe's way."""
    tid: TreeId = _new_tuple(TreeId, (attr, depth, path))
    return tid


@dataclass(frozen=True, slots=True)
class Zone:
    """A rectangle of one attribute's square. Upper bounds are exclusive unless ``*_top`` (the
    domain maximum, which stays inclusive)."""

    x_lo: float
    x_hi: float
    y_lo: float
    y_hi: float
    x_top: bool
    y_top: bool

    def contains(self, x: float, y: float) -> bool:
        return (
            self.x_lo <= x
            and (x < self.x_hi or (self.x_top and x <= self.x_hi))
            and self.y_lo <= y
            and (y < self.y_hi or (self.y_top and y <= self.y_hi))
        )

    def has_triangle(self) -> bool:
        """Does the zone hold any point with y >= x (anything a range can map to)?"""
        return self.y_hi >= self.x_lo


def _compute_zone(lo: float, hi: float, depth: int, path: int) -> Zone:
    x_lo = y_lo = lo
    x_hi = y_hi = hi
    x_top = y_top = True
    for level in range(depth):
        bit = (path >> (depth - 1 - level)) & 1
        if level % 2 == 0:
            mid = (x_lo + x_hi) / 2.0
            if bit:
                x_lo = mid
            else:
                x_hi, x_top = mid, False
        else:
            mid = (y_lo + y_hi) / 2.0
            if bit:
                y_lo = mid
            else:
                y_hi, y_top = mid, False
    return Zone(x_lo, x_hi, y_lo, y_hi, x_top, y_top)


def _zone_cache(lo: float, hi: float) -> Callable[[int, int], Zone]:
    """The zone cache of the domain ``[lo, hi]``, shared by every space over it: zones depend
    on the domain alone, and a simulation holds a space per attribute per peer (a cache each
    cost ~12 KB per peer). Keyed by the bounds' exact bits (-0.0 and 0.0 stay apart)."""
    return _zone_cache_of(lo.hex(), hi.hex())


@lru_cache(maxsize=256)
def _zone_cache_of(lo: str, hi: str) -> Callable[[int, int], Zone]:
    # Room for every zone of a large run (a peer used to hold 1 << 16 per attribute).
    return lru_cache(maxsize=1 << 18)(partial(_compute_zone, float.fromhex(lo), float.fromhex(hi)))


class AttributeSpace:
    """Zone arithmetic for one attribute of one schema."""

    __slots__ = ("_zone", "index", "key_prefix", "max", "min", "name")

    def __init__(self, schema: str, name: str, index: int, lo: float, hi: float) -> None:
        if not lo < hi:
            raise LocalProtocolError(f"attribute {name}: empty domain [{lo}, {hi}]")
        self.index = index
        self.name = name
        self.min = float(lo)
        self.max = float(hi)
        #: Thesis: the root is identified by the attribute's name and a child appends 0 or 1;
        #: the schema name is prefixed so that several schemas can share the overlay.
        self.key_prefix = f"{schema}/{name}/"
        self._zone = _zone_cache(self.min, self.max)

    @property
    def root(self) -> TreeId:
        return tree_id(self.index, 0, 0)

    def identifier(self, tid: TreeId) -> str:
        return self.key_prefix + tid.bits()

    def zone(self, tid: TreeId) -> Zone:
        return self._zone(tid.depth, tid.path)

    def locate(self, x: float, y: float, depth: int) -> TreeId:
        """The depth-``depth`` node whose zone holds the point (x, y)."""
        if not (self.min <= x <= self.max and self.min <= y <= self.max):
            raise LocalProtocolError(f"point ({x}, {y}) outside {self.name}'s square")
        nodes = list(self.path(x, y, depth))
        return nodes[-1] if nodes else self.root

    def path(self, x: float, y: float, depth: int) -> Iterator[TreeId]:
        """The nodes at depths 1 to ``depth`` whose zones hold the point, top down (for a point
        outside the square, the path it would take). Descends with the same halving the zones
        use, so the two can never disagree."""
        tid = self.root
        for _ in range(depth):
            tid = self.child_for(tid, x, y)
            yield tid

    def split_axis_is_x(self, tid: TreeId) -> bool:
        return tid.depth % 2 == 0

    def split_mid(self, tid: TreeId) -> float:
        z = self.zone(tid)
        return (z.x_lo + z.x_hi) / 2.0 if tid.depth % 2 == 0 else (z.y_lo + z.y_hi) / 2.0

    def child_for(self, tid: TreeId, x: float, y: float) -> TreeId:
        """Which child of ``tid`` holds the point."""
        mid = self.split_mid(tid)
        coord = x if tid.depth % 2 == 0 else y
        return tid.child(1 if coord >= mid else 0)


def zone_overlaps(zone: Zone, value: float | None, cutoff: float | None) -> bool:
    """Could ``zone`` hold a point of the target region of ``value``?

    ``value`` None means the whole space (a missing attribute under the lenient rule). Zone
    bounds are taken as closed, so the answer errs on the side of probing."""
    if value is None:
        # The whole triangle (or the band below the cut-off line): the zone must reach the
        # diagonal's upper side, and its lowest y - x must not exceed the cut-off.
        return zone.y_hi >= zone.x_lo and (cutoff is None or zone.y_lo - zone.x_hi <= cutoff)
    if zone.x_lo > value or zone.y_hi < value:
        return False
    if cutoff is None:
        return True
    # Smallest y - x inside the zone's part of {x <= v <= y}: x as large, y as small as allowed.
    return max(zone.y_lo, value) - min(zone.x_hi, value) <= cutoff


def point_in_region(x: float, y: float, value: float | None, cutoff: float | None) -> bool:
    """Is the stored point (x, y) inside the target region (exactly, bounds included)?"""
    if value is not None and not (x <= value <= y):
        return False
    return cutoff is None or y - x <= cutoff
