"""Healing a split overlay: peers declared failed are asked again, now and then
(``PastryConfig.heal_s``, ``KademliaConfig.heal_s``).

Theory of operation
-------------------
Failure detection cannot tell a crashed peer from one it cannot reach. When a network partition
(or a long stall on both sides) outlasts ``fail_after_s``, each side declares the other failed
and drops it from its leaf set or buckets. From then on nothing crosses: keep-alives, leaf-set
exchanges and lookups only ever go to peers still in the tables. When the network comes back,
the overlay stays split into two rings (two Kademlia networks), each the root of every key in
its half: a subscription made on one side is never matched by an event published on the other.
A peer left alone (every neighbour declared failed) stays a one-peer overlay for ever.

So a peer remembers the peers it declared failed (its *graveyard*): at most ``heal_peers``, the
most recent, each for ``heal_keep_s``. Not those that said goodbye (``Leave``): they left on
purpose and rejoin by themselves. Every ``heal_s`` it sends a ``Ping`` to one of them, the one
asked longest ago. A ping that reaches a live peer is a direct message: the receiver takes the
sender back into its tables (a direct message overrides a failure verdict) and answers, and the
answer puts the receiver back into the sender's. From that one contact the usual maintenance
merges the rest: a Pastry peer's leaf-set exchanges spread the news along both rings, and a
Kademlia peer looks up its own id, whose answers come from both sides. A peer that answers
leaves the graveyard; one demoted for dropping messages (``dht.e2e``) is not asked while its
quarantine lasts.

Cost: one ``Ping`` (and its ``Pong``, if anyone answers) per ``heal_s`` per peer with a
non-empty graveyard, nothing otherwise. Off in the simulator (``heal_s = inf``: its figures
predate it, and simulated networks do not split); real peers ask every 30 s.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from rangecast.dht.errors import LocalProtocolError
from rangecast.dht.routing import Peer

#: Real peers: how often a declared-failed peer is asked again, how many are remembered, and
#: for how long. A split lasting longer than ``HEAL_KEEP_S`` is not healed.
HEAL_S = 30.0
HEAL_PEERS = 32
HEAL_KEEP_S = 3600.0


def check_heal_config(heal_s: float, heal_peers: int, heal_keep_s: float) -> None:
    """Refuse a configuration that cannot work (one line, ``LocalProtocolError``)."""
    if not heal_s > 0 or heal_peers < 1 or not heal_keep_s > 0:
        raise LocalProtocolError("need heal_s > 0 (inf: off), heal_peers >= 1, heal_keep_s > 0")


class Graveyard:
    """The peers this node declared failed, in the order they are to be asked again."""

    __slots__ = ("_buried", "every_s", "keep_s", "limit", "next_at")

    def __init__(self, every_s: float, limit: int, keep_s: float) -> None:
        self.every_s = every_s
        self.limit = limit
        self.keep_s = keep_s
        #: Not before this time is the next one asked.
        self.next_at = -math.inf
        # id -> (peer, declared failed at); dict order is the asking order, oldest first.
        self._buried: dict[int, tuple[Peer, float]] = {}

    @staticmethod
    def of(cfg: object) -> Graveyard | None:
        """The graveyard a DHT configuration asks for, None where healing is off."""
        every = getattr(cfg, "heal_s", math.inf)
        if every == math.inf:
            return None
        return Graveyard(every, cfg.heal_peers, cfg.heal_keep_s)  # type: ignore[attr-defined]

    def __len__(self) -> int:
        return len(self._buried)

    def __contains__(self, ident: int) -> bool:
        return ident in self._buried

    def bury(self, peer: Peer, now: float) -> None:
        """``peer`` was declared failed: ask it again later (the most recent ``limit``)."""
        buried = self._buried
        buried.pop(peer.id, None)
        buried[peer.id] = (peer, now)
        if len(buried) > self.limit:
            del buried[next(iter(buried))]

    def revive(self, ident: int) -> None:
        """``ident`` spoke to us, or left on purpose: no need to ask it again."""
        self._buried.pop(ident, None)

    def due(self, now: float) -> bool:
        return bool(self._buried) and now >= self.next_at

    def next(self, now: float, skip: Callable[[int], bool] | None = None) -> Peer | None:
        """The peer to ask now (it goes to the back of the queue), forgetting those buried
        longer than ``keep_s``; None if none is left. ``skip(id)``: not this one now (it keeps
        its turn at the back)."""
        self.next_at = now + self.every_s
        buried = self._buried
        for ident in list(buried):
            peer, since = buried.pop(ident)
            if now - since > self.keep_s:
                continue
            buried[ident] = (peer, since)
            if skip is None or not skip(ident):
                return peer
        return None
