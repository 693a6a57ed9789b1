"""A small simulated content-based overlay for the end-to-end tests, with the checks they share.

``Net`` wires ``OverlayPeer`` cores over a failure-free simulated Pastry overlay (oracle
bootstrap, keep-alives off) and records every application event. ``check_tree`` verifies the
distributed 2d-tree from the outside (every peer's hosted nodes put together) and
``check_deliveries`` compares what subscribers received with a brute-force expectation.

Not a test module (no ``test_`` prefix): the overlay test files import it."""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rangecast.dht.node import PastryConfig
from rangecast.dht.wire import codec_for
from rangecast.pubsub.messages import Pred, StoredSub
from rangecast.pubsub.node import (
    EventDelivered,
    OverlayConfig,
    PieceStored,
    SubscriptionInstalled,
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


class Net:
    """A simulated overlay of ``n`` peers carrying one schema."""

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
        pastry: PastryConfig | None = None,
        wrap: dict[int, Callable[[OverlayPeer], Any]] | None = None,
    ) -> None:
        """``pastry`` replaces the DHT's configuration (keep-alives off, ``hop_acks``);
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
            )
            return wrap[i](core) if wrap and i in wrap else core

        pastry = pastry or PastryConfig(keepalive_s=math.inf, hop_acks=hop_acks)
        self.net = SimNetwork(self.sim, seed, config=pastry, core_factory=make)
        self.net.oracle_bootstrap(self.net.create(n))
        self.peers: list[OverlayPeer] = self.net.cores  # type: ignore[assignment]
        self.index_of_id = {self.net.space.to_bytes(p.id): i for i, p in enumerate(self.net.peers)}
        self.spaces = [
            AttributeSpace(schema.name, a.name, k, a.min, a.max)
            for k, a in enumerate(schema.attributes)
        ]
        # Application events.
        self.installed: Counter[Key] = Counter()
        self.removed: Counter[Key] = Counter()
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
        for i, p in enumerate(self.peers):
            for schema, node in p.overlay.tree_nodes():
                out.setdefault((schema, node.tid), []).append((i, node))
        return out

    def leaves(self) -> list[TreeNode]:
        return [n for p in self.peers for _, n in p.overlay.tree_nodes() if n.is_leaf]

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

    def check_tree(self, samples: int = 400, seed: int = 0) -> None:
        """The distributed 2d-tree, seen from outside, after the overlay settled:

        * no tree node is hosted twice, and no node deeper than ``max_depth`` exists;
        * every non-root node's parent is hosted and internal, every internal node's two
          children are hosted (so the leaves are exactly the tree's leaves);
        * every internal node's table names exactly the leaves below it (all updates landed);
        * the leaves' zones partition the triangle ``y >= x`` of every attribute tree (checked
          on sampled points, split lines and leaf corners);
        * every stored piece is in exactly one leaf, whose zone holds the piece's point."""
        hosted = self.hosted()
        for key, hosts in hosted.items():
            assert len(hosts) == 1, f"{key} hosted by peers {[i for i, _ in hosts]}"
        nodes = {key: hosts[0][1] for key, hosts in hosted.items()}
        for (schema, tid), node in nodes.items():
            assert schema == self.schema.name
            assert node.tid == tid
            assert tid.depth <= self.config.max_depth, f"{tid} deeper than max_depth"
            if tid.depth > 0:
                parent = nodes.get((schema, tid.parent()))
                assert parent is not None, f"{tid} has no parent node"
                assert not parent.is_leaf, f"{tid}'s parent is a leaf"
            if not node.is_leaf:
                assert node.table is not None
                for bit in (0, 1):
                    assert (schema, tid.child(bit)) in nodes, f"{tid} lacks child {bit}"
                for r in node.table.rows:
                    assert tid.is_ancestor_of(r) and r != tid, f"{tid}'s table names {r}"
                below = {
                    t
                    for (_, t), n in nodes.items()
                    if n.is_leaf and tid.is_ancestor_of(t) and t != tid
                }
                assert set(node.table.rows) == below, f"{tid}'s table is not its leaves"
        # Partition of the triangle, per attribute tree.
        rng = random.Random(seed)
        by_attr: dict[int, list[TreeNode]] = {}
        for (_, tid), node in nodes.items():
            if node.is_leaf:
                by_attr.setdefault(tid.attr, []).append(node)
        for attr, leaves in by_attr.items():
            space = self.spaces[attr]
            assert (self.schema.name, space.root) in nodes
            self._check_partition(space, [n.tid for n in leaves], rng, samples)
        # Every stored piece: one leaf, inside its zone.
        seen: Counter[tuple[bytes, int, int, int]] = Counter()
        for node in self.leaves():
            zone = self.spaces[node.tid.attr].zone(node.tid)
            assert node.index is not None
            for s in node.index:
                seen[(s.subscriber.id, s.sid, s.gen, s.piece)] += 1
                assert s.base == node.tid.attr
                assert zone.contains(s.x, s.y), f"piece at ({s.x}, {s.y}) outside {node.tid}"
        dup = [k for k, c in seen.items() if c > 1]
        assert not dup, f"pieces stored twice: {dup[:5]}"

    def _check_partition(
        self, space: AttributeSpace, leaves: list[TreeId], rng: random.Random, samples: int
    ) -> None:
        zones = [space.zone(t) for t in leaves]
        x_lo = np.array([z.x_lo for z in zones])
        x_hi = np.array([z.x_hi for z in zones])
        y_lo = np.array([z.y_lo for z in zones])
        y_hi = np.array([z.y_hi for z in zones])
        x_top = np.array([z.x_top for z in zones])
        y_top = np.array([z.y_top for z in zones])
        lo, hi = space.min, space.max
        pts: list[tuple[float, float]] = [(lo, lo), (lo, hi), (hi, hi), ((lo + hi) / 2, hi)]
        for _ in range(samples):
            a, b = rng.uniform(lo, hi), rng.uniform(lo, hi)
            pts.append((min(a, b), max(a, b)))
        for z in zones[:200]:  # corners of leaves: points on split lines
            for x, y in ((z.x_lo, z.y_lo), (z.x_lo, z.y_hi), (z.x_hi, z.y_hi), (z.x_hi, z.y_lo)):
                if y >= x:
                    pts.append((x, y))
        px = np.array([p[0] for p in pts])[:, None]
        py = np.array([p[1] for p in pts])[:, None]
        inside = (
            (x_lo <= px)
            & ((px < x_hi) | (x_top & (px <= x_hi)))
            & (y_lo <= py)
            & ((py < y_hi) | (y_top & (py <= y_hi)))
        )
        counts = inside.sum(axis=1)
        bad = np.flatnonzero(counts != 1)
        assert bad.size == 0, (
            f"attribute {space.name}: point {pts[bad[0]]} lies in {counts[bad[0]]} leaves"
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
