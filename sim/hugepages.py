"""Python objects on transparent huge pages for large simulations.

A simulated network of 10^5 nodes is a heap of several GB in which every message lands on a
random node, so much of a large run waits on address translation (TLB misses), not on
computation. ``use_huge_pages`` moves the interpreter's small-object arenas (where nearly every
object of a run lives) onto 2 MiB pages through a small C extension (``sim/_hugepages.c``):
measured side by side, 14 % less CPU at 30,000 nodes (1.16x); see docs/simulator.md ("Huge pages").

Only where objects lie changes, never what a run computes: results are the same bit for bit with
it or without it (``RANGECAST_HUGE_PAGES=0`` turns it off; tests compare the two). Where the
extension was not built, the kernel is not Linux, or the kernel refuses, nothing happens and the
run is as fast as before.
"""

from __future__ import annotations

import os
import sys

#: Environment switch: "0" keeps the interpreter's own arena allocator.
ENV = "RANGECAST_HUGE_PAGES"

_state: bool | None = None


def _reserve_bytes() -> int:
    """Address space to reserve: the machine's memory (nothing is committed until used)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 16 << 30


def use_huge_pages() -> bool:
    """Serve the interpreter's object arenas from a huge-page region from now on, for the rest
    of the process (idempotent). True when in effect."""
    global _state
    if _state is not None:
        return _state
    _state = False
    if os.environ.get(ENV, "1") == "0" or not sys.platform.startswith("linux"):
        return False
    try:
        from rangecast.sim import _hugepages  # type: ignore[attr-defined]
    except ImportError:
        return False
    _state = bool(_hugepages.enable(_reserve_bytes()))
    return _state


def huge_page_bytes() -> int:
    """Bytes of object arenas handed out from the huge-page region so far (0 when off)."""
    if not _state:
        return 0
    from rangecast.sim import _hugepages  # type: ignore[attr-defined]

    return int(_hugepages.used())
