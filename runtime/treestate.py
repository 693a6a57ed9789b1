"""A peer's part of the distributed 2d-tree as plain data, in pages: what ``TreeReply`` carries
to ``rangecast swarm check`` (``rangecast.testkit.live`` turns the pages of every peer into a
``TreeSnapshot`` and runs the invariant checkers on it).

The picture is taken in one go, between two core steps (the core is single-threaded under
trio, so no message is half handled while it is read), and then cut into pages of at most
``TREE_PAGE_ITEMS`` items (a node's header, each of its table rows, each of its pieces): a leaf
with more pieces than a page holds is sent in parts, each part repeating the node's header.
The pages of one picture are served from it, however the peer's tree moves meanwhile."""

from __future__ import annotations

from dataclasses import dataclass

from rangecast.pubsub.messages import StoredSub
from rangecast.pubsub.node import OverlayConfig
from rangecast.pubsub.peer import OverlayPeer
from rangecast.pubsub.replication import INTERNAL_REPLICAS
from rangecast.pubsub.schema import SchemaRegistry
from rangecast.pubsub.space import TreeId
from rangecast.pubsub.tree import TreeNode
from rangecast.runtime.messages import (
    TREE_PAGE_ITEMS,
    WireDomain,
    WireHosted,
    WirePiece,
    WireSchema,
    WireTid,
    WireTreeConfig,
)


def wire_tid(tid: TreeId) -> WireTid:
    return WireTid(tid.attr, tid.depth, tid.path)


def wire_piece(s: StoredSub) -> WirePiece:
    return WirePiece(
        s.subscriber.id,
        s.sid,
        s.gen,
        s.base,
        s.piece,
        s.pieces,
        s.piece_lo,
        s.piece_hi,
        s.x,
        s.y,
    )


def hosted(schema: str, node: TreeNode, primary: bool) -> WireHosted:
    """One copy of a tree node. A replica's table is not replicated: it is sent without rows
    (the checkers read the primary's)."""
    pieces = [wire_piece(s) for s in node.index] if node.index is not None else []
    rows = [wire_tid(r) for r in node.table.rows] if node.table is not None and primary else []
    return WireHosted(schema, wire_tid(node.tid), primary, node.is_leaf, rows, pieces)


def config_of(cfg: OverlayConfig) -> WireTreeConfig:
    return WireTreeConfig(
        cfg.replicas, INTERNAL_REPLICAS, cfg.max_depth, cfg.load_balancing, cfg.cutoff
    )


def schemas_of(registry: SchemaRegistry) -> list[WireSchema]:
    out = []
    for name in registry.names():
        schema = registry.get(name)
        attrs = [WireDomain(a.name, a.min, a.max) for a in schema.attributes]
        out.append(WireSchema(name, attrs))
    return out


def paginate(nodes: list[WireHosted], items: int = TREE_PAGE_ITEMS) -> list[list[WireHosted]]:
    """``nodes`` cut into pages of at most ``items`` items (``items`` >= 2: a header and one
    row or piece); never an empty list of pages (a peer that hosts nothing sends one empty
    page)."""
    if items < 2:
        raise ValueError("a page holds at least a node's header and one row or piece")
    pages: list[list[WireHosted]] = [[]]
    left = items
    for node in nodes:
        rows, pieces = node.rows, node.pieces
        first = True
        while first or rows or pieces:
            if left < 2 and (rows or pieces or left < 1):
                pages.append([])
                left = items
            room = left - 1
            part_rows, rows = rows[:room], rows[room:]
            room -= len(part_rows)
            part_pieces, pieces = pieces[:room], pieces[room:]
            pages[-1].append(
                WireHosted(node.schema, node.tid, node.primary, node.leaf, part_rows, part_pieces)
            )
            left -= 1 + len(part_rows) + len(part_pieces)
            first = False
    return pages


@dataclass(frozen=True, slots=True)
class TreePicture:
    """One peer's tree state at one moment, paged."""

    pages: list[list[WireHosted]]
    schemas: list[WireSchema]
    config: WireTreeConfig


def picture(
    core: OverlayPeer, registry: SchemaRegistry, items: int = TREE_PAGE_ITEMS
) -> TreePicture:
    """Every tree node ``core`` hosts, as the primary or as a replica, paged."""
    ov = core.overlay
    nodes = [hosted(schema, node, True) for (schema, _), node in ov.nodes.items()]
    nodes += [hosted(schema, node, False) for (schema, _), node in ov.replicas.items()]
    return TreePicture(paginate(nodes, items), schemas_of(registry), config_of(ov.cfg))


__all__ = ["TreePicture", "config_of", "hosted", "paginate", "picture", "schemas_of", "wire_tid"]
