"""The sans-IO broker core: content-based routing of advertisements, subscriptions and
publications over one or more overlays, configured as SIENA (filter-based tree) or PADRES
(advertisements; tree-ID routing on a cyclic graph).

Theory of operation
-------------------
A ``Broker`` is a state machine with the project's core contract (docs/architecture.md): inputs
are ``receive(msg, src, now)`` (a message from neighbour broker ``src``), ``handle_timer(now)``
and the client API (``advertise``, ``unadvertise``, ``subscribe``, ``unsubscribe``,
``publish``); outputs are ``take_messages()`` ((neighbour, message) pairs), ``get_timer()`` and
``take_events()`` (``Delivered``: a publication for local subscriptions, with their ids). No
clock, no socket, no randomness.

The broker is on one or more *overlays* (indices; every message names its overlay) and keeps
``OverlayTables`` per overlay: SRT, PRT and the per-neighbour sent index (brokers/tables.py).
A message from a broker that is not its neighbour on that overlay, or with a box of the wrong
shape, is a ``RemoteProtocolError``: counted in ``stats.dropped`` and dropped.

The three forwarding primitives, each confined to one overlay:

``flood_adv(ad, from)``
    The advertisement goes to every neighbour but ``from``. On a tree that reaches each broker
    once; on a cyclic graph (``tid_routing``) the first copy defines the ad's tree (its lasthop)
    and later copies are counted (``stats.adv_duplicates``) and dropped: the ad id is the TID.
``fwd_sub(s, from, mode)``
    ``flood`` (SIENA): to every neighbour but ``from``; ``toward_ads`` (PADRES): to the lasthops
    of the advertisements overlapping ``s``, but ``from``. Each forward goes through the
    neighbour's sent index (covering, at most once per neighbour). With advertisements, an ad
    arriving from n pulls the overlapping subscriptions toward n. With tree IDs a subscription
    carries the trees it is bound to, and each hop forwards it, per tree, to that tree's lasthop:
    it climbs every overlapping ad's tree from the subscriber to the ad's host exactly once.
``route_pub(e, from)``
    Match ``e`` against the whole PRT (``stats.matchings`` counts the entries scanned), deliver to
    the local matches, and send one copy to each neighbour but ``from`` that is the lasthop of a
    matching entry (with tree IDs: its lasthop on the publication's tree). A publication received
    that delivers nothing and goes nowhere is a false positive (``stats.false_positives``).

Message handlers are in ``_HANDLERS`` by type:

=============== ==========================================================================
message         handler
=============== ==========================================================================
Advertise       store (lasthop = sender; drop a duplicate), ``flood_adv``, pull subscriptions
Unadvertise     forget the ad, flood on (subscriptions it attracted stay: conservative)
Subscribe       store (lasthop = sender), ``fwd_sub``
Unsubscribe     forget, re-forward what it covered, then unsubscribe where it was forwarded
Publish         ``route_pub``
Control         the strategy's ``on_control`` (the substrate defines no control op itself)
=============== ==========================================================================

Systems built on the substrate (OctopiA, Kyra, POP/GRAPE) plug in a ``Strategy``: it sees every
received message first (``on_receive``, which may consume it), every message before it leaves
(``before_send``: add a header, drop it), local deliveries (``on_deliver``: Kyra's proxies send
to the origin server instead), control messages and timers. It acts through the broker's own
calls (``send``, ``route_pub``, ``set_timer``, ``tables``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec

from rangecast.brokers.filters import Box, matches, overlaps
from rangecast.brokers.messages import (
    Advertise,
    Control,
    Publish,
    Subscribe,
    Unadvertise,
    Unsubscribe,
    WireBox,
    box_from_wire,
    box_to_wire,
)
from rangecast.brokers.tables import LOCAL, AdEntry, OverlayTables, SubEntry
from rangecast.dht.errors import LocalProtocolError, RemoteProtocolError
from rangecast.dht.timers import TimerHeap
from rangecast.dht.wire import Message
from rangecast.pubsub.schema import Schema

__all__ = [
    "LOCAL",
    "PADRES",
    "PADRES_TID",
    "SIENA",
    "Broker",
    "BrokerStats",
    "Delivered",
    "LinkQueues",
    "RoutingConfig",
    "Strategy",
    "padres",
    "siena",
]

FLOOD, TOWARD_ADS = "flood", "toward_ads"


@dataclass(frozen=True, slots=True)
class RoutingConfig:
    """How a broker routes on an overlay: the system is a configuration of the primitives."""

    #: Advertisements are flooded, and a publication must fall in one of its broker's ads.
    advertisements: bool = False
    #: ``flood`` or ``toward_ads``.
    sub_mode: str = FLOOD
    #: Hold back subscriptions covered by one already forwarded to the same neighbour.
    covering: bool = False
    #: A cyclic overlay: ads flood with a seen-set, subscriptions and publications follow trees.
    tid_routing: bool = False

    def __post_init__(self) -> None:
        if self.sub_mode not in (FLOOD, TOWARD_ADS):
            raise LocalProtocolError(f"sub_mode is 'flood' or 'toward_ads', not {self.sub_mode!r}")
        if self.sub_mode == TOWARD_ADS and not self.advertisements:
            raise LocalProtocolError("toward_ads needs advertisements")
        if self.tid_routing and (self.sub_mode != TOWARD_ADS or self.covering):
            raise LocalProtocolError("tree-ID routing needs toward_ads and no covering")


def siena(covering: bool = False) -> RoutingConfig:
    """The classic filter-based tree: subscriptions flood, publications follow them back."""
    return RoutingConfig(covering=covering)


def padres(covering: bool = False, cyclic: bool = False) -> RoutingConfig:
    """PADRES: ads flood, subscriptions go toward overlapping ads; ``cyclic``: tree-ID routing
    (OctopiA's comparator on the unclustered SCOT)."""
    return RoutingConfig(True, TOWARD_ADS, covering, cyclic)


SIENA = siena()
PADRES = padres()
PADRES_TID = padres(cyclic=True)


class Delivered(msgspec.Struct, frozen=True, gc=False):
    """Publication ``eid`` matched the local subscriptions ``sids`` on ``overlay``."""

    overlay: int
    eid: int
    values: tuple[float | None, ...]
    sids: tuple[int, ...]
    now: float


class BrokerStats:
    """The broker's counters (messages are counted when they leave or arrive)."""

    __slots__ = (
        "adv_duplicates",
        "control_in",
        "control_out",
        "deliveries",
        "dropped",
        "false_positives",
        "matchings",
        "pub_in",
        "pub_out",
        "pure_forwards",
    )

    def __init__(self) -> None:
        self.pub_in = 0
        self.pub_out = 0
        #: Control messages by type name (``Control:<op>`` for the generic one).
        self.control_in: dict[str, int] = {}
        self.control_out: dict[str, int] = {}
        #: PRT entries scanned by ``route_pub``.
        self.matchings = 0
        #: Publications received that delivered nothing locally and went nowhere.
        self.false_positives = 0
        #: Publications received that delivered nothing locally but were forwarded.
        self.pure_forwards = 0
        #: (publication, local subscription) pairs delivered.
        self.deliveries = 0
        self.adv_duplicates = 0
        #: Messages refused as a RemoteProtocolError.
        self.dropped = 0


def _kind(msg: Message) -> str:
    return f"Control:{msg.op}" if isinstance(msg, Control) else msg.kind


class Strategy:
    """A system's hooks into the broker; the base does nothing (plain SIENA/PADRES)."""

    def on_receive(self, broker: Broker, msg: Message, src: int, now: float) -> bool:
        """Called first for every accepted message; False: the strategy consumed it."""
        return True

    def before_send(self, broker: Broker, dst: int, msg: Message, now: float) -> Message | None:
        """The message to send to ``dst`` instead of ``msg`` (None: send nothing)."""
        return msg

    def on_deliver(
        self, broker: Broker, msg: Publish, sids: tuple[int, ...], src: int, now: float
    ) -> bool:
        """Local matches of a publication; True: handled here, no ``Delivered`` event."""
        return False

    def on_control(self, broker: Broker, msg: Control, src: int, now: float) -> None:
        raise RemoteProtocolError(f"no handler for control op {msg.op}")

    def on_timer(self, broker: Broker, kind: str, arg: Any, now: float) -> None:
        return None


class LinkQueues(Protocol):
    """The driver's per-link output queues, as a strategy reads them (OctopiA's IDR, GRAPE's
    delay estimate): the broker core has no queue, the engine that paces its sends has."""

    def sample(self, broker: int, dst: int, now: float) -> tuple[int, int, int]:
        """(queue length now, messages enqueued, messages sent) on ``broker``'s output queue to
        ``dst``; the two counts since the previous sample of that queue. A driver with a
        per-broker service time adds the broker's waiting inputs to every such queue, and
        ``dst == broker`` samples its input queue alone (waiting, arrived, taken into service)."""
        ...


class _Overlay:
    __slots__ = ("config", "index", "neighbours", "nset", "tables")

    def __init__(self, index: int, neighbours: Sequence[int], config: RoutingConfig) -> None:
        self.index = index
        self.neighbours = tuple(sorted(neighbours))
        self.nset = frozenset(self.neighbours)
        self.config = config
        self.tables = OverlayTables(config.covering)


Handler = Callable[["Broker", _Overlay, Any, int, float], None]


class Broker:
    """One broker (see the module docs)."""

    __slots__ = (
        "_arity",
        "_events",
        "_next_id",
        "_out",
        "_overlays",
        "id",
        "schema",
        "stats",
        "strategy",
        "timers",
    )

    def __init__(
        self,
        broker_id: int,
        schema: Schema,
        overlays: Mapping[int, Sequence[int]],
        config: RoutingConfig | Mapping[int, RoutingConfig] = SIENA,
        strategy: Strategy | None = None,
    ) -> None:
        if not 0 <= broker_id < 1 << 31:
            raise LocalProtocolError(f"broker ids are 0 .. 2**31-1, got {broker_id}")
        self.id = broker_id
        self.schema = schema
        self._arity = len(schema)
        self._overlays: dict[int, _Overlay] = {}
        for index, neighbours in overlays.items():
            cfg = config if isinstance(config, RoutingConfig) else config[index]
            if broker_id in neighbours:
                raise LocalProtocolError(f"broker {broker_id} is its own neighbour")
            self._overlays[index] = _Overlay(index, neighbours, cfg)
        self.strategy = strategy if strategy is not None else Strategy()
        self.stats = BrokerStats()
        self.timers: TimerHeap[str] = TimerHeap()
        self._out: list[tuple[int, Message]] = []
        self._events: list[Any] = []
        self._next_id = 0

    # -- outputs -------------------------------------------------------------------------------

    def take_messages(self) -> list[tuple[int, Message]]:
        out, self._out = self._out, []
        return out

    def take_events(self) -> list[Any]:
        ev, self._events = self._events, []
        return ev

    def get_timer(self) -> float | None:
        return self.timers.next_deadline()

    # -- for strategies ------------------------------------------------------------------------

    def tables(self, overlay: int) -> OverlayTables:
        return self._ov(overlay).tables

    def neighbours(self, overlay: int) -> tuple[int, ...]:
        return self._ov(overlay).neighbours

    @property
    def overlays(self) -> tuple[int, ...]:
        return tuple(self._overlays)

    def send(self, dst: int, msg: Message, now: float) -> None:
        """Queue ``msg`` for neighbour ``dst`` through the strategy's ``before_send``."""
        out = self.strategy.before_send(self, dst, msg, now)
        if out is None:
            return
        s = self.stats
        if type(out) is Publish:
            s.pub_out += 1
        else:
            k = _kind(out)
            s.control_out[k] = s.control_out.get(k, 0) + 1
        self._out.append((dst, out))

    def set_timer(self, deadline: float, kind: str, arg: Any = None) -> None:
        self.timers.push(deadline, kind, arg)

    def new_id(self) -> int:
        """A system-wide unique id (broker id in the high bits, a counter below)."""
        self._next_id += 1
        return self.id << 32 | self._next_id

    def srt_size(self) -> int:
        return sum(len(o.tables.srt) for o in self._overlays.values())

    def prt_size(self) -> int:
        return sum(len(o.tables.prt) for o in self._overlays.values())

    def _ov(self, overlay: int) -> _Overlay:
        try:
            return self._overlays[overlay]
        except KeyError:
            raise LocalProtocolError(f"broker {self.id} is not on overlay {overlay}") from None

    # -- API -----------------------------------------------------------------------------------

    def advertise(self, box: Box, now: float, overlay: int = 0) -> int:
        """A local publisher's advertisement; returns its id (also its tree id)."""
        ov = self._ov(overlay)
        if not ov.config.advertisements:
            raise LocalProtocolError(f"overlay {overlay} routes without advertisements")
        self._check_box(box)
        ad = self.new_id()
        ov.tables.srt[ad] = AdEntry(box, LOCAL)
        ov.tables.seen.add(ad)
        # Local subscriptions overlapping it need no forwarding: local matching delivers them.
        self._flood(ov, Advertise(overlay, ad, box_to_wire(box)), LOCAL, now)
        return ad

    def unadvertise(self, ad: int, now: float, overlay: int = 0) -> None:
        ov = self._ov(overlay)
        e = ov.tables.srt.get(ad)
        if e is None or e.lasthop != LOCAL:
            raise LocalProtocolError(f"no local advertisement {ad} on overlay {overlay}")
        del ov.tables.srt[ad]
        self._flood(ov, Unadvertise(overlay, ad), LOCAL, now)

    def subscribe(self, box: Box, now: float, overlay: int = 0) -> int:
        """A local client's subscription; returns its id (deliveries name it)."""
        ov = self._ov(overlay)
        self._check_box(box)
        sub = self.new_id()
        wire = box_to_wire(box)
        entry = SubEntry(box, LOCAL, self.id, hops={} if ov.config.tid_routing else None)
        ov.tables.prt[sub] = entry
        if ov.config.tid_routing:
            binds: dict[int, list[int]] = {}
            for ad, a in ov.tables.srt.items():
                if a.lasthop != LOCAL and overlaps(a.box, box):
                    binds.setdefault(a.lasthop, []).append(ad)
            for n in sorted(binds):
                self._send_tid_sub(ov, n, sub, entry, wire, binds[n], now)
        else:
            self._fwd_sub(ov, sub, entry, wire, LOCAL, now)
        return sub

    def unsubscribe(self, sub: int, now: float, overlay: int = 0) -> None:
        ov = self._ov(overlay)
        e = ov.tables.prt.get(sub)
        if e is None or e.lasthop != LOCAL:
            raise LocalProtocolError(f"no local subscription {sub} on overlay {overlay}")
        del ov.tables.prt[sub]
        if ov.config.tid_routing:
            for n, subs in sorted(ov.tables.tid_sent.items()):
                ts = subs.pop(sub, None)
                if ts:
                    self.send(n, Unsubscribe(overlay, sub, sorted(ts)), now)
        else:
            self._retract(ov, sub, now)

    def publish(
        self,
        values: Sequence[float | None],
        now: float,
        overlay: int = 0,
        ad: int | None = None,
    ) -> int:
        """Publish an event (schema order); with advertisements it must fall in local ad
        ``ad``. Returns the event id."""
        ov = self._ov(overlay)
        if len(values) != self._arity:
            raise LocalProtocolError(f"an event of {len(values)} values, schema has {self._arity}")
        tid = None
        if ov.config.advertisements:
            a = ov.tables.srt.get(ad) if ad is not None else None
            if a is None or a.lasthop != LOCAL:
                raise LocalProtocolError(f"publish needs a local advertisement, got {ad}")
            if not matches(a.box, values):
                raise LocalProtocolError(f"event {tuple(values)} is outside its ad {a.box}")
            if ov.config.tid_routing:
                tid = ad
        eid = self.new_id()
        self.route_pub(ov.index, Publish(overlay, eid, list(values), tid), LOCAL, now)
        return eid

    def _check_box(self, box: Box) -> None:
        if len(box) != self._arity:
            raise LocalProtocolError(f"a box of {len(box)} attributes, schema has {self._arity}")

    # -- inputs --------------------------------------------------------------------------------

    def receive(self, msg: Message, src: int, now: float) -> None:
        """A message from neighbour broker ``src``."""
        s = self.stats
        try:
            ov = self._overlays.get(msg.overlay)  # type: ignore[attr-defined]
            if ov is None:
                raise RemoteProtocolError(f"broker {self.id} is not on overlay {msg.overlay}")  # type: ignore[attr-defined]
            if src not in ov.nset:
                raise RemoteProtocolError(f"{src} is no neighbour of {self.id} on {ov.index}")
            if type(msg) is Publish:
                s.pub_in += 1
            else:
                k = _kind(msg)
                s.control_in[k] = s.control_in.get(k, 0) + 1
            if not self.strategy.on_receive(self, msg, src, now):
                return
            handler = _HANDLERS.get(type(msg))
            if handler is None:
                raise RemoteProtocolError(f"no broker handler for {type(msg).__name__}")
            handler(self, ov, msg, src, now)
        except RemoteProtocolError:
            s.dropped += 1

    def handle_timer(self, now: float) -> None:
        while (due := self.timers.pop_due(now)) is not None:
            kind, arg = due
            self.strategy.on_timer(self, kind, arg, now)

    # -- handlers --------------------------------------------------------------------------------

    def _on_advertise(self, ov: _Overlay, msg: Advertise, src: int, now: float) -> None:
        t = ov.tables
        if msg.ad in t.seen:
            # A cyclic overlay's later copy (on a tree this cannot happen).
            self.stats.adv_duplicates += 1
            return
        box = box_from_wire(msg.box, self._arity)
        t.seen.add(msg.ad)
        t.srt[msg.ad] = AdEntry(box, src)
        self._flood(ov, msg, src, now)
        if ov.config.sub_mode != TOWARD_ADS:
            return
        # Subscriptions that overlap the new ad now go toward it.
        if ov.config.tid_routing:
            # Only local ones: a remote one is bound to this tree by the hop before, if at all.
            for sub, e in list(t.prt.items()):
                if e.lasthop == LOCAL and overlaps(e.box, box):
                    self._send_tid_sub(ov, src, sub, e, box_to_wire(e.box), [msg.ad], now)
            return
        for sub, e in list(t.prt.items()):
            if e.lasthop != src and overlaps(e.box, box):
                self._send_sub(ov, src, sub, e, now)

    def _on_unadvertise(self, ov: _Overlay, msg: Unadvertise, src: int, now: float) -> None:
        a = ov.tables.srt.get(msg.ad)
        if a is None or a.lasthop != src:
            return  # a cyclic overlay's later copy, or one racing a re-flood
        del ov.tables.srt[msg.ad]
        self._flood(ov, msg, src, now)

    def _on_subscribe(self, ov: _Overlay, msg: Subscribe, src: int, now: float) -> None:
        t = ov.tables
        box = box_from_wire(msg.box, self._arity)
        e = t.prt.get(msg.sub)
        if not ov.config.tid_routing:
            if e is not None:
                raise RemoteProtocolError(f"subscription {msg.sub} arrived twice")
            e = t.prt[msg.sub] = SubEntry(box, src, msg.origin)
            self._fwd_sub(ov, msg.sub, e, msg.box, src, now)
            return
        if e is None:
            e = t.prt[msg.sub] = SubEntry(box, src, msg.origin, hops={})
        hops = e.hops
        assert hops is not None
        binds: dict[int, list[int]] = {}
        for tid in msg.tids:
            if tid in hops:
                continue
            hops[tid] = src
            a = t.srt.get(tid)
            if a is None or a.lasthop in (LOCAL, src):
                continue  # this broker hosts the ad (or the tree is gone): the climb ends here
            binds.setdefault(a.lasthop, []).append(tid)
        for n in sorted(binds):
            self._send_tid_sub(ov, n, msg.sub, e, msg.box, binds[n], now)

    def _on_unsubscribe(self, ov: _Overlay, msg: Unsubscribe, src: int, now: float) -> None:
        t = ov.tables
        e = t.prt.get(msg.sub)
        if e is None:
            return
        if not ov.config.tid_routing:
            if e.lasthop != src:
                raise RemoteProtocolError(f"unsubscription {msg.sub} from {src}, not its lasthop")
            del t.prt[msg.sub]
            self._retract(ov, msg.sub, now)
            return
        hops = e.hops
        assert hops is not None
        gone = {tid for tid in msg.tids if hops.get(tid) == src}
        for tid in gone:
            del hops[tid]
        if not hops:
            del t.prt[msg.sub]
        elif e.lasthop == src:
            e.lasthop = next(iter(hops.values()))
        for n, subs in sorted(t.tid_sent.items()):
            ts = subs.get(msg.sub)
            if not ts:
                continue
            drop = ts & gone
            if drop:
                ts -= drop
                if not ts:
                    del subs[msg.sub]
                self.send(n, Unsubscribe(ov.index, msg.sub, sorted(drop)), now)

    def _on_publish(self, ov: _Overlay, msg: Publish, src: int, now: float) -> None:
        if len(msg.values) != self._arity:
            raise RemoteProtocolError(f"an event of {len(msg.values)} values")
        if ov.config.tid_routing and msg.tid is None:
            raise RemoteProtocolError("a publication without a tree id")
        self.route_pub(ov.index, msg, src, now)

    def _on_control(self, ov: _Overlay, msg: Control, src: int, now: float) -> None:
        self.strategy.on_control(self, msg, src, now)

    # -- primitives ------------------------------------------------------------------------------

    def _flood(self, ov: _Overlay, msg: Message, src: int, now: float) -> None:
        """``flood_adv``: to every neighbour but ``src`` (the same message object each time)."""
        for n in ov.neighbours:
            if n != src:
                self.send(n, msg, now)

    def _fwd_sub(
        self, ov: _Overlay, sub: int, e: SubEntry, wire: WireBox, src: int, now: float
    ) -> None:
        """``fwd_sub`` on a tree: flood, or toward the lasthops of overlapping ads."""
        if ov.config.sub_mode == FLOOD:
            targets: Sequence[int] = ov.neighbours
        else:
            # Hot at set-up (every hop of every subscription scans the SRT): test an ad only
            # if its lasthop is not a target yet, and stop once every neighbour is one.
            hops: set[int] = set()
            box, n_max = e.box, len(ov.neighbours)
            for a in ov.tables.srt.values():
                h = a.lasthop
                if h != LOCAL and h not in hops and overlaps(a.box, box):
                    hops.add(h)
                    if len(hops) == n_max:
                        break
            targets = sorted(hops)
        msg: Subscribe | None = None
        for n in targets:
            if n != src and ov.tables.sent_to(n).offer(sub, e.box):
                if msg is None:
                    msg = Subscribe(ov.index, sub, wire, e.origin)
                self.send(n, msg, now)

    def offer_sub(self, overlay: int, n: int, sub: int, now: float) -> None:
        """Forward PRT entry ``sub`` to neighbour ``n`` unless it went there already (or is
        covered there): a publisher's migration pulls subscriptions toward its new broker."""
        ov = self._ov(overlay)
        self._send_sub(ov, n, sub, ov.tables.prt[sub], now)

    def drop_sub(self, overlay: int, sub: int, now: float) -> None:
        """Forget a remote PRT entry no advertisement needs any more (a migration's clean-up),
        with no unsubscription: the hops past it drop theirs the same way. What it covered at a
        neighbour is forwarded there now."""
        ov = self._ov(overlay)
        prt = ov.tables.prt
        del prt[sub]
        for n, idx in sorted(ov.tables.sent.items()):
            for o, obox in idx.remove(sub)[1]:
                self.send(n, Subscribe(ov.index, o, box_to_wire(obox), prt[o].origin), now)

    def forget_sent_ids(self, overlay: int, n: int, sids: Sequence[int]) -> None:
        """Forget having forwarded ``sids`` to ``n`` (the neighbour dropped exactly these: a
        migration's clean-up), and the ones held back under them (inside a dropped box, so the
        neighbour needs them no more than it did the coverer)."""
        idx = self._ov(overlay).tables.sent.get(n)
        if idx is None:
            return
        stack = list(sids)
        while stack:
            stack.extend(o for o, _ in idx.remove(stack.pop())[1])

    def _send_sub(self, ov: _Overlay, n: int, sub: int, e: SubEntry, now: float) -> None:
        if ov.tables.sent_to(n).offer(sub, e.box):
            self.send(n, Subscribe(ov.index, sub, box_to_wire(e.box), e.origin), now)

    def _send_tid_sub(
        self,
        ov: _Overlay,
        n: int,
        sub: int,
        e: SubEntry,
        wire: WireBox,
        tids: list[int],
        now: float,
    ) -> None:
        sent = ov.tables.tid_sent.setdefault(n, {}).setdefault(sub, set())
        new = [tid for tid in tids if tid not in sent]
        if new:
            sent.update(new)
            self.send(n, Subscribe(ov.index, sub, wire, e.origin, new), now)

    def _retract(self, ov: _Overlay, sub: int, now: float) -> None:
        """Withdraw ``sub`` from every neighbour it was forwarded to, forwarding first what it
        was covering there."""
        prt = ov.tables.prt
        for n, idx in sorted(ov.tables.sent.items()):
            was_sent, resend = idx.remove(sub)
            for o, obox in resend:
                self.send(n, Subscribe(ov.index, o, box_to_wire(obox), prt[o].origin), now)
            if was_sent:
                self.send(n, Unsubscribe(ov.index, sub), now)

    def route_pub(self, overlay: int, msg: Publish, src: int, now: float) -> None:
        """``route_pub``: deliver locally, then one copy per matching lasthop but ``src``."""
        local, targets = self.match(overlay, msg, src)
        self.deliver(overlay, msg, local, src, now, bool(targets))
        for n in targets:
            self.send(n, msg, now)

    def match(self, overlay: int, msg: Publish, src: int) -> tuple[tuple[int, ...], list[int]]:
        """Match ``msg`` against the overlay's PRT: (local subscription ids, the sorted
        neighbours but ``src`` that are lasthops of matching entries). Systems that route
        publications themselves (OctopiA's iLinks, POP's traced publications) call it, then
        ``deliver``, then send their own copies."""
        ov = self._ov(overlay)
        prt = ov.tables.prt
        values = msg.values
        local: list[int] = []
        targets: set[int] = set()
        tid = msg.tid if ov.config.tid_routing else None
        for sid, e in prt.matching(values):
            h = e.lasthop
            if h == LOCAL:
                local.append(sid)
            elif tid is None:
                if h != src:
                    targets.add(h)
            else:
                hops = e.hops
                th = hops.get(tid) if hops is not None else None
                if th is not None and th != src:
                    targets.add(th)
        self.stats.matchings += len(prt)
        return tuple(local), sorted(targets)

    def deliver(
        self,
        overlay: int,
        msg: Publish,
        sids: tuple[int, ...],
        src: int,
        now: float,
        forwarded: bool,
    ) -> None:
        """The local matches of a publication (through the strategy's ``on_deliver``), and the
        reception counters: a received publication that delivers nothing is a pure forward when
        it goes on (``forwarded``), a false positive otherwise."""
        s = self.stats
        if sids:
            if not self.strategy.on_deliver(self, msg, sids, src, now):
                s.deliveries += len(sids)
                self._events.append(Delivered(overlay, msg.eid, tuple(msg.values), sids, now))
        elif src != LOCAL:
            if forwarded:
                s.pure_forwards += 1
            else:
                s.false_positives += 1

    def emit(self, event: Any) -> None:
        """Queue an output event for the driver (a strategy's client commands, its own
        deliveries); ``take_events`` returns them in order with the ``Delivered`` ones."""
        self._events.append(event)


_HANDLERS: dict[type[Message], Handler] = {
    Advertise: Broker._on_advertise,
    Unadvertise: Broker._on_unadvertise,
    Subscribe: Broker._on_subscribe,
    Unsubscribe: Broker._on_unsubscribe,
    Publish: Broker._on_publish,
    Control: Broker._on_control,
}
