"""Routing tables of one broker on one overlay: the advertisement table (SRT), the subscription
table (PRT) and the per-neighbour index of what was sent, which implements covering.

Theory of operation
-------------------
``SRT``: ad id -> ``AdEntry`` (box, lasthop, ext); ``PRT``: subscription id -> ``SubEntry``
(box, lasthop, origin broker, ext). ``lasthop`` is the neighbour the entry came from, or
``LOCAL`` for the broker's own clients. ``ext`` is the systems' slot (a CIV, a PPTable, a bit
vector) and is never read here. For tree-ID routing on a cyclic graph a subscription can reach a
broker over several advertisement trees, from a different neighbour on each: ``SubEntry.hops``
maps tree id -> lasthop then (``None`` otherwise).

Covering (``SentIndex``, one per neighbour): a subscription is forwarded to neighbour n unless a
subscription already forwarded to n covers it; then it is *suppressed* under that coverer
(exactly one). Removing a forwarded subscription releases the ones suppressed under it; each is
checked again against what is still forwarded to n (it may be suppressed under another coverer)
and the others are returned to be forwarded now, before the unsubscription goes out, so that n is
never without a filter for events a live subscription wants. The sent index also remembers plain
forwards with covering off, so that a subscription is forwarded to a neighbour at most once
(advertisements arriving later re-trigger forwarding in PADRES).

Matching a publication (``Prt.matching``) is the brokers' hot path: every broker a publication
reaches scans its whole PRT. A PRT of more than ``VECTOR_MIN`` entries is matched as arrays (one
row of lower and one of upper bounds per attribute, over all entries; numpy), rebuilt only when
the PRT has changed since (``Prt`` counts its changes). An open end is stored as the next float
inward (``v > lo`` is ``v >= nextafter(lo, +inf)`` for every float ``v``), a free attribute as
(-inf, +inf), so each attribute costs two comparisons; the answer is ``filters.matches``' exactly,
in the PRT's order.

Looking for a coverer scans only subscriptions whose first attribute starts at or below the new
one's (a coverer's lower end cannot be above the covered one's): the forwarded subscriptions are
kept in a ``SortedList`` by that lower end. Suppressed subscriptions keep their box so that they
can be re-checked without the PRT.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from sortedcontainers import SortedList

from rangecast.brokers.filters import Box, covers, matches

__all__ = ["LOCAL", "VECTOR_MIN", "AdEntry", "OverlayTables", "Prt", "SentIndex", "SubEntry"]

#: PRTs up to this size are matched entry by entry (arrays cost more than they save there).
VECTOR_MIN = 32

#: The lasthop of an entry that came from the broker's own client.
LOCAL = -1


class AdEntry:
    __slots__ = ("box", "ext", "lasthop")

    def __init__(self, box: Box, lasthop: int, ext: Any = None) -> None:
        self.box = box
        self.lasthop = lasthop
        self.ext = ext


class SubEntry:
    __slots__ = ("box", "ext", "hops", "lasthop", "origin")

    def __init__(
        self,
        box: Box,
        lasthop: int,
        origin: int,
        ext: Any = None,
        hops: dict[int, int] | None = None,
    ) -> None:
        self.box = box
        self.lasthop = lasthop
        self.origin = origin
        self.ext = ext
        self.hops = hops


class Prt(dict[int, SubEntry]):
    """The PRT (sub id -> entry): a dict that counts its changes, so that ``matching`` can keep
    its arrays until the next one. Entries' boxes never change; their lasthops may (read from
    the entries, not cached)."""

    __slots__ = ("_arrays", "version")

    def __init__(self) -> None:
        super().__init__()
        self.version = 0
        #: (version, sub ids, entries, lower bounds, upper bounds, free mask) or None.
        self._arrays: tuple[int, list[int], list[SubEntry], Any, Any, Any] | None = None

    def __setitem__(self, key: int, value: SubEntry) -> None:
        self.version += 1
        dict.__setitem__(self, key, value)

    def __delitem__(self, key: int) -> None:
        self.version += 1
        dict.__delitem__(self, key)

    def pop(self, key: int, *default: Any) -> Any:  # type: ignore[override]
        self.version += 1
        return dict.pop(self, key, *default)

    def popitem(self) -> tuple[int, SubEntry]:
        self.version += 1
        return dict.popitem(self)

    def clear(self) -> None:
        self.version += 1
        dict.clear(self)

    def setdefault(self, key: int, default: SubEntry) -> SubEntry:  # type: ignore[override]
        self.version += 1
        return dict.setdefault(self, key, default)

    def update(self, *args: Any, **kw: Any) -> None:
        self.version += 1
        dict.update(self, *args, **kw)

    def __ior__(self, other: Any) -> Prt:  # type: ignore[override,misc]
        self.update(other)
        return self

    def matching(self, values: Sequence[float | None]) -> Iterator[tuple[int, SubEntry]]:
        """The entries whose box matches the event, in PRT order (``filters.matches``)."""
        if len(self) <= VECTOR_MIN:
            for sid, e in self.items():
                if matches(e.box, values):
                    yield sid, e
            return
        arrays = self._arrays
        if arrays is None or arrays[0] != self.version:
            arrays = self._arrays = self._build()
        _, sids, entries, lo, hi, free = arrays
        ok = None
        for a in range(lo.shape[0]):
            v = values[a] if a < len(values) else None
            m = free[a] if v is None else (lo[a] <= v) & (v <= hi[a])
            ok = m if ok is None else ok & m
        if ok is None:
            return
        for i in np.flatnonzero(ok).tolist():
            yield sids[i], entries[i]

    def _build(self) -> tuple[int, list[int], list[SubEntry], Any, Any, Any]:
        sids = list(self.keys())
        entries = list(self.values())
        d = len(entries[0].box)
        n = len(entries)
        lo = np.full((d, n), -np.inf)
        hi = np.full((d, n), np.inf)
        free = np.ones((d, n), dtype=bool)
        for j, e in enumerate(entries):
            for a, low, high, lo_open, hi_open in e.box._flat:
                lo[a, j] = np.nextafter(low, np.inf) if lo_open else low
                hi[a, j] = np.nextafter(high, -np.inf) if hi_open else high
                free[a, j] = False
        return self.version, sids, entries, lo, hi, free


class SentIndex:
    """What one broker forwarded to one neighbour, and what it held back as covered."""

    __slots__ = ("_by_lo", "covered_by", "covering", "sent", "suppressed", "use_covering")

    def __init__(self, use_covering: bool) -> None:
        self.use_covering = use_covering
        #: Forwarded: sub id -> box.
        self.sent: dict[int, Box] = {}
        #: (first attribute's lower end, sub id) of the forwarded subscriptions.
        self._by_lo = SortedList()
        #: Suppressed: sub id -> box, and sub id -> the forwarded subscription covering it.
        self.suppressed: dict[int, Box] = {}
        self.covered_by: dict[int, int] = {}
        #: Coverer -> the subscriptions suppressed under it (insertion-ordered).
        self.covering: dict[int, dict[int, None]] = {}

    def __contains__(self, sub: int) -> bool:
        return sub in self.sent or sub in self.suppressed

    def coverer(self, box: Box) -> int | None:
        """A forwarded subscription covering ``box``, or None."""
        lo0, hi0, _, hi0_open = box.dims[0]
        free = box.free
        sent = self.sent
        for _, sid in self._by_lo.irange(maximum=(lo0, 1 << 64)):
            s = sent[sid]
            # Cheap refusals first (the scan is the set-up's hot path): a box closed at hi0
            # holds hi0, which a box ending below it lacks; a missing value is accepted only
            # on a free attribute.
            if (s.dims[0][1] < hi0 and not hi0_open) or free & ~s.free:
                continue
            if covers(s, box):
                return sid
        return None

    def offer(self, sub: int, box: Box) -> bool:
        """Record ``sub`` for this neighbour: True if it must be forwarded now, False if it was
        already handled or is covered by something forwarded."""
        if sub in self.sent or sub in self.suppressed:
            return False
        if self.use_covering:
            c = self.coverer(box)
            if c is not None:
                self.suppressed[sub] = box
                self.covered_by[sub] = c
                self.covering.setdefault(c, {})[sub] = None
                return False
        self.sent[sub] = box
        self._by_lo.add((box.dims[0][0], sub))
        return True

    def remove(self, sub: int) -> tuple[bool, list[tuple[int, Box]]]:
        """Forget ``sub``: (whether it had been forwarded, so an unsubscription must follow;
        the subscriptions it covered that must be forwarded now)."""
        if sub in self.suppressed:
            del self.suppressed[sub]
            c = self.covered_by.pop(sub)
            del self.covering[c][sub]
            return False, []
        box = self.sent.pop(sub, None)
        if box is None:
            return False, []
        self._by_lo.remove((box.dims[0][0], sub))
        resend: list[tuple[int, Box]] = []
        for o in self.covering.pop(sub, {}):
            obox = self.suppressed.pop(o)
            del self.covered_by[o]
            if self.offer(o, obox):
                resend.append((o, obox))
        return True, resend

    def __len__(self) -> int:
        return len(self.sent)


class OverlayTables:
    """The routing state of one broker on one overlay."""

    __slots__ = ("prt", "seen", "sent", "srt", "tid_sent", "use_covering")

    def __init__(self, use_covering: bool) -> None:
        self.use_covering = use_covering
        self.srt: dict[int, AdEntry] = {}
        self.prt = Prt()
        #: Neighbour -> its sent index (made on first use).
        self.sent: dict[int, SentIndex] = {}
        #: Tree-ID routing: neighbour -> sub id -> the trees it was forwarded for.
        self.tid_sent: dict[int, dict[int, set[int]]] = {}
        #: Ad ids seen on a cyclic overlay (duplicates are dropped there).
        self.seen: set[int] = set()

    def sent_to(self, n: int) -> SentIndex:
        s = self.sent.get(n)
        if s is None:
            s = self.sent[n] = SentIndex(self.use_covering)
        return s
