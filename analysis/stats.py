"""Means over independent runs (seeds) with Student's t 95% intervals: the one rule every page
uses for spread (the reproduction's checks, the systems comparison over seeds)."""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["T95", "Z95", "mean_ci"]

#: Two-sided 95% Student t quantiles by degrees of freedom (seeds - 1); beyond, the normal's.
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}
Z95 = 1.96


def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """The mean of ``values`` and the half width of its 95% interval (NaN for one value)."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, math.nan
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, T95.get(n - 1, Z95) * math.sqrt(var / n)
