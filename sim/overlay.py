"""A simulated Pastry overlay: node creation, the two bootstraps, failure injection and the
oracle that every check compares against.

``oracle`` bootstrap builds each node's leaf set and routing table directly from the whole
membership. Routing-table candidates for a slot are contiguous in sorted id order, so they are
found by bisection; among them the node keeps the one nearest by the latency model out of an
evenly spaced sample of at most ``pns_sample`` (proximity neighbour selection, approximated as a
real PNS-driven Pastry approximates it). ``join`` bootstrap runs the real join protocol, one node
after another with exponential gaps, so that the protocol itself is what gets exercised.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable, Sequence

from dht.errors import LocalProtocolError
from dht.ids import IdSpace
from dht.node import Application, PastryConfig, PastryNode, State
from dht.routing import Peer
from sim.engine import Core, Simulator
from sim.latency import LatencyModel
from sim.streams import stream


class _RttTo:
    """Proximity function of one node: RTT in ms to a peer, from the latency model."""

    __slots__ = ("index", "index_of", "rtt")

    def __init__(self, index: int, model: LatencyModel, index_of: dict[bytes, int]) -> None:
        self.index = index
        self.rtt = model.rtt_ms
        self.index_of = index_of

    def __call__(self, peer: Peer) -> float:
        j = self.index_of.get(peer.addr)
        return self.rtt(self.index, j) if j is not None else 1e9


class PastryOverlay:
    """The Pastry nodes of one simulated run."""

    def __init__(
        self,
        sim: Simulator,
        seed: int,
        *,
        config: PastryConfig | None = None,
        app_factory: Callable[[int], Application] | None = None,
        core_factory: Callable[[int, PastryNode], Core] | None = None,
    ) -> None:
        self.sim = sim
        self.seed = seed
        self.cfg = config or PastryConfig()
        self.space: IdSpace = self.cfg.space
        self.app_factory = app_factory
        #: Wraps each Pastry node into the core the engine drives (the overlay stack);
        #: by default the engine drives the Pastry node itself.
        self.core_factory = core_factory
        self.cores: list[Core] = []
        self.nodes: list[PastryNode] = []
        self.peers: list[Peer] = []
        self._ids_rng = stream(seed, "ids")
        self._place_rng = stream(seed, "placement")
        self._proto_rng = stream(seed, "protocol")
        self._taken: set[int] = set()

    # ---------------------------------------------------------------------------- creation

    def create(self, count: int) -> range:
        """Add ``count`` idle nodes with fresh unique random ids."""
        if count < 1:
            raise LocalProtocolError("need at least one node")
        indices = self.sim.add_nodes(count, self._place_rng)
        for i in indices:
            ident = self.space.random_id(self._ids_rng)
            while ident in self._taken:
                ident = self.space.random_id(self._ids_rng)
            self._taken.add(ident)
            addr = self.sim.addrs[i]
            app = self.app_factory(i) if self.app_factory else None
            node = PastryNode(
                ident,
                addr,
                self._proto_rng,
                config=self.cfg,
                proximity=_RttTo(i, self.sim.latency, self.sim.index_of),
                app=app,
            )
            core: Core = self.core_factory(i, node) if self.core_factory else node
            self.nodes.append(node)
            self.peers.append(node.me)
            self.cores.append(core)
            self.sim.attach(i, core)
        return indices

    def live(self) -> list[int]:
        alive = self.sim.alive
        return [i for i, n in enumerate(self.nodes) if alive[i] and n.state is State.READY]

    # ------------------------------------------------------------------------ oracle state

    def oracle_bootstrap(self, indices: Sequence[int], pns_sample: int = 16) -> None:
        """Install exact leaf sets and PNS routing tables for ``indices`` (their whole
        membership), as if the overlay had converged."""
        space = self.space
        half = self.cfg.leaf_set_size // 2
        peers = self.peers
        order = sorted(indices, key=lambda i: peers[i].id)
        ids = [peers[i].id for i in order]
        n = len(order)
        nearest = self.sim.latency.nearest
        now = self.sim.now
        radix, b, bits = space.radix, space.b, space.bits
        for k, i in enumerate(order):
            own = ids[k]
            reach = min(half, n - 1)
            right = [peers[order[(k + j) % n]] for j in range(1, reach + 1)]
            left = [peers[order[(k - j) % n]] for j in range(1, reach + 1)]
            rows: list[list[Peer | None]] = []
            row = 0
            while row < space.digits:
                shift = bits - b * (row + 1)
                base = (own >> (shift + b)) << b
                own_digit = (own >> shift) & (radix - 1)
                entries: list[Peer | None] = [None] * radix
                for d in range(radix):
                    if d == own_digit:
                        continue
                    lo = bisect.bisect_left(ids, (base | d) << shift)
                    hi = bisect.bisect_left(ids, (base | d) + 1 << shift, lo)
                    if lo == hi:
                        continue
                    if hi - lo == 1:
                        entries[d] = peers[order[lo]]
                        continue
                    step = max(1, (hi - lo) // pns_sample)
                    entries[d] = peers[nearest(i, order[lo:hi:step])]
                rows.append(entries)
                # Deeper rows exist only while other nodes share our next digit too.
                lo = bisect.bisect_left(ids, (base | own_digit) << shift)
                hi = bisect.bisect_left(ids, (base | own_digit) + 1 << shift, lo)
                if hi - lo <= 1:
                    break
                row += 1
            self.nodes[i].install_state(left, right, rows, now)
            self.sim.poke(i)

    # -------------------------------------------------------------------------------- joins

    def join_all(
        self,
        indices: Sequence[int],
        *,
        mean_gap_s: float = 0.25,
        contact_sample: int = 8,
        timeout_s: float = 600.0,
    ) -> dict[str, float]:
        """Run the real join protocol for ``indices``: the first starts the overlay, each later
        one joins through the nearest of a few random ready nodes (Pastry assumes a nearby
        contact). Returns join statistics once every join has completed or given up."""
        sim = self.sim
        rng = stream(self.seed, "joins")
        started: dict[int, float] = {}
        pending = set(indices)

        def begin(i: int) -> None:
            ready = [j for j in self.live() if j != i]
            started[i] = sim.now
            if not ready:
                self.nodes[i].start_alone(sim.now)
            else:
                picks = [ready[rng.randrange(len(ready))] for _ in range(contact_sample)]
                contact = min(picks, key=lambda j: (sim.latency.one_way_ms(i, j), j))
                self.nodes[i].join(sim.addrs[contact], sim.now)
            sim.poke(i)

        t = sim.now
        first = True
        for i in indices:
            sim.call_at(t, begin, i)
            t += 0.0 if first else rng.expovariate(1.0 / mean_gap_s)
            first = False
        last_start = t
        durations: list[float] = []
        failed = 0
        step = max(1.0, mean_gap_s * 20)
        while pending and sim.now < last_start + timeout_s:
            sim.run(until=sim.now + step)
            for i in list(pending):
                st = self.nodes[i].state
                if st is State.READY:
                    pending.discard(i)
                    durations.append(sim.now - started[i])
                elif st is State.FAILED:
                    pending.discard(i)
                    failed += 1
        return {
            "joins": len(indices),
            "completed": len(indices) - failed - len(pending),
            "failed": failed,
            "unfinished": len(pending),
        }

    # ------------------------------------------------------------------------------ failures

    def crash_fraction(self, fraction: float, rng: random.Random) -> list[int]:
        """Crash ``fraction`` of the live nodes (chosen with ``rng``) at the current time."""
        if not 0.0 <= fraction < 1.0:
            raise LocalProtocolError(f"failure fraction must be in [0, 1), got {fraction}")
        live = self.live()
        victims = sorted(rng.sample(live, round(fraction * len(live))))
        for i in victims:
            self.sim.crash(i)
        return victims

    # ------------------------------------------------------------------------------- oracle

    def oracle(self) -> Oracle:
        return Oracle(self.space, [(self.peers[i].id, i) for i in self.live()])

    def oracle_leaf_sets(self) -> dict[int, tuple[list[int], list[int]]]:
        """For every live node: its (left, right) leaf ids as a perfect overlay would have."""
        return self.oracle().leaf_sets(self.cfg.leaf_set_size // 2)

    def leafset_mismatches(self) -> list[int]:
        """Live nodes whose leaf set differs from the oracle's."""
        expected = self.oracle_leaf_sets()
        bad = []
        for i, (left, right) in expected.items():
            node = self.nodes[i]
            if [p.id for p in node.leaves.left] != left or [
                p.id for p in node.leaves.right
            ] != right:
                bad.append(i)
        return bad


class Oracle:
    """Brute-force knowledge of the live membership."""

    def __init__(self, space: IdSpace, members: list[tuple[int, int]]) -> None:
        if not members:
            raise LocalProtocolError("the oracle needs at least one live node")
        self.space = space
        members = sorted(members)
        self.ids = [m[0] for m in members]
        self.index = [m[1] for m in members]

    def root(self, key: int) -> int:
        """Index of the live node numerically closest to ``key`` (ties: smaller id)."""
        ids, n, space = self.ids, len(self.ids), self.space
        k = bisect.bisect_left(ids, key)
        best = None
        for pos in (k - 1, k % n):
            ident = ids[pos % n]
            cand = (space.distance(ident, key), ident, pos % n)
            if best is None or cand < best:
                best = cand
        assert best is not None
        return self.index[best[2]]

    def leaf_sets(self, half: int) -> dict[int, tuple[list[int], list[int]]]:
        ids, n = self.ids, len(self.ids)
        reach = min(half, n - 1)
        out = {}
        for k in range(n):
            right = [ids[(k + j) % n] for j in range(1, reach + 1)]
            left = [ids[(k - j) % n] for j in range(1, reach + 1)]
            out[self.index[k]] = (left, right)
        return out
