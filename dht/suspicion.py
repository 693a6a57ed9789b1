"""Suspicion before declaration: a peer that is slow is not a peer that is dead
(``PastryConfig.suspect_s``).

Theory of operation
-------------------
Two silences make a Pastry node give up on a peer: a routed hop whose ``HopAck`` does not come
within ``ack_floor_s + ack_rtt_factor * RTT``, and a leaf-set member not heard from for
``fail_after_s``. Without suspicion either declares the peer failed at once: it leaves the
leaf set and routing table, its tree nodes' replicas are promoted elsewhere, and every
neighbour that saw the same silence does the same. A peer that was only busy (a burst of
subscriptions to store, a long garbage collection, a stalled host) comes back to find the swarm
has routed around it and re-homed its state: overload has turned into failure, and its load
into everyone's.

With ``suspect_s`` > 0 a silence makes the peer *suspected* instead:

==========================  ===================================================================
event                       action
==========================  ===================================================================
silence (hop ack, leaf)     suspected since now (if not already); pinged; every routed message
                            avoids it (``DhtCore._avoid``), the one that found it re-routed
anything direct from it     (a ping, pong, hop ack, end-to-end ack, leaf-set reply) clears the
                            suspicion: it was slow, not dead (``NodeStats.suspicions_cleared``)
suspected for ``suspect_s``  declared failed, as before
==========================  ===================================================================

A suspect keeps its place in the leaf set and routing table, so nothing is re-homed while it
is only slow; only new messages go around it. A crashed peer is declared ``suspect_s`` later
than without suspicion (the price: routed messages avoid it meanwhile, so only the replicas'
promotion waits). Judgement stays local, as for end-to-end acks: a node suspects only peers it
observed itself. The simulator leaves it off (0: its figures predate it); real peers turn it on
(``runtime.peer.RUNTIME_PASTRY``).
"""

from __future__ import annotations

from rangecast.dht.routing import Peer


class Suspects:
    """The peers this node suspects: id -> (the peer, since when)."""

    __slots__ = ("_by_id", "ids")

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[Peer, float]] = {}
        #: The suspects' ids, for routing to leave out (rebuilt on change: read per message).
        self.ids: frozenset[int] = frozenset()

    def __len__(self) -> int:
        return len(self._by_id)

    def __contains__(self, ident: int) -> bool:
        return ident in self._by_id

    def suspect(self, peer: Peer, now: float) -> bool:
        """Suspect ``peer`` from ``now`` on; False if it was already suspected (its clock
        keeps running from the first silence)."""
        if peer.id in self._by_id:
            return False
        self._by_id[peer.id] = (peer, now)
        self.ids = frozenset(self._by_id)
        return True

    def clear(self, ident: int) -> bool:
        """``ident`` spoke to us: no longer suspected; whether it was."""
        if self._by_id.pop(ident, None) is None:
            return False
        self.ids = frozenset(self._by_id)
        return True

    def forget(self, ident: int) -> None:
        """``ident`` is gone for another reason (it left, it was declared failed)."""
        if self._by_id.pop(ident, None) is not None:
            self.ids = frozenset(self._by_id)

    def due(self, now: float, after: float) -> list[Peer]:
        """The peers suspected for longer than ``after``: taken out, to be declared failed."""
        out = [p for p, since in self._by_id.values() if now - since > after]
        for p in out:
            del self._by_id[p.id]
        if out:
            self.ids = frozenset(self._by_id)
        return out


__all__ = ["Suspects"]
