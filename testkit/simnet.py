"""A small simulated content-based overlay for property-based tests, with its oracle.

``SimOverlay`` wires ``OverlayPeer`` cores over a simulated DHT (Pastry by default, failure-free:
oracle bootstrap, keep-alives off; or any DHT configuration, failure detection on, for churn)
and records every application event. Its checks:

* ``check_tree``: the tree invariants (``rangecast.testkit.invariants``) on its snapshot;
* ``check_pieces``: the stored pieces are exactly those of the active subscriptions;
* ``check_deliveries``: what subscribers received against the brute-force oracle
  (``brute_force``: every active subscription ``Subscription.matches``), no miss, no duplicate,
  no false positive.

A variant of the overlay (a different split rule, say) comes in as ``node_class``, a subclass of
``PubSubNode`` (docs/testing.md)."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rangecast.dht.node import PastryConfig
from rangecast.dht.wire import codec_for
from rangecast.pubsub.messages import Pred, StoredSub
from rangecast.pubsub.node import (
    EventDelivered,
    OverlayConfig,
    PieceStored,
    PubSubNode,
    SubscriptionInstalled,
    SubscriptionRefused,
    SubscriptionRemoved,
)
from rangecast.pubsub.peer import OverlayPeer
from rangecast.pubsub.schema import Schema, SchemaRegistry
from rangecast.pubsub.space import AttributeSpace, TreeId
from rangecast.pubsub.subscription import Subscription
from rangecast.pubsub.tree import TreeNode
from rangecast.sim.engine import Simulator
from rangecast.sim.latency import SyntheticLatency
from rangecast.sim.network import SimNetwork
from rangecast.sim.streams import stream
from rangecast.testkit.invariants import assert_tree
from rangecast.testkit.snapshot import TreeSnapshot, snapshot_of

Key = tuple[int, int]  # (subscriber index, sid)
DeliveryKey = tuple[int, int, int]  # (subscriber index, sid, eid)


@dataclass
class Published:
    eid: int
    values: tuple[float | None, ...]
    publisher: int
    #: Subscriptions that must receive the event exactly once.
    expected: set[Key]
    #: Subscriptions whose state was changing when it was published: at most once, and only if
    #: the event matches the subscription they had before or have after.
    unsure: dict[Key, list[Subscription]] = field(default_factory=dict)


class SimOverlay:
    """A simulated overlay of ``n`` peers carrying one schema.

    ``dht``: the DHT's configuration (default: Pastry with keep-alives off, so nothing fails
    and the event queue drains; pass ``PastryConfig()`` or ``KademliaConfig()`` for failure
    detection, repair and churn). ``node_class``: the overlay core's class."""

    def __init__(
        self,
        n: int,
        seed: int,
        schema: Schema,
        *,
        capacity: tuple[int, int] = (2, 6),
        config: OverlayConfig | None = None,
        hop_acks: bool = False,
        sites: int = 64,
        dht: Any = None,
        node_class: type[PubSubNode] = PubSubNode,
        wrap: dict[int, Callable[[OverlayPeer], Any]] | None = None,
    ) -> None:
        """``dht``: the DHT's configuration (default: Pastry, keep-alives off, ``hop_acks``);
        ``wrap`` maps peer indices to what wraps their core (a misbehaving peer)."""
        self.schema = schema
        self.config = config or OverlayConfig()
        self.registry = SchemaRegistry()
        self.registry.add(schema)
        self.sim = Simulator(
            SyntheticLatency(seed, sites=sites),
            stream(seed, "network"),
            codec=codec_for(*OverlayPeer.TABLES),
        )
        cap_rng = stream(seed, "capacity")
        proto_rng = stream(seed, "overlay")
        self.capacities: list[int] = []

        def make(i: int, node: object) -> OverlayPeer:
            cap = cap_rng.randint(*capacity)
            self.capacities.append(cap)
            core = OverlayPeer(
                node,  # type: ignore[arg-type]
                schemas=self.registry,
                capacity=cap,
                rng=proto_rng,
                overlay=self.config,
                node_class=node_class,
            )
            return wrap[i](core) if wrap and i in wrap else core

        if dht is None:
            dht = PastryConfig(keepalive_s=math.inf, hop_acks=hop_acks)
        #: Without keep-alives nothing is ever detected as failed, nor reconciled.
        self.pastry_keepalive_off = getattr(dht, "keepalive_s", 0.0) == math.inf
        self.net = SimNetwork(self.sim, seed, config=dht, core_factory=make)
        self.net.oracle_bootstrap(self.net.create(n))
        self.peers: list[OverlayPeer] = self.net.cores  # type: ignore[assignment]
        self.index_of_id = {self.net.space.to_bytes(p.id): i for i, p in enumerate(self.net.peers)}
        #: Peers crashed by ``crash`` (their cores keep their last state, which no longer counts).
        self.crashed: set[int] = set()
        self.spaces = [
            AttributeSpace(schema.name, a.name, k, a.min, a.max)
            for k, a in enumerate(schema.attributes)
        ]
        # Application events.
        self.installed: Counter[Key] = Counter()
        self.removed: Counter[Key] = Counter()
        #: Subscriptions a full leaf refused (``SubscriptionRefused``).
        self.refused: Counter[Key] = Counter()
        self.received: Counter[DeliveryKey] = Counter()
        self.stored_events: list[PieceStored] = []
        #: The latest of SubscriptionInstalled / SubscriptionRemoved per subscription.
        self.last_event: dict[Key, str] = {}
        #: Subscriptions that still had a piece stored somewhere when SubscriptionRemoved came.
        self.leftovers: list[Key] = []
        self.sim.on_events = self._on_events

    @property
    def n(self) -> int:
        return len(self.peers)

    def _on_events(self, i: int, events: list[object]) -> None:
        for ev in events:
            if isinstance(ev, EventDelivered):
                for sid in ev.sids:
                    self.received[(i, sid, ev.event.eid)] += 1
            elif isinstance(ev, SubscriptionInstalled):
                self.installed[(i, ev.sid)] += 1
                self.last_event[(i, ev.sid)] = "installed"
            elif isinstance(ev, SubscriptionRefused):
                self.refused[(i, ev.sid)] += 1
                self.last_event[(i, ev.sid)] = "refused"
            elif isinstance(ev, SubscriptionRemoved):
                self.removed[(i, ev.sid)] += 1
                self.last_event[(i, ev.sid)] = "removed"
                # The host removed the piece before acknowledging: nothing may be left.
                me = self.net.space.to_bytes(self.net.peers[i].id)
                if any(s.subscriber.id == me and s.sid == ev.sid for _, s in self.stored()):
                    self.leftovers.append((i, ev.sid))
            elif isinstance(ev, PieceStored):
                self.stored_events.append(ev)

    # ------------------------------------------------------------------------------ actions

    def subscribe(self, i: int, sub: Subscription) -> Key:
        sid = self.peers[i].overlay.subscribe(sub, self.sim.now)
        self.sim.poke(i)
        return (i, sid)

    def unsubscribe(self, key: Key) -> None:
        i, sid = key
        self.peers[i].overlay.unsubscribe(sid, self.sim.now)
        self.sim.poke(i)

    def modify(self, key: Key, sub: Subscription) -> None:
        i, sid = key
        self.peers[i].overlay.modify(sid, sub, self.sim.now)
        self.sim.poke(i)

    def join(self, via: int) -> int:
        """A new peer joins through peer ``via``; returns its index."""
        (j,) = self.net.create(1)
        self.peers[j].dht.join(self.sim.addrs[via], self.sim.now)
        self.sim.poke(j)
        me = self.net.space.to_bytes(self.net.peers[j].id)
        self.index_of_id[me] = j
        return j

    def crash(self, i: int) -> None:
        """Peer ``i`` stops at once (no leave): the others find out through failure detection."""
        self.sim.crash(i)
        self.crashed.add(i)

    def ready(self) -> list[int]:
        """Live peers whose DHT node is ready (joined)."""
        return [i for i in self.alive() if self.peers[i].dht.state.value == "ready"]

    def publish(self, i: int, values: Sequence[float | None]) -> int:
        eid = self.peers[i].overlay.publish(self.schema.name, values, self.sim.now)
        self.sim.poke(i)
        return eid

    def run_for(self, seconds: float) -> None:
        self.sim.run(until=self.sim.now + seconds)

    def settle(self) -> None:
        """Run until nothing is left to do (no keep-alives: the queue drains)."""
        self.sim.run()

    # ---------------------------------------------------------------------------- views

    def hosted(self) -> dict[tuple[str, TreeId], list[tuple[int, TreeNode]]]:
        out: dict[tuple[str, TreeId], list[tuple[int, TreeNode]]] = {}
        for i in self.alive():
            for schema, node in self.peers[i].overlay.tree_nodes():
                out.setdefault((schema, node.tid), []).append((i, node))
        return out

    def leaves(self) -> list[TreeNode]:
        live = [self.peers[i] for i in self.alive()]
        return [n for p in live for _, n in p.overlay.tree_nodes() if n.is_leaf]

    def stored(self) -> list[tuple[TreeId, StoredSub]]:
        return [(n.tid, s) for n in self.leaves() for s in n.index]  # type: ignore[union-attr]

    def pieces_by_key(self) -> dict[Key, list[StoredSub]]:
        out: dict[Key, list[StoredSub]] = {}
        for _, s in self.stored():
            out.setdefault((self.index_of_id[s.subscriber.id], s.sid), []).append(s)
        for v in out.values():
            v.sort(key=lambda s: s.piece)
        return out

    def stat(self, name: str) -> int:
        return sum(getattr(p.overlay.stats, name) for p in self.peers)

    def max_depth(self) -> int:
        return max((n.tid.depth for p in self.peers for _, n in p.overlay.tree_nodes()), default=0)

    # ---------------------------------------------------------------------------- checks

    def snapshot(self) -> TreeSnapshot:
        """The tree as plain data (``rangecast.testkit.snapshot``), live peers only."""
        return snapshot_of(self.peers, [self.schema], alive=self.alive())

    def alive(self) -> list[int]:
        """Peers not crashed (``crash``)."""
        return [i for i in range(self.n) if i not in self.crashed]

    def check_tree(self, samples: int = 400, seed: int = 0, *, settled: bool = True) -> None:
        """Every tree invariant (``rangecast.testkit.invariants``) on the live peers; raises
        ``TreeInvariantError``. ``settled``: the overlay has gone quiet since its last change,
        so internal nodes' tables are exactly the leaves below them; without failure detection
        internal nodes keep a leaf's replica set (their set widens at a reconcile, which only
        runs with keep-alives)."""
        assert_tree(
            self.snapshot(),
            samples=samples,
            seed=seed,
            exact_tables=settled,
            lazy_internal=self.pastry_keepalive_off,
        )

    def check_pieces(
        self, active: dict[Key, Subscription], *, lb_cutoff: float | None = None
    ) -> dict[Key, list[StoredSub]]:
        """The stored pieces are exactly those of the ``active`` subscriptions: for each, one
        generation, pieces 0..k-1 each once, carrying its predicates, partitioning its base range
        (contiguous, from its low end to its high end), each stored at a widened point that
        holds its piece and stays below the cut-off line (load balancing)."""
        by_key = self.pieces_by_key()
        assert set(by_key) == set(active), (
            f"stored for {sorted(set(by_key) - set(active))[:5]} (not active), "
            f"missing {sorted(set(active) - set(by_key))[:5]}"
        )
        for key, sub in active.items():
            pieces = by_key[key]
            first = pieces[0]
            assert {s.gen for s in pieces} == {first.gen}, f"{key}: mixed generations"
            assert [s.piece for s in pieces] == list(range(first.pieces)), f"{key}: pieces"
            assert all(s.pieces == first.pieces and s.base == first.base for s in pieces)
            assert first.preds == preds_of(sub), f"{key}: stored predicates differ"
            r = sub.range_of(first.base)
            assert r is not None, f"{key}: base attribute not constrained"
            space = self.spaces[first.base]
            assert pieces[0].piece_lo == r.lo and pieces[-1].piece_hi == r.hi, key
            for a, b in itertools.pairwise(pieces):
                assert a.piece_hi == b.piece_lo, f"{key}: pieces not contiguous"
            width = space.max - space.min
            e_max = self.config.widen * width
            for s in pieces:
                assert s.piece_lo <= s.piece_hi, f"{key}: empty piece {s.piece}"
                assert space.min <= s.x <= s.piece_lo and s.piece_hi <= s.y <= space.max
                assert s.piece_lo - s.x <= e_max * (1 + 1e-9) + 1e-12
                assert s.y - s.piece_hi <= e_max * (1 + 1e-9) + 1e-12
                if lb_cutoff is not None:
                    assert s.y - s.x <= lb_cutoff, f"{key}: piece {s.piece} above the cut-off"
            if lb_cutoff is None:
                assert first.pieces == 1
        return by_key

    def check_deliveries(self, events: Iterable[Published]) -> None:
        """Zero missed, zero duplicates, zero false positives."""
        events = list(events)
        eids = {e.eid for e in events}
        problems: list[str] = []
        for ev in events:
            for i, sid in ev.expected:
                got = self.received.get((i, sid, ev.eid), 0)
                if got != 1:
                    problems.append(f"{(i, sid)} got event {ev.eid} {got} times, expected once")
        by_eid = {e.eid: e for e in events}
        for (i, sid, eid), count in self.received.items():
            if eid not in eids:
                continue
            ev = by_eid[eid]
            if (i, sid) in ev.expected:
                continue
            unsure = ev.unsure.get((i, sid))
            if unsure is None:
                problems.append(f"{(i, sid)} got event {eid} ({ev.values}), not expected")
                continue
            # The subscription was modified while the event was in flight: any of its forms
            # (generations) may have matched, but the subscriber hears of it at most once.
            forms = sum(1 for s in unsure if s.matches(ev.values, self.schema.partial))
            if forms == 0:
                problems.append(f"{(i, sid)} got event {eid} ({ev.values}) it does not match")
            elif count > 1:
                problems.append(f"{(i, sid)} got event {eid} {count} times ({forms} forms)")
        assert not problems, f"{len(problems)} delivery problems: {problems[:8]}"


def preds_of(sub: Subscription) -> list[Pred]:
    return [
        Pred(i, r.lo, r.hi, (1 if r.lo_open else 0) | (2 if r.hi_open else 0))
        for i, r in sub.ranges
    ]


def brute_force(
    active: dict[Key, Subscription], values: Sequence[float | None], partial: str
) -> set[Key]:
    return {k for k, s in active.items() if s.matches(values, partial)}


#: The name the overlay tests have always used.
Net = SimOverlay

__all__ = [
    "DeliveryKey",
    "Key",
    "Net",
    "Published",
    "SimOverlay",
    "brute_force",
    "preds_of",
]
