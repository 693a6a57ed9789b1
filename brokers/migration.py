"""Publisher relocation on a PADRES broker tree: the migration protocol POP and GRAPE share
(Cheung & Jacobsen, CSRG-597, Phase 3), as a ``Strategy`` base the two systems extend.

Theory of operation
-------------------
The publisher's client advertises ad A at its source broker S (overlay 0, a tree running PADRES:
ads flood, subscriptions go toward overlapping ads, publications follow them back). Once a
system has chosen a target T and the tree path ``path = [T, ..., S]`` (the RAM's list), S calls
``start_migration``:

=========================  ======================================================================
step                       action
=========================  ======================================================================
1 at S                     emit ``ClientCommand(pause)``: the driver pauses the client (its
                           publications are buffered) and hands T the migration ad
2 at T (``migration_ad``)  SRT[A].lasthop = LOCAL (A is T's own now); MUM(A, path) toward S
3 MUM at each hop b        SRT[A].lasthop = the sender (toward T), the old one kept in
                           ``moving`` until the MCM; every PRT entry overlapping A that did
                           not come from there is forwarded there (``offer_sub``, at most
                           once); the system's tables for A are cleared (``on_migrated``);
                           at S: MCM(A, path, dropped) back toward T
4 MCM at each hop b        forget having sent the sender exactly the entries it dropped (the
                           MCM's list; ``forget_sent_ids``); drop the remote PRT entries from
                           the T side that no ad needs (``drop_sub``; S does so when it sends
                           the MCM), forward the MCM with their ids; at T: emit
                           ``ClientCommand(resume)``: the driver re-attaches the client to T
                           and publishes its buffer there
=========================  ======================================================================

Why nothing is lost or duplicated: each publication is published exactly once, at S before the
pause or at T after the resume (the client registry buffers in between). Links are FIFO, so the
subscriptions a hop forwards on the MUM reach T before the MCM does: T's first publication finds
every route. The clean-up waits for the MCM (our reading; the paper prunes on the MUM): a
publication S sent before the pause travels the path ahead of the MCM, so a hop drops an entry
only after every such publication has passed it. Routing stays a tree's: a hop never sends a
publication back where it came from.

Concurrent migrations (of different ads) share the path's brokers, so the clean-up of one must
not cut the routes of another still under way: between its MUM and its MCM an ad B's
publications from before its pause may still come to b from B's old side, so ``_prune`` counts
B at its old lasthop too (``moving``) and keeps what they need. Whatever is kept is dropped by a
later MCM (B's own, or the next one passing b). The sender's exact list of dropped entries in the
MCM keeps the two ends of a link agreed on what went where (a receiver guessing from its own
tables could think an entry still sent that was dropped, and suppress it forever).

The path's brokers are tree neighbours in order; the messages are ``Control`` ops on overlay 0
(``ref`` = A, ``ints`` = the path; the MCM's ``blob``: the dropped subscription ids, int64
little-endian), counted as control traffic.

``Tracing`` extends ``Relocation`` with what POP and GRAPE both do on top of it: a publication
carrying a header (POP's traced ones, GRAPE's session ones) is routed by the strategy at every
broker, which records what its system needs on the way.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from rangecast.brokers.broker import Broker, Strategy
from rangecast.brokers.clients import PAUSE, RESUME, ClientCommand
from rangecast.brokers.filters import Box, matches, overlaps
from rangecast.brokers.messages import Control, Publish
from rangecast.brokers.tables import LOCAL
from rangecast.dht.errors import LocalProtocolError, RemoteProtocolError
from rangecast.dht.wire import Message

__all__ = ["OP_MCM", "OP_MUM", "Relocation", "Tracing", "tree_path"]

#: Control ops of the migration (POP's and GRAPE's own ops are below 20).
OP_MUM, OP_MCM = 20, 21


def tree_path(neighbours: dict[int, Sequence[int]], target: int, source: int) -> list[int]:
    """The tree path ``[target, ..., source]`` over the adjacency ``neighbours``."""
    parent: dict[int, int] = {source: source}
    frontier = [source]
    while frontier and target not in parent:
        nxt = []
        for u in frontier:
            for v in neighbours.get(u, ()):
                if v not in parent:
                    parent[v] = u
                    nxt.append(v)
        frontier = nxt
    if target not in parent:
        raise LocalProtocolError(f"no tree path from {target} to {source}")
    path = [target]
    while path[-1] != source:
        path.append(parent[path[-1]])
    return path


class Relocation(Strategy):
    """Phase 3 and the publisher bookkeeping; POP and GRAPE add tracing and the choice.

    ``publishers``: local ad -> its client. Client calls: ``attach_publisher`` (advertise for
    a client), ``publish``; the driver calls ``migration_ad`` on the target after a pause."""

    OVERLAY = 0

    def __init__(self) -> None:
        self.publishers: dict[int, int] = {}
        #: Ads this broker is moving away (source) or receiving (target): no second migration.
        self.migrating: set[int] = set()
        #: Ads whose MUM passed this broker and whose MCM has not yet: ad -> its old lasthop,
        #: the side its publications from before the pause may still come from.
        self.moving: dict[int, int] = {}
        self.migrations = 0

    # -- client calls ----------------------------------------------------------------------

    def attach_publisher(self, broker: Broker, client: int, box: Box, now: float) -> int:
        ad = broker.advertise(box, now, self.OVERLAY)
        self.publishers[ad] = client
        return ad

    def publish(self, broker: Broker, ad: int, values: Sequence[float | None], now: float) -> int:
        if ad in self.migrating or ad not in self.publishers:
            raise LocalProtocolError(f"ad {ad} has no attached publisher at {broker.id}")
        return broker.publish(values, now, self.OVERLAY, ad)

    # -- Phase 3 ------------------------------------------------------------------------------

    def start_migration(self, broker: Broker, ad: int, path: Sequence[int], now: float) -> None:
        """At the source (``path[-1]``): pause the client; the driver does the rest."""
        if path[-1] != broker.id or len(path) < 2 or ad not in self.publishers:
            raise LocalProtocolError(f"broker {broker.id} cannot move ad {ad} along {path}")
        if ad in self.migrating:
            return
        self.migrating.add(ad)
        broker.emit(ClientCommand(self.publishers[ad], PAUSE, path[0], ad, tuple(path)))

    def migration_ad(
        self, broker: Broker, client: int, ad: int, path: Sequence[int], now: float
    ) -> None:
        """At the target: the client's migration ad (it carries the RAM's path)."""
        e = broker.tables(self.OVERLAY).srt.get(ad)
        if e is None or path[0] != broker.id:
            raise LocalProtocolError(f"broker {broker.id} knows no ad {ad} to take over")
        self.moving[ad] = e.lasthop
        e.lasthop = LOCAL
        self.publishers[ad] = client
        self.migrating.add(ad)
        self.on_migrated(broker, ad)
        broker.send(path[1], Control(self.OVERLAY, OP_MUM, ad, list(path)), now)

    def on_control(self, broker: Broker, msg: Control, src: int, now: float) -> None:
        if msg.op == OP_MUM:
            self._on_mum(broker, msg, src, now)
        elif msg.op == OP_MCM:
            self._on_mcm(broker, msg, src, now)
        else:
            self.on_system_control(broker, msg, src, now)

    def on_system_control(self, broker: Broker, msg: Control, src: int, now: float) -> None:
        raise RemoteProtocolError(f"no handler for control op {msg.op}")

    def on_migrated(self, broker: Broker, ad: int) -> None:
        """A MUM for ``ad`` passed: the system clears its tables for it."""
        return None

    def _at(self, broker: Broker, msg: Control, src: int, step: int) -> int:
        """This broker's index in the path, checking the message came from its predecessor."""
        path = msg.ints
        try:
            j = path.index(broker.id)
        except ValueError:
            raise RemoteProtocolError(f"broker {broker.id} is not on path {path}") from None
        if not 0 <= j - step < len(path) or path[j - step] != src:
            raise RemoteProtocolError(f"migration message from {src} out of path order")
        return j

    def _on_mum(self, broker: Broker, msg: Control, src: int, now: float) -> None:
        j = self._at(broker, msg, src, 1)
        ov = self.OVERLAY
        t = broker.tables(ov)
        e = t.srt.get(msg.ref)
        if e is None:
            raise RemoteProtocolError(f"MUM for unknown ad {msg.ref}")
        self.moving[msg.ref] = e.lasthop
        e.lasthop = src
        for sid, s in list(t.prt.items()):
            if s.lasthop != src and overlaps(s.box, e.box):
                broker.offer_sub(ov, src, sid, now)
        self.on_migrated(broker, msg.ref)
        if j + 1 < len(msg.ints):
            broker.send(msg.ints[j + 1], msg, now)
            return
        # The source: the ad is no longer its own; it routed its last publication of it already.
        del self.moving[msg.ref]
        dropped = self._prune(broker, src, now)
        self.publishers.pop(msg.ref, None)
        self.migrating.discard(msg.ref)
        self.migrations += 1
        broker.send(src, Control(ov, OP_MCM, msg.ref, msg.ints, _pack(dropped)), now)

    def _on_mcm(self, broker: Broker, msg: Control, src: int, now: float) -> None:
        j = self._at(broker, msg, src, -1)
        if len(msg.blob) % 8:
            raise RemoteProtocolError(f"an MCM list of {len(msg.blob)} bytes")
        # The sender dropped these (no ad on its far side needs them): forget having sent them.
        broker.forget_sent_ids(self.OVERLAY, src, _unpack(msg.blob))
        # This ad's publications from before the pause have all passed: it moved.
        self.moving.pop(msg.ref, None)
        if j > 0:
            toward_t = msg.ints[j - 1]
            dropped = self._prune(broker, toward_t, now)
            broker.send(
                toward_t, Control(self.OVERLAY, OP_MCM, msg.ref, msg.ints, _pack(dropped)), now
            )
            return
        self.migrating.discard(msg.ref)
        broker.emit(ClientCommand(self.publishers[msg.ref], RESUME, broker.id, msg.ref))

    def _prune(self, broker: Broker, toward_t: int, now: float) -> list[int]:
        """Drop the entries from the target's side that no advertisement elsewhere needs (an ad
        still moving counts at its old lasthop too); returns their ids."""
        t = broker.tables(self.OVERLAY)
        moving = self.moving
        # The sides each ad's publications may come from: its lasthop, and while it moves, the
        # old one too.
        needs = [(a.box, a.lasthop, moving.get(ad, a.lasthop)) for ad, a in t.srt.items()]
        dropped: list[int] = []
        for sid, s in list(t.prt.items()):
            if s.lasthop == toward_t and not any(
                (h != toward_t or old != toward_t) and overlaps(box, s.box) for box, h, old in needs
            ):
                broker.drop_sub(self.OVERLAY, sid, now)
                dropped.append(sid)
        return dropped


class Tracing(Relocation):
    """The plumbing POP and GRAPE share over ``Relocation``: a publication with a header (POP's
    traced ones, GRAPE's session ones) is routed by the strategy at every broker (``route``),
    which records what its system needs on the way (``on_traced``)."""

    def check_publish(self, broker: Broker, ad: int, values: Sequence[float | None]) -> None:
        """What ``Broker.publish`` checks, for a publication the strategy makes itself."""
        a = broker.tables(self.OVERLAY).srt.get(ad)
        if ad in self.migrating or ad not in self.publishers or a is None:
            raise LocalProtocolError(f"ad {ad} has no attached publisher at {broker.id}")
        if len(values) != len(broker.schema) or not matches(a.box, values):
            raise LocalProtocolError(f"event {tuple(values)} is outside its ad {a.box}")

    def route(self, broker: Broker, msg: Publish, src: int, now: float) -> tuple[int, list[int]]:
        """Deliver and forward ``msg`` as the core would: (local deliveries, the links used)."""
        if len(msg.values) != len(broker.schema):
            raise RemoteProtocolError(f"an event of {len(msg.values)} values")
        local, targets = broker.match(self.OVERLAY, msg, src)
        broker.deliver(self.OVERLAY, msg, local, src, now, bool(targets))
        for n in targets:
            broker.send(n, msg, now)
        return len(local), targets

    def on_receive(self, broker: Broker, msg: Message, src: int, now: float) -> bool:
        if type(msg) is Publish and msg.hdr:
            assert isinstance(msg, Publish)
            self.on_traced(broker, msg, src, now)
            return False
        return True

    def on_traced(self, broker: Broker, msg: Publish, src: int, now: float) -> None:
        """A publication with a header, from ``src`` (LOCAL: this broker's own)."""
        raise RemoteProtocolError(f"unexpected publication header {msg.hdr}")


def _pack(sids: Sequence[int]) -> bytes:
    return struct.pack(f"<{len(sids)}q", *sids)


def _unpack(blob: bytes) -> tuple[int, ...]:
    return struct.unpack(f"<{len(blob) // 8}q", blob)
