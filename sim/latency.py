"""Latency models for the discrete-event simulator.

A latency model maps overlay *nodes* (dense indices 0, 1, 2, ... in the order they were placed)
onto underlying *hosts* and answers "how long does a message from node ``a`` take to reach node
``b``?". Two models exist:

``MatrixLatency`` ("matrix:<filename>")
    Replays a measured all-pairs RTT matrix, e.g. the 490-host PlanetLab slice
    ``shared/data/planetlab490_rtt_ms_slice1.txt`` (mean off-diagonal RTT 146.84 ms), which is
    also shipped in the package (``sim/data/``) and named by the spec ``"planetlab"``.
    One-way delay is half the RTT between the two nodes' hosts. Nodes are assigned to hosts
    uniformly at random with the rng given to ``place()``, so an overlay may have more nodes than
    the matrix has hosts. Two *distinct* nodes that land on the same host get ``same_host_ms``
    (default 0.25 ms) one way rather than 0: the matrix diagonal says nothing about co-located
    peers, and such peers are separate processes whose messages still cross the loopback/LAN
    network stack (syscalls, copies, scheduling), so a zero delay would be unrealistically free
    and would let co-located peers win every race.

``SyntheticLatency`` ("synthetic", the default)
    An Internet-like model that needs no data file and is fully determined by its seed:

    * ``sites`` sites (default 1024) are laid out on a 2-D plane in a handful of weighted clusters
      ("continents": North America, Europe, East Asia, South America, Oceania) with Gaussian spread.
      Clustering is what makes the delay distribution realistic: it is bimodal-ish (cheap
      intra-continent pairs, expensive inter-continent pairs) rather than the smooth bell a uniform
      square gives, and the far-apart small clusters produce the long tail. The centres are placed
      so that their distances roughly match real inter-continental one-way delays in ms (e.g. North
      America-Europe ~45 ms, Europe-East Asia ~110 ms), and the weights mimic the
      North-America/Europe-heavy population of testbeds such as PlanetLab. Sites are shared out
      between clusters in proportion to the weights (largest remainder), so every seed has the
      same continental mix and seeds differ only in where sites fall within their continent.
    * Propagation one-way delay between two sites is ``ms_per_unit * euclidean_distance``: a 2-D
      embedding of Internet delay is crude but captures most of the structure (it is what
      network-coordinate systems such as Vivaldi rely on), while staying cheap and deterministic.
    * Every node has a last-mile access delay drawn (with the ``place()`` rng) from a lognormal
      distribution, median ``access_median_ms`` (2 ms) and log-space sigma ``access_sigma`` (1.0):
      most hosts sit on well-connected networks, a few sit behind slow links. It is added on both
      ends, so ``one_way(a, b) = core[site(a)][site(b)] + (access[a] + access[b])``; two distinct
      nodes on the same site pay only their access delays.
    * Calibration: at construction ``ms_per_unit`` is *computed* from the actual site layout so
      that the expected RTT between nodes on two distinct sites equals ``target_mean_rtt_ms``,
      which defaults to the PlanetLab matrix's mean (146.84 ms) so that results under the two
      models are comparable. Solving ``2 * (ms_per_unit * mean_distance + 2 * E[access]) = target``
      is exact and deterministic, whereas hand-tuning a constant would silently drift whenever the
      layout or the seed changes. With the default parameters the node-pair RTT has mean ~147 ms,
      median ~136 ms and p95 ~310 ms (p95 a bit over 2x the mean, as in the PlanetLab data).

The site layout uses a private ``random.Random(seed)``; node placement uses only the rng passed to
``place()``. Nothing here touches the global ``random`` functions or the clock, so equal seeds and
equal rng states give identical placements and latencies.

``one_way_ms`` is on the simulator's hottest path (once per message), so each model keeps plain
per-node lists and a host-by-host table of ``array('d')`` rows, and answers with a couple of
indexings and additions. ``numpy`` is deliberately not used: it is not a dependency, and scalar
numpy indexing would be slower than list indexing anyway.
"""

from __future__ import annotations

import math
import os
import random
from abc import ABC, abstractmethod
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from itertools import repeat
from pathlib import Path
from typing import Any, Self

try:
    import cython
except ImportError:  # interpreted, without Cython installed
    from rangecast import _nocython as cython  # type: ignore[no-redef]

from rangecast.dht.errors import RangecastError

__all__ = [
    "DEFAULT_CLUSTERS",
    "DEFAULT_SAME_HOST_MS",
    "NAMED_MATRICES",
    "PLANETLAB_MEAN_RTT_MS",
    "Cluster",
    "LatencyModel",
    "LatencyModelError",
    "MatrixLatency",
    "SyntheticLatency",
    "latency_model",
]

# Mean off-diagonal RTT of shared/data/planetlab490_rtt_ms_slice1.txt. The synthetic model is
# calibrated to it so that experiments under the two models are comparable.
PLANETLAB_MEAN_RTT_MS = 146.84

# One-way delay between two distinct nodes sharing a host (see the module docstring for why > 0).
DEFAULT_SAME_HOST_MS = 0.25


class LatencyModelError(RangecastError, ValueError):
    """A latency model spec, matrix file or parameter is invalid."""


class Delays:
    """The one-way delays of a model's placed nodes: ``rows[site[a]][site[b]]``, plus
    ``access[a] + access[b]`` where the model has per-node access delays, and 0.0 from a node to
    itself. The table models' ``one_way_ms`` is this one, and the engine asks it directly, once
    per simulated message (``LatencyModel.delays``). Compiled (docs/simulator.md, "Two speeds")
    it reads the arrays in C; ``site`` and ``access`` may grow meanwhile (nodes placed later), as
    it holds the arrays, not their buffers.

    A model without that form gives ``Delays(model=...)``, which asks the model."""

    __slots__ = ("access", "model", "rows", "site")

    def __init__(
        self,
        site: array[int] | None = None,
        rows: list[array[float]] | None = None,
        access: array[float] | None = None,
        model: LatencyModel | None = None,
    ) -> None:
        if (site is None or rows is None) and model is None:
            raise ValueError("Delays needs a site array and its rows, or a model")
        if site is not None and site.typecode != "l":
            raise ValueError("Delays: site must be an array('l')")
        if access is not None and access.typecode != "d":
            raise ValueError("Delays: access must be an array('d')")
        self.site = site
        self.rows = rows
        self.access = access
        self.model = model

    def one_way_ms(self, a: int, b: int) -> float:
        if a == b:
            return 0.0
        site = self.site
        rows = self.rows
        if site is None or rows is None:
            assert self.model is not None
            return self.model.one_way_ms(a, b)
        if cython.compiled:
            n = len(site)
            if 0 <= a < n and 0 <= b < n:
                row = rows[site.data.as_longs[a]]  # type: ignore[attr-defined]
                d = row.data.as_doubles[site.data.as_longs[b]]  # type: ignore[attr-defined]
                access = self.access
                if access is None:
                    return d  # type: ignore[no-any-return]
                return d + (access.data.as_doubles[a] + access.data.as_doubles[b])  # type: ignore[attr-defined,no-any-return]
        d = rows[site[a]][site[b]]
        if self.access is None:
            return d
        # The access delays are summed first because IEEE addition is commutative but not
        # associative: (a + b) is the same value as (b + a), which keeps one_way_ms(a, b) ==
        # one_way_ms(b, a) bit for bit (the C branch above sums in the same order).
        return d + (self.access[a] + self.access[b])


class LatencyModel(ABC):
    """Maps overlay node indices to hosts and gives message delays between nodes.

    Node indices are dense and assigned in placement order: the first ``place(n, rng)`` creates
    nodes ``0 .. n-1``, the next continues from ``len(self)``.
    """

    __slots__ = ("name",)

    name: str  # "synthetic" or "matrix:<filename>"

    @abstractmethod
    def place(self, count: int, rng: random.Random) -> None:
        """Append ``count`` nodes, assigning each to a host using only ``rng``."""

    @abstractmethod
    def __len__(self) -> int:
        """Number of placed nodes."""

    @abstractmethod
    def one_way_ms(self, a: int, b: int) -> float:
        """One-way delay in ms between nodes ``a`` and ``b``: symmetric, 0.0 when ``a == b``."""

    def rtt_ms(self, a: int, b: int) -> float:
        """Round-trip time in ms between nodes ``a`` and ``b`` (twice the one-way delay)."""
        return 2.0 * self.one_way_ms(a, b)

    @abstractmethod
    def mean_rtt_ms(self) -> float:
        """Mean RTT over distinct host pairs of the underlying host model (not placed nodes).

        It characterises the model itself, so it does not depend on how many nodes were placed
        or where they landed.
        """

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """JSON-able summary: name, hosts, mean_rtt_ms and the model's parameters."""

    def nearest(self, a: int, candidates: Sequence[int]) -> int:
        """The candidate with the smallest one-way delay from ``a`` (first one on ties).
        Models override it with a tighter loop: the oracle bootstrap's proximity neighbour
        selection asks it millions of times."""
        one_way = self.one_way_ms
        best, best_d = candidates[0], one_way(a, candidates[0])
        for c in candidates[1:]:
            d = one_way(a, c)
            if d < best_d:
                best, best_d = c, d
        return best

    def delays(self) -> Delays:
        """The engine's view of ``one_way_ms`` (``Delays``): a model whose delays are a table
        between sites (plus per-node access delays) gives the table itself."""
        return Delays(model=self)

    def nearest_terms(
        self,
    ) -> tuple[Sequence[int], Sequence[Sequence[float]], Sequence[float] | None] | None:
        """What ``nearest`` compares, for callers that vectorise it (the oracle bootstrap at
        10^6 nodes): (host of each node, host-by-host table, per-node addend or None) such
        that ``nearest`` picks the candidate ``c`` minimising ``table[host[a]][host[c]] +
        addend[c]`` (first on ties). None: no such form; call ``nearest``."""
        return None

    # Optional extras for analysis and tests; not abstract, so minimal models (e.g. test stubs)
    # need only implement the interface above.
    @property
    def hosts(self) -> int:
        """Number of hosts (matrix rows or synthetic sites) nodes are placed on."""
        raise NotImplementedError

    def host_of(self, node: int) -> int:
        """Host index that ``node`` was placed on."""
        raise NotImplementedError


def _check_placement_count(count: int) -> None:
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise LatencyModelError(f"place() needs a non-negative int count, got {count!r}")


# --------------------------------------------------------------------------------------------
# Measured RTT matrix
# --------------------------------------------------------------------------------------------

# Formats the location of row i (and column j, if given), both 0-based, for error messages.
_Where = Callable[[int, int | None], str]


def _memory_where(name: str) -> _Where:
    def where(i: int, j: int | None) -> str:
        if j is None:
            return f"{name}: row {i} (0-based)"
        return f"{name}: row {i}, column {j} (0-based host indices)"

    return where


def _file_where(path: Path, line_numbers: Sequence[int]) -> _Where:
    def where(i: int, j: int | None) -> str:
        if j is None:
            return f"{path}, line {line_numbers[i]}"
        # Columns are reported 1-based like the line, with the host pair spelled out so the
        # reader does not have to convert.
        return f"{path}, line {line_numbers[i]}, column {j + 1} (hosts {i} and {j})"

    return where


def _check_matrix(rows: Sequence[Sequence[float]], where: _Where, origin: str) -> None:
    """Validate a square, finite, non-negative RTT matrix with positive off-diagonal entries."""
    n = len(rows)
    if n == 0:
        raise LatencyModelError(f"{origin}: RTT matrix is empty (no rows)")
    for i, row in enumerate(rows):
        if len(row) != n:
            raise LatencyModelError(
                f"{where(i, None)}: expected {n} values (the matrix has {n} "
                f"rows and must be square), found {len(row)}"
            )
    if n < 2:
        raise LatencyModelError(f"{origin}: an RTT matrix needs at least 2 hosts, found {n}")
    for i, row in enumerate(rows):
        # Fast path: whole-row checks in C; only hunt for the culprit column when one fails
        # (a TypeError means a non-number, which the slow path names).
        try:
            row_ok = all(map(math.isfinite, row)) and min(row) >= 0.0
        except TypeError:
            row_ok = False
        if row_ok:
            # Off-diagonal minimum via C-level slices; the diagonal may legitimately be 0.
            if min(row[:i], default=1.0) > 0.0 and min(row[i + 1 :], default=1.0) > 0.0:
                continue
            bad = next(j for j, v in enumerate(row) if j != i and v <= 0.0)
            raise LatencyModelError(
                f"{where(i, bad)}: off-diagonal RTT must be > 0 ms, got {row[bad]!r} "
                "(distinct hosts cannot be zero distance apart)"
            )
        for j, v in enumerate(row):
            if not isinstance(v, float | int):
                raise LatencyModelError(f"{where(i, j)}: expected a number, got {v!r}")
            if not math.isfinite(v):
                raise LatencyModelError(f"{where(i, j)}: RTT must be finite, got {v!r}")
            if v < 0.0:
                raise LatencyModelError(f"{where(i, j)}: RTT must be >= 0 ms, got {v!r}")


def _parse_matrix_file(path: Path) -> tuple[list[list[float]], list[int]]:
    """Parse whitespace/tab separated rows of floats; return rows and their 1-based line numbers."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise LatencyModelError(f"{path}: RTT matrix file not found") from None
    except UnicodeDecodeError as exc:
        raise LatencyModelError(f"{path}: not a UTF-8 text file ({exc.reason})") from None
    except OSError as exc:
        raise LatencyModelError(f"{path}: cannot read RTT matrix file: {exc.strerror}") from None

    rows: list[list[float]] = []
    line_numbers: list[int] = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields:
            continue  # tolerate blank lines (e.g. a trailing newline pair)
        try:
            row = list(map(float, fields))
        except ValueError:
            # Slow path only on error: find the offending column for the message.
            for col, token in enumerate(fields, start=1):
                try:
                    float(token)
                except ValueError:
                    raise LatencyModelError(
                        f"{path}, line {line_no}, column {col}: expected a number, got {token!r}"
                    ) from None
            raise  # pragma: no cover - map(float) failed, so some token must fail too
        rows.append(row)
        line_numbers.append(line_no)
    if not rows:
        raise LatencyModelError(f"{path}: file is empty; expected a square RTT matrix in ms")
    return rows, line_numbers


class MatrixLatency(LatencyModel):
    """Latency from a measured host-to-host RTT matrix (ms); one-way = RTT / 2.

    Nodes are assigned to hosts uniformly at random (more nodes than hosts is fine); two distinct
    nodes on the same host are ``same_host_ms`` apart one way (co-located peers still cross the
    loopback/LAN stack). The diagonal of the input is validated but otherwise ignored. An
    asymmetric matrix is symmetrised with the mean of (i, j) and (j, i), since the simulator's
    links are symmetric; ``describe()`` reports whether and how much that changed.
    """

    __slots__ = (
        "_asymmetric_pairs",
        "_delays",
        "_host",
        "_max_asymmetry_ms",
        "_mean_rtt_ms",
        "_n_hosts",
        "_one_way",
        "_same_host_ms",
    )

    def __init__(
        self,
        rtt_ms_rows: list[list[float]],
        name: str,
        same_host_ms: float = DEFAULT_SAME_HOST_MS,
    ) -> None:
        """Build from in-memory RTT rows (copied, not mutated).

        ``name`` is used as ``matrix:<name>``; a name already starting with ``matrix:`` is kept.
        """
        self._init(rtt_ms_rows, name, same_host_ms, _memory_where(name), name)

    def _init(
        self,
        rows: Sequence[Sequence[float]],
        name: str,
        same_host_ms: float,
        where: _Where,
        origin: str,
    ) -> None:
        # Shared by __init__ and load() so file errors can name line/column without validating
        # the matrix twice.
        if not (isinstance(same_host_ms, float | int) and math.isfinite(same_host_ms)) or (
            same_host_ms < 0.0
        ):
            raise LatencyModelError(f"same_host_ms must be finite and >= 0, got {same_host_ms!r}")
        _check_matrix(rows, where, origin)
        self.name = name if name.startswith("matrix:") else f"matrix:{name}"
        n = len(rows)
        rtt = [array("d", row) for row in rows]

        asymmetric = 0
        max_asym = 0.0
        for i in range(n):
            row_i = rtt[i]
            for j in range(i + 1, n):
                a, b = row_i[j], rtt[j][i]
                if a != b:
                    asymmetric += 1
                    max_asym = max(max_asym, abs(a - b))
                    row_i[j] = rtt[j][i] = (a + b) / 2.0

        # Mean over ordered distinct host pairs; fsum keeps it independent of summation order.
        off_diag_total = math.fsum(math.fsum(row) - row[i] for i, row in enumerate(rtt))
        self._mean_rtt_ms = off_diag_total / (n * (n - 1))

        # One-way table with the diagonal set to the co-located delay: one_way_ms() then needs no
        # same-host branch, only the a == b check.
        one_way: list[array[float]] = []
        for i, row in enumerate(rtt):
            half = array("d", map((0.5).__mul__, row))
            half[i] = float(same_host_ms)
            one_way.append(half)
        self._one_way = one_way
        self._n_hosts = n
        self._same_host_ms = float(same_host_ms)
        self._asymmetric_pairs = asymmetric
        self._max_asymmetry_ms = max_asym
        # Compact arrays, not lists of int objects: ``one_way_ms`` reads two entries per
        # simulated message at random nodes, and an array keeps them in a few cache lines.
        self._host: array[int] = array("l")
        self._delays = Delays(self._host, self._one_way)

    @classmethod
    def load(cls, path: str | os.PathLike[str], same_host_ms: float = DEFAULT_SAME_HOST_MS) -> Self:
        """Load a square whitespace/tab separated RTT matrix (ms), one host per line."""
        p = Path(path)
        rows, line_numbers = _parse_matrix_file(p)
        model = cls.__new__(cls)
        model._init(rows, f"matrix:{p.name}", same_host_ms, _file_where(p, line_numbers), str(p))
        return model

    def place(self, count: int, rng: random.Random) -> None:
        _check_placement_count(count)
        n = self._n_hosts
        self._host.extend(rng.randrange(n) for _ in range(count))

    def __len__(self) -> int:
        return len(self._host)

    def one_way_ms(self, a: int, b: int) -> float:
        return self._delays.one_way_ms(a, b)

    def nearest(self, a: int, candidates: Sequence[int]) -> int:
        host = self._host
        row = self._one_way[host[a]]
        best, best_d = -1, math.inf
        for c in candidates:
            d = row[host[c]] if c != a else 0.0
            if d < best_d:
                best, best_d = c, d
        return best

    def delays(self) -> Delays:
        return self._delays

    def nearest_terms(self) -> tuple[Sequence[int], list[array[float]], None]:
        return self._host, self._one_way, None

    def mean_rtt_ms(self) -> float:
        return self._mean_rtt_ms

    @property
    def hosts(self) -> int:
        return self._n_hosts

    def host_of(self, node: int) -> int:
        return self._host[node]

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "hosts": self._n_hosts,
            "nodes": len(self._host),
            "mean_rtt_ms": self._mean_rtt_ms,
            "same_host_ms": self._same_host_ms,
            "symmetrised": self._asymmetric_pairs > 0,
            "asymmetric_pairs": self._asymmetric_pairs,
            "max_asymmetry_ms": self._max_asymmetry_ms,
        }


# --------------------------------------------------------------------------------------------
# Synthetic Internet-like model
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Cluster:
    """A geographic cluster of sites: centre (x, y) and Gaussian spread in layout units.

    Layout units are nominal one-way milliseconds; calibration rescales them (by ~1.1 for the
    defaults), so only relative positions matter.
    """

    name: str
    weight: float
    x: float
    y: float
    spread: float


# Centres chosen so pairwise distances approximate real inter-continental one-way delays
# (NA-EU ~45, NA-EA ~75, EU-EA ~110, NA-SA ~66, EA-OC ~69, EU-OC ~145 ms); spreads reflect
# continent size (NA and East Asia are wide, Europe and Oceania compact); weights mimic the
# NA/EU-heavy host population of testbeds such as PlanetLab.
DEFAULT_CLUSTERS: tuple[Cluster, ...] = (
    Cluster("north_america", 0.40, 0.0, 0.0, 12.0),
    Cluster("europe", 0.30, 45.0, 0.0, 7.0),
    Cluster("east_asia", 0.17, -49.0, 56.0, 12.0),
    Cluster("south_america", 0.07, 10.0, -65.0, 8.0),
    Cluster("oceania", 0.06, -100.0, 10.0, 6.0),
)


def _apportion(total: int, weights: Sequence[float]) -> list[int]:
    """Split ``total`` into integer shares proportional to ``weights`` (largest remainder).

    Deterministic, and ties go to the earlier cluster, so the layout never depends on rng draws.
    """
    weight_sum = math.fsum(weights)
    quotas = [total * w / weight_sum for w in weights]
    shares = [math.floor(q) for q in quotas]
    leftover = total - sum(shares)
    by_remainder = sorted(range(len(weights)), key=lambda k: (-(quotas[k] - shares[k]), k))
    for k in by_remainder[:leftover]:
        shares[k] += 1
    return shares


class SyntheticLatency(LatencyModel):
    """Clustered 2-D Internet-like latency, calibrated to a target mean RTT (see module docs).

    ``one_way(a, b) = core[site(a)][site(b)] + (access[a] + access[b])`` for ``a != b``, where
    the core delay is ``ms_per_unit`` times the Euclidean distance between the sites.
    """

    __slots__ = (
        "_access",
        "_access_median_ms",
        "_access_mu",
        "_access_sigma",
        "_cluster_sizes",
        "_clusters",
        "_core",
        "_delays",
        "_mean_access_ms",
        "_mean_rtt_ms",
        "_ms_per_unit",
        "_seed",
        "_site",
        "_sites",
        "_target_mean_rtt_ms",
    )

    def __init__(
        self,
        seed: int,
        sites: int = 1024,
        *,
        target_mean_rtt_ms: float = PLANETLAB_MEAN_RTT_MS,
        access_median_ms: float = 2.0,
        access_sigma: float = 1.0,
        clusters: Sequence[Cluster] = DEFAULT_CLUSTERS,
    ) -> None:
        if isinstance(sites, bool) or not isinstance(sites, int) or sites < 2:
            raise LatencyModelError(f"sites must be an int >= 2, got {sites!r}")
        if not clusters:
            raise LatencyModelError("clusters must not be empty")
        for c in clusters:
            if not (math.isfinite(c.weight) and c.weight > 0.0):
                raise LatencyModelError(f"cluster {c.name!r}: weight must be > 0, got {c.weight}")
            if not (math.isfinite(c.spread) and c.spread >= 0.0):
                raise LatencyModelError(f"cluster {c.name!r}: spread must be >= 0, got {c.spread}")
            if not (math.isfinite(c.x) and math.isfinite(c.y)):
                raise LatencyModelError(f"cluster {c.name!r}: centre must be finite")
        if not (math.isfinite(access_median_ms) and access_median_ms > 0.0):
            raise LatencyModelError(f"access_median_ms must be > 0, got {access_median_ms!r}")
        if not (math.isfinite(access_sigma) and access_sigma >= 0.0):
            raise LatencyModelError(f"access_sigma must be >= 0, got {access_sigma!r}")
        if not (math.isfinite(target_mean_rtt_ms) and target_mean_rtt_ms > 0.0):
            raise LatencyModelError(f"target_mean_rtt_ms must be > 0, got {target_mean_rtt_ms!r}")

        self.name = "synthetic"
        self._seed = seed
        self._sites = sites
        self._clusters = tuple(clusters)
        self._target_mean_rtt_ms = float(target_mean_rtt_ms)
        self._access_median_ms = float(access_median_ms)
        self._access_sigma = float(access_sigma)
        self._access_mu = math.log(access_median_ms)
        # Lognormal mean: median * exp(sigma^2 / 2).
        self._mean_access_ms = access_median_ms * math.exp(access_sigma * access_sigma / 2.0)

        # Site layout from a private rng so it depends on the seed alone, never on placement.
        layout_rng = random.Random(seed)
        self._cluster_sizes = _apportion(sites, [c.weight for c in self._clusters])
        points: list[tuple[float, float]] = []
        for c, size in zip(self._clusters, self._cluster_sizes, strict=True):
            for _ in range(size):
                points.append((layout_rng.gauss(c.x, c.spread), layout_rng.gauss(c.y, c.spread)))

        # Unscaled distances. math.dist computes |p - q| coordinate-wise, and IEEE subtraction is
        # sign-symmetric, so dist[i][j] == dist[j][i] exactly and the table is symmetric.
        dist = [array("d", map(math.dist, repeat(p), points)) for p in points]
        mean_distance = math.fsum(map(math.fsum, dist)) / (sites * (sites - 1))

        # Calibration: expected RTT between nodes on distinct sites is
        # 2 * (ms_per_unit * mean_distance + 2 * E[access]); solve it for ms_per_unit.
        propagation_budget = target_mean_rtt_ms / 2.0 - 2.0 * self._mean_access_ms
        if propagation_budget <= 0.0 or mean_distance <= 0.0:
            raise LatencyModelError(
                f"cannot calibrate: the access delay alone (mean {self._mean_access_ms:.3f} ms "
                f"per end) already reaches target_mean_rtt_ms={target_mean_rtt_ms}, "
                "or all sites coincide"
            )
        self._ms_per_unit = propagation_budget / mean_distance
        scale = self._ms_per_unit.__mul__
        self._core: list[array[float]] = [array("d", map(scale, row)) for row in dist]
        # Report the realised mean (not the target) so describe() is honest about rounding.
        core_mean = math.fsum(map(math.fsum, self._core)) / (sites * (sites - 1))
        self._mean_rtt_ms = 2.0 * (core_mean + 2.0 * self._mean_access_ms)

        # Compact arrays (see ``MatrixLatency._host``).
        self._site: array[int] = array("l")
        self._access: array[float] = array("d")
        self._delays = Delays(self._site, self._core, self._access)

    def place(self, count: int, rng: random.Random) -> None:
        _check_placement_count(count)
        sites, mu, sigma = self._sites, self._access_mu, self._access_sigma
        site, access = self._site, self._access
        # Fixed draw order per node (site, then access) so equal rng states give equal results.
        for _ in range(count):
            site.append(rng.randrange(sites))
            access.append(rng.lognormvariate(mu, sigma))

    def __len__(self) -> int:
        return len(self._site)

    def one_way_ms(self, a: int, b: int) -> float:
        return self._delays.one_way_ms(a, b)

    def nearest(self, a: int, candidates: Sequence[int]) -> int:
        # access[a] is common to every candidate, so it is left out of the comparison.
        site = self._site
        access = self._access
        row = self._core[site[a]]
        best, best_d = -1, math.inf
        for c in candidates:
            d = row[site[c]] + access[c] if c != a else -1.0
            if d < best_d:
                best, best_d = c, d
        return best

    def delays(self) -> Delays:
        return self._delays

    def nearest_terms(self) -> tuple[Sequence[int], list[array[float]], Sequence[float]]:
        # access[a] is common to every candidate, as in ``nearest``.
        return self._site, self._core, self._access

    def mean_rtt_ms(self) -> float:
        """Expected RTT between nodes on two distinct sites, averaged over all site pairs.

        Access delays enter at their distribution mean, so the value is a property of the model
        (equal to ``target_mean_rtt_ms`` up to rounding) and not of the placed nodes.
        """
        return self._mean_rtt_ms

    @property
    def hosts(self) -> int:
        return self._sites

    def host_of(self, node: int) -> int:
        return self._site[node]

    def access_ms(self, node: int) -> float:
        """Last-mile one-way access delay of ``node`` in ms."""
        return self._access[node]

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "hosts": self._sites,
            "nodes": len(self._site),
            "mean_rtt_ms": self._mean_rtt_ms,
            "seed": self._seed,
            "sites": self._sites,
            "target_mean_rtt_ms": self._target_mean_rtt_ms,
            "ms_per_unit": self._ms_per_unit,
            "access_median_ms": self._access_median_ms,
            "access_sigma": self._access_sigma,
            "mean_access_ms": self._mean_access_ms,
            "clusters": [
                {
                    "name": c.name,
                    "weight": c.weight,
                    "centre": [c.x, c.y],
                    "spread": c.spread,
                    "sites": size,
                }
                for c, size in zip(self._clusters, self._cluster_sizes, strict=True)
            ],
        }


#: Named measured matrices shipped as package data (``sim/data/``, provenance in its README), so
#: that they work on a fresh clone or an installed wheel, without ``shared/``.
NAMED_MATRICES = {"planetlab": "planetlab490_rtt_ms_slice1.txt"}


def latency_model(spec: str, seed: int) -> LatencyModel:
    """Build a model from a spec: ``"synthetic"``, ``"planetlab"`` (the measured 490-host matrix
    shipped in ``sim/data/``), or a path to an RTT matrix file.

    A ``matrix:`` prefix on the path is accepted and stripped, so a model's ``name`` for a file in
    the working directory round-trips.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise LatencyModelError(
            "latency model spec must be 'synthetic', 'planetlab' or a path to an RTT matrix file, "
            f"got {spec!r}"
        )
    if spec == "synthetic":
        return SyntheticLatency(seed)
    if spec in NAMED_MATRICES:
        # as_file: a real path even if the package is ever imported from a zip.
        resource = resources.files("rangecast.sim") / "data" / NAMED_MATRICES[spec]
        with resources.as_file(resource) as path:
            return MatrixLatency.load(path)
    given = spec.removeprefix("matrix:")
    if not Path(given).is_file():
        raise LatencyModelError(
            f"unknown latency model {spec!r}: expected 'synthetic', 'planetlab' or a path to an "
            f"RTT matrix file, and {given!r} is not a file"
        )
    return MatrixLatency.load(given)
