"""The membership side of the LBDD topic mode: rendezvous, member lists, heartbeats, trees.

Theory of operation
-------------------
**Rendezvous and membership.** A topic's rendezvous is the DHT root of
``hash_key("topic:" + name)``. A node joins by routing ``TopicJoin`` to that key; the rendezvous
keeps the list of receivers (and of publishers that only need the list) and pushes the full list
of receivers, with a version number, to everyone (``TopicMembers``). Pushes are batched
(``push_delay_s``, a ``TimerKind.PUSH`` timer): a burst of joins costs one push, not one per join.

**Heartbeats (member to rendezvous only).** Every ``heartbeat_s`` each member sends a small
``TopicHeartbeat`` straight to the rendezvous, which answers ``TopicBeat`` (or the list, if the
member's version is old). That is 2n small messages per period, where the paper's all-to-all
heartbeats cost n^2; the price is that failures are detected at one place, which is enough
because the member list lives there anyway. A member not heard from for ``fail_after_s`` is
removed (path update: the next push, and every node recomputes its tree); ``leave`` is announced
with ``TopicLeave``. A member that does not hear from the rendezvous for ``fail_after_s`` routes
its join again: it lands on the key's new root, which rebuilds the lists from the re-joins (soft
state). A rendezvous taking over like that waits ``fail_after_s`` before its first push, so that
it does not push a half-rebuilt list; meanwhile the members keep using the old one. A rendezvous
that finds it is no longer the key's root hands its lists over (``TopicHandoff``, routed).
Versions only grow: joins and heartbeats carry the member's version and a digest of its list, and
a rendezvous never pushes a version at or below one it has seen; the digest catches two
incarnations of the rendezvous that used the same number for different lists. Each join draws a
fresh *nonce*, listed with the member (``TopicMember``): a node that left and joined again is a
new member to everyone even if no list without it was ever pushed. Heartbeats are authoritative
about the member's role (receiver or publisher only), which corrects a join that arrived late.

**Trees.** Every node computes the LBDD tree locally from its member list
(``multicast.lbdd.build_tree``, rooted at the publication's publisher; ``Membership.tree``); the
publication's mode, carried by every slice, says which rule (the paper's exact rule, our
near-bucket variant, or a star for the point-to-point baseline), so all nodes with the same list
build the same tree. A new list is a *path update*: ``Members.on_members`` returns the previous
list so that the core can let the publications recompute their parents and children
(``Publications.view_changed``).

``Members`` holds both roles of a node, the member's (``Membership``, one per topic we are
attached to) and the rendezvous's (``HostedTopic``, one per topic whose key we are the root of),
because one node is often both and the two only meet through messages (sent to ourselves when
so, see ``TopicContext.send``).
"""

from __future__ import annotations

import math

from rangecast.dht.core import State
from rangecast.dht.errors import LocalProtocolError, RemoteProtocolError
from rangecast.dht.routing import Peer
from rangecast.multicast.lbdd import SOURCE, build_tree
from rangecast.multicast.messages import (
    MAX_MEMBERS,
    MODE_LBDD,
    MODE_STAR,
    TopicBeat,
    TopicHandoff,
    TopicHeartbeat,
    TopicJoin,
    TopicLeave,
    TopicMember,
    TopicMembers,
    list_digest,
)
from rangecast.multicast.topic_base import TimerKind, TopicContext, topic_key
from rangecast.multicast.topic_events import MembershipChanged

#: (parent, children) of this node in one publication's tree.
Tree = tuple[bytes | None, tuple[bytes, ...]]


class Membership:
    """Our attachment to one topic: our role and our copy of the member list."""

    __slots__ = (
        "addrs",
        "asked",
        "digest",
        "has_list",
        "join_sent",
        "key",
        "last_contact",
        "nonce",
        "order",
        "receiver",
        "rendezvous",
        "topic",
        "trees",
        "version",
    )

    def __init__(self, topic: str, key: int, receiver: bool) -> None:
        self.topic = topic
        self.key = key
        self.receiver = receiver
        self.version = 0
        self.has_list = False
        #: Receivers' addresses in list order, and the same as a set.
        self.order: tuple[bytes, ...] = ()
        #: Each receiver's join nonce (``TopicMember``).
        self.addrs: dict[bytes, int] = {}
        self.digest = list_digest(())
        #: Our own join nonce, drawn by ``Members.attach`` (and again when a publisher joins).
        self.nonce = 0
        self.rendezvous: bytes | None = None
        self.last_contact = -math.inf
        self.join_sent = -math.inf
        #: Last version we asked the rendezvous about (rate-limits requests for the list).
        self.asked = -1
        #: (publisher, mode) -> (parent, children), for the current version.
        self.trees: dict[tuple[bytes, int], Tree] = {}

    def tree(self, me: bytes, source: bytes, mode: int) -> Tree:
        """``me``'s parent and children in the tree rooted at ``source``, from this list."""
        cached = self.trees.get((source, mode))
        if cached is not None:
            return cached
        receivers = [a for a in self.order if a != source]
        parent: bytes | None = None
        children: tuple[bytes, ...] = ()
        if mode == MODE_STAR:
            if me == source:
                children = tuple(receivers)
            elif me in self.addrs:
                parent = source
        else:
            tree = build_tree(source, receivers, near_bucket=mode == MODE_LBDD)
            if me == source:
                children = tuple(receivers[j] for j in tree.source_children)
            elif me in self.addrs:
                i = receivers.index(me)
                p = tree.parent[i]
                parent = source if p == SOURCE else receivers[p]
                children = tuple(receivers[j] for j in tree.children[i])
        self.trees[(source, mode)] = (parent, children)
        return parent, children


class HostedTopic:
    """The lists we keep as the rendezvous of a topic."""

    __slots__ = (
        "changed",
        "digest",
        "heard",
        "key",
        "members",
        "publishers",
        "push_at",
        "settle_until",
        "topic",
        "version",
    )

    def __init__(self, topic: str, key: int) -> None:
        self.topic = topic
        self.key = key
        self.version = 0
        self.members: dict[bytes, TopicMember] = {}
        self.publishers: dict[bytes, TopicMember] = {}
        self.heard: dict[bytes, float] = {}
        self.changed = False
        #: Digest of the list pushed as ``version``.
        self.digest = list_digest(())
        self.push_at: float | None = None
        self.settle_until = -math.inf


class Members:
    """The membership side of one node: the topics it is attached to and those it hosts."""

    __slots__ = ("_ctx", "hosted", "topics")

    def __init__(self, ctx: TopicContext) -> None:
        self._ctx = ctx
        #: (The dict objects are never replaced: the sender keeps a reference to ``topics``.)
        self.topics: dict[str, Membership] = {}
        self.hosted: dict[str, HostedTopic] = {}

    # ------------------------------------------------------------------------ the member side

    def attach(self, topic: str, *, receiver: bool, now: float) -> Membership:
        ctx = self._ctx
        m = Membership(topic, topic_key(ctx.dht, topic), receiver)
        m.nonce = ctx.rng.getrandbits(63)
        self.topics[topic] = m
        ctx.ensure_tick(now)
        return m

    def join(self, topic: str, now: float) -> None:
        m = self.topics.get(topic)
        if m is not None:
            if m.receiver:
                raise LocalProtocolError(f"already a member of topic {topic!r}")
            m.receiver = True  # a publisher becomes a receiver as well, a new one
            m.nonce = self._ctx.rng.getrandbits(63)
        else:
            m = self.attach(topic, receiver=True, now=now)
        self.send_join(m, now)

    def leave(self, topic: str, now: float) -> None:
        m = self.topics.pop(topic, None)
        if m is None:
            raise LocalProtocolError(f"not attached to topic {topic!r}")
        bye = TopicLeave(topic, self._ctx.dht.me.handle)
        if m.rendezvous is not None:
            self._ctx.send(m.rendezvous, bye)
        else:
            self._ctx.route(m.key, bye, now)

    def ready(self, now: float) -> None:
        # Joins asked for before the DHT node could route go out now.
        for m in self.topics.values():
            if m.rendezvous is None:
                self.send_join(m, now)

    def send_join(self, m: Membership, now: float) -> None:
        me = self._ctx.dht.me.handle
        join = TopicJoin(m.topic, me, m.nonce, m.receiver, m.version, m.digest)
        if self._ctx.route(m.key, join, now):
            m.join_sent = now

    def _heartbeat(self, m: Membership) -> None:
        if m.rendezvous is not None:
            me = self._ctx.dht.me.handle
            hb = TopicHeartbeat(m.topic, me, m.nonce, m.receiver, m.version, m.digest)
            self._ctx.send(m.rendezvous, hb)

    def on_members(
        self, msg: TopicMembers, src: bytes, now: float
    ) -> tuple[Membership, dict[bytes, int]] | None:
        """Take a pushed list. Returns (our membership, the previous list's members and nonces)
        when it is a new list (a path update follows), else None."""
        ctx = self._ctx
        m = self.topics.get(msg.topic)
        if m is None:
            ctx.stats.drop("list for a topic we are not in")
            return None
        if m.has_list and msg.version <= m.version:
            if src == m.rendezvous:
                m.last_contact = now
            return None
        order: list[bytes] = []
        nbytes = ctx.dht.space.nbytes
        nonces: dict[bytes, int] = {}
        for tm in msg.members:
            h = tm.handle
            if len(h.id) != nbytes:
                raise RemoteProtocolError(f"member id of {len(h.id)} bytes")
            if not h.addr or h.addr in nonces:
                raise RemoteProtocolError("member list with an empty or repeated address")
            nonces[h.addr] = tm.nonce
            order.append(h.addr)
        old = m.addrs if m.has_list else {}
        m.version = msg.version
        m.order = tuple(order)
        m.addrs = nonces
        m.digest = list_digest(nonces.items())
        m.has_list = True
        m.trees = {}
        m.rendezvous = src
        m.last_contact = now
        ctx.events.append(MembershipChanged(m.topic, m.version, m.order, now))
        if m.receiver and ctx.me not in m.addrs and m.asked != m.version:
            m.asked = m.version
            self._heartbeat(m)  # we were dropped (a late heartbeat?): this re-admits us
        return m, old

    def on_beat(self, msg: TopicBeat, src: bytes, now: float) -> None:
        m = self.topics.get(msg.topic)
        if m is None:
            self._ctx.stats.drop("beat for a topic we are not in")
            return
        if m.rendezvous is None:
            m.rendezvous = src
        if src == m.rendezvous:
            m.last_contact = now
            if msg.version > m.version:
                self.ask_list(m, msg.version)

    def ask_list(self, m: Membership, version: int) -> None:
        """Someone has a newer list than ours: a heartbeat makes the rendezvous send it."""
        if m.asked < version:
            m.asked = version
            self._heartbeat(m)

    def member_tick(self, now: float) -> None:
        cfg = self._ctx.cfg
        for m in self.topics.values():
            if m.rendezvous is not None and now - m.last_contact > cfg.fail_after_s:
                m.rendezvous = None  # the rendezvous is gone: find the key's new root
                m.join_sent = -math.inf
            if m.rendezvous is None:
                if now - m.join_sent >= cfg.join_retry_s:
                    self.send_join(m, now)
            else:
                self._heartbeat(m)

    # -------------------------------------------------------------------- the rendezvous side

    def _host(self, topic: str, key: int, version: int, now: float) -> HostedTopic:
        r = self.hosted.get(topic)
        if r is None:
            r = HostedTopic(topic, key)
            if version > 0:
                # A takeover: the old rendezvous is gone and members are re-joining. Wait for
                # them before pushing, rather than push a list that lacks most of them.
                r.settle_until = now + self._ctx.cfg.fail_after_s
            self.hosted[topic] = r
            self._ctx.ensure_tick(now)
        return r

    def _admit(
        self,
        r: HostedTopic,
        member: TopicMember,
        receiver: bool,
        version: int,
        digest: int | None,
        now: float,
    ) -> None:
        ctx = self._ctx
        Peer.from_handle(ctx.dht.space, member.handle)  # a wrong id length: the sender's fault
        addr = member.handle.addr
        if not addr:
            raise RemoteProtocolError("member with an empty address")
        self._compare(r, version, digest, now)
        r.heard[addr] = now
        if receiver:
            known = r.members.get(addr)
            if known is None or known.nonce != member.nonce:  # new, or joined again
                if known is None and len(r.members) >= MAX_MEMBERS:
                    ctx.stats.drop("topic full")
                    r.heard.pop(addr, None)
                    return
                r.members[addr] = member
                r.publishers.pop(addr, None)
                r.changed = True
        else:
            if r.members.pop(addr, None) is not None:
                r.changed = True  # a receiver that left and came back as a publisher only
            elif addr not in r.publishers and len(r.publishers) >= MAX_MEMBERS:
                ctx.stats.drop("topic full")
                r.heard.pop(addr, None)
                return
            r.publishers[addr] = member
        if not r.changed and now >= r.settle_until:
            ctx.send(addr, TopicMembers(r.topic, r.version, list(r.members.values())))
            return
        if r.changed:
            self._schedule_push(r, now)
        # The list comes with the next push; meanwhile this tells the member where we are, so
        # it heartbeats us instead of routing its join again.
        ctx.send(addr, TopicBeat(r.topic, r.version))

    def _compare(self, r: HostedTopic, version: int, digest: int | None, now: float) -> None:
        """A member reports the list it holds. If it is newer than ours, or the same version
        but a different list (an earlier incarnation of the rendezvous used that number), our
        next push must carry a higher version than the member's."""
        if version > r.version or (
            version == r.version and digest is not None and digest != r.digest
        ):
            r.version = version
            r.changed = True
            self._schedule_push(r, now)

    def _schedule_push(self, r: HostedTopic, now: float) -> None:
        if r.push_at is None:
            r.push_at = max(now + self._ctx.cfg.push_delay_s, r.settle_until)
            self._ctx.timers.push(r.push_at, TimerKind.PUSH, r.topic)

    def on_push_timer(self, topic: str, now: float) -> None:
        r = self.hosted.get(topic)
        if r is None or r.push_at is None or r.push_at > now:
            return  # no longer ours, or a push already made (the timer is not cancelled)
        r.push_at = None
        if r.changed:
            r.version += 1
            r.changed = False
            r.digest = list_digest((a, tm.nonce) for a, tm in r.members.items())
        ctx = self._ctx
        ctx.stats.pushes += 1
        msg = TopicMembers(topic, r.version, list(r.members.values()))
        for addr in r.members:
            ctx.send(addr, msg)
        for addr in r.publishers:
            ctx.send(addr, msg)

    def on_join(self, msg: TopicJoin, origin: Peer, now: float) -> None:
        if origin.addr != msg.member.addr:
            raise RemoteProtocolError("TopicJoin for another node")
        r = self._host(msg.topic, topic_key(self._ctx.dht, msg.topic), msg.version, now)
        member = TopicMember(msg.member, msg.nonce)
        self._admit(r, member, msg.receiver, msg.version, msg.digest, now)

    def on_leave(self, msg: TopicLeave, src: bytes, now: float) -> None:
        if src != msg.member.addr:
            raise RemoteProtocolError("TopicLeave for another node")
        r = self.hosted.get(msg.topic)
        if r is None:
            # Sent to a rendezvous that is no longer one: pass it on to the key's root.
            self._ctx.route(topic_key(self._ctx.dht, msg.topic), msg, now)
            return
        self._forget(r, src, now)

    def on_routed_leave(self, msg: TopicLeave, origin: Peer, now: float) -> None:
        # The origin may be a former rendezvous passing the member's leave on (``on_leave``).
        r = self.hosted.get(msg.topic)
        if r is None:
            self._ctx.stats.drop("leave for a topic we do not host")
            return
        self._forget(r, msg.member.addr, now)

    def _forget(self, r: HostedTopic, addr: bytes, now: float) -> None:
        r.heard.pop(addr, None)
        r.publishers.pop(addr, None)
        if r.members.pop(addr, None) is not None:
            r.changed = True
            self._schedule_push(r, now)

    def on_handoff(self, msg: TopicHandoff, origin: Peer, now: float) -> None:
        r = self._host(msg.topic, topic_key(self._ctx.dht, msg.topic), 0, now)
        r.changed = True
        for tm in msg.members:
            self._admit(r, tm, True, msg.version, None, now)
        for tm in msg.publishers:
            self._admit(r, tm, False, msg.version, None, now)
        r.changed = True
        self._schedule_push(r, now)

    def on_heartbeat(self, msg: TopicHeartbeat, src: bytes, now: float) -> None:
        if src != msg.member.addr:
            raise RemoteProtocolError("TopicHeartbeat for another node")
        ctx = self._ctx
        r = self.hosted.get(msg.topic)
        if r is None:
            key = topic_key(ctx.dht, msg.topic)
            if ctx.dht.state is not State.READY or ctx.dht.next_hop(key) is not None:
                ctx.stats.drop("heartbeat for a topic we do not host")
                return  # the member will time out and route its join to the real root
            r = self._host(msg.topic, key, msg.version, now)
        # Heartbeats say what the member is now; a join that arrived late (re-routed around a
        # failure, after the member's leave) may have said otherwise.
        known = r.members.get(src)
        if (
            src not in r.heard
            or (msg.receiver and (known is None or known.nonce != msg.nonce))
            or (not msg.receiver and known is not None)
        ):
            member = TopicMember(msg.member, msg.nonce)
            self._admit(r, member, msg.receiver, msg.version, msg.digest, now)  # (re-)admit
            return
        r.heard[src] = now
        self._compare(r, msg.version, msg.digest, now)
        if msg.version < r.version and now >= r.settle_until:
            ctx.send(src, TopicMembers(r.topic, r.version, list(r.members.values())))
        else:
            ctx.send(src, TopicBeat(r.topic, r.version))

    def rendezvous_tick(self, now: float) -> None:
        ctx = self._ctx
        limit = now - ctx.cfg.fail_after_s
        for topic, r in list(self.hosted.items()):
            gone = [a for a, t in r.heard.items() if t < limit]
            for addr in gone:
                self._forget(r, addr, now)
            if ctx.dht.state is State.READY and ctx.dht.next_hop(r.key) is not None:
                # No longer the key's root (a node joined closer to it): hand over.
                version = r.version + (1 if r.changed else 0)
                # One frame's worth: whoever does not fit re-joins by itself when its
                # heartbeats go unanswered.
                members = list(r.members.values())
                publishers = list(r.publishers.values())[: MAX_MEMBERS - len(members)]
                handoff = TopicHandoff(topic, version, members, publishers)
                del self.hosted[topic]
                ctx.route(r.key, handoff, now)
