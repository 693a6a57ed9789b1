"""A plain-data picture of the distributed 2d-tree: what every peer hosts, as the primary or as a
replica, and the configuration the tree is meant to follow.

The invariant checkers (``rangecast.testkit.invariants``) read only this, so the same checks run
on a simulated overlay (``snapshot_of``: the cores' state, read in place) and on a running swarm
(``rangecast.testkit.live`` builds one from the peers' ``TreeReply``). Peers are named by a label
(the simulator's index, or a live peer's address); tree nodes are ``TreeId``s of a schema.

Nothing in here needs hypothesis: ``rangecast swarm check`` imports it on a plain install."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from rangecast.pubsub.messages import StoredSub
from rangecast.pubsub.peer import OverlayPeer
from rangecast.pubsub.replication import INTERNAL_REPLICAS
from rangecast.pubsub.schema import Schema
from rangecast.pubsub.space import AttributeSpace, TreeId
from rangecast.pubsub.tree import TreeNode

#: (subscriber id as hex, sid, generation, piece): one stored piece of one subscription.
PieceKey = tuple[str, int, int, int]


@dataclass(frozen=True, slots=True)
class Piece:
    """One stored subscription piece (``StoredSub`` without its predicates)."""

    subscriber: str
    sid: int
    gen: int
    piece: int
    pieces: int
    base: int
    piece_lo: float
    piece_hi: float
    x: float
    y: float

    @property
    def key(self) -> PieceKey:
        return (self.subscriber, self.sid, self.gen, self.piece)

    @classmethod
    def of(cls, s: StoredSub) -> Piece:
        return cls(
            s.subscriber.id.hex(),
            s.sid,
            s.gen,
            s.piece,
            s.pieces,
            s.base,
            s.piece_lo,
            s.piece_hi,
            s.x,
            s.y,
        )


@dataclass(frozen=True, slots=True)
class HostedNode:
    """One copy of one tree node on one peer: the primary (the node's DHT root) or a replica.
    A leaf has ``pieces``; an internal node has ``rows`` (its LeafNodeRoutingTable; replicas
    keep none, the table is not replicated)."""

    peer: str
    schema: str
    tid: TreeId
    primary: bool
    leaf: bool
    pieces: tuple[Piece, ...] = ()
    rows: tuple[TreeId, ...] = ()


@dataclass(frozen=True, slots=True)
class Domain:
    """One attribute of a schema: its name and its domain ``[lo, hi]``."""

    name: str
    lo: float
    hi: float


@dataclass(frozen=True, slots=True)
class TreeConfig:
    """What the tree is meant to follow (``OverlayConfig``'s fields the checks need)."""

    #: Copies of a leaf (primary included); internal nodes get ``max(replicas,
    #: internal_replicas)`` when replication is on.
    replicas: int = 3
    internal_replicas: int = INTERNAL_REPLICAS
    max_depth: int = 48
    load_balancing: bool = False
    #: The cut-off line's c, as a fraction of the domain (only with load balancing).
    cutoff: float = 0.1


@dataclass(frozen=True)
class TreeSnapshot:
    """Every hosted copy of every tree node of an overlay, at one moment (or, collected from a
    live swarm, over the short time the collection took)."""

    #: Labels of the peers that took part (the live ones): replica counts are bounded by them.
    peers: tuple[str, ...]
    nodes: tuple[HostedNode, ...]
    #: Schema name -> its attributes, in order (``TreeId.attr`` indexes them).
    schemas: Mapping[str, tuple[Domain, ...]]
    config: TreeConfig = field(default_factory=TreeConfig)

    def space(self, schema: str, attr: int) -> AttributeSpace:
        d = self.schemas[schema][attr]
        return AttributeSpace(schema, d.name, attr, d.lo, d.hi)

    def name(self, schema: str, tid: TreeId) -> str:
        """A tree node as people read it: ``thesis/Attr2:0110`` (``:root`` for a root)."""
        attrs = self.schemas.get(schema, ())
        attr = attrs[tid.attr].name if tid.attr < len(attrs) else f"#{tid.attr}"
        return f"{schema}/{attr}:{tid.bits() or 'root'}"

    def primaries(self) -> list[HostedNode]:
        return [n for n in self.nodes if n.primary]


def domains_of(schema: Schema) -> tuple[Domain, ...]:
    return tuple(Domain(a.name, a.min, a.max) for a in schema.attributes)


def _hosted(peer: str, schema: str, node: TreeNode, primary: bool) -> HostedNode:
    if node.index is not None:
        pieces = tuple(Piece.of(s) for s in node.index)
        return HostedNode(peer, schema, node.tid, primary, True, pieces)
    rows = tuple(node.table.rows) if node.table is not None and primary else ()
    return HostedNode(peer, schema, node.tid, primary, False, (), rows)


def snapshot_of(
    peers: Sequence[OverlayPeer],
    schemas: Iterable[Schema],
    *,
    alive: Collection[int] | None = None,
    labels: Sequence[str] | None = None,
) -> TreeSnapshot:
    """The snapshot of simulated peers (``alive``: the indices still running, default all; a
    crashed core keeps its state, which no longer counts). Peers are labelled by their index
    unless ``labels`` says otherwise. The configuration is the first live peer's."""
    live = [i for i in range(len(peers)) if alive is None or i in alive]
    names = list(labels) if labels is not None else [str(i) for i in range(len(peers))]
    nodes: list[HostedNode] = []
    for i in live:
        ov = peers[i].overlay
        for (schema, _), node in ov.nodes.items():
            nodes.append(_hosted(names[i], schema, node, True))
        for (schema, _), node in ov.replicas.items():
            nodes.append(_hosted(names[i], schema, node, False))
    cfg = peers[live[0]].overlay.cfg if live else None
    config = (
        TreeConfig(
            replicas=cfg.replicas,
            max_depth=cfg.max_depth,
            load_balancing=cfg.load_balancing,
            cutoff=cfg.cutoff,
        )
        if cfg is not None
        else TreeConfig()
    )
    return TreeSnapshot(
        tuple(names[i] for i in live),
        tuple(nodes),
        {s.name: domains_of(s) for s in schemas},
        config,
    )


__all__ = [
    "Domain",
    "HostedNode",
    "Piece",
    "PieceKey",
    "TreeConfig",
    "TreeSnapshot",
    "domains_of",
    "snapshot_of",
]
