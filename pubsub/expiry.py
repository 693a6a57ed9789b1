"""Expiry of stored subscription pieces: soft state at the tree host, the other half of the
subscriber's refresh.

Theory of operation
-------------------
A subscriber re-probes every piece of its active subscriptions every ``refresh_s``
(``pubsub.subscriber``). With ``OverlayConfig.expire_after_s`` set, the primary of every leaf
remembers when each of its pieces was last installed or refreshed; a piece that no probe has
refreshed for ``expire_after_s`` is removed as an unsubscription would remove it (its replicas
too, through the ordinary ``ReplicaOp``) and counted in ``stats.expired``. A subscriber that is
gone (its peer died or left without unsubscribing) thus stops costing the swarm after one
period, and so does an orphan piece (one a refresh stored again while its removal was on its
way). A live subscriber whose piece expired anyway (all its refreshes lost for a whole period)
gets it back with its next refresh, which stores it anew.

Only primaries keep the times; a replica's copy changes only through ``ReplicaOp``. Where a
piece changes hands its age restarts, as the wire carries no ages: a replica promoted after a
failure counts its pieces fresh at promotion, a hand-off's new root at arrival, a split's
children at the transfer. That delays an expiry by at most one period per move, never causes
one early.

The sweep costs nothing for a fresh piece: ``ExpiryQueue`` is a timer wheel, the pieces filed
by the time of their last refresh in buckets of ``expire_after_s / 64``. A refresh moves its
piece to the current bucket (two dictionary writes); a sweep takes whole buckets older than
``expire_after_s`` and looks at nothing else (it reads the bucket numbers, about 66). A piece
removed, split away or handed off is not looked for: its entry, when due, finds no such piece at
a hosted leaf and is dropped. The sweep runs every ``refresh_s / 2`` (``T_EXPIRE``), so a piece
goes between ``expire_after_s`` and ``expire_after_s * 65 / 64 + refresh_s / 2`` after its last
refresh (``bench/expiry_sweep.py`` measures it against a scan).

Orphaned replicas. A primary keeps the copies of its own replica set current, but a node that
changed hands (a hand-off to a joiner, a promotion after a crash) starts from an empty record of
who holds copies: a holder outside the new set is never told to drop its copy, and no
``ReplicaOp`` reaches it any more, so its pieces would stay for ever. The sweep therefore also
releases a replica copy that this peer's own view has placed outside the node's replica set
(``DhtCore.replica_set``, as ``Replication._sync_replicas`` asks it) for a whole
``expire_after_s`` (``stats.replicas_released``); the wait rides out a view that differs from the
primary's for a moment. It looks at the replica copies held (tree nodes, not pieces) once per
sweep.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from rangecast.pubsub.base import T_EXPIRE, NodeBase, NodeKey
from rangecast.pubsub.messages import OP_REMOVE, StoredSub
from rangecast.pubsub.replication import INTERNAL_REPLICAS
from rangecast.pubsub.tree import TreeNode

#: A tracked piece: the tree node holding it and the piece's identity at its leaf.
Entry = tuple[NodeKey, bytes, int, int, int]
#: Buckets per ``expire_after_s``: an expiry comes at most ``expire_after_s / BUCKETS`` late.
BUCKETS = 64


class ExpiryQueue:
    """When each tracked piece was last refreshed, filed in time buckets (a timer wheel) so
    that the stale ones are found without looking at the fresh ones (module header)."""

    __slots__ = ("_at", "_buckets", "grain", "ttl")

    def __init__(self, ttl: float, grain: float | None = None) -> None:
        if not 0.0 < ttl < math.inf:
            raise ValueError("an expiry queue needs a finite, positive ttl")
        self.ttl = ttl
        #: The width of a bucket: an expiry comes at most this late.
        self.grain = ttl / BUCKETS if grain is None else grain
        #: Entry -> the bucket of its last refresh.
        self._at: dict[Entry, int] = {}
        #: Bucket -> its entries (dicts, not sets: the sweep's order must not depend on the
        #: process's hash seed, so that a simulated run is repeatable).
        self._buckets: dict[int, dict[Entry, None]] = {}

    def __len__(self) -> int:
        return len(self._at)

    def touch(self, entry: Entry, now: float) -> None:
        """The piece was installed or refreshed at ``now``: it moves to ``now``'s bucket."""
        b = math.floor(now / self.grain)
        old = self._at.get(entry)
        if old == b:
            return
        if old is not None:
            self._buckets[old].pop(entry, None)
        self._at[entry] = b
        bucket = self._buckets.get(b)
        if bucket is None:
            bucket = self._buckets[b] = {}
        bucket[entry] = None

    def forget(self, entry: Entry) -> None:
        """Stop tracking a piece."""
        b = self._at.pop(entry, None)
        if b is not None:
            self._buckets[b].pop(entry, None)

    def due(self, now: float) -> list[Entry]:
        """The tracked pieces not refreshed for ``ttl`` by ``now`` (never one refreshed
        later than ``now - ttl``; at most ``grain`` late), in order; they are forgotten."""
        # Bucket b holds refreshes in [b * grain, (b + 1) * grain): all stale once
        # (b + 1) * grain + ttl <= now. Only bucket numbers are looked at, about ttl / grain.
        last = math.floor((now - self.ttl) / self.grain) - 1
        out: list[Entry] = []
        for b in sorted(b for b in self._buckets if b <= last):
            for entry in self._buckets.pop(b):
                del self._at[entry]
                out.append(entry)
        return out


class Expiry(NodeBase):
    """The expiry part of ``PubSubNode``."""

    __slots__ = ("_expiry", "_orphan_since", "_replicate_op")

    #: When each piece at a primary was last refreshed; None while expiry is off.
    _expiry: ExpiryQueue | None
    #: Replica copies held outside their replica set (by our view), since when.
    _orphan_since: dict[NodeKey, float]
    # Given by the node (``pubsub.base``): replication's, for the pieces it removes.
    _replicate_op: Callable[[NodeKey, int, StoredSub, float], None]

    def __init__(self, shared: NodeBase) -> None:
        NodeBase.__init__(self, shared)
        self._expiry = ExpiryQueue(self.cfg.expire_after_s) if self._expiring else None
        self._orphan_since = {}

    def _touch(self, key: NodeKey, s: StoredSub, now: float) -> None:
        """A primary leaf stored or was re-sent piece ``s``."""
        if self._expiry is not None:
            self._expiry.touch((key, s.subscriber.id, s.sid, s.gen, s.piece), now)

    def _touch_node(self, key: NodeKey, node: TreeNode, now: float) -> None:
        """Every piece of ``node`` counts as fresh: it has just become a primary here."""
        if self._expiry is not None and node.index is not None:
            for s in node.index:
                self._expiry.touch((key, s.subscriber.id, s.sid, s.gen, s.piece), now)

    def _forget(self, key: NodeKey, s: StoredSub) -> None:
        if self._expiry is not None:
            self._expiry.forget((key, s.subscriber.id, s.sid, s.gen, s.piece))

    def _on_expire_timer(self, arg: Any, now: float) -> None:
        self._expire(now)
        self._timers.push(now + self.cfg.refresh_s / 2.0, T_EXPIRE)

    def _expire(self, now: float) -> None:
        """Remove every piece not refreshed for ``expire_after_s``, at its replicas too."""
        if self._expiry is None:
            return
        for entry in self._expiry.due(now):
            key, owner, sid, gen, piece = entry
            node = self.nodes.get(key)
            if node is None or node.index is None:
                continue  # split or handed off since: the piece's new holder tracks it
            s = node.index.get(owner, sid, gen, piece)
            if s is None:
                continue
            node.index.remove(owner, sid, gen, piece)
            self.stats.expired += 1
            self._replicate_op(key, OP_REMOVE, s, now)
        self._release_orphans(now)

    def _release_orphans(self, now: float) -> None:
        """Drop the replica copies our view has kept outside their replica set for a whole
        ``expire_after_s`` (module header: no primary updates them any more)."""
        since = self._orphan_since
        me = self.dht.me.id
        for key, node in list(self.replicas.items()):
            k = self.cfg.replicas
            if node.index is None and k > 1:
                k = max(k, INTERNAL_REPLICAS)
            if any(p.id == me for p in self.dht.replica_set(self._key(*key), k)):
                since.pop(key, None)
                continue
            first = since.setdefault(key, now)
            if now - first >= self.cfg.expire_after_s:
                del self.replicas[key]
                del since[key]
                self.stats.replicas_released += 1
        for key in [key for key in since if key not in self.replicas]:
            del since[key]
