"""End-to-end acknowledgement of routed messages, and the demotion of a next hop that
acknowledges hops but whose forwarded messages never arrive (``PastryConfig.e2e_acks``).

Theory of operation
-------------------
A hop acknowledgement (``HopAck``) proves only that the next hop *received* a ``Route``: a peer
that acknowledges every hop and then drops the message is, to hop acks and keep-alives alike,
a perfectly healthy neighbour. With ``e2e_acks`` on, the key's root answers ``RouteDone(uid)``
to the hop the message came from, and every hop passes it on to its own upstream, back to the
origin. A forwarding hop keeps a ``Track`` of each message it sent on; if the ``RouteDone``
does not come back from its next hop within the deadline, that next hop is charged with a
*loss*, and the message is re-routed from here with the next hop excluded (for this message
only: ``Track.excluded``).

Deadlines are nested by the hops still to go, so the hop nearest the loss times out first:
``(ack_floor_s + ack_rtt_factor * RTT) * max(1, e2e_hops - hops)``. A hop that re-routes tells
its upstream (``RouteWait(uid, by)``, ``by`` its own id, passed on unchanged towards the
origin), which restarts its deadline instead of blaming an honest hop for a loss further on.
A track honours at most ``max_reroutes`` waits per asker and ``e2e_hops`` askers, and a wait
its next hop asks for itself (a new attempt further on) renews the budgets of the askers beyond
it (``DhtCore._wait_granted``). So a staller next to an honest hop spends its budget there and
at every hop above at the same count; the nearest hop, whose deadline is shortest, charges it
first, and that hop's own re-route renews the budgets above instead of costing an honest hop a
loss. A liar naming made-up askers stalls a message by at most ``e2e_hops * max_reroutes``
waits per attempt and is then charged.

With a notary (``dht.notary``) the root signs its ``RouteDone``, and a hop believes it only if
the signature is the named root's and the named root may be the key's as far as the hop knows:
a hop that drops what it should forward cannot answer for the root.

Judgement is local: a node believes only what it observed itself, never what another node
says about a third (no avoid list travels with the message), so no peer can get an honest one
demoted by accusing it. When the next-closest node receives a message that its upstream
re-routed around the root, it tries the root itself, times out in turn, and then handles the
message as the root with the dropper excluded (the application's ``next_hop`` and
``replica_set`` upcall queries honour the exclusion while it handles it): a replica of the key's
state serves it.

A next hop with ``demote_after`` losses and no delivery in between is *demoted*: declared failed
(removed from the leaf set and routing table, exactly as for a crash), and its id quarantined
for ``quarantine_s`` so that its own announcements and pings, and second-hand mentions of it,
do not put it straight back. After the quarantine it must be caught again.

A slow hop is not a dropper: its ``RouteDone`` comes, only late. A node remembers the messages
whose deadline passed (``late``, the most recent ``LATE_KEPT``), and a ``RouteDone`` that still
arrives from the hop it was charged to clears that hop's losses (``NodeStats.e2e_late``). With
``demote_confirm_s`` > 0 a hop reaching ``demote_after`` losses is demoted only after that long
with no delivery and no late answer from it (``pending``): load alone slows answers but does
not lose them, so it cannot demote an honest hop. 0 (the simulator's default): at once.

Direct messages whose receiver keeps or passes on what they carry for others (the
application's hand-offs and replica copies, its relays: ``send_direct(..., confirm=True)``)
are acknowledged too: they go as ``AckedDirect`` with a ``uid``, and the receiver answers
``RouteDone(uid)`` as soon as its core takes it, before the application handles it (a refusal
is an answer, not a loss). There is nowhere else to send it, so a missing answer within one
hop's deadline (``ack_floor_s + ack_rtt_factor * e2e_rtt_s``) is not re-sent; it is the
evidence:

=================================  ==========================================================
event                              action
=================================  ==========================================================
no answer by the deadline          with suspicion (``dht.suspicion``): the receiver is
                                   *doubted* and suspected (pinged); without: a loss at once
the doubted receiver speaks        alive, so what it did not answer it dropped: each doubted
(``_cleared``)                     message is a loss charged to it, as for a routed loss
the answer comes late              a late answer: its losses and doubts are cleared
the receiver is declared failed    a crash, not a drop: its doubts are forgotten uncharged
=================================  ==========================================================

So a crashed receiver is a silence (suspected, then declared failed, quarantined by no one),
and a live one that drops what is sent to it is demoted like a dropping hop. The application
recovers through the demotion: the receiver leaves the replica sets and groups it was in, and
the next reconciliation re-homes what it held.

Limits: a dropper that forwards just enough to break every run of ``demote_after`` losses is
never demoted (its losses are still re-routed, at the cost of a deadline each). A receiver's
``RouteDone`` for a ``Direct`` is its own word, so a relay that answers and then does not
relay is not caught here; for the same reason a message whose receiver is its end (a
notification to a subscriber's peer, a reply) is not confirmed: the one party it concerns
would vouch for itself. A root that swallows its own keys' messages and signs their
``RouteDone`` is believed: it is the key's root (``dht.notary``). Kademlia has no end-to-end
acknowledgements.
"""

from __future__ import annotations

from rangecast.dht.messages import Route
from rangecast.dht.routing import Peer

#: Timed-out messages remembered for a late ``RouteDone`` (the oldest forgotten first).
LATE_KEPT = 4096


class Track:
    """A routed message this node forwarded (or sent as its origin), until its ``RouteDone``."""

    __slots__ = (
        "deadline",
        "excluded",
        "hops",
        "key",
        "msg",
        "next_hop",
        "reroutes",
        "sends",
        "sign",
        "upstream",
        "waits",
    )

    def __init__(self, upstream: bytes | None) -> None:
        #: The previous hop's address (None: we are the origin).
        self.upstream = upstream
        self.msg: Route | None = None
        self.key = 0
        self.next_hop: Peer | None = None
        self.deadline = 0.0
        self.hops = 0
        self.reroutes = 0
        #: How many times it was sent on from here (a re-route sends it again).
        self.sends = 0
        #: ``RouteWait``-s honoured since the current next hop last re-routed, per the node
        #: that asked (``RouteWait.by``).
        self.waits: dict[bytes, int] = {}
        #: Next hops that lost it: not tried again for this message.
        self.excluded: set[int] = set()
        #: Whether a ``RouteDone`` from here must carry the proof (``dht.notary``): only when
        #: the upstream hop is not the origin, which needs no proof of what its next hop says.
        self.sign = False


class EndToEnd:
    """A node's end-to-end bookkeeping: the messages in flight, the losses charged to each
    next hop since its last delivery, and the quarantined ids."""

    __slots__ = (
        "demote_after",
        "directs",
        "doubted",
        "late",
        "losses",
        "pending",
        "quarantine",
        "quarantine_s",
        "tracks",
    )

    def __init__(self, demote_after: int, quarantine_s: float) -> None:
        self.demote_after = demote_after
        self.quarantine_s = quarantine_s
        self.tracks: dict[int, Track] = {}
        #: Ledger -> losses since its last delivery (a delivery clears it). A peer has two
        #: ledgers, kept apart so that serving one kind of message does not excuse dropping the
        #: other: its id for routed messages, ``direct_ledger(id)`` for direct ones.
        self.losses: dict[int, int] = {}
        #: Demoted id -> end of its quarantine.
        self.quarantine: dict[int, float] = {}
        #: uid of a message whose deadline passed -> (the hop charged, its address, the key).
        self.late: dict[int, tuple[int, bytes, int]] = {}
        #: Ledger -> (the hop, when it is demoted unless it answers first).
        self.pending: dict[int, tuple[Peer, float]] = {}
        #: uid of a ``Direct`` sent -> its receiver, until its ``RouteDone`` or deadline.
        self.directs: dict[int, Peer] = {}
        #: Receiver id -> (the receiver, its ``Direct``-s unanswered by their deadline): losses
        #: once it proves alive, nothing if it is declared failed.
        self.doubted: dict[int, tuple[Peer, int]] = {}

    def timed_out(self, uid: int, hop: Peer, key: int) -> None:
        """``uid``'s deadline passed at ``hop``: a late ``RouteDone`` may still clear it
        (``key`` -1: a ``Direct``, whose receiver's word needs no proof)."""
        late = self.late
        late[uid] = (hop.id, hop.addr, key)
        if len(late) > LATE_KEPT:
            del late[next(iter(late))]

    def late_from(self, uid: int, src: bytes) -> tuple[int, int] | None:
        """For a ``RouteDone`` of a timed-out ``uid``: (the hop charged, the key) if ``src`` is
        that hop's address, else None (only the hop charged can answer late)."""
        entry = self.late.get(uid)
        if entry is None or entry[1] != src:
            return None
        return entry[0], entry[2]

    def late_answer(self, uid: int) -> None:
        """A believed ``RouteDone`` for the timed-out ``uid`` came from the hop charged with it
        (the caller checked ``late[uid]``): that hop's losses are cleared."""
        ident, _, key = self.late.pop(uid)
        if key >= 0:
            self.delivered(ident)
        else:
            self.direct_delivered(ident)

    def due(self, now: float) -> list[Peer]:
        """The pending demotions whose time came: taken out, to be demoted."""
        due = [ledger for ledger, (_, t) in self.pending.items() if t <= now]
        return [self.pending.pop(ledger)[0] for ledger in due]

    def lost(self, ledger: int) -> bool:
        """Charge a loss to ``ledger`` (a peer's id, or its ``direct_ledger``); whether the
        peer is now to be demoted."""
        n = self.losses.get(ledger, 0) + 1
        if n >= self.demote_after:
            self.losses.pop(ledger, None)
            return True
        self.losses[ledger] = n
        return False

    def delivered(self, ident: int) -> None:
        """A routed message ``ident`` was sent on reached its end: its routed losses clear."""
        self.losses.pop(ident, None)
        self.pending.pop(ident, None)

    def direct_delivered(self, ident: int) -> None:
        """``ident`` answered a ``Direct``: its direct losses and doubts clear."""
        ledger = direct_ledger(ident)
        self.losses.pop(ledger, None)
        self.pending.pop(ledger, None)
        self.doubted.pop(ident, None)

    def doubt(self, peer: Peer) -> None:
        """A ``Direct`` to ``peer`` went unanswered: a loss if it proves alive."""
        n = self.doubted.get(peer.id, (peer, 0))[1]
        self.doubted[peer.id] = (peer, n + 1)

    def demote(self, ident: int, now: float) -> None:
        self.quarantine[ident] = now + self.quarantine_s

    def quarantined(self, ident: int, now: float) -> bool:
        until = self.quarantine.get(ident)
        if until is None:
            return False
        if until <= now:
            del self.quarantine[ident]
            return False
        return True

    def sweep(self, now: float) -> None:
        """Forget expired quarantines (called with the keep-alives)."""
        if self.quarantine:
            self.quarantine = {i: t for i, t in self.quarantine.items() if t > now}


def direct_ledger(ident: int) -> int:
    """The ledger of ``ident``'s direct-message losses: negative, apart from every id."""
    return ~ident


__all__ = ["EndToEnd", "Track", "direct_ledger"]
