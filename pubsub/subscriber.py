"""The subscriber side of a peer: its subscriptions, how they are installed, changed and removed,
and the notifications they receive.

Theory of operation
-------------------
RndLeafProbe (thesis 3.3). ``subscribe`` picks a base attribute at random; its range (or, under
load balancing, each piece of it below the cut-off line) is a point, widened by a small random
amount so that identical ranges still split apart. Each piece goes out as a ``ProbeSub`` routed
to the zone holding the point at a randomly guessed level; the tree host that stores it
(``pubsub.host``) answers with an ``InstallAck``.

A subscription's record (``MySubscription``) moves through three states: *installing* until
every piece is acknowledged (``SubscriptionInstalled``), *active*, then *removing* until every
piece's removal is acknowledged (``SubscriptionRemoved``). ``modify`` is a removal followed by
an install of the new ranges under the same sid and the next generation, so that pieces of the
old and the new version are told apart. A change asked for while installing waits for the
install to finish (``pending``). A leaf that is full (``OverlayConfig.max_leaf_bytes``) acks an
insert it did not store: the whole subscription is then refused (``SubscriptionRefused``) and
removed, since a subscription short of a piece would miss the events that piece stands for.

Soft state: where the DHT detects failures, every ``refresh_s`` the subscriber probes every
piece of its active subscriptions again (a leaf that lost it with its whole replica set stores it
anew), and re-sends the pieces of an install or a removal that are still unacknowledged. Where
tree hosts expire pieces (``OverlayConfig.expire_after_s``, ``pubsub.expiry``), these refreshes
are what keeps a live subscriber's pieces stored.

A notification (``EventDelivery``) names the subscriber's matching sids. Each (sid, event) is
passed to the application at most once: an event in flight while a subscription is modified can
match its old generation at one leaf and its new one at another.
"""

from __future__ import annotations

import itertools
from typing import Any

try:
    import cython
except ImportError:  # interpreted, without Cython installed
    from rangecast import _nocython as cython  # type: ignore[no-redef]

from rangecast.dht.errors import LocalProtocolError
from rangecast.dht.wire import Handle
from rangecast.pubsub.base import T_REFRESH, NodeBase
from rangecast.pubsub.events import (
    EventDelivered,
    SubscriptionInstalled,
    SubscriptionRefused,
    SubscriptionRemoved,
)
from rangecast.pubsub.messages import (
    OP_INSERT,
    OP_REMOVE,
    EventDelivery,
    InstallAck,
    Pred,
    ProbeSub,
    Ref,
    StoredSub,
)
from rangecast.pubsub.schema import Schema
from rangecast.pubsub.space import AttributeSpace
from rangecast.pubsub.subscription import Subscription


class MySubscription:
    """Subscriber-side record of one of our subscriptions."""

    __slots__ = ("acked", "gen", "pending", "pieces", "state", "sub")

    def __init__(self, sub: Subscription, gen: int, pieces: list[StoredSub]) -> None:
        self.sub = sub
        self.gen = gen
        self.pieces = pieces
        self.acked: set[int] = set()
        self.state = "installing"
        #: A change asked for while installing: ("remove",) or ("modify", Subscription).
        self.pending: tuple[Any, ...] | None = None


class Subscriber(NodeBase):
    """The subscriber part of ``PubSubNode``."""

    __slots__ = ("_got", "_got_prune_at", "_next_sid", "_subs")

    _subs: dict[int, MySubscription]
    _next_sid: int
    #: (sid, eid) of recent notifications, to drop repeats.
    _got: dict[tuple[int, int], float]
    _got_prune_at: float

    def __init__(self, shared: NodeBase) -> None:
        NodeBase.__init__(self, shared)
        self._subs = {}
        self._next_sid = 1
        self._got = {}
        self._got_prune_at = 0.0

    # ------------------------------------------------------------------------------ API calls

    def subscribe(self, sub: Subscription, now: float) -> int:
        """Install ``sub``; returns its sid. ``SubscriptionInstalled`` follows when every piece
        is stored."""
        schema = self._schema(sub.schema)
        sid = self._next_sid
        self._next_sid += 1
        self._install(sid, 0, sub, schema, now)
        return sid

    def unsubscribe(self, sid: int, now: float) -> None:
        rec = self._subs.get(sid)
        if rec is None or rec.state == "removing":
            raise LocalProtocolError(f"no active subscription {sid}")
        if rec.state == "installing":
            rec.pending = ("remove",)
            return
        self._remove(sid, rec, now)

    def modify(self, sid: int, sub: Subscription, now: float) -> None:
        """Replace subscription ``sid`` by ``sub`` (remove, then install under the same sid)."""
        rec = self._subs.get(sid)
        if rec is None or rec.state == "removing":
            raise LocalProtocolError(f"no active subscription {sid}")
        self._schema(sub.schema)
        if rec.state == "installing":
            rec.pending = ("modify", sub)
            return
        self._remove(sid, rec, now)
        rec.pending = ("modify", sub)

    def subscriptions(self) -> dict[int, Subscription]:
        return {sid: rec.sub for sid, rec in self._subs.items() if rec.state != "removing"}

    # ------------------------------------------------------------------------- installation

    def _install(self, sid: int, gen: int, sub: Subscription, schema: Schema, now: float) -> None:
        attrs = sub.attributes()
        base = attrs[self.rng.randrange(len(attrs))]
        space = self._space(schema.name, base)
        rng_range = sub.range_of(base)
        assert rng_range is not None
        preds = [
            Pred(i, r.lo, r.hi, (1 if r.lo_open else 0) | (2 if r.hi_open else 0))
            for i, r in sub.ranges
        ]
        width = space.max - space.min
        e_max = self.cfg.widen * width
        lo, hi = rng_range.lo, rng_range.hi
        bounds = [(lo, hi)]
        if self.cfg.load_balancing:
            # Thesis 3.5: only a point above the cut-off line (y - x > c) is mapped to several
            # points below it. Pieces must stay below the line even after widening on both
            # sides, so their height h is drawn below ``limit``; a hair of margin absorbs
            # floating-point rounding in y - x.
            cut = self.cfg.cutoff * width
            limit = cut - 2.0 * e_max - 1e-9 * width
            if hi - lo <= cut:
                # Below the line but within the widening of it: widen less, so that the point
                # stays below the line, rather than cut it (the thesis cuts only points above).
                e_max = min(e_max, max(0.0, (cut - 1e-9 * width - (hi - lo)) / 2.0))
            else:
                h = self.rng.uniform(limit / 2.0, limit)
                cuts = [lo]
                k = 1
                while lo + k * h < hi:  # never a cut at or past hi: no empty last piece
                    cuts.append(lo + k * h)
                    k += 1
                cuts.append(hi)
                bounds = list(itertools.pairwise(cuts))
        pieces = []
        me = self.dht.me.handle
        for k, (p_lo, p_hi) in enumerate(bounds):
            x = max(space.min, p_lo - self.rng.uniform(0.0, e_max))
            y = min(space.max, p_hi + self.rng.uniform(0.0, e_max))
            pieces.append(StoredSub(me, sid, gen, preds, base, k, len(bounds), p_lo, p_hi, x, y))
        self._subs[sid] = MySubscription(sub, gen, pieces)
        for piece in pieces:
            self._probe_sub(OP_INSERT, schema.name, space, piece, now)

    def _probe_sub(
        self, op: int, schema: str, space: AttributeSpace, piece: StoredSub, now: float
    ) -> None:
        level = self.rng.randint(1, self.cfg.max_probe_level)
        tid = space.locate(piece.x, piece.y, level)
        msg = ProbeSub(op, Ref(schema, space.index, tid.depth, tid.path), False, 0, piece)
        self._route(schema, tid, msg, now)

    def _refresh(self, now: float) -> None:
        """Soft state: probe every piece of every active subscription again. A leaf that has
        the piece only acknowledges it again (the subscriber ignores that); one that lost it
        with a whole replica set stores it anew.

        An install or a removal still waiting for acknowledgements is retried the same way,
        for the pieces not acknowledged yet: a probe lost on the way (a dropped frame, a peer
        that died with it) would otherwise leave it waiting for ever, and the pieces that did
        arrive stored for ever (a removal asked for meanwhile waits for the install)."""
        for rec in self._subs.values():
            schema = rec.sub.schema
            if rec.state == "active":
                for piece in rec.pieces:
                    self._probe_sub(OP_INSERT, schema, self._space(schema, piece.base), piece, now)
                continue
            op = OP_INSERT if rec.state == "installing" else OP_REMOVE
            # Where stored pieces expire, the acknowledged pieces of an install are refreshed
            # too: an install held up by one lost piece must not lose the others meanwhile.
            keep = op == OP_INSERT and self._expiring
            for piece in rec.pieces:
                unacked = piece.piece not in rec.acked
                if unacked or keep:
                    self.stats.retries += unacked
                    self._probe_sub(op, schema, self._space(schema, piece.base), piece, now)
        self.stats.refreshes += 1

    def _on_refresh_timer(self, arg: Any, now: float) -> None:
        self._refresh(now)
        self._timers.push(now + self.cfg.refresh_s, T_REFRESH)

    def _remove(self, sid: int, rec: MySubscription, now: float) -> None:
        rec.state = "removing"
        rec.acked = set()
        schema = rec.sub.schema
        for piece in rec.pieces:
            self._probe_sub(OP_REMOVE, schema, self._space(schema, piece.base), piece, now)

    def _on_install_ack(self, msg: InstallAck, sender: Handle | None, now: float) -> None:
        rec = self._subs.get(msg.sid)
        if rec is None or rec.gen != msg.gen or msg.piece >= len(rec.pieces):
            return  # about an older generation, or not ours any more
        if msg.op == OP_INSERT and not msg.found and rec.state in ("installing", "active"):
            # A leaf refused the piece (full: ``max_leaf_bytes``). A subscription short of a
            # piece would miss events, so it is given up whole: the application hears why,
            # and the pieces stored elsewhere are removed.
            self._events.append(SubscriptionRefused(msg.sid, "a tree leaf is full", now))
            rec.pending = None
            self._remove(msg.sid, rec, now)
            return
        want = "installing" if msg.op == OP_INSERT else "removing"
        if rec.state != want:
            return
        rec.acked.add(msg.piece)
        if len(rec.acked) < len(rec.pieces):
            return
        if msg.op == OP_INSERT:
            rec.state = "active"
            self._events.append(SubscriptionInstalled(msg.sid, now))
            if rec.pending is not None:
                pending, rec.pending = rec.pending, None
                if pending[0] == "remove":
                    self._remove(msg.sid, rec, now)
                else:
                    self._remove(msg.sid, rec, now)
                    rec.pending = pending
            return
        del self._subs[msg.sid]
        if rec.pending is not None and rec.pending[0] == "modify":
            new: Subscription = rec.pending[1]
            self._install(msg.sid, (rec.gen + 1) & 0xFFFF, new, self._schema(new.schema), now)
        else:
            self._events.append(SubscriptionRemoved(msg.sid, now))

    # -------------------------------------------------------------------------- notifications

    @cython.locals(got=dict, subs=dict, fresh=list)
    def _on_delivery(self, msg: EventDelivery, sender: Handle | None, now: float) -> None:
        # At most one notification per subscription per event: an event in flight while a
        # subscription is modified can match its old generation at one leaf and its new one at
        # another. Repeats are dropped here and counted.
        eid = msg.event.eid
        got = self._got
        subs = self._subs
        fresh = []
        for sid in msg.sids:
            if sid not in subs:
                # Removed (or never ours): a leaf still holds an orphan piece of it, e.g. one a
                # refresh stored again while the removal was on its way. Not the application's.
                self.stats.stale_deliveries += 1
            else:
                key = (sid, eid)
                if key in got:
                    self.stats.repeated_deliveries += 1
                else:
                    got[key] = now
                    fresh.append(sid)
        if now >= self._got_prune_at:
            # Forget notifications older than the window, on a clock rather than a count: a
            # peer that hears of few events (most of them, in a large swarm) would otherwise
            # keep every one it ever got. Entries inside the window always stay.
            window = self.cfg.dedup_window_s
            self._got_prune_at = now + window
            horizon = now - window
            self._got = {k: t for k, t in got.items() if t >= horizon}
        if fresh:
            self._events.append(EventDelivered(msg.event, tuple(fresh), now))
