"""The testing kit (rangecast.testkit, docs/testing.md): its checkers find planted faults in a
snapshot and name the peers and nodes; the docs' worked example runs here (a split rule with
a planted bug is caught by the kit's state machine and shrunk; the correct rule passes)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, Phase, settings

from rangecast.pubsub.host import TreeHost
from rangecast.pubsub.messages import StoredSub
from rangecast.pubsub.node import PubSubNode
from rangecast.pubsub.schema import THESIS_SCHEMA
from rangecast.pubsub.space import AttributeSpace, TreeId
from rangecast.pubsub.subscription import where
from rangecast.testkit.invariants import Kind, check_tree, count_by_kind
from rangecast.testkit.machine import OverlayMachine
from rangecast.testkit.simnet import SimOverlay


def _settled() -> SimOverlay:
    net = SimOverlay(12, 3, THESIS_SCHEMA, capacity=(2, 2))
    for k in range(30):
        net.subscribe(
            k % 12, where(THESIS_SCHEMA).between("Attr1", k * 90.0, k * 90.0 + 50).build()
        )
    net.settle()
    return net


def test_a_settled_overlay_is_clean_and_planted_faults_are_named() -> None:
    snap = _settled().snapshot()
    assert check_tree(snap, exact_tables=True, lazy_internal=True) == []
    leaf = next(n for n in snap.nodes if n.primary and n.leaf and n.pieces and n.tid.depth > 0)
    # A second primary of one leaf, a piece moved to its sibling, a lost replica.
    twin = dataclasses.replace(leaf, peer="intruder")
    sibling = TreeId(leaf.tid.attr, leaf.tid.depth, leaf.tid.path ^ 1)
    moved = [
        dataclasses.replace(n, pieces=n.pieces + leaf.pieces[:1])
        if n.primary and n.tid == sibling and n.leaf
        else n
        for n in snap.nodes
    ]
    replica = next(n for n in snap.nodes if not n.primary and n.leaf)
    broken = dataclasses.replace(
        snap,
        peers=(*snap.peers, "intruder"),
        nodes=(*[n for n in moved if n is not replica], twin),
    )
    found = check_tree(broken, exact_tables=True, lazy_internal=True)
    kinds = count_by_kind(found)
    assert kinds[Kind.TWO_PRIMARIES] == 1
    assert kinds[Kind.REPLICAS_MISSING] >= 1
    assert {Kind.PIECE_TWICE, Kind.PIECE_OUTSIDE} <= set(kinds) or Kind.PIECE_TWICE in kinds
    two = next(v for v in found if v.kind == Kind.TWO_PRIMARIES)
    assert "intruder" in two.peers and leaf.peer in two.peers
    assert two.nodes == (snap.name(leaf.schema, leaf.tid),)
    lost = next(v for v in found if v.kind == Kind.REPLICAS_MISSING)
    assert replica.peer not in lost.peers and snap.name(replica.schema, replica.tid) in lost.nodes


# --------------------------------------------------------------- the worked example (docs)


class EagerSplit(TreeHost):
    """A split rule: a leaf splits once it holds more than half its capacity."""

    def split_due(self, node: object) -> bool:
        index = getattr(node, "index", None)
        tid = getattr(node, "tid", None)
        return (
            index is not None
            and tid is not None
            and 2 * len(index) > self.capacity
            and tid.depth < self.cfg.max_depth
        )


class EagerSplitBuggy(EagerSplit):
    """The same rule with a planted bug: it always splits on x (forgets odd levels split y)."""

    def split_side(self, space: AttributeSpace, tid: TreeId, piece: StoredSub) -> int:
        return 1 if piece.x >= (space.zone(tid).x_lo + space.zone(tid).x_hi) / 2 else 0


class EagerNode(PubSubNode):
    host_class = EagerSplit


class BuggyNode(PubSubNode):
    host_class = EagerSplitBuggy


class EagerMachine(OverlayMachine):
    node_class = EagerNode
    capacity = (4, 4)


class BuggyMachine(EagerMachine):
    node_class = BuggyNode


_FAST = settings(
    max_examples=15,
    stateful_step_count=12,
    deadline=None,
    database=None,
    report_multiple_bugs=False,
    suppress_health_check=list(HealthCheck),
)


def test_the_correct_split_rule_passes() -> None:
    EagerMachine.TestCase.settings = _FAST
    EagerMachine.TestCase().runTest()


def _run_buggy(phases: list[Phase]) -> str:
    BuggyMachine.TestCase.settings = settings(_FAST, phases=phases)
    with pytest.raises(AssertionError) as caught:
        BuggyMachine.TestCase().runTest()
    # Hypothesis attaches the (shrunk) failing steps to the error as notes.
    return "\n".join([str(caught.value), *getattr(caught.value, "__notes__", [])])


def test_the_planted_bug_is_found() -> None:
    # Found without shrinking here (cheap); the slow test below shrinks it too.
    _run_buggy([Phase.explicit, Phase.generate])


@pytest.mark.slow
def test_the_planted_bug_is_found_and_shrunk() -> None:
    printed = _run_buggy(list(Phase))
    # Shrunk: the failing run hypothesis prints is a handful of steps.
    steps = [line for line in printed.splitlines() if line.strip().startswith("state.")]
    assert 0 < len(steps) <= 8, printed
