"""Who serves whom: the data path of the LBDD topic mode, receiver-driven.

Theory of operation
-------------------
Slices travel down the tree each node computes from its member list (``Membership.tree``); the
flows that carry them and their states are in ``multicast.flows``. This module decides which
flows exist.

**Who serves whom (receiver-driven).** When a node first learns of a publication (from its first
slice), it opens flows from slice 0 to its own children. Beyond that, a node serves exactly the
receivers that *pulled* it: a ``TopicPull`` says "I have [0, have) and these extra slices" and
resets the puller's flow at the sender. A receiver pulls its parent whenever its parent changes
(a path update after a failure, a leave or a join: ``view_changed``), when no slice has arrived
for ``max(stall_s, 4 x the usual gap)`` (a lost pull, a parent that died before the failure was
noticed), and when its parent sends it a slice it already has. It sends ``TopicStop`` to a node
that sends it slices but is not its parent. A node that receives a pull for a publication it has
not seen yet (PENDING) pulls its own parent in turn. A receiver cannot pull for a publication it
has never heard of, so a parent tells a child that became its child in a path update
(``TopicOffer``), and repeats the offer every ``stall_s`` to any child it neither serves nor has
served to the end (lost offers, views that changed under it); a child that has it all answers
with a pull that says so. Together: after the last path update every live receiver has pulled
its parent in the final tree, every parent serves everything it has that the child lacks, and by
induction down the tree every live receiver gets every slice. Slices that an orphaned subtree
missed while its parent was dead are recovered this way, from the new parent, starting where
each orphan stopped.

**Exactly once.** A receiver delivers each slice index once (``SliceDelivered``) and
``PublicationComplete`` once; a slice that arrives again (in flight from an old parent when the
tree changed, or resent after a lost acknowledgement) is acknowledged and counted in
``stats.duplicates``, not delivered. After a path update that costs at most the old parent's
unacknowledged slices per re-parented receiver; without failures, membership changes or loss
no slice crosses the network twice.

**Late members.** A member that joins while a publication is under way is served by its parent
from slice 0 (a new member has nothing). Nodes keep a publication's slices for ``retain_s``
after the last activity, so a member joining within that time still gets it; a dropped
publication's key is remembered a while longer, so that a late slice is not taken for a new one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rangecast.dht.errors import RemoteProtocolError
from rangecast.multicast.flows import HAS_ALL, Publication, PubState, Sender
from rangecast.multicast.messages import (
    MAX_EXTRA,
    MAX_SLICE_BYTES,
    MODES,
    TopicAck,
    TopicData,
    TopicOffer,
    TopicPull,
    TopicStop,
)
from rangecast.multicast.rendezvous import Members, Membership
from rangecast.multicast.topic_base import PubKey, TopicContext
from rangecast.multicast.topic_events import (
    PubInfo,
    PublicationAbandoned,
    PublicationComplete,
    SliceDelivered,
)


class Publications:
    """The publications one node holds, and the receiver-driven rules that serve them."""

    __slots__ = ("_ctx", "_members", "_sender", "done", "pubs")

    def __init__(self, ctx: TopicContext, members: Members, sender: Sender) -> None:
        self._ctx = ctx
        self._members = members
        self._sender = sender
        self.pubs: dict[PubKey, Publication] = {}
        #: Publications dropped after retention or abandonment, until when to ignore them.
        self.done: dict[PubKey, float] = {}

    def info(self, key: PubKey) -> PubInfo | None:
        pub = self.pubs.get(key)
        if pub is None:
            return None
        return PubInfo(
            pub.count,
            pub.total,
            pub.state in HAS_ALL,
            pub.upstream,
            dict(pub.senders),
            tuple(pub.flows),
        )

    # ------------------------------------------------------------------------------ the source

    def publish(self, topic: str, slices: Sequence[bytes], size: int, mode: int, now: float) -> int:
        """Start a publication of checked ``slices`` (``size`` bytes); returns its id."""
        members = self._members
        m = members.topics.get(topic)
        if m is None:
            m = members.attach(topic, receiver=False, now=now)
            members.send_join(m, now)
        pid = self._ctx.rng.getrandbits(63)
        key = (topic, self._ctx.me, pid)
        pub = Publication(key, mode, now, PubState.SOURCE)
        pub.init(len(slices), size)
        pub.slices = list(slices)
        pub.count = pub.prefix = len(slices)
        self.pubs[key] = pub
        if m.has_list:
            self._open_children(m, pub, now)
        self._sender.pump(now)
        return pid

    # --------------------------------------------------------------------------- path update

    def view_changed(self, m: Membership, old: dict[bytes, int], now: float) -> None:
        """Path update: recompute every publication's targets from the new list. ``old``: the
        previous list's members and nonces (empty for our first list)."""
        nonces = m.addrs
        me = self._ctx.me
        sender = self._sender
        # Members that joined since (or left and joined again): they hold none of the
        # publications under way.
        fresh = {a for a, n in nonces.items() if old and old.get(a) != n}
        for pub in [p for k, p in self.pubs.items() if k[0] == m.topic]:
            for dest, flow in list(pub.flows.items()):
                if dest not in nonces or dest in fresh:
                    sender.close(flow)  # failed, left, or a flow to an earlier incarnation
            pub.done_for -= fresh
            parent, children = m.tree(me, pub.key[1], pub.mode)
            if not pub.opened:
                if pub.state is PubState.SOURCE or pub.count:
                    self._open_children(m, pub, now)
            else:
                topic, publisher, pid = pub.key
                before = pub.children
                for c in children:
                    if c in pub.flows:
                        continue
                    if c in fresh:
                        sender.open(pub, c, 0, (), now)  # a new member has nothing yet
                    elif c not in before and pub.total is not None:
                        # Re-parented to us: it may have part of it, or not know it at all.
                        offer = TopicOffer(topic, publisher, pid, pub.total, pub.size, pub.mode)
                        self._ctx.send(c, offer)
                pub.children = children
            if pub.state not in HAS_ALL and parent is not None and parent != pub.upstream:
                self._switch_upstream(pub, parent, now)
        sender.pump(now)

    # ------------------------------------------------------------------------------ data path

    def on_data(self, msg: TopicData, src: bytes, now: float) -> None:
        ctx = self._ctx
        m = self._members.topics.get(msg.topic)
        if m is None:
            ctx.stats.drop("data for a topic we are not in")
            return
        key = (msg.topic, msg.publisher, msg.pid)
        ack = TopicAck(msg.topic, msg.publisher, msg.pid, msg.index)
        if msg.index >= msg.total or msg.mode not in MODES:
            raise RemoteProtocolError("slice index past the total, or unknown mode")
        if msg.size > msg.total * MAX_SLICE_BYTES or len(msg.data) > msg.size:
            raise RemoteProtocolError("publication size inconsistent with its slices")
        if key in self.done or msg.publisher == ctx.me:
            ctx.send(src, ack)
            ctx.stats.drop("slice of a finished publication")
            return
        pub = self.pubs.get(key)
        if pub is None:
            pub = self.pubs[key] = Publication(key, msg.mode, now)
        self._shape(pub, msg.total, msg.size, msg.mode)
        ctx.send(src, ack)
        if msg.version > m.version:
            self._members.ask_list(m, msg.version)
        parent: bytes | None = None
        if m.has_list:
            parent = m.tree(ctx.me, msg.publisher, msg.mode)[0]
            if not pub.opened:
                # Our first slice of it: serve our children from the start.
                self._open_children(m, pub, now)
        pub.last_active = now
        if pub.slices[msg.index] is not None:
            ctx.stats.duplicates += 1
            if src == pub.upstream:
                if pub.count > pub.pulled:
                    # Our parent is behind what we have (it started from what our last pull
                    # said, and slices kept coming from our old parent since): tell it. At most
                    # one pull per new slice, so this cannot run away.
                    self._pull(pub, src)
            else:
                self._stop(pub, src, now)
            self._sender.pump(now)
            return
        self._store(pub, msg.index, msg.data, src, now)
        if pub.upstream is None:
            if parent is None or src == parent:
                pub.upstream = src
            else:
                self._stop(pub, src, now)
                self._pull(pub, parent)
        elif src != pub.upstream:
            self._stop(pub, src, now)
        self._sender.pump(now)

    def _store(self, pub: Publication, index: int, data: bytes, src: bytes, now: float) -> None:
        ctx = self._ctx
        pub.slices[index] = data
        pub.count += 1
        slices = pub.slices
        total = pub.total
        assert total is not None
        while pub.prefix < total and slices[pub.prefix] is not None:
            pub.prefix += 1
        if pub.count > 1:
            pub.gap += 0.2 * (now - pub.last_progress - pub.gap)
        pub.last_progress = now
        pub.senders[src] = pub.senders.get(src, 0) + 1
        ctx.stats.slices_received += 1
        topic, publisher, pid = pub.key
        ctx.events.append(SliceDelivered(topic, publisher, pid, index, total, data, now))
        waiting = pub.waiting.pop(index, None)
        if waiting:
            self._sender.wake(waiting)
        if pub.count == total:
            pub.state = PubState.COMPLETE
            payload = None
            if pub.size <= ctx.cfg.assemble_limit_bytes:
                payload = b"".join(s for s in slices if s is not None)
            ctx.events.append(
                PublicationComplete(topic, publisher, pid, total, pub.size, payload, now)
            )

    def on_ack(self, msg: TopicAck, src: bytes, now: float) -> None:
        pub = self.pubs.get((msg.topic, msg.publisher, msg.pid))
        if pub is None:
            return
        f = pub.flows.get(src)
        if f is not None:  # (else for a flow that was stopped since)
            self._sender.ack(f, msg.index, now)

    def on_pull(self, msg: TopicPull, src: bytes, now: float) -> None:
        m = self._members.topics.get(msg.topic)
        if m is None:
            self._ctx.stats.drop("pull for a topic we are not in")
            return
        if msg.mode not in MODES:
            raise RemoteProtocolError(f"unknown mode {msg.mode}")
        key = (msg.topic, msg.publisher, msg.pid)
        pub = self.pubs.get(key)
        if pub is None:
            if key in self.done or msg.publisher == self._ctx.me:
                self._ctx.stats.drop("pull for a publication we no longer keep")
                return
            # We have not seen it yet (our parent was slow, or died): keep the puller waiting
            # and pull our own parent in turn.
            pub = self.pubs[key] = Publication(key, msg.mode, now)
        elif pub.mode != msg.mode:
            raise RemoteProtocolError("pull disagrees with its publication's mode")
        if pub.total is not None and msg.have > pub.total:
            raise RemoteProtocolError("pull claims more slices than the publication has")
        pub.last_active = now
        self._sender.open(pub, src, msg.have, msg.extra, now)
        if pub.state not in HAS_ALL and pub.upstream is None and m.has_list:
            parent = m.tree(self._ctx.me, msg.publisher, msg.mode)[0]
            if parent is not None:
                self._pull(pub, parent)
        self._sender.pump(now)

    def on_stop(self, msg: TopicStop, src: bytes, now: float) -> None:
        pub = self.pubs.get((msg.topic, msg.publisher, msg.pid))
        if pub is not None:
            f = pub.flows.get(src)
            if f is not None:
                self._sender.close(f)
                self._sender.pump(now)

    def on_offer(self, msg: TopicOffer, src: bytes, now: float) -> None:
        m = self._members.topics.get(msg.topic)
        if m is None:
            self._ctx.stats.drop("offer for a topic we are not in")
            return
        key = (msg.topic, msg.publisher, msg.pid)
        if msg.publisher == self._ctx.me:
            return
        pub = self.pubs.get(key)
        if key in self.done or (pub is not None and pub.state in HAS_ALL):
            # We have it all: say so, or the parent would keep offering.
            self._ctx.send(src, TopicPull(*key, msg.mode, msg.total, []))
            return
        if pub is None:
            if msg.mode not in MODES:
                raise RemoteProtocolError(f"unknown mode {msg.mode}")
            pub = self.pubs[key] = Publication(key, msg.mode, now)
        self._shape(pub, msg.total, msg.size, msg.mode)
        parent = m.tree(self._ctx.me, msg.publisher, msg.mode)[0] if m.has_list else None
        target = parent or src
        if pub.upstream != target:
            self._switch_upstream(pub, target, now)
        self._sender.pump(now)

    # ------------------------------------------------------------------ pulls, stops, opening

    def _pull(self, pub: Publication, dest: bytes) -> None:
        topic, publisher, pid = pub.key
        extra: list[int] = []
        if pub.total is not None and pub.count > pub.prefix:
            slices = pub.slices
            for i in range(pub.prefix + 1, pub.total):
                if slices[i] is not None:
                    extra.append(i)
                    if len(extra) == MAX_EXTRA:
                        break
        self._ctx.send(dest, TopicPull(topic, publisher, pid, pub.mode, pub.prefix, extra))
        pub.upstream = dest
        pub.pulled = pub.count
        self._ctx.stats.pulls_sent += 1

    def _stop(self, pub: Publication, dest: bytes, now: float) -> None:
        last = pub.stopped.get(dest, -math.inf)
        if now - last < self._ctx.cfg.stall_s:
            return
        pub.stopped[dest] = now
        topic, publisher, pid = pub.key
        self._ctx.send(dest, TopicStop(topic, publisher, pid))
        self._ctx.stats.stops_sent += 1

    def _switch_upstream(self, pub: Publication, parent: bytes, now: float) -> None:
        if pub.upstream is not None and pub.upstream != parent:
            self._stop(pub, pub.upstream, now)
        self._pull(pub, parent)
        pub.repull_at = now + self._ctx.cfg.stall_s

    def _open_children(self, m: Membership, pub: Publication, now: float) -> None:
        children = m.tree(self._ctx.me, pub.key[1], pub.mode)[1]
        for c in children:
            if c not in pub.flows:
                self._sender.open(pub, c, 0, (), now)
        pub.children = children
        pub.opened = True

    def _shape(self, pub: Publication, total: int, size: int, mode: int) -> None:
        """Learn (or check) a publication's shape from a slice or an offer."""
        if mode not in MODES:
            raise RemoteProtocolError(f"unknown mode {mode}")
        if size > total * MAX_SLICE_BYTES:
            raise RemoteProtocolError("publication size larger than its slices can hold")
        if pub.total is None:
            if mode != pub.mode:
                raise RemoteProtocolError("publication's mode differs from the pull's")
            pub.init(total, size)
            pub.state = PubState.RECEIVING
            parked, pub.waiting = pub.waiting, {}
            for lst in parked.values():
                self._sender.wake(lst)
        elif pub.total != total or pub.size != size or pub.mode != mode:
            raise RemoteProtocolError("publication's shape differs from what we know")

    # -------------------------------------------------------------------------- periodic work

    def tick(self, now: float) -> None:
        cfg = self._ctx.cfg
        me = self._ctx.me
        for key, pub in list(self.pubs.items()):
            m = self._members.topics.get(key[0])
            if m is None:
                self.drop(pub, now, remember=False)
                continue
            if pub.flows:
                self._sender.time_out(pub, now)
            if pub.opened and pub.total is not None and m.has_list:
                # Backstop for lost offers and views that changed under us: a child we neither
                # serve nor finished serving is told about the publication again.
                topic, publisher, pid = key
                for c in m.tree(me, publisher, pub.mode)[1]:
                    if (
                        c not in pub.flows
                        and c not in pub.done_for
                        and now - pub.offered.get(c, -math.inf) >= cfg.stall_s
                    ):
                        pub.offered[c] = now
                        offer = TopicOffer(topic, publisher, pid, pub.total, pub.size, pub.mode)
                        self._ctx.send(c, offer)
            if pub.state in HAS_ALL:
                if not pub.flows and now - pub.last_active > cfg.retain_s:
                    self.drop(pub, now, remember=True)
                continue
            if now - pub.last_progress > cfg.abandon_s:
                topic, publisher, pid = key
                self._ctx.events.append(
                    PublicationAbandoned(topic, publisher, pid, pub.count, pub.total or 0, now)
                )
                self.drop(pub, now, remember=True)
                continue
            stalled = now - pub.last_progress > max(cfg.stall_s, 4.0 * pub.gap)
            if stalled and now >= pub.repull_at and m.has_list:
                parent = m.tree(me, key[1], pub.mode)[0] or pub.upstream
                if parent is not None:
                    self._switch_upstream(pub, parent, now)
        if self.done:
            self.done = {k: t for k, t in self.done.items() if t > now}
        self._sender.pump(now)

    def drop_topic(self, topic: str, now: float) -> None:
        """We left ``topic``: its publications go, unremembered (we will not take its slices)."""
        for key in [k for k in self.pubs if k[0] == topic]:
            self.drop(self.pubs[key], now, remember=False)

    def drop(self, pub: Publication, now: float, *, remember: bool) -> None:
        for f in list(pub.flows.values()):
            self._sender.close(f)
        # (Every flow parked there was one of ``pub.flows``, closed just now, or had ended.)
        pub.waiting.clear()
        pub.state = PubState.DROPPED
        self.pubs.pop(pub.key, None)
        if remember:
            # Remember it a while, so that a late slice is not taken for a new publication.
            cfg = self._ctx.cfg
            self.done[pub.key] = now + 10 * max(cfg.retain_s, cfg.abandon_s)
