"""Shared test configuration: Hypothesis profiles.

Pick a profile with the ``HYPOTHESIS_PROFILE`` environment variable:

``default``   quick local and CI runs (the whole fast suite stays well under a minute);
``ci``        more examples, derandomised so that a failure reproduces on every run;
``thorough``  many examples, for hunting rare bugs before a release.

Tests that are expensive per example scale their own ``max_examples`` from the active profile
(``settings().max_examples`` read at import time, after this file has loaded the profile) instead
of hard-coding a count, so every profile stays meaningful.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "default",
    max_examples=30,
    deadline=None,
    print_blob=True,
)
settings.register_profile(
    "ci",
    max_examples=100,
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "thorough",
    max_examples=1000,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
