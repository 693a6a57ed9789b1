"""Order statistics for experiment summaries."""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import chain

import numpy as np

#: Values converted to Python floats at a time by ``ordered_sum``.
_CHUNK = 1 << 16


def percentile(sorted_vals: Sequence[float] | np.ndarray, q: float) -> float:
    """Nearest-rank ``q``-quantile of already sorted values (0.0 for none)."""
    if not len(sorted_vals):
        return 0.0
    k = min(len(sorted_vals) - 1, max(0, math.ceil(q * len(sorted_vals)) - 1))
    return float(sorted_vals[k])


def ordered_sum(vals: np.ndarray) -> float:
    """``sum(vals.tolist())`` without the list: the builtin float sum, left to right, so that a
    mean is the same to the last bit as over a Python list of the same values (numpy's own sum
    adds pairwise and can differ in the last place), in memory bounded by ``_CHUNK``."""
    chunks = (vals[i : i + _CHUNK].tolist() for i in range(0, len(vals), _CHUNK))
    return float(sum(chain.from_iterable(chunks)))
