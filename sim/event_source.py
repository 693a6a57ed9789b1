"""Where a scenario's events come from: the thesis workload's generator, or the rows of a CSV
file (docs/simulator.md, "Events from a CSV file").

Every scenario that publishes the thesis workload (``sim run thesis`` and the broker systems)
declares the CSV source with the same three parameters, defined once here, and builds its
schema, subscription generator and events through ``EventSource``, so that the DHT overlay and
the broker systems see the same subscriptions and the same events for one seed and file.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from rangecast.dht.errors import LocalProtocolError
from rangecast.pubsub.schema import THESIS_SCHEMA, Schema
from rangecast.sim.options import missing_value
from rangecast.sim.scenario import param
from rangecast.sim.workload import THESIS_WORKLOAD, CsvEvents, Workload, default_params

__all__ = [
    "NO_CSV",
    "CsvParams",
    "CsvSource",
    "EventSource",
    "check_csv_params",
    "columns_param",
    "events_from_param",
    "missing_param",
]


def events_from_param() -> Any:
    """The ``--events-from CSV`` parameter of a params dataclass."""
    return param(None, "publish the rows of a CSV file instead of generated events", metavar="CSV")


def missing_param() -> Any:
    """``--missing VALUE``: a CSV cell marking an absent value."""
    return param(
        None,
        "a CSV cell marking an absent value: a number (-200) or a word (NA); empty cells are "
        "always absent",
        type=missing_value,
        metavar="VALUE",
    )


def columns_param() -> Any:
    """``--columns``: which CSV columns to publish and under what attribute names:
    ``"temp C=temp,RH"``; None: every numeric column, names made valid."""
    return param(
        None,
        "publish only these CSV columns, in this order, optionally under another attribute "
        "name ('temp C=temp,RH'); by default every numeric column, names made valid "
        "('temp C' -> temp_C, '0' -> _0)",
        metavar="COL[=NAME],...",
    )


class CsvParams(Protocol):
    """The fields a params dataclass declares with the three functions above."""

    @property
    def events_from(self) -> str | None: ...
    @property
    def missing(self) -> float | str | None: ...
    @property
    def columns(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class CsvSource:
    """The three CSV parameters alone: what ``sim compare`` passes on to every system."""

    events_from: str | None = events_from_param()
    missing: float | str | None = missing_param()
    columns: str | None = columns_param()


#: No file: the thesis workload's generated events.
NO_CSV = CsvSource()


def check_csv_params(p: CsvParams) -> None:
    """The checks every scenario with a CSV source makes (``params.check``)."""
    if p.missing is not None and p.events_from is None:
        raise LocalProtocolError("--missing needs --events-from")
    if p.columns is not None and p.events_from is None:
        raise LocalProtocolError("--columns needs --events-from")


@dataclass(slots=True)
class EventSource:
    """A run's schema, subscription generator and events. ``csv`` None: the thesis workload
    (Table 4.3); otherwise the file's schema, its generator drawing subscriptions over the
    file's attribute domains, and its rows as the events."""

    schema: Schema
    gen: Workload
    csv: CsvEvents | None

    @classmethod
    def load(
        cls,
        p: CsvParams,
        layout: random.Random,
        *,
        partial: str = "strict",
        say: Callable[[str], None] | None = None,
    ) -> EventSource:
        """``layout``: the ``workload-layout`` stream (the generator's draws of its layout)."""
        if p.events_from:
            csv = CsvEvents.load(p.events_from, missing=p.missing, columns=p.columns)
            if say is not None:
                for note in csv.notes():
                    say(note)
            schema = csv.schema.with_partial(partial)
            return cls(schema, Workload(schema, default_params(schema), layout), csv)
        schema = THESIS_SCHEMA.with_partial(partial)
        return cls(schema, Workload(schema, THESIS_WORKLOAD, layout), None)

    def events(self, n: int, rng: random.Random) -> list[tuple[float | None, ...]]:
        """The first ``n`` events: the file's first rows, or ``n`` draws from ``rng`` (the
        ``events`` stream, which also draws the publishers and gaps after them)."""
        if self.csv is not None:
            return self.csv.events[:n]
        return [self.gen.event(rng) for _ in range(n)]
