"""The timer heap every sans-IO core keeps: deadlines with a kind and an argument, in order.

Theory of operation
-------------------
A core has one timer towards its driver (``get_timer()``: the earliest deadline) but many
reasons to be woken: a hop's acknowledgement, a keep-alive round, a parked probe, a periodic
check. Each reason is a *kind*; an entry is ``(deadline, sequence number, kind, argument)``.
The core pushes entries as it goes and, when the driver calls ``handle_timer(now)``, pops the
due ones in order and dispatches each through its table kind -> handler.

Ties go in the order the entries were pushed (the sequence number; it also means entries
never compare their kinds or arguments), so the same inputs always fire the same timers in the
same order, and a deterministic run stays deterministic.

Entries are never removed early: a core that cancels something (an ack that arrived, a probe
that found its node) leaves the entry in place and tells a stale one from a live one when it
comes up, by its own state. ``heap`` is the list itself, read without a call on the cores' hot
paths (``heap[0][0]`` is the next deadline; ``get_timer`` may ``heapq.heappop`` stale entries
off the top so that the driver is not woken for nothing); the list object is never replaced
(cores keep a reference to it).
"""

from __future__ import annotations

import heapq
from typing import Any, Generic, TypeVar

K = TypeVar("K")


class TimerHeap(Generic[K]):
    """Deadlines in order, ties in the order they were pushed."""

    __slots__ = ("_seq", "heap")

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, K, Any]] = []
        self._seq = 0

    def __len__(self) -> int:
        return len(self.heap)

    def push(self, deadline: float, kind: K, arg: Any = None) -> None:
        self._seq += 1
        heapq.heappush(self.heap, (deadline, self._seq, kind, arg))

    def next_deadline(self) -> float | None:
        heap = self.heap
        return heap[0][0] if heap else None

    def pop_due(self, now: float) -> tuple[K, Any] | None:
        """The earliest entry due at ``now``, removed, as (kind, argument); None when none is."""
        heap = self.heap
        if not heap or heap[0][0] > now:
            return None
        _, _, kind, arg = heapq.heappop(heap)
        return kind, arg

    def pop_due_at(self, now: float) -> tuple[float, K, Any] | None:
        """As ``pop_due``, with the entry's deadline first: for handlers that tell a live entry
        from a stale one by the deadline their own state records."""
        heap = self.heap
        if not heap or heap[0][0] > now:
            return None
        deadline, _, kind, arg = heapq.heappop(heap)
        return deadline, kind, arg

    def shift(self, gap_s: float) -> None:
        """Every deadline ``gap_s`` later (the driver could not run meanwhile). The same shift
        for every entry keeps the heap ordered; the list object stays the same."""
        self.heap[:] = [(d + gap_s, seq, kind, arg) for d, seq, kind, arg in self.heap]

    def clear(self) -> None:
        self.heap.clear()


__all__ = ["TimerHeap"]
