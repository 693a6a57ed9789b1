"""OctopiA (Shafique, arXiv 1604.06853) as a strategy on broker cores over a SCOT: cluster index
vectors, static (SNR) and inter-cluster dynamic (IDR) notification routing.

Theory of operation
-------------------
A SCOT (``graphs.scot``) is the product of a tree G_a and the complete graph K_m. Broker
``B(x, c)`` sits in region ``x`` and cluster ``c``; **aLinks** join ``B(x,c)-B(y,c)`` for tree
edges x-y (overlay c: cluster c is a copy of the tree), **iLinks** join ``B(x,c)-B(x,c')``
(overlay m: region x is a K_m). Each cluster overlay runs SIENA (subscriptions flood their own
cluster; covering off, as in the paper's evaluation); the iLink overlay carries only the
strategy's messages, and its SRT is OctopiA's (``AdEntry.ext``: the CIV at the host, the SCB
flag at a region peer).

A **CIV** is an m-bit int, bit c for cluster c, printed most significant first ("101": clusters 2
and 0). The host broker keeps the CIV of the publisher's target clusters; a region peer keeps only
its **SCB** (has my cluster a matching subscription?).

==========================  ===========================================================  =========
input at broker b=B(x,c)    action                                                       sends
==========================  ===========================================================  =========
advertise (client)          SRT[a] = (box, LOCAL, CIV = own bit if PRT overlaps a)      ADV to
                                                                                         m-1 peers
ADV a from peer h           SRT[a] = (box, h, SCB = PRT overlaps a); consumed here       CIB_SET
                                                                                         to h if SCB
subscribe s (client/aLink)  the core stores and floods s in the cluster; per foreign     CIB_SET
                            ad overlapping s with SCB off: SCB on; per own hosted ad     to a's host
                            overlapping s: own bit on (the PTC bit)
CIB_SET(a) from B(x,c')     host sets bit c' of CIV[a]                                   -
==========================  ===========================================================  =========

A notification is routed by the strategy at every broker (``Broker.match`` then ``deliver``):
**aLinks** = lasthops of the matching cluster PRT entries but the sender (reverse path),
**iLinks** = one per cluster in (CIV[a] at the host | the CIV header of a CIV-N), never the
broker's own cluster (own bit = context/PTC bit). SNR sends on all targets; IDR (``idr``)
decides from the congested set O of the target iLinks I:

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
50 ms window as the paper set them). The queues are the driver's: before each decision the
strategy samples every candidate link from its ``LinkQueues`` into the table at ``now``. A
driver with a per-broker service time counts the broker's waiting inputs in every link's queue
(each will be routed onto its target links after them): an overwhelmed broker, the paper's case
(i), finds all its target links congested and adds one copy instead of one per target cluster.

Reading for Fig. 8 (the OCR lost its cluster names): the CIVs 100/101/111 given for P1 (host
cluster 2), P2 (host 1, not a target) and P3 (host 1) are exactly the publishers' target-cluster
sets, so the host's own bit is set iff its own cluster holds a matching subscription (its PRT
sees every subscription of its cluster). Only the other bits send iLink copies.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from rangecast.brokers.broker import Broker, LinkQueues, RoutingConfig, Strategy, siena
from rangecast.brokers.filters import Box, matches, overlaps
from rangecast.brokers.graphs import BrokerGraph, Overlay, RttLike, scot
from rangecast.brokers.messages import (
    Advertise,
    Control,
    Publish,
    Subscribe,
    box_from_wire,
    box_to_wire,
)
from rangecast.brokers.tables import LOCAL, AdEntry
from rangecast.dht.errors import LocalProtocolError, RemoteProtocolError
from rangecast.dht.wire import Message

__all__ = [
    "Copy",
    "LinkStatusTable",
    "OctopiaLayout",
    "OctopiaStrategy",
    "build",
    "civ_str",
    "clusters",
    "idr",
]

#: Control op: the peer's cluster has a subscription matching the ad (``ref``).
OP_CIB_SET = 1


def civ_str(civ: int, m: int) -> str:
    """Bits indexed right to left: ``civ_str(0b101, 3) == "101"`` (clusters 2 and 0)."""
    return format(civ, f"0{m}b")


def clusters(civ: int) -> list[int]:
    return [c for c in range(civ.bit_length()) if civ >> c & 1]


# ------------------------------------------------------------------------- dynamic routing
@dataclass(frozen=True, slots=True)
class Copy:
    link: int
    #: CIV header (0: a plain copy; otherwise a CIV-N for these clusters)
    civ: int = 0


def idr(
    alinks: Sequence[int],
    ilinks: Mapping[int, int],
    congested: Callable[[int], bool],
    qlen: Callable[[int], int],
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
        self._state: dict[int, list[float]] = {}

    def observe(self, link: int, now: float, n_in: int = 0, n_out: int = 0,
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

    def ce(self, link: int) -> float:
        st = self._state.get(link)
        return 1.0 if st is None else st[4]

    def queue(self, link: int) -> int:
        st = self._state.get(link)
        return 0 if st is None else int(st[5])

    def congested(self, link: int) -> bool:
        return self.ce(link) >= 1 and self.queue(link) > self.delta


def _ratio(n_in: float, n_out: float) -> float:
    if n_out == 0:
        return math.inf if n_in > 0 else 1.0
    return n_in / n_out


# ------------------------------------------------------------------------------------ layout
@dataclass(slots=True)
class OctopiaLayout:
    """A SCOT as broker overlays: cluster c is overlay c, the iLinks are overlay m."""

    graph: BrokerGraph
    overlays: list[Overlay]
    m: int
    groups: list[list[int]]
    cluster_of: dict[int, int]
    region_of: dict[int, int]

    @property
    def ilink(self) -> int:
        return self.m

    def configs(self) -> dict[int, RoutingConfig]:
        return {i: siena() for i in range(self.m + 1)}

    def strategy(
        self, v: int, dynamic: bool = False, queues: LinkQueues | None = None
    ) -> OctopiaStrategy:
        return OctopiaStrategy(self, v, dynamic, queues)


def build(
    tree_edges: Sequence[tuple[int, int]],
    m: int,
    groups: Sequence[Sequence[int]],
    rtt: RttLike | None = None,
) -> OctopiaLayout:
    """``graphs.scot`` with its overlays: B(x, c) = ``groups[c][x]``."""
    g = scot(tree_edges, m, groups, rtt)
    overlays = [g.overlay(f"cluster:{c}", f"cluster:{c}") for c in range(m)]
    overlays.append(g.overlay("iLink", "iLink"))
    cluster_of = {v: c for c, grp in enumerate(groups) for v in grp}
    region_of = {v: x for grp in groups for x, v in enumerate(grp)}
    return OctopiaLayout(g, overlays, m, [list(x) for x in groups], cluster_of, region_of)


# ---------------------------------------------------------------------------------- strategy
class OctopiaStrategy(Strategy):
    """One broker's part of OctopiA (module docs). Client calls: ``advertise``, ``subscribe``,
    ``publish``. ``dynamic``: IDR, else SNR; ``queues``: the driver's output queues (none: no
    link is ever congested, and IDR is SNR)."""

    __slots__ = ("_layout", "alinks", "c", "dynamic", "lst", "peers", "queues")

    def __init__(
        self,
        layout: OctopiaLayout,
        v: int,
        dynamic: bool = False,
        queues: LinkQueues | None = None,
    ) -> None:
        self._layout = layout
        self.c = layout.cluster_of[v]
        x = layout.region_of[v]
        #: The iLink peer of each other cluster.
        self.peers = {d: grp[x] for d, grp in enumerate(layout.groups) if d != self.c}
        self.alinks = frozenset(layout.overlays[self.c].neighbours(v))
        self.dynamic = dynamic
        self.queues = queues
        self.lst = LinkStatusTable()

    # -- client calls ----------------------------------------------------------------------

    def advertise(self, broker: Broker, box: Box, now: float) -> int:
        ad = broker.new_id()
        own = any(overlaps(e.box, box) for e in broker.tables(self.c).prt.values())
        broker.tables(self._layout.ilink).srt[ad] = AdEntry(box, LOCAL, 1 << self.c if own else 0)
        msg = Advertise(self._layout.ilink, ad, box_to_wire(box))
        for _, p in sorted(self.peers.items()):
            broker.send(p, msg, now)
        return ad

    def subscribe(self, broker: Broker, box: Box, now: float) -> int:
        sid = broker.subscribe(box, now, self.c)
        self._cib(broker, box, now)
        return sid

    def publish(self, broker: Broker, ad: int, values: Sequence[float | None], now: float) -> int:
        e = broker.tables(self._layout.ilink).srt.get(ad)
        if e is None or e.lasthop != LOCAL or not matches(e.box, values):
            raise LocalProtocolError(f"publish needs an event inside local ad {ad}")
        eid = broker.new_id()
        self._route(broker, Publish(self.c, eid, list(values)), LOCAL, e.ext, now)
        return eid

    def civ(self, broker: Broker, ad: int) -> int:
        """The CIV of an ad this broker hosts."""
        e = broker.tables(self._layout.ilink).srt[ad]
        if e.lasthop != LOCAL:
            raise LocalProtocolError(f"broker {broker.id} does not host ad {ad}")
        return int(e.ext)

    # -- hooks ------------------------------------------------------------------------------

    def on_receive(self, broker: Broker, msg: Message, src: int, now: float) -> bool:
        t = type(msg)
        if t is Publish:
            assert isinstance(msg, Publish)
            self._route(broker, msg, src, msg.hdr[0] if msg.hdr else 0, now)
            return False
        if t is Advertise:
            assert isinstance(msg, Advertise)
            if msg.overlay != self._layout.ilink:
                raise RemoteProtocolError("OctopiA advertisements travel on iLinks only")
            box = box_from_wire(msg.box, len(broker.schema))
            hit = any(overlaps(e.box, box) for e in broker.tables(self.c).prt.values())
            broker.tables(msg.overlay).srt[msg.ad] = AdEntry(box, src, hit)
            if hit:
                broker.send(src, Control(msg.overlay, OP_CIB_SET, msg.ad), now)
            return False  # a tree of depth 1: never flooded on
        if t is Subscribe:
            assert isinstance(msg, Subscribe)
            if msg.overlay != self.c:
                raise RemoteProtocolError("OctopiA subscriptions flood their own cluster only")
            # The core stores and floods it on; the CIVs learn of it here.
            self._cib(broker, box_from_wire(msg.box, len(broker.schema)), now)
        return True

    def on_control(self, broker: Broker, msg: Control, src: int, now: float) -> None:
        e = broker.tables(self._layout.ilink).srt.get(msg.ref)
        if msg.op != OP_CIB_SET or e is None or e.lasthop != LOCAL:
            raise RemoteProtocolError(f"unexpected control {msg.op} for ad {msg.ref}")
        e.ext |= 1 << self._layout.cluster_of[src]

    # -- internals ----------------------------------------------------------------------------

    def _cib(self, broker: Broker, box: Box, now: float) -> None:
        """A subscription of this cluster: mark the overlapping ads' CIVs."""
        ilink = self._layout.ilink
        for ad, e in broker.tables(ilink).srt.items():
            if not overlaps(e.box, box):
                continue
            if e.lasthop == LOCAL:
                e.ext |= 1 << self.c
            elif not e.ext:
                e.ext = True
                broker.send(e.lasthop, Control(ilink, OP_CIB_SET, ad), now)

    def _route(self, broker: Broker, msg: Publish, src: int, civ: int, now: float) -> None:
        """Deliver locally, RPF on aLinks, iLink copies per CIV bit (IDR: some as CIV-N)."""
        pub = msg if msg.overlay == self.c and not msg.hdr else Publish(self.c, msg.eid, msg.values)
        local, alinks = broker.match(self.c, pub, src)
        civ &= ~(1 << self.c)  # the own (context) bit never sends a copy
        ilinks = {d: self.peers[d] for d in clusters(civ)}
        if self.dynamic and self.queues is not None and ilinks:
            self._sample(broker.id, [*alinks, *ilinks.values()], now)
            copies = idr(alinks, ilinks, self.lst.congested, self.lst.queue)
        else:
            copies = [Copy(a) for a in alinks] + [Copy(ilinks[d]) for d in sorted(ilinks)]
        broker.deliver(self.c, pub, local, src, now, bool(copies))
        ilink = self._layout.ilink
        for cp in copies:
            ov = self.c if cp.link in self.alinks else ilink
            hdr = [cp.civ] if cp.civ else []
            out = pub if ov == self.c and not hdr else Publish(ov, msg.eid, msg.values, hdr=hdr)
            broker.send(cp.link, out, now)

    def _sample(self, v: int, links: list[int], now: float) -> None:
        assert self.queues is not None
        for link in links:
            q, n_in, n_out = self.queues.sample(v, link, now)
            self.lst.observe(link, now, n_in, n_out, q)
