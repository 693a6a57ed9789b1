"""Order statistics for experiment summaries: the one percentile rule, and an ordered sum."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain

import numpy as np

#: Values converted to Python floats at a time by ``ordered_sum``.
_CHUNK = 1 << 16


def percentile(
    values: Sequence[float] | np.ndarray, q: float, counts: Sequence[int] | None = None
) -> float:
    """The ``q``-quantile (0 <= q <= 1) by nearest rank: the smallest value with at least
    ``q`` of the values at or below it, the ``ceil(q n)``-th smallest (the first for q = 0).

    The project's one definition of a percentile: numpy's ``inverted_cdf`` method (Hyndman and
    Fan's definition 1), so ``np.percentile(values, 100 q, method="inverted_cdf")`` gives the
    same; the report's Spark job takes the same rank over an ordered window
    (``analysis.report.spark_job.nearest_rank``). Nearest rank returns a value that occurred,
    never an interpolation between two, which is how the thesis' "N% of deliveries within X"
    reads. ``values`` in any order; ``counts``: how many times each value occurs (a
    histogram's bins). 0.0 for no values.
    """
    if counts is not None:
        values = np.repeat(np.asarray(values, dtype=float), np.asarray(counts, dtype=np.int64))
    if not len(values):
        return 0.0
    return float(np.quantile(np.asarray(values), q, method="inverted_cdf"))


def ordered_sum(vals: np.ndarray) -> float:
    """``sum(vals.tolist())`` without the list: the builtin float sum, left to right, so that a
    mean is the same to the last bit as over a Python list of the same values (numpy's own sum
    adds pairwise and can differ in the last place), in memory bounded by ``_CHUNK``."""
    chunks = (vals[i : i + _CHUNK].tolist() for i in range(0, len(vals), _CHUNK))
    return float(sum(chain.from_iterable(chunks)))
