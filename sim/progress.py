"""Progress of a simulator run on stderr: phase bars with a known total and an ETA (tqdm).

An experiment names its phases and, for each, a total and a way to count what is done (events
published, subscriptions installed, lookups delivered, simulated seconds); the engine calls
``tick`` every so often while it runs. Work outside the engine (placing and building the nodes,
the bootstrap's routing tables, drawing the workload, the oracle check) goes through ``steps``,
which wraps the loop that does it in a bar. On a terminal each phase is a tqdm bar with rate and
ETA; when stderr is not a terminal (a log file, a pipe, a test) there are no bars, only the few
plain notes the experiment ``say``s, and ``--quiet`` turns everything off.

Progress only reads counters the run keeps anyway: it never draws from a random stream, never
schedules an event and never changes a result, so a run gives the same JSON with or without it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator, Sized
from typing import Any, TextIO, TypeVar

T = TypeVar("T")

#: Seconds of wall time between two engine ticks: a bar moves smoothly; without bars nothing
#: is printed per tick, so the interval only bounds the (tiny) cost of the check.
TICK_S = 0.5


class Progress:
    """``progress(message)`` prints a note; ``phase(...)`` starts a bar (terminals only)."""

    def __init__(
        self,
        label: str,
        *,
        stream: TextIO | None = None,
        bars: bool | None = None,
        notes: Callable[[str], None] | None = None,
    ) -> None:
        self.label = label
        self._stream = stream if stream is not None else sys.stderr
        if bars is None:
            isatty = getattr(self._stream, "isatty", None)
            bars = bool(isatty and isatty())
        self.bars = bars
        self._notes = notes
        self._bar: Any = None
        self._count: Callable[[], float] | None = None
        self._scale = 1.0

    # ------------------------------------------------------------------------------- notes

    def __call__(self, message: str) -> None:
        if self._notes is not None:
            self._notes(message)
            return
        line = f"[{self.label}] {message}"
        if self._bar is not None:
            from tqdm import tqdm

            tqdm.write(line, file=self._stream)
        else:
            print(line, file=self._stream, flush=True)

    # -------------------------------------------------------------------------------- bars

    def phase(self, desc: str, total: float, count: Callable[[], float], unit: str = "it") -> None:
        """Start a bar of ``total`` ``unit``s; ``count()`` says how many are done so far."""
        self.end()
        if not self.bars:
            return
        from tqdm import tqdm

        # Simulated seconds are floats: bars count them in whole units.
        self._count = count
        self._bar = tqdm(
            total=max(0, round(total)),
            desc=f"[{self.label}] {desc}",
            unit=f" {unit}",
            file=self._stream,
            leave=True,
            dynamic_ncols=True,
            mininterval=TICK_S,
        )

    def tick(self, _sim: Any = None) -> None:
        """The engine's hook: move the bar to the current count."""
        bar = self._bar
        if bar is None or self._count is None:
            return
        done = min(bar.total, max(0, round(self._count())))
        if done > bar.n:
            bar.update(done - bar.n)

    def end(self) -> None:
        """Finish the current bar (at its final count)."""
        if self._bar is not None:
            self.tick()
            self._bar.close()
            self._bar = None
            self._count = None

    def steps(
        self, items: Iterable[T], desc: str, total: int | None = None, unit: str = "it"
    ) -> Iterable[T]:
        """``items``, as a phase bar of ``total`` (default ``len(items)``) ``unit``s that
        moves as the caller's loop takes them. Without bars it is ``items`` itself: a set-up
        loop over a million nodes pays nothing. Inside a phase that is showing (a node that
        joins during the churn phase is created one at a time) it is ``items`` too: the
        phase's bar stays."""
        if not self.bars or self._bar is not None:
            return items
        if total is None:
            total = len(items) if isinstance(items, Sized) else 0
        return self._stepped(items, desc, total, unit)

    def _stepped(self, items: Iterable[T], desc: str, total: int, unit: str) -> Iterator[T]:
        done = 0
        self.phase(desc, total, lambda: done, unit)
        bar = self._bar
        # A tick per item would cost more than some loops' own work; ~1,000 ticks a bar is
        # as smooth as a terminal line can show.
        every = max(1, total // 1000)
        try:
            for item in items:
                yield item
                done += 1
                if done % every == 0:
                    self.tick()
        finally:
            # A loop left early is finished when the generator is collected, maybe after a
            # later phase began: only this phase's own bar is ended.
            if self._bar is bar:
                self.end()

    @property
    def engine_hook(self) -> Callable[[Any], None] | None:
        """What to pass as the simulator's ``progress``: None without bars (no cost at all)."""
        return self.tick if self.bars else None


def steps(
    progress: Progress | None,
    items: Iterable[T],
    desc: str,
    total: int | None = None,
    unit: str = "it",
) -> Iterable[T]:
    """``progress.steps(...)``, or ``items`` itself where there is no progress (a network
    built outside an experiment, in a test)."""
    return items if progress is None else progress.steps(items, desc, total, unit)


def as_progress(progress: Callable[[str], None] | None, label: str) -> Progress:
    """The experiments accept a ``Progress``, any ``str`` callback (tests, sweeps: notes only,
    no bars) or None (nothing at all)."""
    if isinstance(progress, Progress):
        return progress
    return Progress(label, bars=False, notes=progress or (lambda _m: None))
