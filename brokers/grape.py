"""GRAPE, Greedy Relocation Algorithm for Publishers of Events (Cheung & Jacobsen, CSRG-597):
trace sessions with delivery bit vectors, then a centralised choice of the publisher's broker
by estimated message rate and delivery delay.

Theory of operation
-------------------
**Phase 1.** A trace session is ``G_threshold`` = 100 consecutive publications of one publisher,
named by the first message id M. A broker that delivers publication M + k locally sets bit k of
its session bit vector and adds the number of local deliveries (``SessionLog``). At the end the
source sends a TIR down the links that carried session traffic and gathers one TIA per broker
(``TraceInfo``: neighbours, bit vector, deliveries, input-queue, matching and per-link
output-queue delays), about 100 B per broker.

**Phase 2**, at the source, over the tree the TIAs describe (Algorithms 1-3):

=================  ===========================================================================
downBV(b, prev)    bv(b) OR downBV(n, b) for every neighbour n != prev; memoised per directed
                   edge (one DFS per candidate reuses them: O(N^2) overall)
msgRate(c)         sum over every broker b of |downBV(b, parent of b with the tree rooted at c)|:
                   b carries publication k iff a broker at or past b delivered it (the root
                   term is the same for every c)
avgDelay(c)        DFS from c with cum = ping(publisher, c), our RTT/2; at b:
                   total += deliv(b) * (cum + qm(b, client)); child n gets cum + qm(b, n)
                   (+ RTT(b, n)/2 in the ``link_delay`` mode; the paper's Algorithm 1 has
                   none); qm(b, x) = input queue(b) + matching(b) + output queue(b -> x);
                   avgDelay = total / sum of deliv
select             priority p in {delay, load}, weight P: min-max normalise the p metric of
                   the candidates to 0-100, keep those <= 100 - P, pick the lowest other metric
                   (ties: lower p metric, then candidate order)
=================  ===========================================================================

So load100 is a minimum-rate candidate, delay100 a minimum-delay one, and load1 drops only the
candidates at the very top of the rate range before picking the lowest delay: close to delay100.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from rangecast.dht.errors import LocalProtocolError

Node = Hashable
#: the output queue toward the subscribers of a broker (the "client binding")
CLIENT = "<client>"
G_THRESHOLD = 100


@dataclass(slots=True)
class SessionLog:
    """One broker's record of one trace session."""

    trace_id: int
    bits: int = 0
    deliveries: int = 0
    #: G_threshold: publications in the session
    size: int = G_THRESHOLD

    def deliver(self, msg_id: int, local_deliveries: int) -> None:
        k = msg_id - self.trace_id
        if not 0 <= k < self.size:
            raise LocalProtocolError(f"message {msg_id} is outside session {self.trace_id}")
        if local_deliveries > 0:
            self.bits |= 1 << k
            self.deliveries += local_deliveries


@dataclass(slots=True)
class TraceInfo:
    """A TIA's payload for one broker."""

    neighbours: tuple[Node, ...]
    bits: int = 0
    deliveries: int = 0
    in_queue: float = 0.0
    matching: float = 0.0
    #: output-queue delay per neighbour and toward ``CLIENT``
    out_queue: dict[Node, float] = field(default_factory=dict)

    def qm(self, to: Node) -> float:
        return self.in_queue + self.matching + self.out_queue.get(to, 0.0)


class Grape:
    """Phase 2 over the TIAs of one session (``infos``: every broker of the session's tree)."""

    __slots__ = ("_down", "infos")

    def __init__(self, infos: Mapping[Node, TraceInfo]) -> None:
        self.infos = infos
        self._down: dict[tuple[Node, Node | None], int] = {}

    def down_bv(self, b: Node, prev: Node | None) -> int:
        """Algorithm 3, iteratively (deep trees) with the memo per directed edge."""
        stack: list[tuple[Node, Node | None, bool]] = [(b, prev, False)]
        down = self._down
        while stack:
            u, p, done = stack.pop()
            if (u, p) in down:
                continue
            kids = [n for n in self.infos[u].neighbours if n != p]
            if done:
                acc = self.infos[u].bits
                for n in kids:
                    acc |= down[(n, u)]
                down[(u, p)] = acc
            else:
                stack.append((u, p, True))
                stack.extend((n, u, False) for n in kids if (n, u) not in down)
        return down[(b, prev)]

    def _preorder(self, root: Node) -> list[tuple[Node, Node | None]]:
        order: list[tuple[Node, Node | None]] = []
        stack: list[tuple[Node, Node | None]] = [(root, None)]
        while stack:
            u, p = stack.pop()
            order.append((u, p))
            stack.extend((n, u) for n in reversed(self.infos[u].neighbours) if n != p)
        return order

    def msg_rate(self, c: Node) -> int:
        """Algorithm 2: publications carried, summed over the brokers, with the publisher at c."""
        return sum(self.down_bv(b, p).bit_count() for b, p in self._preorder(c))

    def avg_delay(
        self, c: Node, ping: float, link_delay: Callable[[Node, Node], float] | None = None
    ) -> float:
        """Algorithm 1 from candidate ``c``; ``ping`` is the publisher's one-way delay to c."""
        cum: dict[Node, float] = {c: ping}
        total = 0.0
        count = 0
        for b, p in self._preorder(c):
            info = self.infos[b]
            total += info.deliveries * (cum[b] + info.qm(CLIENT))
            count += info.deliveries
            for n in info.neighbours:
                if n != p:
                    extra = link_delay(b, n) if link_delay is not None else 0.0
                    cum[n] = cum[b] + info.qm(n) + extra
        return total / count if count else 0.0

    def select(
        self,
        candidates: Sequence[Node],
        pings: Mapping[Node, float],
        priority: Literal["delay", "load"],
        weight: float,
        link_delay: Callable[[Node, Node], float] | None = None,
    ) -> Node:
        rates = [float(self.msg_rate(c)) for c in candidates]
        delays = [self.avg_delay(c, pings[c], link_delay) for c in candidates]
        first, second = (delays, rates) if priority == "delay" else (rates, delays)
        return candidates[select_index(first, second, weight)]


def select_index(primary: Sequence[float], secondary: Sequence[float], weight: float) -> int:
    """Min-max normalise ``primary`` to 0-100, keep the indices <= 100 - weight, return the one
    with the lowest ``secondary`` (ties: lower primary, then the earlier index)."""
    if not primary or len(primary) != len(secondary):
        raise LocalProtocolError("need one primary and one secondary value per candidate")
    if not 0 <= weight <= 100:
        raise LocalProtocolError("weight is a percentage, 0 to 100")
    lo, hi = min(primary), max(primary)
    span = hi - lo

    def norm(x: float) -> float:
        return 100.0 * (x - lo) / span if span > 0 else 0.0

    keep = [i for i, x in enumerate(primary) if norm(x) <= 100.0 - weight]
    return min(keep, key=lambda i: (secondary[i], primary[i], i))
