"""What a thesis run records of its deliveries, and the oracle check (``Deliveries``), with
the hook that hands it the cores' application events (``Collector``).

The collector runs once per application event of the run (a delivery, a stored piece, an
installed subscription): at 100,000 nodes some 40 million times, which is why this module is
compiled (``rangecast/_compiled.py``) and keeps its receipts in flat arrays.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from typing import Any

import numpy as np

from rangecast.pubsub.node import EventDelivered, PieceStored, SubscriptionInstalled
from rangecast.sim import runlog
from rangecast.sim.engine import Simulator
from rangecast.sim.progress import Progress, steps

#: Elements converted at a time where a whole-array temporary would be as large as the record.
_SLICE = 1 << 20


class Deliveries:
    """Every receipt of an event by a subscription, and what the oracle expected, in flat
    arrays: the thesis run at 100,000 nodes has ~40 M of them, too many for a dict entry each.

    A subscription is its index ``j`` in subscribe order, an event its index ``k`` in publish
    order, and a receipt one ``int64`` key ``k * stride + j`` plus its time (16 bytes). The
    oracle's answer per event is an ascending ``int32`` array of ``j``. Receipts the run cannot
    name (an event nobody published, a subscription nobody made: never, unless ids collide)
    stay in a small dict, ``strays``, and are counted as false positives.
    """

    def __init__(self, stride: int) -> None:
        self.stride = max(1, stride)
        #: Receipts sorted at a time by ``check``.
        self.block = 1 << 22
        self.sub_of: dict[int, dict[int, int]] = {}
        self.owner_node = array("i")
        self.owner_sid = array("q")
        self.event_of: dict[int, int] = {}
        self.expected: list[np.ndarray] = []
        self.keys = array("q")
        self.times = array("d")
        #: (eid, subscriber index, sid) -> [first receipt time, receipts].
        self.strays: dict[tuple[int, int, int], list[float]] = {}

    def subscribed(self, i: int, sid: int) -> None:
        self.sub_of.setdefault(i, {})[sid] = len(self.owner_sid)
        self.owner_node.append(i)
        self.owner_sid.append(sid)

    def published(self, eid: int, matches: np.ndarray) -> None:
        self.event_of[eid] = len(self.expected)
        self.expected.append(matches.astype(np.int32))

    def received(self, i: int, eid: int, sids: Sequence[int], now: float) -> None:
        k = self.event_of.get(eid)
        subs = self.sub_of.get(i)
        if k is None or subs is None:
            for sid in sids:
                self._stray(eid, i, sid, now)
            return
        base = k * self.stride
        for sid in sids:
            j = subs.get(sid)
            if j is None:
                self._stray(eid, i, sid, now)
            else:
                self.keys.append(base + j)
                self.times.append(now)

    def _stray(self, eid: int, i: int, sid: int, now: float) -> None:
        got = self.strays.get((eid, i, sid))
        if got is None:
            self.strays[(eid, i, sid)] = [now, 1]
        else:
            got[1] += 1

    def check(
        self,
        published: dict[int, float],
        publisher: dict[int, int],
        log: runlog.DeliveryLog | None = None,
        progress: Progress | None = None,
    ) -> tuple[dict[str, int], np.ndarray]:
        """Compare the receipts with the oracle, event by event in eid order: the counts
        (expected, received, missed, duplicates, false positives) and the delivery latencies
        (ms) of the expected receipts; with ``log``, hand it each event's rows in the run log's
        order (eid, subscriber, sid); with ``progress``, show the events checked as a bar (40 s
        at 10^5 nodes and 2,000 events).

        Receipts are sorted a block of events at a time (about ``block`` receipts), so that the
        sort's temporaries stay small next to the record itself."""
        keys = np.frombuffer(self.keys, dtype=np.int64)
        times = np.frombuffer(self.times, dtype=np.float64)
        stride = self.stride
        strays: dict[int, list[tuple[int, int, float, int]]] = {}
        for (eid, i, stray_sid), (t, n) in self.strays.items():
            strays.setdefault(eid, []).append((i, stray_sid, t, int(n)))
        eids = sorted(self.event_of.keys() | strays.keys())
        # Each published event's rank in eid order, and each receipt's (computed in slices).
        n_events = len(self.expected)
        rank_of_k = np.zeros(n_events, dtype=np.int32)
        ranked = [self.event_of[e] for e in eids if e in self.event_of]
        rank_of_k[ranked] = np.arange(len(ranked), dtype=np.int32)
        receipt_rank = np.empty(len(keys), dtype=np.int32)
        for a in range(0, len(keys), _SLICE):
            receipt_rank[a : a + _SLICE] = rank_of_k[keys[a : a + _SLICE] // stride]
        upto = np.cumsum(np.bincount(receipt_rank, minlength=len(ranked)))
        owner_node = np.frombuffer(self.owner_node, dtype=np.int32)
        owner_sid = np.frombuffer(self.owner_sid, dtype=np.int64)
        # Rank of each subscription in (subscriber, sid) order: the run log's row order.
        order_of = np.empty(len(owner_sid), dtype=np.int64)
        order_of[np.lexsort((owner_sid, owner_node))] = np.arange(len(owner_sid))
        counts = dict.fromkeys(("expected", "received", "missed", "false_positives"), 0)
        distinct = 0
        latencies: list[np.ndarray] = []
        empty_i, empty_f = np.zeros(0, dtype=np.int64), np.zeros(0)
        uniq = copies = empty_i
        first_s = empty_f
        block_end = rank = 0
        for eid in steps(progress, eids, "checking deliveries", unit="events"):
            k = self.event_of.get(eid)
            if k is None:
                want = got = got_n = empty_i
                got_s = empty_f
            else:
                if rank >= block_end:
                    # The next block: ranks [rank, block_end) with about ``block`` receipts.
                    before = upto[rank - 1] if rank else 0
                    block_end = max(
                        rank + 1, int(np.searchsorted(upto, before + self.block, side="right"))
                    )
                    inside = np.flatnonzero((receipt_rank >= rank) & (receipt_rank < block_end))
                    uniq, first, copies = np.unique(
                        keys[inside], return_index=True, return_counts=True
                    )
                    first_s = times[inside[first]]
                    distinct += len(uniq)
                    del inside, first
                rank += 1
                lo, hi = np.searchsorted(uniq, (k * stride, (k + 1) * stride))
                want = self.expected[k]
                got = uniq[lo:hi] - k * stride
                got_s = first_s[lo:hi]
                got_n = copies[lo:hi]
            rows = np.union1d(want, got)
            pos = np.searchsorted(got, rows)
            is_got = pos < len(got)
            is_got[is_got] = got[pos[is_got]] == rows[is_got]
            pos_w = np.searchsorted(want, rows)
            is_want = pos_w < len(want)
            is_want[is_want] = want[pos_w[is_want]] == rows[is_want]
            received_s = np.full(len(rows), np.nan)
            received_s[is_got] = got_s[pos[is_got]]
            n_copies = np.zeros(len(rows), dtype=np.int64)
            n_copies[is_got] = got_n[pos[is_got]]
            subscriber = owner_node[rows].astype(np.int64)
            sids: np.ndarray = owner_sid[rows]
            order = np.argsort(order_of[rows], kind="stable")
            extra = strays.get(eid)
            if extra:
                subscriber = np.concatenate([subscriber, [e[0] for e in extra]])
                sids = np.concatenate([sids, np.array([e[1] for e in extra], dtype=np.int64)])
                received_s = np.concatenate([received_s, [e[2] for e in extra]])
                n_copies = np.concatenate([n_copies, [e[3] for e in extra]])
                is_got = np.concatenate([is_got, np.ones(len(extra), dtype=bool)])
                is_want = np.concatenate([is_want, np.zeros(len(extra), dtype=bool)])
                order = np.lexsort((sids, subscriber))
            t0 = published.get(eid, math.nan)
            latency = (received_s - t0) * 1000.0
            if k is not None:
                hit = is_want & is_got
                counts["expected"] += len(want)
                counts["received"] += int(is_got.sum())
                counts["missed"] += len(want) - int(hit.sum())
                counts["false_positives"] += int((is_got & ~is_want).sum())
                latencies.append(latency[hit])
            else:
                counts["false_positives"] += int(is_got.sum())
            if log is not None:
                log.add(
                    eid,
                    publisher.get(eid, -1),
                    t0,
                    subscriber[order],
                    sids[order],
                    is_want[order],
                    received_s[order],
                    n_copies[order],
                    latency[order],
                )
        counts["duplicates"] = len(keys) - distinct
        counts["duplicates"] += sum(int(n) - 1 for _, n in self.strays.values())
        return counts, np.concatenate(latencies) if latencies else empty_f


class Collector:
    """Receives the cores' application events."""

    def __init__(self, index_of_id: dict[bytes, int], deliveries: Deliveries) -> None:
        self.index_of_id = index_of_id
        self.installed: dict[tuple[int, int], float] = {}
        self.stored: dict[tuple[int, int], float] = {}
        self.deliveries = deliveries
        self.expect_installs = 0
        self.sim: Simulator | None = None

    def __call__(self, i: int, events: list[Any]) -> None:
        for ev in events:
            if isinstance(ev, EventDelivered):
                self.deliveries.received(i, ev.event.eid, ev.sids, ev.now)
            elif isinstance(ev, PieceStored):
                key = (self.index_of_id[ev.subscriber], ev.sid)
                prev = self.stored.get(key)
                if prev is None or ev.now > prev:
                    self.stored[key] = ev.now
            elif isinstance(ev, SubscriptionInstalled):
                self.installed[(i, ev.sid)] = ev.now
                if len(self.installed) == self.expect_installs and self.sim is not None:
                    self.sim.stop()
