"""The report's data: comparison rows and tables, figures, and the report that holds them
(built by ``analysis.report.build``, drawn by ``analysis.report.plots``, shown by
``analysis.report.html_page``, which reads nothing else)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rangecast.analysis.report.spark_job import RunFigures


@dataclass
class Row:
    """One line of a comparison table: the paper's value, ours, and their ratio."""

    figure: str
    quantity: str
    paper: float | None
    ours: float | None
    unit: str
    latency_model: str = ""
    source: str = ""
    #: Latencies: both sides divided by their mean RTT (thesis: King's).
    paper_rtt: float | None = None
    ours_rtt: float | None = None
    approx: bool = False
    paper_text: str = ""

    @property
    def ratio(self) -> float | None:
        if self.paper in (None, 0) or self.ours is None:
            return None
        return self.ours / self.paper

    @property
    def ratio_rtt(self) -> float | None:
        if self.paper_rtt in (None, 0) or self.ours_rtt is None:
            return None
        return self.ours_rtt / self.paper_rtt

    def as_dict(self) -> dict[str, Any]:
        return {
            "figure": self.figure,
            "quantity": self.quantity,
            "paper": self.paper,
            "paper_text": self.paper_text or None,
            "ours": self.ours,
            "ratio": self.ratio,
            "unit": self.unit,
            "latency_model": self.latency_model,
            "paper_rtt": self.paper_rtt,
            "ours_rtt": self.ours_rtt,
            "ratio_rtt": self.ratio_rtt,
            "approx": self.approx,
            "source": self.source,
        }


@dataclass
class Table:
    title: str
    rows: list[Row]
    note: str = ""
    #: Whether the table's runs are the paper's setting, in a sentence (``sim.comparable``),
    #: and the verdict itself (None: the rule was not asked).
    setting: str = ""
    comparable: bool | None = None


@dataclass
class Figure:
    figure: str
    title: str
    path: Path
    dirs: list[str]
    caption: str = ""
    #: What the axes show, read back from matplotlib (``plots.figure_data``).
    data: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class SystemsTable:
    """The systems comparison of runs on one workload (``analysis.report.systems``): a row per
    run, the recomputed columns of ``rangecast sim compare``'s table."""

    title: str
    columns: list[str]
    #: Per run: its label, then the formatted cells (``columns`` order).
    rows: list[list[str]]
    #: The recomputed values behind the cells, per run (``--json``).
    data: list[dict[str, Any]] = field(default_factory=list)
    note: str = ""


@dataclass
class Report:
    runs: list[RunFigures]
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    systems: list[SystemsTable] = field(default_factory=list)
    #: The runs table: per run (``runs`` order), column -> text (``build.run_columns``).
    run_table: list[dict[str, str]] = field(default_factory=list)
    #: Per run, how many recomputed figures its summary also has (compared with it).
    shared: list[int] = field(default_factory=list)
