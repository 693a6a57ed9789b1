"""A simulated DHT overlay (Pastry, or Kademlia with a ``KademliaConfig``): node creation, the
two bootstraps, failure injection and the oracle that every check compares against.

``oracle`` bootstrap builds each node's leaf set and routing table directly from the whole
membership. Routing-table candidates for a slot are contiguous in sorted id order, so they are
found by bisection; among them the node keeps the one nearest by the latency model out of an
evenly spaced sample of at most ``pns_sample`` (proximity neighbour selection, approximated as a
real PNS-driven Pastry approximates it). For Kademlia it fills every k-bucket with up to ``k``
members of its id range drawn at random (a bucket keeps the first live nodes it met, which have
nothing to do with latency). ``join`` bootstrap runs the real join protocol, one node
after another with exponential gaps, so that the protocol itself is what gets exercised.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rangecast.dht.errors import LocalProtocolError
from rangecast.dht.ids import IdSpace
from rangecast.dht.kademlia import ROOT_CACHE, KademliaConfig
from rangecast.dht.node import Application, PastryConfig, State
from rangecast.dht.routing import Peer
from rangecast.dht.substrate import SUBSTRATES, DhtConfig, substrate_of
from rangecast.sim.engine import Core, Simulator
from rangecast.sim.latency import LatencyModel
from rangecast.sim.progress import Progress, steps
from rangecast.sim.streams import node_stream, stream


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


def dht_config(
    dht: str,
    *,
    lookup: str = "iterative",
    root_cache: int = ROOT_CACHE,
    failure_free: bool = False,
) -> DhtConfig:
    """The substrate's configuration by name. ``failure_free``: no keep-alives and no hop or
    lookup deadlines (experiments without churn, where they would only cost wall time)."""
    spec = SUBSTRATES.get(dht)
    if spec is None:
        raise LocalProtocolError(f"--dht must be one of {', '.join(SUBSTRATES)}, got {dht!r}")
    if root_cache < 0:
        raise LocalProtocolError(f"--root-cache must be >= 0, got {root_cache}")
    off: dict[str, Any] = {"keepalive_s": math.inf, "hop_acks": False} if failure_free else {}
    return spec.config(lookup=lookup, root_cache=root_cache, **off)


def dht_fields(dht: str, lookup: str, root_cache: int = ROOT_CACHE) -> dict[str, Any]:
    """How a run's JSON names its substrate (``lookup`` only means something on Kademlia, and
    the root cache only with iterative lookups)."""
    spec = SUBSTRATES.get(dht)
    has_lookup = spec is not None and spec.has_lookup
    iterative = has_lookup and lookup == "iterative"
    return {
        "dht": dht,
        "lookup": lookup if has_lookup else None,
        "root_cache": root_cache if iterative else None,
    }


class SimNetwork:
    """The DHT nodes of one simulated run (Pastry unless ``config`` is a ``KademliaConfig``).

    Every node is built through its substrate's descriptor with the run's one codec, the one the
    experiment gave the simulator (``sim.codec``): it must speak what the cores ``core_factory``
    stacks on the nodes send (``codec_for(*OverlayPeer.TABLES)`` for the pub/sub stack), which
    those cores check when they are built.

    ``progress``: the experiment's progress (sim.progress), which shows node creation and the
    bootstraps as bars on a terminal (seconds to minutes at 10^5-10^6 nodes); it only watches
    the loops, so a network builds the same with or without it."""

    def __init__(
        self,
        sim: Simulator,
        seed: int,
        *,
        config: DhtConfig | None = None,
        app_factory: Callable[[int], Application] | None = None,
        core_factory: Callable[[int, Any], Core] | None = None,
        progress: Progress | None = None,
    ) -> None:
        self.sim = sim
        self.seed = seed
        self.progress = progress
        #: The codec of the run's stack, shared by every node (and the engine).
        self.codec = sim.codec
        self.cfg = config or PastryConfig()
        self.substrate = substrate_of(self.cfg)
        self.space: IdSpace = self.cfg.space
        self.app_factory = app_factory
        #: Wraps each Pastry node into the core the engine drives (the overlay stack);
        #: by default the engine drives the Pastry node itself.
        self.core_factory = core_factory
        self.cores: list[Core] = []
        #: The DHT nodes (``DhtNode``; Any: the bootstraps call substrate-specific methods).
        self.nodes: list[Any] = []
        self.peers: list[Peer] = []
        self._ids_rng = stream(seed, "ids")
        self._place_rng = stream(seed, "placement")
        self._taken: set[int] = set()

    # ---------------------------------------------------------------------------- creation

    def create(self, count: int) -> range:
        """Add ``count`` idle nodes with fresh unique random ids."""
        if count < 1:
            raise LocalProtocolError("need at least one node")
        indices = self.sim.add_nodes(count, self._place_rng)
        for i in steps(self.progress, indices, "creating nodes", unit="nodes"):
            ident = self.space.random_id(self._ids_rng)
            while ident in self._taken:
                ident = self.space.random_id(self._ids_rng)
            self._taken.add(ident)
            addr = self.sim.addrs[i]
            app = self.app_factory(i) if self.app_factory else None
            node = self.substrate.node(
                ident,
                addr,
                node_stream(self.seed, ident),
                codec=self.codec,
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
        """Install exact leaf sets and PNS routing tables (Kademlia: full k-buckets) for
        ``indices`` (their whole membership), as if the overlay had converged."""
        if isinstance(self.cfg, KademliaConfig):
            self._oracle_buckets(indices, self.cfg.k, self.cfg.siblings)
            return
        peers = self.peers
        order = sorted(indices, key=lambda i: peers[i].id)
        ids = [peers[i].id for i in order]
        n = len(order)
        half = self.cfg.leaf_set_size // 2
        reach = min(half, n - 1)
        # ``at[k]``: the peer at sorted position k; ``at[-1]`` is None, so a table of positions
        # with -1 for an empty slot maps straight to a routing-table row.
        at: list[Peer | None] = [peers[i] for i in order]
        ring = at[:]
        at.append(None)
        tables = _PnsTables(
            self.space, ids, order, self.sim.latency, pns_sample, self.progress
        ).peer_rows(at)
        now = self.sim.now
        nodes = self.nodes
        poke = self.sim.poke
        # The ring with ``reach`` nodes of wrap-around on each end: every leaf side is a slice.
        ext = ring[n - reach :] + ring + ring[:reach] if reach else ring
        for k, i in enumerate(
            steps(self.progress, order, "installing routing state", unit="nodes")
        ):
            if reach:
                right = ext[k + reach + 1 : k + 2 * reach + 1]
                left = ext[k : k + reach][::-1]
            else:
                left, right = [], []
            nodes[i].install_state(left, right, tables[k], now)
            poke(i)

    def _oracle_buckets(self, indices: Sequence[int], k: int, near: int) -> None:
        bits = self.space.bits
        peers = self.peers
        order = sorted(indices, key=lambda i: peers[i].id)
        ids = [peers[i].id for i in order]
        rng = stream(self.seed, "kbuckets")
        now = self.sim.now
        for i in steps(self.progress, order, "filling k-buckets", unit="nodes"):
            own = peers[i].id
            contacts: list[Peer] = []
            spans: list[tuple[int, int]] = []
            j = 0
            while j < bits:
                shift = bits - j - 1
                lo_id = ((own >> shift) ^ 1) << shift
                lo = bisect.bisect_left(ids, lo_id)
                hi = bisect.bisect_left(ids, lo_id + (1 << shift), lo)
                span = range(lo, hi)
                picks = span if hi - lo <= k else sorted(rng.sample(span, k))
                contacts.extend(peers[order[p]] for p in picks)
                spans.append((lo, hi))
                # Deeper buckets exist only while another node shares our next bit too.
                mine = (own >> shift) << shift
                lo = bisect.bisect_left(ids, mine)
                hi = bisect.bisect_left(ids, mine + (1 << shift), lo)
                if hi - lo <= 1:
                    break
                j += 1
            # The ``near`` closest nodes are known whatever the sampling left out (a node's
            # self-lookup finds them): they lie in the deepest buckets' spans.
            pool: list[int] = []
            for lo, hi in reversed(spans):
                pool.extend(range(lo, hi))
                if len(pool) >= near:
                    break
            pool.sort(key=lambda p: ids[p] ^ own)
            contacts.extend(peers[order[p]] for p in pool[:near])
            self.nodes[i].install_state(contacts, now)
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
        if self.progress is not None:
            # Moved by the engine's ticks while it runs the joins.
            self.progress.phase(
                "joining", len(pending), lambda: len(indices) - len(pending), "nodes"
            )
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
        if self.progress is not None:
            self.progress.end()
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

    def oracle(self) -> RootOracle:
        members = [(self.peers[i].id, i) for i in self.live()]
        return RootOracle(self.space, members, xor=self.substrate.xor_metric)

    def oracle_leaf_sets(self) -> dict[int, tuple[list[int], list[int]]]:
        """For every live node: its (left, right) leaf ids as a perfect overlay would have."""
        assert isinstance(self.cfg, PastryConfig)
        return self.oracle().leaf_sets(self.cfg.leaf_set_size // 2)

    def leafset_mismatches(self) -> list[int]:
        """Live nodes whose leaf set (Kademlia: sibling list) differs from the oracle's."""
        if isinstance(self.cfg, KademliaConfig):
            live = self.live()
            ids = [self.peers[i].id for i in live]
            spec = self.substrate
            bad = []
            for i in live:
                have = [p.id for p in self.nodes[i].neighbours()]
                if not spec.neighbours_match(have, ids, self.peers[i].id, self.cfg):
                    bad.append(i)
            return bad
        expected = self.oracle_leaf_sets()
        bad = []
        for i, (left, right) in expected.items():
            node = self.nodes[i]
            if [p.id for p in node.leaves.left] != left or [
                p.id for p in node.leaves.right
            ] != right:
                bad.append(i)
        return bad


def _bit_length(x: np.ndarray) -> np.ndarray:
    """``int.bit_length`` of each element of a uint64 array."""
    out = np.zeros(len(x), dtype=np.int64)
    y = x.copy()
    for sh in (32, 16, 8, 4, 2, 1):
        big = (y >> np.uint64(sh)) != 0
        out[big] += sh
        y[big] >>= np.uint64(sh)
    out += (y != 0).astype(np.int64)
    return out


class _PnsTables:
    """Every node's Pastry routing table from the sorted membership, in numpy.

    Row ``r`` of the node at sorted position ``k`` has, for each digit ``d`` other than its
    own, the candidates sharing its first ``r`` digits followed by ``d``: a contiguous run
    ``[lo, hi)`` of sorted positions, found by ``searchsorted``. A run of one is the entry; of
    more, the entry is the one nearest by the latency model among an evenly spaced sample of at
    most ``pns_sample`` (proximity neighbour selection). Rows go on while another node shares
    the node's next digit. This is the per-node bisection loop it replaces, done for all nodes
    at once, with the same choices (ties to the first in the sample): ``_rows_py`` is that loop,
    kept for the rare node a 64-bit key cannot place and for latency models without
    ``nearest_terms``.

    Ids are longer than a machine word, but a prefix boundary ``X << shift`` with ``shift >=
    bits - 64`` compares with an id exactly as it compares with the id's top 64 bits, so the
    searches run on those; a node needing a deeper row (two ids sharing their first 64 bits)
    takes the Python path.
    """

    #: Slots whose samples are scored per numpy batch (bounds the temporaries, ~32 x 8 bytes
    #: per slot and array).
    _BATCH = 1 << 14

    def __init__(
        self,
        space: IdSpace,
        ids: list[int],
        order: list[int],
        model: LatencyModel,
        pns_sample: int,
        progress: Progress | None = None,
    ) -> None:
        self.space = space
        self.ids = ids
        self.order = order
        self.model = model
        self.pns_sample = pns_sample
        n = len(ids)
        b, radix = space.b, space.radix
        drop = max(0, space.bits - 64)
        word = space.bits - drop
        # Rows a 64-bit key places exactly, and the last digit position they can reach.
        exact_rows = min(space.digits, word // b)
        terms = model.nearest_terms()
        #: Per row: the nodes (sorted positions) that have it, and their entries' positions.
        self.rows_np: list[tuple[np.ndarray, np.ndarray]] = []
        # nrows[k]: 1 + the longest prefix (in digits) node k shares with a sorted neighbour.
        key = np.fromiter((i >> drop for i in ids), dtype=np.uint64, count=n)
        shared = np.zeros(n, dtype=np.int64)
        if n > 1:
            pair = np.minimum((word - _bit_length(key[1:] ^ key[:-1])) // b, space.digits - 1)
            shared[1:] = pair
            shared[:-1] = np.maximum(shared[:-1], pair)
        self.nrows = np.minimum(shared + 1, space.digits)
        # Nodes the vectorised path cannot serve: rows beyond the 64-bit key, or no table form.
        slow = self.nrows > exact_rows if terms is not None else np.ones(n, dtype=bool)
        self.slow = slow
        if terms is None:
            return
        hosts = np.asarray(terms[0], dtype=np.int64)
        table = np.asarray(terms[1], dtype=np.float64)
        addend = None if terms[2] is None else np.asarray(terms[2], dtype=np.float64)
        # Host and addend by sorted position: a slot's samples are then read from nearby
        # memory rather than gathered through ``order`` from all over the node arrays.
        order_np = np.asarray(order, dtype=np.int64)
        own_host = hosts[order_np]
        host_at = own_host
        addend_at = None if addend is None else addend[order_np]
        g_lo = np.zeros(n, dtype=np.int64)
        g_hi = np.full(n, n, dtype=np.int64)
        depth = int(min(self.nrows.max(initial=1), exact_rows))
        # Few rows (log16 N), each a pass over every node: the slow part of the bootstrap.
        for r in steps(progress, range(depth), "routing tables", unit="rows"):
            # Nodes that have row r (the others have stopped); their group [g_lo, g_hi) is the
            # run sharing their first r digits.
            act = np.nonzero(self.nrows > r)[0]
            s = word - b * (r + 1)
            kk = key[act]
            own = ((kk >> np.uint64(s)) & np.uint64(radix - 1)).astype(np.int64)
            base = (kk >> np.uint64(s + b)) << np.uint64(b)
            bounds = np.empty((len(act), radix + 1), dtype=np.int64)
            bounds[:, 0] = g_lo[act]
            bounds[:, radix] = g_hi[act]
            for d in range(1, radix):
                bounds[:, d] = np.searchsorted(key, (base | np.uint64(d)) << np.uint64(s))
            lo = bounds[:, :radix]
            cnt = bounds[:, 1:] - lo
            cnt[np.arange(len(act)), own] = 0
            chosen = np.full((len(act), radix), -1, dtype=np.int64)
            one = cnt == 1
            chosen[one] = lo[one]
            # Slots in three classes by sample count (up to 31, 24, 18 samples), so that little
            # of each batch's rectangle is padding.
            cuts = (2, 2 * pns_sample, 8 * pns_sample, n + 1)
            for low, high in itertools.pairwise(cuts):
                many_r, many_c = np.nonzero((cnt >= low) & (cnt < high))
                for j in range(0, len(many_r), self._BATCH):
                    rr, cc = many_r[j : j + self._BATCH], many_c[j : j + self._BATCH]
                    chosen[rr, cc] = self._pns(
                        own_host[act[rr]], lo[rr, cc], cnt[rr, cc], table, host_at, addend_at
                    )
            self.rows_np.append((act, chosen))
            idx = np.arange(len(act))
            g_lo[act] = bounds[idx, own]
            g_hi[act] = bounds[idx, own + 1]

    def _pns(
        self,
        own_host: np.ndarray,
        lo: np.ndarray,
        cnt: np.ndarray,
        table: np.ndarray,
        host_at: np.ndarray,
        addend_at: np.ndarray | None,
    ) -> np.ndarray:
        """Sorted position of the nearest sampled candidate of each slot."""
        step = np.maximum(1, cnt // self.pns_sample)
        width = int(((cnt + step - 1) // step).max())
        j = np.arange(width, dtype=np.int64)
        pos = lo[:, None] + step[:, None] * j[None, :]
        invalid = pos >= (lo + cnt)[:, None]
        pos[invalid] = lo.repeat(invalid.sum(axis=1))
        cost = table[own_host[:, None], host_at[pos]]
        if addend_at is not None:
            cost += addend_at[pos]
        cost[invalid] = np.inf
        best = np.argmin(cost, axis=1)
        return pos[np.arange(len(pos)), best]

    def peer_rows(self, at: list[Peer | None]) -> list[list[list[Peer | None]]]:
        """Every node's routing table as rows of peers, ``at`` mapping a sorted position to
        its peer (``at[-1]`` None for an empty slot)."""
        n = len(self.ids)
        tables: list[list[list[Peer | None]]] = [[] for _ in range(n)]
        at_np = np.empty(len(at), dtype=object)
        at_np[:] = at
        for act, chosen in self.rows_np:
            fast = ~self.slow[act]
            for k, row in zip(act[fast].tolist(), at_np[chosen[fast]].tolist(), strict=True):
                tables[k].append(row)
        get = at.__getitem__
        for k in np.nonzero(self.slow)[0].tolist():
            tables[k] = [list(map(get, row)) for row in self._rows_py(k)]
        return tables

    def _rows_py(self, k: int) -> list[list[int]]:
        space, ids, order = self.space, self.ids, self.order
        radix, b, bits = space.radix, space.b, space.bits
        own = ids[k]
        i = order[k]
        nearest = self.model.nearest
        rows: list[list[int]] = []
        row = 0
        while row < space.digits:
            shift = bits - b * (row + 1)
            base = (own >> (shift + b)) << b
            own_digit = (own >> shift) & (radix - 1)
            entries = [-1] * radix
            for d in range(radix):
                if d == own_digit:
                    continue
                lo = bisect.bisect_left(ids, (base | d) << shift)
                hi = bisect.bisect_left(ids, (base | d) + 1 << shift, lo)
                if lo == hi:
                    continue
                if hi - lo == 1:
                    entries[d] = lo
                    continue
                step = max(1, (hi - lo) // self.pns_sample)
                sample = range(lo, hi, step)
                best = nearest(i, [order[p] for p in sample])
                entries[d] = next(p for p in sample if order[p] == best)
            rows.append(entries)
            # Deeper rows exist only while other nodes share our next digit too.
            lo = bisect.bisect_left(ids, (base | own_digit) << shift)
            hi = bisect.bisect_left(ids, (base | own_digit) + 1 << shift, lo)
            if hi - lo <= 1:
                break
            row += 1
        return rows


class RootOracle:
    """Brute-force knowledge of the live membership."""

    def __init__(self, space: IdSpace, members: list[tuple[int, int]], xor: bool = False) -> None:
        if not members:
            raise LocalProtocolError("the oracle needs at least one live node")
        self.space = space
        self.xor = xor
        members = sorted(members)
        self.ids = [m[0] for m in members]
        self.index = [m[1] for m in members]

    def root(self, key: int) -> int:
        """Index of the live node numerically closest to ``key`` (ties: smaller id); with
        ``xor``, the one whose id XOR ``key`` is smallest (Kademlia)."""
        if self.xor:
            return self._xor_root(key)
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

    def _xor_root(self, key: int) -> int:
        # Walk down the binary trie of the sorted ids: at each bit keep the key's side if any
        # member lies there.
        ids = self.ids
        lo, hi = 0, len(ids)
        prefix = 0
        for bit in range(self.space.bits - 1, -1, -1):
            want = prefix | (key & (1 << bit))
            mid = bisect.bisect_left(ids, prefix | (1 << bit), lo, hi)
            if want & (1 << bit):
                if mid < hi:
                    lo, prefix = mid, want
                else:
                    hi = mid
            elif lo < mid:
                hi = mid
            else:
                lo, prefix = mid, prefix | (1 << bit)
        return self.index[lo]

    def leaf_sets(self, half: int) -> dict[int, tuple[list[int], list[int]]]:
        ids, n = self.ids, len(self.ids)
        reach = min(half, n - 1)
        out = {}
        for k in range(n):
            right = [ids[(k + j) % n] for j in range(1, reach + 1)]
            left = [ids[(k - j) % n] for j in range(1, reach + 1)]
            out[self.index[k]] = (left, right)
        return out
