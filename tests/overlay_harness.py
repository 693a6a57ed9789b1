"""The simulated overlay and its oracle, for the overlay tests: they live in the testing kit
(``rangecast.testkit.simnet``, docs/testing.md); this module keeps the tests' old import.

Not a test module (no ``test_`` prefix)."""

from rangecast.testkit.simnet import (
    DeliveryKey,
    Key,
    Net,
    Published,
    SimOverlay,
    brute_force,
    preds_of,
)

__all__ = ["DeliveryKey", "Key", "Net", "Published", "SimOverlay", "brute_force", "preds_of"]
