"""OctopiA (Shafique, arXiv 1604.06853): cluster index vectors on a SCOT, static (SNR) and
inter-cluster dynamic (IDR) notification routing.

Theory of operation
-------------------
A SCOT is the product of a tree G_a and the complete graph K_m. Broker ``B(x, c)`` sits in region
``x`` (a node of G_a) and cluster ``c``; **aLinks** join ``B(x,c)-B(y,c)`` for tree edges x-y
(cluster c is a copy of the tree), **iLinks** join ``B(x,c)-B(x,c')`` (region x is a K_m).

A **CIV** is an m-bit int, bit c for cluster c, printed most significant first ("101": clusters 2
and 0). The host broker of an advertisement keeps in its SRT the CIV of the publisher's target
clusters; a region peer keeps only its **SCB** (has my cluster a matching subscription?).

==========================  ===========================================================  =========
input at broker b=B(x,c)    action                                                       sends
==========================  ===========================================================  =========
advertise (client)          SRT[a] = (box, host=b, CIV = own bit if PRT overlaps a)      ADV to
                                                                                         m-1 peers
ADV a from peer h           SRT[a] = (box, host=h); SCB = PRT overlaps a                 CIB_SET
                                                                                         to h if SCB
subscribe s (client/aLink)  PRT[s] = lasthop; forward s over aLinks but the sender;      SUB, and
                            per foreign ad a overlapping s with SCB off: SCB on          CIB_SET
                            per own hosted ad overlapping s: own bit on (the PTC bit)    to a.host
CIB_SET(a, s) from B(x,c')  host sets bit c' of CIV[a]; s is not stored                  -
==========================  ===========================================================  =========

A notification of ad ``a`` is routed at each broker by its targets: **aLinks** = lasthops of the
matching PRT entries (reverse path), **iLinks** = one per cluster in (CIV[a] at the host | the
CIV header of a CIV-N), never to the broker's own cluster (own bit = context/PTC bit). SNR sends
on all targets; IDR (``idr``) decides from the congested set O of the target iLinks I:

====================================  ========================================================
condition                             copies (one CIV header on at most one copy)
====================================  ========================================================
O = {}                                A + I
O != I                                A + (I - O); header clusters(O) on argmin_q(I - O)
O = I, some a in A not congested      A; header clusters(I) on argmin_q(free A)
otherwise                             A; one CIV-N to argmin_q(I) carrying the other clusters
====================================  ========================================================

A queue is congested iff CE = n_in/n_out >= 1 and q > delta over the last closed window
(``LinkStatusTable``; Eq. 10 is lost in the OCR, this is BASELINES' reading, delta = 10 and a
50 ms window as the paper set them).

Reading for Fig. 8 (the OCR lost its cluster names): the CIVs 100/101/111 given for P1 (host
cluster 2), P2 (host 1, not a target) and P3 (host 1) are exactly the publishers' target-cluster
sets, so the host's own bit is set iff its own cluster holds a matching subscription (its PRT
sees every subscription of its cluster). Only the other bits send iLink copies.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

Region = Hashable
Broker = tuple[Region, int]
Interval = tuple[float, float]
Box = tuple[Interval, ...]
Point = tuple[float, ...]
#: (destination, kind, payload) of a control message
Out = tuple[Broker, str, tuple[Any, ...]]


def overlaps(a: Box, b: Box) -> bool:
    return all(alo <= bhi and blo <= ahi for (alo, ahi), (blo, bhi) in zip(a, b, strict=True))


def contains(box: Box, point: Point) -> bool:
    return all(lo <= v <= hi for (lo, hi), v in zip(box, point, strict=True))


def civ_str(civ: int, m: int) -> str:
    """Bits indexed right to left: ``civ_str(0b101, 3) == "101"`` (clusters 2 and 0)."""
    return format(civ, f"0{m}b")


def clusters(civ: int) -> list[int]:
    return [c for c in range(civ.bit_length()) if civ >> c & 1]


def scot(tree: Mapping[Region, Iterable[Region]], m: int) -> tuple[dict[Broker, set[Broker]], ...]:
    """(aLinks, iLinks) adjacency of ``tree`` x K_m."""
    alinks = {(x, c): {(y, c) for y in tree[x]} for x in tree for c in range(m)}
    ilinks = {(x, c): {(x, d) for d in range(m) if d != c} for x in tree for c in range(m)}
    return alinks, ilinks


# ------------------------------------------------------------------------- dynamic routing
@dataclass(frozen=True, slots=True)
class Copy:
    link: Broker
    #: CIV header (0: a plain copy; otherwise a CIV-N for these clusters)
    civ: int = 0


def idr(
    alinks: Sequence[Broker],
    ilinks: Mapping[int, Broker],
    congested: Callable[[Broker], bool],
    qlen: Callable[[Broker], int],
) -> list[Copy]:
    """The IDR decision table (module docstring). ``ilinks`` maps target cluster -> iLink
    peer; argmin ties go to the earlier link (aLinks in the given order, iLinks by cluster)."""
    ic = sorted(ilinks)
    out = [Copy(a) for a in alinks]
    busy = [c for c in ic if congested(ilinks[c])]
    if not busy:
        return out + [Copy(ilinks[c]) for c in ic]
    free = [c for c in ic if c not in busy]
    if free:
        pick = min(free, key=lambda c: qlen(ilinks[c]))
        header = sum(1 << c for c in busy)
        return out + [Copy(ilinks[c], header if c == pick else 0) for c in free]
    header = sum(1 << c for c in ic)
    free_a = [i for i, a in enumerate(alinks) if not congested(a)]
    if free_a:
        pick_a = min(free_a, key=lambda i: qlen(alinks[i]))
        out[pick_a] = Copy(alinks[pick_a], header)
        return out
    pick = min(ic, key=lambda c: qlen(ilinks[c]))
    return [*out, Copy(ilinks[pick], header & ~(1 << pick))]


class LinkStatusTable:
    """Per output queue: CE = n_in/n_out and q over the last closed window of ``window`` s.
    An idle window has CE 1 (the paper's congestion-free queue: CE 1, q 0)."""

    __slots__ = ("_state", "delta", "window")

    def __init__(self, delta: int = 10, window: float = 0.05) -> None:
        self.delta = delta
        self.window = window
        #: link -> [window index, n_in, n_out, q now, CE closed, q closed]
        self._state: dict[Hashable, list[float]] = {}

    def observe(self, link: Hashable, now: float, n_in: int = 0, n_out: int = 0,
                q: int | None = None) -> None:  # fmt: skip
        # windows are [i*window, (i+1)*window); rounding keeps 0.15/0.05 in window 3
        idx = math.floor(round(now / self.window, 9))
        st = self._state.get(link)
        if st is None:
            st = self._state[link] = [idx, 0, 0, 0, 1.0, 0]
        if idx > st[0]:
            # the window that ended holds the counts; any later one was idle
            st[4] = _ratio(st[1], st[2]) if idx == st[0] + 1 else 1.0
            st[5] = st[3]
            st[0] = idx
            st[1] = st[2] = 0
        st[1] += n_in
        st[2] += n_out
        if q is not None:
            st[3] = q

    def ce(self, link: Hashable) -> float:
        st = self._state.get(link)
        return 1.0 if st is None else st[4]

    def queue(self, link: Hashable) -> int:
        st = self._state.get(link)
        return 0 if st is None else int(st[5])

    def congested(self, link: Hashable) -> bool:
        return self.ce(link) >= 1 and self.queue(link) > self.delta


def _ratio(n_in: float, n_out: float) -> float:
    if n_out == 0:
        return math.inf if n_in > 0 else 1.0
    return n_in / n_out


# ---------------------------------------------------------------------------- broker tables
@dataclass(slots=True)
class SrtEntry:
    box: Box
    host: Broker
    civ: int = 0  # at the host: the target clusters
    scb: bool = False  # at a peer: CIB_SET already sent for my cluster


@dataclass(slots=True)
class OctopiaBroker:
    """One broker's SRT and PRT with the handlers of the table above. Handlers return the
    messages to send as (destination, kind, payload)."""

    addr: Broker
    alinks: set[Broker]
    ilinks: dict[int, Broker]
    srt: dict[Hashable, SrtEntry] = field(default_factory=dict)
    prt: dict[Hashable, tuple[Box, Broker | None]] = field(default_factory=dict)

    def advertise(self, adv_id: Hashable, box: Box) -> list[Out]:
        own = any(overlaps(b, box) for b, _ in self.prt.values())
        self.srt[adv_id] = SrtEntry(box, self.addr, (1 << self.addr[1]) if own else 0)
        return [(p, "ADV", (adv_id, box)) for _, p in sorted(self.ilinks.items())]

    def on_adv(self, src: Broker, adv_id: Hashable, box: Box) -> list[Out]:
        e = self.srt[adv_id] = SrtEntry(box, src)
        hit = next((s for s, (b, _) in self.prt.items() if overlaps(b, box)), None)
        if hit is None:
            return []
        e.scb = True
        return [(src, "CIB_SET", (adv_id, hit, self.prt[hit][0]))]

    def on_sub(self, src: Broker | None, sub_id: Hashable, box: Box) -> list[Out]:
        self.prt[sub_id] = (box, src)
        out: list[Out] = [
            (n, "SUB", (sub_id, box)) for n in sorted(self.alinks, key=repr) if n != src
        ]
        for adv_id, e in self.srt.items():
            if not overlaps(e.box, box):
                continue
            if e.host == self.addr:
                e.civ |= 1 << self.addr[1]
            elif not e.scb:
                e.scb = True
                out.append((e.host, "CIB_SET", (adv_id, sub_id, box)))
        return out

    def on_cib_set(self, src: Broker, adv_id: Hashable) -> None:
        self.srt[adv_id].civ |= 1 << src[1]

    def targets(
        self, src: Broker | None, adv_id: Hashable, event: Point, header: int
    ) -> tuple[list[Hashable], list[Broker], dict[int, Broker]]:
        """(local subscriptions, target aLinks, target iLinks by cluster) for a notification."""
        local: list[Hashable] = []
        alinks: list[Broker] = []
        for sub_id, (box, last) in self.prt.items():
            if contains(box, event):
                if last is None:
                    local.append(sub_id)
                elif last != src and last not in alinks:
                    alinks.append(last)
        civ = header
        e = self.srt.get(adv_id)
        if src is None and e is not None and e.host == self.addr:
            civ |= e.civ
        civ &= ~(1 << self.addr[1])  # the own (context) bit never sends a copy
        return local, alinks, {c: self.ilinks[c] for c in clusters(civ)}


class Octopia:
    """All brokers of a SCOT with a FIFO driver that runs a control flow to quiescence and
    routes one notification, counting messages by kind."""

    def __init__(self, tree: Mapping[Region, Iterable[Region]], m: int) -> None:
        self.m = m
        alinks, ilinks = scot(tree, m)
        self.brokers = {
            b: OctopiaBroker(b, alinks[b], {p[1]: p for p in ilinks[b]}) for b in alinks
        }
        self.sent: dict[str, int] = {}

    def _run(self, src: Broker, outs: list[Out]) -> None:
        queue = deque((src, *o) for o in outs)
        while queue:
            frm, dst, kind, payload = queue.popleft()
            self.sent[kind] = self.sent.get(kind, 0) + 1
            b = self.brokers[dst]
            if kind == "ADV":
                more = b.on_adv(frm, *payload)
            elif kind == "SUB":
                more = b.on_sub(frm, *payload)
            else:
                b.on_cib_set(frm, payload[0])
                more = []
            queue.extend((dst, *o) for o in more)

    def advertise(self, host: Broker, adv_id: Hashable, box: Box) -> None:
        self._run(host, self.brokers[host].advertise(adv_id, box))

    def subscribe(self, broker: Broker, sub_id: Hashable, box: Box) -> None:
        self._run(broker, self.brokers[broker].on_sub(None, sub_id, box))

    def civ(self, adv_id: Hashable) -> int:
        return next(b.srt[adv_id].civ for b in self.brokers.values()
                    if adv_id in b.srt and b.srt[adv_id].host == b.addr)  # fmt: skip

    def publish(
        self,
        host: Broker,
        adv_id: Hashable,
        event: Point,
        congested: Callable[[Broker, Broker], bool] = lambda a, b: False,
        qlen: Callable[[Broker, Broker], int] = lambda a, b: 0,
    ) -> tuple[list[tuple[Broker, Broker, int]], list[tuple[Broker, Hashable]]]:
        """(hops (src, dst, CIV header), deliveries (broker, sub id)); SNR by default, IDR
        when ``congested(src, dst)`` marks output queues."""
        hops: list[tuple[Broker, Broker, int]] = []
        delivered: list[tuple[Broker, Hashable]] = []
        queue: deque[tuple[Broker, Broker | None, int]] = deque([(host, None, 0)])
        while queue:
            at, frm, header = queue.popleft()
            local, a, i = self.brokers[at].targets(frm, adv_id, event, header)
            delivered.extend((at, s) for s in local)
            for cp in idr(a, i, partial(congested, at), partial(qlen, at)):
                hops.append((at, cp.link, cp.civ))
                queue.append((cp.link, at, cp.civ))
        return hops, delivered
