"""The host of tree nodes: what a peer does for the tree nodes whose DHT root it is.

Theory of operation
-------------------
Every tree node lives on the DHT root of the SHA-1 of its identifier. A *leaf* stores
subscription pieces up to the peer's capacity, then splits: it divides them by point between
its two children (``TransferSub``, which creates each child), becomes internal with a
LeafNodeRoutingTable naming the children, and tells its ancestors (``LeafUpdate``, passed up to
the root). The root of each attribute tree is created on first use.

Probes arrive routed:

* ``ProbeSub`` (a piece to store or remove): a leaf stores it (``PieceStored``) and
  acknowledges to its subscriber (``InstallAck``); an internal node forwards it to the leaf its
  table names.
* ``ProbePub`` (an event's probe, within a scope): a leaf matches it, each event at most once
  per leaf (``TreeNode.remember``), and hands the matched subscribers, grouped by peer, to the
  notification strategy (``pubsub.dissemination``); an internal node sends it on to the leaves
  of its table within the probe's scope, through the probe strategy.

A probe for a tree node this peer does not host (``_node_for``) takes one of four ways: a
replica of it is promoted (its primary failed) or, while the primary lives, the probe goes on to
the root; a peer that joined a moment ago holds it for the hand-off under way; a probe that a
table sent to a node which does not exist yet (its ``TransferSub`` is still on its way) is
*parked* until the node is created or ``park_timeout_s`` passes (``T_PARK`` timers); anything
else guessed too deep and *jumps* to the ancestor at half the depth (a binary search upwards).
A parked probe whose node never came, addressed to a peer that is the node's root, means the
node died with its whole replica set: the leaf is recreated empty, and its subscribers'
refreshes fill it again.

Every change to a hosted node is passed to its replicas (``pubsub.replication``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

from rangecast.dht.errors import RemoteProtocolError
from rangecast.dht.routing import Peer
from rangecast.dht.wire import Handle, Message
from rangecast.pubsub.base import T_PARK, NodeBase, NodeKey
from rangecast.pubsub.events import PieceStored
from rangecast.pubsub.messages import (
    OP_INSERT,
    OP_REMOVE,
    Event,
    InstallAck,
    LeafUpdate,
    ProbePub,
    ProbeSub,
    ProbeTarget,
    Ref,
    StoredSub,
    TransferSub,
)
from rangecast.pubsub.space import AttributeSpace, TreeId, tree_id
from rangecast.pubsub.tree import TreeNode, piece_bytes

log = logging.getLogger("rangecast.pubsub")


class TreeHost(NodeBase):
    """The tree-host part of ``PubSubNode``. A variant of the split rule subclasses it
    (``split_due``, ``split_side``) and names the subclass in ``PubSubNode.host_class``."""

    __slots__ = (
        "_forget",
        "_forward_out",
        "_notify",
        "_on_delivery",
        "_probe_out",
        "_promote",
        "_ready_at",
        "_replicate_op",
        "_replicate_state",
        "_sync_replicas",
        "_touch",
        "_touch_node",
    )

    #: When the DHT node became ready after joining (``joined``): until ``handoff_wait_s``
    #: later, probes for nodes not here yet wait for the previous root's hand-off.
    _ready_at: float
    # Given by the node (``pubsub.base``): the probe and notification strategies' bound
    # methods (``_forward_out``: how an internal node sends probes on to its table's leaves,
    # ``OverlayConfig.forward``; ``_probe_out`` and ``_on_delivery`` for the strategies'
    # receiving side, which runs here), and replication's and expiry's.
    _forward_out: Callable[[Event, list[ProbeTarget], int, float], None]
    _probe_out: Callable[[Event, list[ProbeTarget], int, float], None]
    _notify: Callable[[Event, dict[bytes, list[StoredSub]], float], None]
    _on_delivery: Callable[[Any, Handle | None, float], None]
    _promote: Callable[[NodeKey, float], TreeNode]
    _sync_replicas: Callable[[NodeKey, TreeNode, float], None]
    _replicate_state: Callable[[NodeKey, TreeNode, float], None]
    _replicate_op: Callable[[NodeKey, int, StoredSub, float], None]
    _touch: Callable[[NodeKey, StoredSub, float], None]
    _touch_node: Callable[[NodeKey, TreeNode, float], None]
    _forget: Callable[[NodeKey, StoredSub], None]

    def __init__(self, shared: NodeBase) -> None:
        NodeBase.__init__(self, shared)
        self._ready_at = -math.inf

    def joined(self, now: float) -> None:
        """The DHT node is ready, having joined: keys it is now root of are on their way from
        their old root."""
        self._ready_at = now

    # ------------------------------------------------------------------ subscription pieces

    def _on_probe_sub(self, msg: ProbeSub, sender: Handle | None, now: float) -> None:
        space, tid = self._resolve(msg.target)
        sub = msg.sub
        if sub.base != space.index:
            raise RemoteProtocolError("ProbeSub base attribute differs from its target's")
        node = self._node_for(msg, space, tid, now)
        if node is None:
            return
        if node.index is None:
            assert node.table is not None
            leaf = node.table.locate(space, sub.x, sub.y)
            if leaf is None:
                raise RemoteProtocolError(f"point ({sub.x}, {sub.y}) outside {tid}")
            ref = Ref(msg.target.schema, leaf.attr, leaf.depth, leaf.path)
            self._route(ref.schema, leaf, ProbeSub(msg.op, ref, True, msg.jumps, sub), now)
            return
        if not space.zone(tid).contains(sub.x, sub.y):
            raise RemoteProtocolError(f"point ({sub.x}, {sub.y}) outside leaf {tid}")
        owner = Peer.from_handle(self.dht.space, sub.subscriber)
        key = (msg.target.schema, tid)
        if msg.op == OP_INSERT:
            if node.index.get(sub.subscriber.id, sub.sid, sub.gen, sub.piece) is None:
                idx, cfg, pb = node.index, self.cfg, piece_bytes(sub)
                full = idx.bytes + pb > cfg.max_leaf_bytes
                mine = idx.bytes_of.get(sub.subscriber.id, 0) + pb
                if full or mine > cfg.max_leaf_share * cfg.max_leaf_bytes:
                    # Its replicas' ReplicaPut would no longer fit a frame, or one subscriber
                    # would crowd the others out: refuse, and say so to the subscriber (an
                    # InstallAck of an insert not stored).
                    if full:
                        self.stats.refused += 1
                    else:
                        self.stats.refused_share += 1
                    ack = InstallAck(OP_INSERT, sub.sid, sub.gen, sub.piece, False)
                    self._send(owner, ack, now)
                    return
            if node.index.add(sub):
                self._replicate_op(key, OP_INSERT, sub, now)
            self._touch(key, sub, now)  # installed, or refreshed by its subscriber
            self.stats.stored += 1
            self._events.append(
                PieceStored(sub.subscriber.id, sub.sid, sub.gen, sub.piece, tid, now)
            )
            self._send(owner, InstallAck(OP_INSERT, sub.sid, sub.gen, sub.piece, True), now)
            if self.split_due(node):
                self._split(msg.target.schema, space, node, now)
        else:
            found = node.index.remove(sub.subscriber.id, sub.sid, sub.gen, sub.piece)
            if found:
                self._forget(key, sub)
                self._replicate_op(key, OP_REMOVE, sub, now)
            self._send(owner, InstallAck(OP_REMOVE, sub.sid, sub.gen, sub.piece, found), now)

    # The split rule: when a leaf splits, and which child each of its pieces goes to. A variant
    # overrides these two in a subclass of PubSubNode (docs/testing.md tests one).

    def split_due(self, node: TreeNode) -> bool:
        """Does this leaf split now? (Over capacity, and not yet at ``max_depth``.)"""
        return (
            node.index is not None
            and len(node.index) > self.capacity
            and node.tid.depth < self.cfg.max_depth
        )

    def split_side(self, space: AttributeSpace, tid: TreeId, piece: StoredSub) -> int:
        """The child (0 or 1) of the splitting leaf ``tid`` that takes ``piece``."""
        return space.child_for(tid, piece.x, piece.y).path & 1

    def _split(self, schema: str, space: AttributeSpace, node: TreeNode, now: float) -> None:
        assert node.index is not None
        tid = node.tid
        halves: tuple[list[StoredSub], list[StoredSub]] = ([], [])
        for s in node.index:
            halves[self.split_side(space, tid, s)].append(s)
        horizon = now - self.cfg.dedup_window_s
        seen = [eid for eid, t in node.seen.items() if t >= horizon]
        node.become_internal()
        self.stats.splits += 1
        self._replicate_state((schema, tid), node, now)
        for bit in (0, 1):
            child = tid.child(bit)
            ref = Ref(schema, child.attr, child.depth, child.path)
            self._route(schema, child, TransferSub(ref, halves[bit], seen), now)
        if tid.depth > 0:
            parent = tid.parent()
            ref = Ref(schema, tid.attr, tid.depth, tid.path)
            self._route(schema, parent, LeafUpdate(ref, parent.depth), now)

    def _on_transfer(self, msg: TransferSub, sender: Handle | None, now: float) -> None:
        space, tid = self._resolve(msg.target)
        self._check_pieces(space, tid, msg.subs)
        schema = msg.target.schema
        key = (schema, tid)
        node = self.nodes.get(key)
        if node is None and key in self.replicas:
            node = self._promote(key, now)  # created before, its host has failed since
        if node is None:
            node = self.nodes[key] = TreeNode(tid, msg.subs)
            self._touch_node(key, node, now)  # ages restart at a split (module pubsub.expiry)
            self._sync_replicas(key, node, now)
        elif node.index is not None:
            for s in msg.subs:
                if node.index.add(s):
                    self._touch(key, s, now)
                    self._replicate_op(key, OP_INSERT, s, now)
        else:
            # Already split again (a late transfer): pass the pieces on down.
            for s in msg.subs:
                self._on_probe_sub(ProbeSub(OP_INSERT, msg.target, True, 0, s), None, now)
        if node.index is not None:
            for eid in msg.seen:
                node.seen.setdefault(eid, now)
        self._unpark(key, now)
        if self.split_due(node):
            self._split(schema, space, node, now)

    def _on_leaf_update(self, msg: LeafUpdate, sender: Handle | None, now: float) -> None:
        _, split = self._resolve(msg.split)
        depth = msg.at_depth
        if not 0 <= depth < split.depth:
            raise RemoteProtocolError("LeafUpdate for a node that is not below the receiver")
        holder = split.ancestor(depth)
        node = self.nodes.get((msg.split.schema, holder))
        if node is None or node.table is None:
            self.stats.drop("leaf update for a node not hosted here")
            return
        node.table.apply_split(split)
        if depth > 0:
            parent = holder.parent()
            self._route(msg.split.schema, parent, LeafUpdate(msg.split, parent.depth), now)

    # -------------------------------------------------------------------------------- events

    def _on_probe_pub(self, msg: ProbePub, sender: Handle | None, now: float) -> None:
        space, tid = self._resolve(msg.target)
        event = msg.event
        if event.schema != msg.target.schema:
            raise RemoteProtocolError("ProbePub event schema differs from its target's")
        schema = self._check_event(event)
        values = event.values
        if msg.scope_depth < tid.depth:
            raise RemoteProtocolError("probe scope above its target")
        scope = tree_id(tid.attr, msg.scope_depth, msg.scope_path)
        if not tid.is_ancestor_of(scope):
            raise RemoteProtocolError("probe scope outside its target")
        node = self._node_for(msg, space, tid, now)
        if node is None:
            return
        value = values[space.index]
        cutoff = self._cutoff(space)
        if node.index is not None:
            if not node.remember(event.eid, now, self.cfg.dedup_window_s):
                self.stats.duplicate_probes += 1
                return
            strict = schema.partial == "strict"
            self.stats.scanned += len(node.index)
            matched = node.index.match(values, space.index, cutoff, strict)
            if not matched:
                return
            self.stats.matched += len(matched)
            by_owner: dict[bytes, list[StoredSub]] = {}
            for s in matched:
                by_owner.setdefault(s.subscriber.addr, []).append(s)
            self._notify(event, by_owner, now)
            return
        assert node.table is not None
        targets = []
        for leaf in node.table.overlapping(space, scope, value, cutoff):
            inner = leaf if scope.is_ancestor_of(leaf) else scope
            targets.append(
                ProbeTarget.make(
                    leaf.attr, leaf.depth, leaf.path, inner.depth, inner.path, True, msg.jumps
                )
            )
        self._forward_out(event, targets, 0, now)

    # ----------------------------------------------------------- probes for a missing node

    def _node_for(
        self, msg: ProbeSub | ProbePub, space: AttributeSpace, tid: TreeId, now: float
    ) -> TreeNode | None:
        """The hosted tree node a probe addresses; if there is none, take over a replica (its
        primary failed), wait for a hand-off (we just joined), park, or jump up."""
        key = (msg.target.schema, tid)
        node = self.nodes.get(key)
        if node is not None:
            return node
        if key in self.replicas:
            if self.dht.next_hop(self._key(key[0], key[1])) is None:
                return self._promote(key, now)
            # Routed here on stale state while the primary lives on: send it on to the root.
            self._forward_to_root(msg, now)
            return None
        young = now - self._ready_at < self.cfg.handoff_wait_s
        if tid.depth == 0 and not young:
            node = self.nodes[key] = TreeNode(tid)  # the root always exists: create on use
            self._sync_replicas(key, node, now)
            return node
        if msg.via_lrt or young:
            self.stats.parked += 1
            wait = self.cfg.park_timeout_s if msg.via_lrt else self.cfg.handoff_wait_s
            deadline = now + wait
            self._parked.setdefault(key, []).append((msg, deadline))
            self._timers.push(deadline, T_PARK, key)
            return None
        self._jump(msg, now)
        return None

    def _forward_to_root(self, msg: ProbeSub | ProbePub, now: float) -> None:
        if msg.jumps >= self.cfg.max_jumps:
            self.stats.drop("too many jumps")
            return
        t = msg.target
        if isinstance(msg, ProbeSub):
            again: Message = ProbeSub(msg.op, t, msg.via_lrt, msg.jumps + 1, msg.sub)
        else:
            again = ProbePub(
                msg.event, t, msg.scope_depth, msg.scope_path, msg.via_lrt, msg.jumps + 1
            )
        self._route(t.schema, TreeId(t.attr, t.depth, t.path), again, now)

    def _serve(self, msg: ProbeSub | ProbePub, now: float) -> None:
        """Handle a probe that waited here, now that its node exists."""
        if isinstance(msg, ProbeSub):
            self._on_probe_sub(msg, None, now)
        else:
            self._on_probe_pub(msg, None, now)

    def _unpark(self, key: NodeKey, now: float) -> None:
        waiting = self._parked.pop(key, None)
        if waiting:
            for parked, _ in waiting:
                try:  # one bad parked probe must not take the others with it
                    self._serve(parked, now)
                except RemoteProtocolError as exc:
                    self.stats.malformed += 1
                    log.debug("dropped bad parked %s: %s", type(parked).__name__, exc)

    def _on_park_timer(self, key: Any, now: float) -> None:
        """Parked probes for ``key`` whose wait is over: recreate the node or jump up."""
        waiting = self._parked.get(key)
        if not waiting:
            return
        due = [m for m, t in waiting if t <= now]
        rest = [(m, t) for m, t in waiting if t > now]
        if rest:
            self._parked[key] = rest
        else:
            del self._parked[key]
        for msg in due:
            self.stats.park_timeouts += 1
            if (
                msg.via_lrt
                and self.dht.cfg.keepalive_s != math.inf
                and key not in self.nodes
                and self.dht.next_hop(self._key(key[0], key[1])) is None
            ):
                # A parent's table names this leaf, we are its root, and no copy arrived:
                # it died with its whole replica set. Recreate it empty; its subscribers'
                # refreshes fill it again (and a late transfer would merge into it).
                self.stats.recreated += 1
                node = self.nodes[key] = TreeNode(key[1])
                self._sync_replicas(key, node, now)
                self._serve(msg, now)
                continue
            # The node never appeared: behave as for a wrong guess and jump up.
            self._jump(msg, now)

    def _jump(self, msg: ProbeSub | ProbePub, now: float) -> None:
        """Guessed too deep: try the ancestor at half the depth (a binary search upwards)."""
        if msg.jumps >= self.cfg.max_jumps:
            self.stats.drop("too many jumps")
            return
        self.stats.jumps += 1
        t = msg.target
        tid = TreeId(t.attr, t.depth, t.path).ancestor(t.depth // 2)
        ref = Ref(t.schema, tid.attr, tid.depth, tid.path)
        if isinstance(msg, ProbeSub):
            up: Message = ProbeSub(msg.op, ref, False, msg.jumps + 1, msg.sub)
        else:
            up = ProbePub(msg.event, ref, msg.scope_depth, msg.scope_path, False, msg.jumps + 1)
        self._route(t.schema, tid, up, now)
