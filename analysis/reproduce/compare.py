"""Our figures across seeds against the papers': mean and confidence interval, ratio, verdict.

Every published value the report knows (analysis/report/paper.py) becomes a ``Check``: the
paper's value (or range, or trend), ours as the mean over the seeds with a 95% confidence
interval (Student's t over the per-seed values, each seed one independent run), their ratio, and
a verdict against a tolerance. The tolerances are defined here and nowhere else
(``TOLERANCE``), and the page and docs/reproduce.md quote them:

* ``within``: ours is within the tolerance of the paper's value (or inside its stated range, or
  follows its stated trend);
* ``better``: beyond the tolerance on the good side (lower latency or bytes, a larger saving, a
  higher speed-up);
* ``outside``: beyond it on the other side, or against the trend;
* ``n/a``: the paper states the value for a setting this run does not have (the LBDD paper's
  n = 100..500 in a --quick run), or there is no value of ours.

Latencies are compared in units of each side's mean RTT (the thesis' King data set: 180 ms,
Table 4.5 per size; ours: the latency model's), since the two latency models differ by a factor
the protocol has nothing to do with; both raw values are kept too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

#: Relative tolerance of a ratio ours / paper: within when 1/(1 + t) <= ratio <= 1 + t.
REL_TOL = 0.25
#: Absolute tolerance of a relative change (multicast probes' and load balancing's savings).
CHANGE_TOL = 0.15
#: Relative tolerance of a value the paper derives exactly (LBDD's mean out-degree of 2).
EXACT_TOL = 0.10
#: Every tolerance by the kind of comparison it governs (written into reproduction.json).
TOLERANCE: dict[str, dict[str, Any]] = {
    "lower": {"relative": REL_TOL, "better": "lower"},
    "higher": {"relative": REL_TOL, "better": "higher"},
    "match": {"relative": EXACT_TOL, "better": None},
    "change": {"absolute": CHANGE_TOL, "better": "larger saving"},
    "range": {"inside": True, "better": "below, for latencies"},
    "trend": {"direction": "as stated"},
}
#: Two-sided 95% Student t quantiles by degrees of freedom (seeds - 1); beyond, the normal's.
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}
Z95 = 1.96


@dataclass(frozen=True, slots=True)
class Stat:
    """A figure over seeds: mean, the 95% interval's half width, the per-seed values."""

    mean: float
    half: float
    values: tuple[float, ...]
    seeds: tuple[int, ...]

    @classmethod
    def of(cls, values: Sequence[float], seeds: Sequence[int]) -> Stat:
        n = len(values)
        mean = sum(values) / n
        if n < 2:
            return cls(mean, math.nan, tuple(values), tuple(seeds))
        var = sum((v - mean) ** 2 for v in values) / (n - 1)
        return cls(mean, T95.get(n - 1, Z95) * math.sqrt(var / n), tuple(values), tuple(seeds))

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

    @property
    def verdict(self) -> str:
        if self.not_applicable or self.ours is None:
            return "n/a"
        if self.kind == "trend":
            return "n/a" if self.holds is None else "within" if self.holds else "outside"
        if self.kind == "range":
            lo, hi = self.paper_range or (math.nan, math.nan)
            m = self.ours.mean
            if lo <= m <= hi:
                return "within"
            return "better" if m < lo and self.extra.get("lower_better") else "outside"
        if self.kind == "change":
            pair = self.compared
            if pair is None:
                return "n/a"
            paper, ours = pair
            if abs(ours - paper) <= CHANGE_TOL:
                return "within"
            return "better" if ours < paper else "outside"
        r = self.ratio
        if r is None:
            return "n/a"
        tol = EXACT_TOL if self.kind == "match" else REL_TOL
        if 1 / (1 + tol) <= r <= 1 + tol:
            return "within"
        if self.kind == "lower" and r < 1:
            return "better"
        if self.kind == "higher" and r > 1:
            return "better"
        return "outside"

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
            "within_tolerance_or_better": self.verdict in ("within", "better"),
            "not_applicable": self.not_applicable or None,
            "source": self.source,
            **({"extra": self.extra} if self.extra else {}),
        }


def figure_verdict(checks: Sequence[Check]) -> str:
    """A figure's verdict: ``outside`` if any check is, else ``within`` / ``better`` (all
    better), ``n/a`` when none applies."""
    verdicts = [c.verdict for c in checks if c.verdict != "n/a"]
    if not verdicts:
        return "n/a"
    if "outside" in verdicts:
        return "outside"
    return "better" if all(v == "better" for v in verdicts) else "within"


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
