"""The distributed 2d-tree's invariants, checked from the outside on a ``TreeSnapshot``.

Each checker returns a list of ``Violation``s (empty: the invariant holds); each violation names
its kind, the peers and the tree nodes involved, and says what is wrong in one line.
``check_tree`` runs them all, ``assert_tree`` raises ``TreeInvariantError`` on any.

The invariants (docs/testing.md):

* ``hosting``: no tree node has two primaries, none is deeper than ``max_depth``, the root of
  every attribute tree with nodes exists, every non-root node's parent is hosted and internal,
  every internal node's two children are hosted: the leaves are the tree's leaves;
* ``partition``: the leaves' zones partition the triangle ``y >= x`` of every attribute tree
  (checked on sampled points, the corners of every leaf and the square's corners: a bug in
  the zone arithmetic would show there even when the structure is sound);
* ``pieces``: every stored piece lies in exactly one leaf, whose zone holds its point, on its
  base attribute's tree;
* ``tables``: the rows of an internal node's LeafNodeRoutingTable are proper descendants and
  cover its zone (soft state may keep an old row beside deeper ones); with ``exact_tables``
  (an overlay that settled) they are exactly the leaves below it;
* ``replicas``: every node has its configured number of copies on distinct peers (bounded by
  the peers present), every replica has a primary, and copies agree on leaf or internal;
* ``load_balancing``: every subscription's pieces (one generation) are numbered 0..k-1 with
  no gap or repeat, partition their range contiguously, each stored at a point that holds it,
  below the cut-off line when load balancing is on."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum

from rangecast.pubsub.space import AttributeSpace, TreeId
from rangecast.testkit.snapshot import HostedNode, Piece, TreeSnapshot


class Kind(StrEnum):
    TWO_PRIMARIES = "two-primaries"
    TOO_DEEP = "too-deep"
    NO_ROOT = "no-root"
    NO_PARENT = "no-parent"
    PARENT_IS_LEAF = "parent-is-leaf"
    NO_CHILD = "no-child"
    PARTITION = "partition"
    PIECE_OUTSIDE = "piece-outside-zone"
    PIECE_TWICE = "piece-twice"
    PIECE_WRONG_TREE = "piece-wrong-tree"
    ROW_NOT_BELOW = "row-not-below"
    TABLE_GAP = "table-gap"
    TABLE_STALE = "table-stale"
    REPLICAS_MISSING = "replicas-missing"
    REPLICAS_EXTRA = "replicas-extra"
    REPLICA_ORPHAN = "replica-orphan"
    REPLICA_SHAPE = "replica-shape"
    PIECES_GAP = "pieces-gap"
    PIECES_NOT_CONTIGUOUS = "pieces-not-contiguous"
    PIECE_POINT = "piece-point"
    PIECE_ABOVE_CUTOFF = "piece-above-cutoff"


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken invariant: what, which peers, which tree nodes (as ``TreeSnapshot.name``)."""

    kind: Kind
    message: str
    peers: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()

    def __str__(self) -> str:
        where = []
        if self.nodes:
            where.append("nodes " + ", ".join(self.nodes))
        if self.peers:
            where.append("peers " + ", ".join(self.peers))
        return f"[{self.kind}] {self.message}" + (f" ({'; '.join(where)})" if where else "")

    def to_json(self) -> dict[str, object]:
        return {
            "kind": str(self.kind),
            "message": self.message,
            "peers": list(self.peers),
            "nodes": list(self.nodes),
        }


class TreeInvariantError(AssertionError):
    """``assert_tree`` found violations (``violations``; the message lists the first ones)."""

    def __init__(self, violations: list[Violation]) -> None:
        self.violations = violations
        shown = "\n  ".join(str(v) for v in violations[:10])
        more = f"\n  ... and {len(violations) - 10} more" if len(violations) > 10 else ""
        super().__init__(f"{len(violations)} tree invariant violations:\n  {shown}{more}")


NodeKey = tuple[str, TreeId]


def _primaries(snap: TreeSnapshot) -> dict[NodeKey, HostedNode]:
    """One primary per node (the first seen; ``check_hosting`` reports the others)."""
    out: dict[NodeKey, HostedNode] = {}
    for n in snap.nodes:
        if n.primary:
            out.setdefault((n.schema, n.tid), n)
    return out


def check_hosting(snap: TreeSnapshot) -> list[Violation]:
    out: list[Violation] = []
    hosts: dict[NodeKey, list[str]] = {}
    for n in snap.nodes:
        if n.primary:
            hosts.setdefault((n.schema, n.tid), []).append(n.peer)
    for (schema, tid), peers in sorted(hosts.items()):
        if len(peers) > 1:
            out.append(
                Violation(
                    Kind.TWO_PRIMARIES,
                    f"hosted as primary by {len(peers)} peers",
                    tuple(peers),
                    (snap.name(schema, tid),),
                )
            )
    nodes = _primaries(snap)
    roots = {(schema, TreeId(tid.attr, 0, 0)) for schema, tid in nodes}
    for schema, root in sorted(roots - nodes.keys()):
        out.append(
            Violation(
                Kind.NO_ROOT, "the attribute tree has no root", (), (snap.name(schema, root),)
            )
        )
    for (schema, tid), node in sorted(nodes.items()):
        name = snap.name(schema, tid)
        if tid.depth > snap.config.max_depth:
            out.append(
                Violation(Kind.TOO_DEEP, f"depth {tid.depth} > max_depth", (node.peer,), (name,))
            )
        if tid.depth > 0:
            parent = nodes.get((schema, tid.parent()))
            pname = snap.name(schema, tid.parent())
            if parent is None:
                out.append(
                    Violation(
                        Kind.NO_PARENT, "its parent is not hosted", (node.peer,), (name, pname)
                    )
                )
            elif parent.leaf:
                out.append(
                    Violation(
                        Kind.PARENT_IS_LEAF,
                        "its parent is a leaf",
                        (node.peer, parent.peer),
                        (name, pname),
                    )
                )
        if not node.leaf:
            for bit in (0, 1):
                child = tid.child(bit)
                if (schema, child) not in nodes:
                    out.append(
                        Violation(
                            Kind.NO_CHILD,
                            f"internal, but its child {bit} is not hosted",
                            (node.peer,),
                            (name, snap.name(schema, child)),
                        )
                    )
    return out


def check_partition(snap: TreeSnapshot, *, samples: int = 400, seed: int = 0) -> list[Violation]:
    """Points of each attribute's triangle that lie in no leaf or in several (sampled with a
    ``random.Random(seed)``: the same snapshot and seed check the same points)."""
    rng = random.Random(seed)
    by_tree: dict[tuple[str, int], list[HostedNode]] = {}
    for (schema, tid), node in sorted(_primaries(snap).items()):
        if node.leaf:
            by_tree.setdefault((schema, tid.attr), []).append(node)
    out: list[Violation] = []
    for (schema, attr), leaves in by_tree.items():
        space = snap.space(schema, attr)
        out += _partition(snap, schema, space, leaves, rng, samples)
    return out


def _partition(
    snap: TreeSnapshot,
    schema: str,
    space: AttributeSpace,
    leaves: list[HostedNode],
    rng: random.Random,
    samples: int,
) -> list[Violation]:
    import numpy as np  # here, not at import: `rangecast swarm` loads this module for its help

    zones = [space.zone(n.tid) for n in leaves]
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
    out = []
    for k in np.flatnonzero(counts != 1)[:5]:  # a gap shows at many points: a few say enough
        holders = [leaves[j] for j in np.flatnonzero(inside[k])]
        out.append(
            Violation(
                Kind.PARTITION,
                f"point {pts[k]} of {space.name}'s triangle lies in {len(holders)} leaves",
                tuple(sorted({n.peer for n in holders})),
                tuple(snap.name(schema, n.tid) for n in holders),
            )
        )
    return out


def check_pieces(snap: TreeSnapshot) -> list[Violation]:
    out: list[Violation] = []
    where: dict[tuple[str, str, int, int, int], list[HostedNode]] = {}
    for (schema, tid), node in sorted(_primaries(snap).items()):
        if not node.leaf:
            continue
        zone = snap.space(schema, tid.attr).zone(tid)
        name = snap.name(schema, tid)
        for p in node.pieces:
            where.setdefault((schema, *p.key), []).append(node)
            if p.base != tid.attr:
                out.append(
                    Violation(
                        Kind.PIECE_WRONG_TREE,
                        f"{_piece(p)} of base attribute {p.base} stored on tree {tid.attr}",
                        (node.peer,),
                        (name,),
                    )
                )
            elif not zone.contains(p.x, p.y):
                out.append(
                    Violation(
                        Kind.PIECE_OUTSIDE,
                        f"{_piece(p)} at ({p.x}, {p.y}) lies outside its leaf's zone",
                        (node.peer,),
                        (name,),
                    )
                )
    for (schema, *key), holders in where.items():
        if len(holders) > 1:
            out.append(
                Violation(
                    Kind.PIECE_TWICE,
                    f"piece {tuple(key)} stored in {len(holders)} leaves",
                    tuple(n.peer for n in holders),
                    tuple(snap.name(schema, n.tid) for n in holders),
                )
            )
    return out


def _piece(p: Piece) -> str:
    return f"piece {p.piece}/{p.pieces} of subscription {p.sid} of {p.subscriber[:12]}"


def check_tables(snap: TreeSnapshot, *, exact: bool = False) -> list[Violation]:
    out: list[Violation] = []
    nodes = _primaries(snap)
    leaves: dict[tuple[str, int], list[TreeId]] | None = None  # built on first use
    for (schema, tid), node in sorted(nodes.items()):
        if node.leaf:
            continue
        name = snap.name(schema, tid)
        rows = set(node.rows)
        bad = sorted(r for r in rows if not (tid.is_ancestor_of(r) and r != tid))
        for r in bad:
            out.append(
                Violation(
                    Kind.ROW_NOT_BELOW,
                    "its table names a node that is not below it",
                    (node.peer,),
                    (name, snap.name(schema, r)),
                )
            )
        space = snap.space(schema, tid.attr)
        deepest = max((r.depth for r in rows), default=tid.depth)
        gap = _uncovered(space, tid, rows, deepest)
        if gap is not None:
            out.append(
                Violation(
                    Kind.TABLE_GAP,
                    "its table covers no row for part of its zone",
                    (node.peer,),
                    (name, snap.name(schema, gap)),
                )
            )
        if exact:
            if leaves is None:
                leaves = {}
                for (s, t), n in nodes.items():
                    if n.leaf:
                        leaves.setdefault((s, t.attr), []).append(t)
            below = {
                t for t in leaves.get((schema, tid.attr), ()) if tid.is_ancestor_of(t) and t != tid
            }
            if rows != below:
                extra = sorted(rows - below)[:3]
                missing = sorted(below - rows)[:3]
                out.append(
                    Violation(
                        Kind.TABLE_STALE,
                        f"its table is not the leaves below it ({len(rows - below)} rows too "
                        f"many, {len(below - rows)} leaves missing)",
                        (node.peer,),
                        (name, *(snap.name(schema, t) for t in extra + missing)),
                    )
                )
    return out


def _uncovered(
    space: AttributeSpace, tid: TreeId, rows: set[TreeId], deepest: int
) -> TreeId | None:
    """A node below ``tid`` (itself included) whose zone reaches the triangle and that no row
    holds, nor is split into rows all the way down: None if the rows cover ``tid``'s zone."""
    stack = [tid.child(1), tid.child(0)] if tid not in rows else []
    while stack:
        t = stack.pop()
        if t in rows or not space.zone(t).has_triangle():
            continue
        if t.depth >= deepest:
            return t
        stack += [t.child(1), t.child(0)]
    return None


def check_replicas(
    snap: TreeSnapshot, *, lazy_internal: bool = False, allow_extra: bool = False
) -> list[Violation]:
    """Copies per node. ``lazy_internal``: an internal node may still have a leaf's number of
    copies (a split widens the set at the next reconcile, which a failure-free simulation,
    with no reconcile timer, never runs). ``allow_extra``: more copies than configured pass
    (after joins, a peer pushed out of a replica set may keep its stale copy)."""
    cfg = snap.config
    live = len(snap.peers)
    copies: dict[NodeKey, list[HostedNode]] = {}
    for n in snap.nodes:
        copies.setdefault((n.schema, n.tid), []).append(n)
    out: list[Violation] = []
    for (schema, tid), held in sorted(copies.items()):
        name = snap.name(schema, tid)
        primaries = [n for n in held if n.primary]
        peers = tuple(sorted({n.peer for n in held}))
        if not primaries:
            out.append(
                Violation(
                    Kind.REPLICA_ORPHAN,
                    f"{len(held)} replicas and no primary",
                    tuple(n.peer for n in held),
                    (name,),
                )
            )
            continue
        primary = primaries[0]
        if any(n.leaf != primary.leaf for n in held):
            odd = tuple(n.peer for n in held if n.leaf != primary.leaf)
            out.append(
                Violation(
                    Kind.REPLICA_SHAPE,
                    f"replicas disagree with the {'leaf' if primary.leaf else 'internal'} primary",
                    (primary.peer, *odd),
                    (name,),
                )
            )
        if cfg.replicas <= 1:
            want_lo = want_hi = 1
        else:
            k = cfg.replicas if primary.leaf else max(cfg.replicas, cfg.internal_replicas)
            want_hi = min(k, live)
            want_lo = min(cfg.replicas, live) if lazy_internal and not primary.leaf else want_hi
        have = len(peers)
        if len(held) > have:
            out.append(
                Violation(
                    Kind.REPLICAS_EXTRA,
                    f"{len(held)} copies on only {have} peers",
                    peers,
                    (name,),
                )
            )
        if have < want_lo:
            out.append(
                Violation(
                    Kind.REPLICAS_MISSING,
                    f"{have} copies, {want_hi} configured: {want_hi - have} lost",
                    peers,
                    (name,),
                )
            )
        elif have > want_hi and not allow_extra:
            out.append(
                Violation(
                    Kind.REPLICAS_EXTRA, f"{have} copies, {want_hi} configured", peers, (name,)
                )
            )
    return out


def check_load_balancing(snap: TreeSnapshot) -> list[Violation]:
    """Each subscription's pieces partition its stored range (and sit below the cut-off)."""
    cfg = snap.config
    subs: dict[tuple[str, str, int], list[tuple[Piece, HostedNode]]] = {}
    for _, node in sorted(_primaries(snap).items()):
        for p in node.pieces:
            subs.setdefault((node.schema, p.subscriber, p.sid), []).append((p, node))
    out: list[Violation] = []
    for (schema, who, sid), found in sorted(subs.items()):
        found.sort(key=lambda pn: (pn[0].gen, pn[0].piece))
        label = f"subscription {sid} of {who[:12]}"
        peers = tuple(sorted({n.peer for _, n in found}))
        names = tuple(dict.fromkeys(snap.name(schema, n.tid) for _, n in found))
        first = found[0][0]
        gens = {p.gen for p, _ in found}
        numbers = [p.piece for p, _ in found]
        if (
            len(gens) > 1
            or numbers != list(range(first.pieces))
            or any(p.pieces != first.pieces or p.base != first.base for p, _ in found)
        ):
            out.append(
                Violation(
                    Kind.PIECES_GAP,
                    f"{label}: pieces {numbers} of {first.pieces}, generations {sorted(gens)}",
                    peers,
                    names,
                )
            )
            continue
        pieces = [p for p, _ in found]
        if any(a.piece_hi != b.piece_lo for a, b in itertools.pairwise(pieces)):
            out.append(
                Violation(
                    Kind.PIECES_NOT_CONTIGUOUS,
                    f"{label}: pieces leave a gap or overlap",
                    peers,
                    names,
                )
            )
        space = snap.space(schema, first.base)
        limit = cfg.cutoff * (space.max - space.min)
        for p, node in found:
            name = (snap.name(schema, node.tid),)
            if not (p.piece_lo <= p.piece_hi and p.x <= p.piece_lo and p.piece_hi <= p.y):
                out.append(
                    Violation(
                        Kind.PIECE_POINT,
                        f"{label}: piece {p.piece} [{p.piece_lo}, {p.piece_hi}] stored at "
                        f"({p.x}, {p.y}), which does not hold it",
                        (node.peer,),
                        name,
                    )
                )
            if cfg.load_balancing and p.y - p.x > limit:
                out.append(
                    Violation(
                        Kind.PIECE_ABOVE_CUTOFF,
                        f"{label}: piece {p.piece} lies above the cut-off line",
                        (node.peer,),
                        name,
                    )
                )
    return out


#: Every checker by name, in the order ``check_tree`` runs them.
CHECKS: dict[str, Callable[[TreeSnapshot], list[Violation]]] = {
    "hosting": check_hosting,
    "partition": check_partition,
    "pieces": check_pieces,
    "tables": check_tables,
    "replicas": check_replicas,
    "load_balancing": check_load_balancing,
}


def check_tree(
    snap: TreeSnapshot,
    *,
    samples: int = 400,
    seed: int = 0,
    exact_tables: bool = False,
    lazy_internal: bool = False,
    allow_extra_replicas: bool = False,
    skip: Iterable[str] = (),
) -> list[Violation]:
    """Every invariant (see the module's header); ``skip`` names checkers to leave out."""
    skipped = set(skip)
    unknown = skipped - CHECKS.keys()
    if unknown:
        raise ValueError(f"no checker named {sorted(unknown)}; they are {sorted(CHECKS)}")
    out: list[Violation] = []
    if "hosting" not in skipped:
        out += check_hosting(snap)
    if "partition" not in skipped:
        out += check_partition(snap, samples=samples, seed=seed)
    if "pieces" not in skipped:
        out += check_pieces(snap)
    if "tables" not in skipped:
        out += check_tables(snap, exact=exact_tables)
    if "replicas" not in skipped:
        out += check_replicas(snap, lazy_internal=lazy_internal, allow_extra=allow_extra_replicas)
    if "load_balancing" not in skipped:
        out += check_load_balancing(snap)
    return out


def assert_tree(
    snap: TreeSnapshot,
    *,
    samples: int = 400,
    seed: int = 0,
    exact_tables: bool = False,
    lazy_internal: bool = False,
    allow_extra_replicas: bool = False,
    skip: Iterable[str] = (),
) -> None:
    """``check_tree`` (same options), raising ``TreeInvariantError`` on any violation."""
    found = check_tree(
        snap,
        samples=samples,
        seed=seed,
        exact_tables=exact_tables,
        lazy_internal=lazy_internal,
        allow_extra_replicas=allow_extra_replicas,
        skip=skip,
    )
    if found:
        raise TreeInvariantError(found)


def count_by_kind(violations: Iterable[Violation]) -> Counter[Kind]:
    return Counter(v.kind for v in violations)


__all__ = [
    "CHECKS",
    "Kind",
    "TreeInvariantError",
    "Violation",
    "assert_tree",
    "check_hosting",
    "check_load_balancing",
    "check_partition",
    "check_pieces",
    "check_replicas",
    "check_tables",
    "check_tree",
    "count_by_kind",
]
