"""Replication of tree nodes: replica sets, promotion, hand-off and reconciliation.

Theory of operation
-------------------
Every tree node hosted here (the primary) has copies on the other members of its key's replica
set (the k closest peers to the key in the DHT's metric, ``DhtCore.replica_set``): its position
(leaf or internal) and its subscription pieces. They are kept current with one ``ReplicaOp`` per
change (a piece stored or removed) and a full ``ReplicaPut`` when a member joins the set or the
node changes shape (created, split); a member that leaves the set gets a ``ReplicaDrop``.
Internal nodes hold no subscriptions, so copies cost almost nothing, while losing one near the
top (the root above all) would cut the tree: they get the widest set (``INTERNAL_REPLICAS``).

Who holds what is re-checked (``_reconcile``) on every neighbourhood change the DHT reports
(the ``update`` upcall) and every ``reconcile_s`` (``T_RECONCILE``, only where the DHT detects
failures):

* a replica whose holder has become the key's root is *promoted* to primary (its primary
  failed), and the probes parked for it are served;
* a node whose host is no longer the key's root is *handed off* to the peer that is (it
  joined), as a ``ReplicaPut`` with ``handoff`` set; the new root merges it with any version it
  already has (a hand-off that crossed a promotion keeps every piece).

With a locality function (``dht.locality``: the runtime's /24s and /48s) the replica set keeps
the root and its heir, then prefers peers of address groups not in it yet, so one network's many
ids cannot hold every copy. A copy may then sit on a peer that is not next in line: when the
primary it came from has left this peer's neighbourhood and the key's root is another peer, the
copy is *re-homed* there as a hand-off (``_rehome``; without a locality function, never).

The LeafNodeRoutingTable is not replicated: a promoted internal node starts from its two
children, which forward further, and refines it from the LeafUpdates that follow. A peer that
joined holds probes for nodes it does not host yet for ``handoff_wait_s`` (``pubsub.host``): the
previous root is handing them over.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from rangecast.dht.routing import Peer
from rangecast.dht.wire import Handle
from rangecast.pubsub.base import T_EXPIRE, T_RECONCILE, T_REFRESH, NodeBase, NodeKey
from rangecast.pubsub.messages import (
    OP_INSERT,
    ProbeSub,
    Ref,
    ReplicaDrop,
    ReplicaOp,
    ReplicaPut,
    StoredSub,
)
from rangecast.pubsub.space import AttributeSpace
from rangecast.pubsub.tree import TreeNode

#: Copies of an internal tree node when replication is on (the leaf set's half plus one).
INTERNAL_REPLICAS = 9


class Replication(NodeBase):
    """The replication part of ``PubSubNode``."""

    __slots__ = ("_held_from", "_on_probe_sub", "_replica_of", "_touch", "_touch_node", "_unpark")

    #: For each tree node hosted here: the peers currently holding its replicas.
    _replica_of: dict[NodeKey, dict[int, Peer]]
    #: With spread replica sets: for each copy held here, the id of the primary it came from.
    _held_from: dict[NodeKey, int]
    # Given by the node (``pubsub.base``): the host's and expiry's methods it calls.
    _on_probe_sub: Callable[[ProbeSub, Handle | None, float], None]
    _unpark: Callable[[NodeKey, float], None]
    _touch: Callable[[NodeKey, StoredSub, float], None]
    _touch_node: Callable[[NodeKey, TreeNode, float], None]

    def __init__(self, shared: NodeBase) -> None:
        NodeBase.__init__(self, shared)
        self._replica_of = {}
        self._held_from = {}

    # ---------------------------------------------------------------------- DHT upcalls

    def ready(self, now: float) -> None:
        # Without keep-alives the DHT detects no failures, and the leaf set changes only
        # through joins, which the update upcall reports: no periodic check is needed (and an
        # endless timer would keep a failure-free simulation from ever going quiet). The
        # subscriber's refresh (``pubsub.subscriber``) starts here too, for the same reason.
        if self.dht.cfg.keepalive_s != math.inf:
            self._timers.push(now + self.rng.uniform(0.0, self.cfg.reconcile_s), T_RECONCILE)
            if self.cfg.refresh_s != math.inf:
                self._timers.push(now + self.rng.uniform(0.0, self.cfg.refresh_s), T_REFRESH)
            if self._expiring:
                self._timers.push(now + self.cfg.refresh_s / 2.0, T_EXPIRE)

    def update(self, peer: Peer, joined: bool, now: float) -> None:
        self._reconcile(now)

    def _on_reconcile_timer(self, arg: Any, now: float) -> None:
        self._reconcile(now)
        self._timers.push(now + self.cfg.reconcile_s, T_RECONCILE)

    # ------------------------------------------------------------------- who holds what

    def _reconcile(self, now: float) -> None:
        if not (self.nodes or self.replicas):
            return
        # Each step may change both maps under the loop: a promotion releases parked probes,
        # whose handling (routed through this very peer when it is the root) can promote,
        # create or hand off other nodes before the loop gets to them. Act only on what is
        # still there, as it is now.
        for key, node in list(self.nodes.items()):
            if self.nodes.get(key) is node:
                self._sync_replicas(key, node, now)
        for key in list(self.replicas):
            if key in self.replicas and self.dht.next_hop(self._key(*key)) is None:
                self._promote(key, now)
        if self.dht.locality is not None:
            self._rehome(now)

    def _rehome(self, now: float) -> None:
        """With replica sets spread across address groups (``dht.locality``), a copy may sit
        on a peer that is not next in line for the key: when the primary it came from is gone
        (no longer a neighbour) and the key's root is another peer, the copy goes to that root
        as a hand-off (merged there, every piece kept), and the root spreads its set anew.
        Otherwise an honest copy could outlive the peers of an attacker's prefix that held the
        key and serve nobody. A live primary that is no longer root hands off by itself."""
        held = self._held_from
        for key in [key for key in held if key not in self.replicas]:
            del held[key]
        if not self.replicas:
            return
        me = self.dht.me.id
        near = {p.id for p in self.dht.neighbours()}
        for key, node in list(self.replicas.items()):
            root = self.dht.replica_set(self._key(*key), 1)[0]
            was = held.setdefault(key, root.id)
            if root.id in (was, me) or was in near:
                continue
            held[key] = root.id
            self._send(root, self._state_of(key, node, handoff=True), now)
            self.stats.handed_off += 1

    def _promote(self, key: NodeKey, now: float) -> TreeNode:
        node = self.replicas.pop(key)
        self._held_from.pop(key, None)
        self.nodes[key] = node
        self.stats.promoted += 1
        self._touch_node(key, node, now)  # its primary kept the ages: they restart here
        self._sync_replicas(key, node, now)
        self._unpark(key, now)
        return node

    def _sync_replicas(self, key: NodeKey, node: TreeNode, now: float) -> None:
        """Make the replica set of ``key`` hold copies of ``node``, or hand it over (with or
        without replication, a peer that joins takes over the keys it becomes root of)."""
        k = self.cfg.replicas
        if node.index is None and k > 1:
            k = max(k, INTERNAL_REPLICAS)
        rs = self.dht.replica_set(self._key(*key), k)
        me = self.dht.me
        if rs[0].id != me.id:
            # No longer the root: the peer that is takes the node over.
            del self.nodes[key]
            self._replica_of.pop(key, None)
            self._send(rs[0], self._state_of(key, node, handoff=True), now)
            self.stats.handed_off += 1
            if any(p.id == me.id for p in rs):
                self.replicas[key] = node
                self._held_from[key] = rs[0].id
            return
        want = {p.id: p for p in rs[1:]}
        have = self._replica_of.get(key, {})
        if want.keys() == have.keys():
            return
        fresh = [p for i, p in want.items() if i not in have]
        if fresh:
            put = self._state_of(key, node, handoff=False)
            for p in fresh:
                self._send(p, put, now)
                self.stats.replica_puts += 1
        for i, p in have.items():
            if i not in want:
                self._send(p, ReplicaDrop(self._ref(key)), now)
        self._replica_of[key] = want

    def replica_sets(self) -> dict[NodeKey, list[Peer]]:
        """For every tree node hosted here: this peer, then the peers holding its copies."""
        me = self.dht.me
        return {key: [me, *self._replica_of.get(key, {}).values()] for key in self.nodes}

    # ------------------------------------------------------------ changes, to the replicas

    def _replicate_state(self, key: NodeKey, node: TreeNode, now: float) -> None:
        """The node changed shape (created, split): every replica gets the whole state."""
        if self.cfg.replicas <= 1:
            return
        have = self._replica_of.get(key)
        if have is None:
            self._sync_replicas(key, node, now)
            return
        put = self._state_of(key, node, handoff=False)
        for p in have.values():
            self._send(p, put, now)
            self.stats.replica_puts += 1

    def _replicate_op(self, key: NodeKey, op: int, sub: StoredSub, now: float) -> None:
        if self.cfg.replicas <= 1:
            return
        have = self._replica_of.get(key)
        if have is None:
            node = self.nodes.get(key)
            if node is not None:
                self._sync_replicas(key, node, now)  # a full state, this change included
            return
        msg = ReplicaOp(self._ref(key), op, sub)
        for p in have.values():
            self._send(p, msg, now)
            self.stats.replica_ops += 1

    def _state_of(self, key: NodeKey, node: TreeNode, handoff: bool) -> ReplicaPut:
        if node.index is not None:
            return ReplicaPut(self._ref(key), True, list(node.index), list(node.seen), handoff)
        return ReplicaPut(self._ref(key), False, [], [], handoff)

    # ------------------------------------------------------------ at a replica, a new root

    def _on_replica_put(self, msg: ReplicaPut, sender: Handle | None, now: float) -> None:
        space, tid = self._resolve(msg.target)
        self._check_pieces(space, tid, msg.subs)
        key = (msg.target.schema, tid)
        incoming = TreeNode(tid, msg.subs)
        if msg.leaf:
            for eid in msg.seen:
                incoming.seen.setdefault(eid, now)
        else:
            incoming.become_internal()
        if not msg.handoff:
            if key not in self.nodes:
                self.replicas[key] = incoming
                if sender is not None:
                    self._held_from[key] = self.dht.space.from_bytes(sender.id)
            return
        node = self.nodes.get(key)
        if node is None:
            self.replicas.pop(key, None)
            node = self.nodes[key] = incoming
            self._touch_node(key, node, now)  # a hand-off carries no ages: they restart
        else:
            self._merge(msg.target, space, node, incoming, now)
        self._sync_replicas(key, node, now)
        self._unpark(key, now)

    def _merge(
        self, ref: Ref, space: AttributeSpace, node: TreeNode, incoming: TreeNode, now: float
    ) -> None:
        """Two versions of one tree node met (a hand-off crossed a promotion): keep every
        piece. A leaf meeting an internal version splits, and its pieces go down the tree."""
        if incoming.index is None and node.index is not None:
            pieces = list(node.index)
            node.become_internal()
        else:
            pieces = list(incoming.index) if incoming.index is not None else []
        for s in pieces:
            if node.index is not None:
                if node.index.add(s):
                    self._touch((ref.schema, node.tid), s, now)
                    self._replicate_op((ref.schema, node.tid), OP_INSERT, s, now)
            else:
                self._on_probe_sub(ProbeSub(OP_INSERT, ref, True, 0, s), None, now)

    def _on_replica_op(self, msg: ReplicaOp, sender: Handle | None, now: float) -> None:
        space, tid = self._resolve(msg.target)
        self._check_pieces(space, tid, [msg.sub])
        key = (msg.target.schema, tid)
        node = self.replicas.get(key) or self.nodes.get(key)
        if node is None or node.index is None:
            return  # no copy here (yet): the next full state brings it
        s = msg.sub
        if msg.op == OP_INSERT:
            node.index.add(s)
        else:
            node.index.remove(s.subscriber.id, s.sid, s.gen, s.piece)

    def _on_replica_drop(self, msg: ReplicaDrop, sender: Handle | None, now: float) -> None:
        _, tid = self._resolve(msg.target)
        self.replicas.pop((msg.target.schema, tid), None)
