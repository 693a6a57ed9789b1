"""Seeded random streams: one independent ``random.Random`` per purpose, derived from the run's
seed and a name, so that adding a draw in one part of a scenario (say, failure injection) does not
shift the numbers every other part sees."""

from __future__ import annotations

import hashlib
import random


def stream(seed: int, name: str) -> random.Random:
    digest = hashlib.sha256(f"rangecast:{seed}:{name}".encode()).digest()
    return random.Random(int.from_bytes(digest[:16], "big"))
