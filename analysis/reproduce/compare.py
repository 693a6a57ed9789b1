"""Our figures across seeds against the papers': mean and confidence interval, ratio, verdict.

Every published value the report knows (analysis/report/paper.py) becomes a ``Check``: the
paper's value (or range, or trend), ours as the mean over the seeds with a 95% confidence
interval (Student's t over the per-seed values, each seed one independent run), their ratio, and
a verdict against a tolerance. The tolerances are defined here and nowhere else
(``TOLERANCE``), and the page and docs/reproduce.md quote them. The verdicts are two-sided
(``VERDICTS``):

* ``reproduced``: ours is within the tolerance of the paper's value on either side (or inside
  its stated range, or follows its stated trend). Better than the paper beyond the tolerance is
  not a pass: it differs as much as worse does;
* ``differs, explained``: outside the tolerance, and the figure builder attached a ``Cause``
  measured by a run that is part of the same reproduction (named in ``Cause.measured_by``);
* ``differs``: outside the tolerance, no measured cause;
* ``n/a``: the paper states the value for a setting this run does not have (the LBDD paper's
  n = 100..500 in a --quick run), there is no value of ours, or the check is ``info`` (shown
  beside the verdicts, e.g. absolute bytes across two encodings, never a verdict).

A check is ``undecided`` when its 95% interval straddles a tolerance bound (or there is one
seed, so no interval): its verdict is then too wide to decide, which the page and the JSON say.

Latencies are compared in units of each side's mean RTT (the thesis' King subsets: Table 4.5,
175 ms at 1,000 nodes; ours: the latency model's), since the two latency models differ by a
factor the protocol has nothing to do with; both raw values are kept too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rangecast.analysis.stats import mean_ci

VERDICTS = ("reproduced", "differs, explained", "differs", "n/a")
#: Relative tolerance of a ratio ours / paper: reproduced when 1/(1 + t) <= ratio <= 1 + t.
REL_TOL = 0.25
#: Absolute tolerance of a relative change (multicast probes' and load balancing's savings).
CHANGE_TOL = 0.15
#: Relative tolerance of a value the paper derives exactly (LBDD's mean out-degree of 2).
EXACT_TOL = 0.10
#: Every tolerance by the kind of comparison it governs (written into reproduction.json). Every
#: one is two-sided; ``good_side`` only says which side the paper calls good, for wording.
TOLERANCE: dict[str, dict[str, Any]] = {
    "lower": {"relative": REL_TOL, "two_sided": True, "good_side": "lower"},
    "higher": {"relative": REL_TOL, "two_sided": True, "good_side": "higher"},
    "match": {"relative": EXACT_TOL, "two_sided": True, "good_side": None},
    "change": {"absolute": CHANGE_TOL, "two_sided": True, "good_side": "larger saving"},
    "range": {"inside": True, "two_sided": True},
    "trend": {"direction": "as stated"},
    "info": {"verdict": None, "why": "shown beside the verdicts, never one"},
}


@dataclass(frozen=True, slots=True)
class Stat:
    """A figure over seeds: mean, the 95% interval's half width, the per-seed values."""

    mean: float
    half: float
    values: tuple[float, ...]
    seeds: tuple[int, ...]

    @classmethod
    def of(cls, values: Sequence[float], seeds: Sequence[int]) -> Stat:
        mean, half = mean_ci(values)
        return cls(mean, half, tuple(values), tuple(seeds))

    def as_dict(self) -> dict[str, Any]:
        return {
            "mean": self.mean,
            "ci95": None if math.isnan(self.half) else self.half,
            "n": len(self.values),
            "values": list(self.values),
            "seeds": list(self.seeds),
        }


def stat_of(pairs: Sequence[tuple[int, float | None]]) -> Stat | None:
    """(seed, value) pairs into a Stat, the seeds in order; None when no run has the value."""
    got = sorted((s, v) for s, v in pairs if v is not None and math.isfinite(v))
    if not got:
        return None
    return Stat.of([v for _, v in got], [s for s, _ in got])


@dataclass(frozen=True, slots=True)
class Cause:
    """A measured reason why ours differs from the paper."""

    #: Generated from the numbers it explains (an f-string over the measured values).
    text: str
    #: The reproduction parts (plan names, e.g. "thesis-lb-c0.5") whose runs measure the
    #: cause; they must be parts of the same reproduction.
    measured_by: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"text": self.text, "measured_by": list(self.measured_by)}


@dataclass
class Check:
    """One published value against ours."""

    figure: str
    quantity: str
    #: How the two are compared: a key of TOLERANCE.
    kind: str
    ours: Stat | None
    unit: str = ""
    #: The paper's value; ``paper_range`` instead for a stated range.
    paper: float | None = None
    paper_range: tuple[float, float] | None = None
    #: The paper's words where it gives no number (a trend, a range), else "".
    paper_text: str = ""
    source: str = ""
    #: For latencies: (paper, ours) in units of the mean RTT, which the verdict uses.
    normalised: tuple[float, float] | None = None
    #: "trend" checks: whether ours follows the stated trend (computed by the caller).
    holds: bool | None = None
    #: Why the check does not apply (``n/a``), if it does not.
    not_applicable: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    #: Set by the figure builder when a run of the reproduction measures why ours differs.
    cause: Cause | None = None
    #: "trend" checks: the value of ``ours`` at which the trend flips (e.g. a ratio of 1), so
    #: an interval across it is undecided.
    threshold: float | None = None
    #: Per-node bandwidth checks: ours with each node charged the bytes it receives instead of
    #: those it sends (``ours``), from the same runs. The thesis does not say which it counts;
    #: causes.py explains a difference with it when it is within the tolerance.
    received: Stat | None = None

    @property
    def compared(self) -> tuple[float, float] | None:
        """(paper, ours) as the verdict compares them."""
        if self.normalised is not None:
            return self.normalised
        if self.paper is None or self.ours is None:
            return None
        return self.paper, self.ours.mean

    @property
    def ratio(self) -> float | None:
        pair = self.compared
        if pair is None:
            if self.paper_range is not None and self.ours is not None:
                lo, hi = self.paper_range
                return self.ours.mean / ((lo + hi) / 2) if lo + hi else None
            return None
        paper, ours = pair
        return ours / paper if paper else None

    def _within(self) -> bool | None:
        """Whether ours is within the tolerance (two-sided); None when it cannot be said."""
        if self.kind == "info" or self.not_applicable or self.ours is None:
            return None
        if self.kind == "trend":
            return self.holds
        if self.kind == "range":
            lo, hi = self.paper_range or (math.nan, math.nan)
            return lo <= self.ours.mean <= hi
        if self.kind == "change":
            pair = self.compared
            return None if pair is None else abs(pair[1] - pair[0]) <= CHANGE_TOL
        r = self.ratio
        if r is None:
            return None
        tol = EXACT_TOL if self.kind == "match" else REL_TOL
        return 1 / (1 + tol) <= r <= 1 + tol

    @property
    def verdict(self) -> str:
        within = self._within()
        if within is None:
            return "n/a"
        if within:
            return "reproduced"
        return "differs, explained" if self.cause is not None else "differs"

    @property
    def reproduced(self) -> bool:
        return self.verdict == "reproduced"

    def bounds(self) -> tuple[float, ...]:
        """The tolerance's bounds on ours, in the units ``compared`` uses (empty: none)."""
        if self.kind == "range" and self.paper_range is not None:
            return self.paper_range
        if self.kind == "trend":
            return () if self.threshold is None else (self.threshold,)
        pair = self.compared
        if pair is None or self.kind == "info":
            return ()
        paper = pair[0]
        if self.kind == "change":
            return (paper - CHANGE_TOL, paper + CHANGE_TOL)
        tol = EXACT_TOL if self.kind == "match" else REL_TOL
        return (paper / (1 + tol), paper * (1 + tol))

    def interval(self) -> tuple[float, float] | None:
        """Ours' 95% interval in the compared units (a normalised latency's interval scaled by
        the same factor as its mean); None without one (one seed)."""
        if self.ours is None or math.isnan(self.ours.half):
            return None
        lo, hi = self.ours.mean - self.ours.half, self.ours.mean + self.ours.half
        if self.normalised is not None and self.ours.mean:
            f = self.normalised[1] / self.ours.mean
            lo, hi = lo * f, hi * f
        return lo, hi

    @property
    def undecided(self) -> bool:
        """The verdict is too wide to decide: the 95% interval straddles a tolerance bound, or
        there is no interval (one seed)."""
        if self.verdict == "n/a":
            return False
        iv = self.interval()
        if iv is None:
            return True
        lo, hi = iv
        return any(lo < b < hi for b in self.bounds())

    @property
    def undecided_note(self) -> str:
        """Why the verdict is undecided, generated from the interval and bounds ("" if not)."""
        if not self.undecided:
            return ""
        if self.ours is None or math.isnan(self.ours.half):
            return "one seed: no interval, the verdict is too wide to decide"
        lo, hi = self.interval() or (math.nan, math.nan)
        cut = [f"{b:.4g}" for b in self.bounds() if lo < b < hi]
        word = "bound" if len(cut) == 1 else "bounds"
        return (
            f"the 95% interval [{lo:.4g}, {hi:.4g}] over {len(self.ours.values)} seeds "
            f"straddles the tolerance {word} {' and '.join(cut)}: too wide to decide"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "figure": self.figure,
            "quantity": self.quantity,
            "kind": self.kind,
            "unit": self.unit,
            "paper": self.paper,
            "paper_range": list(self.paper_range) if self.paper_range else None,
            "paper_text": self.paper_text or None,
            "ours": self.ours.as_dict() if self.ours else None,
            "normalised_by_rtt": (
                {"paper": self.normalised[0], "ours": self.normalised[1]}
                if self.normalised
                else None
            ),
            "ratio": self.ratio,
            "tolerance": TOLERANCE[self.kind],
            "verdict": self.verdict,
            "reproduced": self.reproduced,
            "undecided": self.undecided,
            "undecided_note": self.undecided_note or None,
            "cause": self.cause.as_dict() if self.cause else None,
            **({"ours_received_bytes": self.received.as_dict()} if self.received else {}),
            "not_applicable": self.not_applicable
            or ("shown beside the verdicts, not a verdict" if self.kind == "info" else None),
            "source": self.source,
            **({"extra": self.extra} if self.extra else {}),
        }


def figure_verdict(checks: Sequence[Check]) -> str:
    """A figure's verdict: ``differs`` if any check differs; else ``differs, explained`` if any
    is explained; else ``reproduced`` if any applies; else ``n/a``."""
    verdicts = {c.verdict for c in checks}
    for v in ("differs", "differs, explained", "reproduced"):
        if v in verdicts:
            return v
    return "n/a"


def fmt_value(x: float, unit: str) -> str:
    """One value in its unit, as the "why" sentences print it."""
    if unit == "fraction":
        return f"{x:.1%}"
    if unit == "relative":
        return f"{x:+.1%}"
    if unit == "x":
        return f"{x:.3g}x"
    return f"{x:,.3g}" if abs(x) < 1000 else f"{x:,.0f}"


def fmt_stat(s: Stat | None, unit: str = "") -> str:
    """``mean ± half`` for the page, in the unit's usual precision."""
    if s is None:
        return ""

    def num(x: float) -> str:
        if unit == "fraction":
            return f"{x:.1%}"
        if unit == "relative":
            return f"{x:+.1%}"
        if abs(x) >= 100:
            return f"{x:,.0f}"
        return f"{x:.3g}" if abs(x) < 1 else f"{x:.2f}"

    if math.isnan(s.half):
        return num(s.mean)
    half = f"{s.half:.1%}" if unit in ("fraction", "relative") else num(s.half).lstrip("+")
    return f"{num(s.mean)} ± {half}"
