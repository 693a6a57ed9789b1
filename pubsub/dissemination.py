"""How an event travels: the probe strategies (publisher and internal tree nodes to the leaves) and
the notification strategies (a leaf to its matched subscribers), each chosen once per node.

Theory of operation
-------------------
``OverlayConfig.probe`` and ``OverlayConfig.delivery`` name how events travel; every peer of an
overlay agrees on them. ``make_prober`` and ``make_notifier`` turn the names into strategy
objects when a ``PubSubNode`` is built, and its parts keep their bound methods (the publisher's
and the host's ``_probe_out``, the host's ``_forward_out`` and ``_notify``): the choice costs
nothing per event (no comparison of mode names on the way of a probe or a notification). A
strategy works for the node's tree host (``pubsub.host``): it routes and sends through it, and
hands it what is for this peer.

Probes (RndRegionProbe's targets: tree nodes of one event's schema):

* ``UnicastProbes`` (the thesis' baseline): one ``ProbePub`` per target, routed by the DHT to
  the target's key.
* ``MulticastProbes`` (thesis 3.4.2): targets this peer is root of are served here; the rest go
  as one ``ProbePubMulticast`` per next hop (``multicast.prefix.split``, the DHT's own routing
  decision), point to point: the next hop regroups them again (``on_probe_multicast``). A
  multicast hop needs no routing header (key, uid, origin), since every hop decides afresh for
  every target.

Notifications (a leaf's matched pieces, grouped by subscriber address):

* ``UnicastNotifier``: one ``EventDelivery`` per subscriber, naming its matching sids.
* ``MulticastNotifier``: for more than one subscriber, one ``DeliveryMulticast`` per next hop
  towards the subscribers' ids, regrouped at every hop (``on_delivery_multicast``) until each
  subscriber's own id is reached.
* ``LbddNotifier``: for at least ``lbdd_min_subscribers``, the event goes down an LBDD tree
  (``multicast.lbdd.build_tree``) rooted at the leaf's host: the leaf sends to the tree's top
  subscribers only, each with the list of its subtree (``LbddDelivery``), and every subscriber
  takes its notification and relays to its own children (``on_lbdd_delivery``). Fewer
  subscribers get one ``EventDelivery`` each.

The handlers of ``ProbePubMulticast``, ``DeliveryMulticast`` and ``LbddDelivery`` serve whatever
arrives, whatever the receiver's own choice: a peer relays in the mode the sender chose.
"""

from __future__ import annotations

import logging

from rangecast.dht.errors import RemoteProtocolError
from rangecast.dht.routing import Peer
from rangecast.dht.wire import Handle
from rangecast.multicast.lbdd import build_tree
from rangecast.multicast.prefix import MAX_HOPS as MULTICAST_MAX_HOPS
from rangecast.multicast.prefix import split as split_keys
from rangecast.pubsub.host import TreeHost
from rangecast.pubsub.messages import (
    DeliveryMulticast,
    Event,
    EventDelivery,
    LbddDelivery,
    Notify,
    ProbePub,
    ProbePubMulticast,
    ProbeTarget,
    Ref,
    Relay,
    StoredSub,
)
from rangecast.pubsub.space import MAX_DEPTH, tree_id

log = logging.getLogger("rangecast.pubsub")

#: A leaf's matched pieces, grouped by the subscriber's transport address.
ByOwner = dict[bytes, list[StoredSub]]


class _Strategy:
    """A probe or notification strategy of one node: stateless but for the node it serves."""

    __slots__ = ("node",)

    def __init__(self, node: TreeHost) -> None:
        self.node = node


# ------------------------------------------------------------------------------------ probes


class UnicastProbes(_Strategy):
    """One ``ProbePub`` per target, routed by the DHT."""

    __slots__ = ()

    def out(self, event: Event, targets: list[ProbeTarget], hops: int, now: float) -> None:
        node = self.node
        schema = event.schema
        for t in targets:
            tid = tree_id(t.attr, t.depth, t.path)
            ref = Ref(schema, t.attr, t.depth, t.path)
            pp = ProbePub(event, ref, t.scope_depth, t.scope_path, t.via_lrt, t.jumps)
            node._route(schema, tid, pp, now)


class MulticastProbes(_Strategy):
    """Targets grouped per next hop; those this peer is root of served here."""

    __slots__ = ()

    def out(self, event: Event, targets: list[ProbeTarget], hops: int, now: float) -> None:
        node = self.node
        schema = event.schema
        keys = [node._key(schema, tree_id(t.attr, t.depth, t.path)) for t in targets]
        plan = split_keys(node.dht, keys)
        for group in plan.groups:
            batch = [targets[i] for i in group.members]
            node._send(group.next_hop, ProbePubMulticast(event, hops + 1, batch), now)
        for i in plan.local:
            t = targets[i]
            ref = Ref(schema, t.attr, t.depth, t.path)
            pp = ProbePub(event, ref, t.scope_depth, t.scope_path, t.via_lrt, t.jumps)
            try:  # one bad target must not take the others with it
                node._on_probe_pub(pp, None, now)
            except RemoteProtocolError as exc:
                node.stats.malformed += 1
                log.debug("dropped bad multicast target: %s", exc)


PROBES: dict[str, type[UnicastProbes] | type[MulticastProbes]] = {
    "unicast": UnicastProbes,
    "multicast": MulticastProbes,
}


def make_prober(mode: str, node: TreeHost) -> UnicastProbes | MulticastProbes:
    """The probe strategy ``mode`` names (``OverlayConfig.probe``, validated there)."""
    return PROBES[mode](node)


def on_probe_multicast(
    node: TreeHost, msg: ProbePubMulticast, sender: Handle | None, now: float
) -> None:
    """Serve the targets this peer is root of and send the rest on, regrouped."""
    event = msg.event
    node._check_event(event)
    if msg.hops >= MULTICAST_MAX_HOPS:
        node.stats.drop("multicast hop budget exhausted")
        return
    targets = []
    for t in msg.targets:
        try:
            node._resolve(Ref(event.schema, t.attr, t.depth, t.path))
            if t.scope_depth > MAX_DEPTH or t.below_path >> t.below:
                raise RemoteProtocolError("multicast target scope malformed")
        except RemoteProtocolError as exc:
            node.stats.malformed += 1
            log.debug("dropped bad multicast target: %s", exc)
            continue
        targets.append(t)
    if targets:
        node._probe_out(event, targets, msg.hops, now)


# ----------------------------------------------------------------------------- notifications


# Each strategy sends its one ``EventDelivery`` per subscriber itself (the same three lines):
# the unicast send is on the path of every match, where a shared helper would cost a call. It
# goes to the address the leaf's pieces are grouped by (``ByOwner``), with no ``Peer`` made of
# the stored handle: a notification asks no answer (``DhtCore.send_to_end``).


class UnicastNotifier(_Strategy):
    """One ``EventDelivery`` per matched subscriber."""

    __slots__ = ()

    def notify(self, event: Event, by_owner: ByOwner, now: float) -> None:
        node = self.node
        for addr, group in by_owner.items():
            node._send_end(addr, EventDelivery(event, [s.sid for s in group]))


class MulticastNotifier(_Strategy):
    """Several subscribers: grouped per next hop towards their ids."""

    __slots__ = ()

    def notify(self, event: Event, by_owner: ByOwner, now: float) -> None:
        node = self.node
        if len(by_owner) > 1:
            notes = [Notify(g[0].subscriber, [s.sid for s in g]) for g in by_owner.values()]
            notify_multicast(node, event, notes, 0, now)
            return
        for addr, group in by_owner.items():
            node._send_end(addr, EventDelivery(event, [s.sid for s in group]))


def notify_multicast(
    node: TreeHost, event: Event, notes: list[Notify], hops: int, now: float
) -> None:
    """Group ``notes`` per next hop towards their subscribers' ids; deliver our own."""
    space = node.dht.space
    plan = split_keys(node.dht, [space.from_bytes(n.subscriber.id) for n in notes])
    for group in plan.groups:
        batch = [notes[i] for i in group.members]
        node._send(group.next_hop, DeliveryMulticast(event, hops + 1, batch), now)
    me = node.dht.me.handle.id
    for i in plan.local:
        if notes[i].subscriber.id == me:
            node._on_delivery(EventDelivery(event, notes[i].sids), None, now)
        else:  # the subscriber's id has another root: it has left the overlay
            node.stats.drop("notification for a departed subscriber")


def on_delivery_multicast(
    node: TreeHost, msg: DeliveryMulticast, sender: Handle | None, now: float
) -> None:
    if msg.hops >= MULTICAST_MAX_HOPS:
        node.stats.drop("multicast hop budget exhausted")
        return
    nbytes = node.dht.space.nbytes
    for n in msg.targets:
        if len(n.subscriber.id) != nbytes:
            raise RemoteProtocolError("notification for a malformed subscriber id")
    notify_multicast(node, msg.event, msg.targets, msg.hops, now)


class LbddNotifier(_Strategy):
    """Many subscribers: down an LBDD tree in which they relay."""

    __slots__ = ("min_subscribers",)

    def __init__(self, node: TreeHost) -> None:
        super().__init__(node)
        self.min_subscribers = node.cfg.lbdd_min_subscribers

    def notify(self, event: Event, by_owner: ByOwner, now: float) -> None:
        node = self.node
        space = node.dht.space
        if len(by_owner) < self.min_subscribers:
            for addr, group in by_owner.items():
                node._send_end(addr, EventDelivery(event, [s.sid for s in group]))
            return
        me = node.dht.me.addr
        mine = by_owner.get(me)
        if mine is not None:  # this leaf's host subscribes too: no relay for itself
            node._send(node.dht.me, EventDelivery(event, [s.sid for s in mine]), now)
        addrs = [a for a in by_owner if a != me]
        tree = build_tree(me, addrs)
        relays = [Relay(by_owner[a][0].subscriber, [s.sid for s in by_owner[a]], -1) for a in addrs]
        for child in tree.source_children:
            below = tree.subtree(child)
            position = {m: k for k, m in enumerate(below)}
            listed = [
                Relay(
                    relays[m].subscriber,
                    relays[m].sids,
                    -1 if tree.parent[m] == child else position[tree.parent[m]],
                )
                for m in below
            ]
            owner = Peer.from_handle(space, relays[child].subscriber)
            node._send(owner, LbddDelivery(event, relays[child].sids, listed), now)


def on_lbdd_delivery(node: TreeHost, msg: LbddDelivery, sender: Handle | None, now: float) -> None:
    """Take our notification and pass the event on to our children, each with its own
    subtree. Parents are listed before their children, so one pass finds every entry's
    top-level ancestor and a malformed list cannot make a cycle."""
    below = msg.below
    top: list[int] = []
    space = node.dht.space
    for k, r in enumerate(below):
        if r.parent >= k:
            raise RemoteProtocolError("LBDD relay list names a later entry as parent")
        if len(r.subscriber.id) != space.nbytes:
            raise RemoteProtocolError("LBDD relay with a malformed subscriber id")
        top.append(k if r.parent == -1 else top[r.parent])
    node._on_delivery(EventDelivery(msg.event, msg.sids), sender, now)
    for j, r in enumerate(below):
        if r.parent != -1:
            continue
        mine = [k for k in range(j + 1, len(below)) if top[k] == j]
        position = {k: n for n, k in enumerate(mine)}
        listed = [
            Relay(
                below[k].subscriber,
                below[k].sids,
                -1 if below[k].parent == j else position[below[k].parent],
            )
            for k in mine
        ]
        child = Peer.from_handle(space, r.subscriber)
        node._send(child, LbddDelivery(msg.event, r.sids, listed), now)


Notifier = UnicastNotifier | MulticastNotifier | LbddNotifier

NOTIFIERS: dict[str, type[Notifier]] = {
    "unicast": UnicastNotifier,
    "multicast": MulticastNotifier,
    "lbdd": LbddNotifier,
}


def make_notifier(mode: str, node: TreeHost) -> Notifier:
    """The notification strategy ``mode`` names (``OverlayConfig.delivery``, validated there)."""
    return NOTIFIERS[mode](node)
