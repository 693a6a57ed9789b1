"""Seeded random streams: one independent ``random.Random`` per purpose, derived from the run's
seed and a name, so that adding a draw in one part of a scenario (say, failure injection) does not
shift the numbers every other part sees.

Each simulated node draws from a stream of its own (``node_stream``), derived from the run seed
and the node's id: one node's extra draw (a retry, a longer probe walk) leaves every other node's
draws as they were, and a node's draws do not depend on the order in which nodes were created.
The layers of one node (its DHT core and the pub/sub or topic core stacked on it) share that
node's stream (``node.rng``)."""

from __future__ import annotations

import hashlib
import random


def stream(seed: int, name: str) -> random.Random:
    digest = hashlib.sha256(f"rangecast:{seed}:{name}".encode()).digest()
    return random.Random(int.from_bytes(digest[:16], "big"))


def node_stream(seed: int, node_id: int) -> random.Random:
    """The random stream of the simulated node whose DHT id is ``node_id``."""
    return stream(seed, f"node:{node_id:x}")
