"""The tree invariants on a running swarm: every peer's tree state (``Client.tree``, the
``TreeRequest``/``TreeReply`` pages of ``rangecast.runtime.treestate``) gathered into one
``TreeSnapshot`` and checked (``rangecast swarm check``, docs/testing.md).

A live swarm is never frozen: the pictures of the peers are taken one after the other, over
the fraction of a second the collection takes, and some things are legitimately in flight. The
live check therefore runs the checkers with these allowances (``strict`` drops them):

* ``replicas``: a peer pushed out of a node's replica set by a join may keep its stale copy
  until it notices (``allow_extra_replicas``), and an internal node keeps a leaf's number of
  copies until the next reconcile widens its set (``lazy_internal``); a missing copy or a node
  with no primary is always reported: that is what a crashed peer leaves until repair;
* ``tables``: rows must lie below their node and cover its zone, but a table may lag the
  leaves (soft state), so it is not compared with them (``exact_tables`` off);
* ``hosting``, ``partition``, ``pieces`` and ``load_balancing`` run as they do in a simulation.

A peer that does not answer is listed apart (``LiveTree.unreachable``), not a violation by
itself: a crashed peer stays in a swarm's list, and what its loss does to the tree (lost copies,
a node with no primary, a gap in a partition) is what the checkers report."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import trio

from rangecast.dht.errors import RangecastError
from rangecast.pubsub.space import TreeId
from rangecast.runtime.client import connect
from rangecast.runtime.identity import parse_endpoint
from rangecast.runtime.messages import TreeReply, WireTid
from rangecast.testkit.invariants import Violation, check_tree
from rangecast.testkit.snapshot import Domain, HostedNode, Piece, TreeConfig, TreeSnapshot

#: The live check's allowances (see the module's header), as ``check_tree`` options.
LIVE_ALLOWANCES: Mapping[str, bool] = {
    "allow_extra_replicas": True,
    "lazy_internal": True,
    "exact_tables": False,
}
#: ``strict``: none of them (a swarm that has settled for a while should pass this too).
STRICT: Mapping[str, bool] = {
    "allow_extra_replicas": False,
    "lazy_internal": False,
    "exact_tables": True,
}
#: Seconds to wait for one peer's whole tree state.
PEER_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class LiveTree:
    """What a collection found: the snapshot of the peers that answered, their overlay state
    (``ready``, ``joining``...), and why the others did not answer."""

    snapshot: TreeSnapshot
    states: Mapping[str, str] = field(default_factory=dict)
    unreachable: Mapping[str, str] = field(default_factory=dict)


def _tid(t: WireTid) -> TreeId:
    return TreeId(t.attr, t.depth, t.path)


def snapshot_from(replies: Mapping[str, Sequence[TreeReply]]) -> TreeSnapshot:
    """One snapshot of the pages each peer (by label) sent. A node cut over several pages is
    put back together; schemas and configuration come from page 0 (the first peer's config)."""
    nodes: list[HostedNode] = []
    schemas: dict[str, tuple[Domain, ...]] = {}
    config: TreeConfig | None = None
    for peer, pages in replies.items():
        parts: dict[tuple[str, TreeId, bool], tuple[bool, list[TreeId], list[Piece]]] = {}
        for page in pages:
            for s in page.schemas:
                schemas.setdefault(s.name, tuple(Domain(a.name, a.lo, a.hi) for a in s.attributes))
            if page.config is not None and config is None:
                c = page.config
                config = TreeConfig(
                    c.replicas, c.internal_replicas, c.max_depth, c.load_balancing, c.cutoff
                )
            for h in page.nodes:
                leaf, rows, pieces = parts.setdefault(
                    (h.schema, _tid(h.tid), h.primary), (h.leaf, [], [])
                )
                rows += [_tid(r) for r in h.rows]
                pieces += [
                    Piece(
                        p.subscriber.hex(),
                        p.sid,
                        p.gen,
                        p.piece,
                        p.pieces,
                        p.base,
                        p.piece_lo,
                        p.piece_hi,
                        p.x,
                        p.y,
                    )
                    for p in h.pieces
                ]
        for (schema, tid, primary), (leaf, rows, pieces) in parts.items():
            nodes.append(HostedNode(peer, schema, tid, primary, leaf, tuple(pieces), tuple(rows)))
    return TreeSnapshot(tuple(replies), tuple(nodes), schemas, config or TreeConfig())


async def _one(address: str, timeout_s: float, token: str | None) -> tuple[str, list[TreeReply]]:
    host, port = parse_endpoint(address)
    with trio.fail_after(timeout_s):
        async with connect(host, port, timeout_s=timeout_s, token=token) as client:
            pages = await client.tree()
    return (pages[0].state if pages else "?"), pages


async def collect(
    addresses: Iterable[str], *, timeout_s: float = PEER_TIMEOUT_S, token: str | None = None
) -> LiveTree:
    """Every peer's tree state, asked of all of them at once (``HOST:PORT`` each; a malformed
    one raises ``LocalProtocolError`` before anything is asked); ``token``: the client token
    of a swarm started with ``--client-tokens``."""
    wanted = list(dict.fromkeys(addresses))
    for a in wanted:
        parse_endpoint(a)  # a typo is the user's error, not an unreachable peer
    got: dict[str, list[TreeReply]] = {}
    states: dict[str, str] = {}
    lost: dict[str, str] = {}

    async def one(address: str) -> None:
        try:
            states[address], got[address] = await _one(address, timeout_s, token)
        except trio.TooSlowError:
            lost[address] = f"no answer within {timeout_s:g} s"
        except (RangecastError, OSError) as exc:
            lost[address] = str(exc)

    async with trio.open_nursery() as nursery:
        for a in wanted:
            nursery.start_soon(one, a)
    ordered = {a: got[a] for a in wanted if a in got}  # the order given, whoever answered first
    return LiveTree(
        snapshot_from(ordered),
        {a: states[a] for a in ordered},
        {a: lost[a] for a in wanted if a in lost},
    )


def check_live(
    live: LiveTree | TreeSnapshot, *, strict: bool = False, skip: Iterable[str] = ()
) -> list[Violation]:
    """The invariant checkers on a live swarm's snapshot, with the live allowances unless
    ``strict``; ``skip`` names checkers to leave out (``invariants.CHECKS``)."""
    snap = live.snapshot if isinstance(live, LiveTree) else live
    opts = STRICT if strict else LIVE_ALLOWANCES
    return check_tree(
        snap,
        allow_extra_replicas=opts["allow_extra_replicas"],
        lazy_internal=opts["lazy_internal"],
        exact_tables=opts["exact_tables"],
        skip=skip,
    )


__all__ = [
    "LIVE_ALLOWANCES",
    "PEER_TIMEOUT_S",
    "STRICT",
    "LiveTree",
    "check_live",
    "collect",
    "snapshot_from",
]
