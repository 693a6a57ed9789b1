"""Order statistics for experiment summaries."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(sorted_vals: Sequence[float], q: float) -> float:
    """Nearest-rank ``q``-quantile of already sorted values (0.0 for none)."""
    if not sorted_vals:
        return 0.0
    k = min(len(sorted_vals) - 1, max(0, math.ceil(q * len(sorted_vals)) - 1))
    return float(sorted_vals[k])
