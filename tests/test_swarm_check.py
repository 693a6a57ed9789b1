"""``rangecast swarm check``: the tree state on the wire (pages, strict decoding), its snapshot,
the command's bad inputs (fast), and issue 20's acceptance 2 on sixteen real peer processes
(slow): clean after 500 subscriptions, the lost copies reported after a SIGKILL, clean again
once the overlay has repaired."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from test_runtime_cli import free_base, rc

from rangecast.dht.errors import WireError
from rangecast.dht.wire import Handle
from rangecast.pubsub.messages import StoredSub
from rangecast.pubsub.space import TreeId
from rangecast.pubsub.tree import TreeNode
from rangecast.runtime.guard import wire_codec
from rangecast.runtime.messages import (
    RUNTIME_TABLE,
    TREE_PAGE_ITEMS,
    TreeReply,
    TreeRequest,
    WireHosted,
    WireTid,
)
from rangecast.runtime.treestate import hosted, paginate
from rangecast.testkit.invariants import Kind
from rangecast.testkit.live import check_live, snapshot_from

RANGECAST = [sys.executable, "-m", "rangecast.cli.main"]


def _leaf(tid: TreeId, n: int) -> TreeNode:
    subs = [
        StoredSub(Handle(bytes([k]) * 20, b"a"), k, 0, [], tid.attr, 0, 1, 10.0, 10.0, 10.0, 10.0)
        for k in range(n)
    ]
    node = TreeNode(tid)
    for s in subs:
        assert node.index is not None
        node.index.add(s)
    return node


def test_pages_stay_small_and_put_back_together() -> None:
    """A leaf with more pieces than a page holds is cut into parts; the snapshot of the pages
    has every piece once, and every page decodes strictly under the frame limit."""
    big = hosted("thesis", _leaf(TreeId(0, 0, 0), 25), True)
    small = hosted("thesis", _leaf(TreeId(1, 0, 0), 1), False)
    pages = paginate([big, small], items=10)
    assert all(sum(1 + len(h.rows) + len(h.pieces) for h in p) <= 10 for p in pages)
    codec = wire_codec(RUNTIME_TABLE)
    replies = [
        TreeReply(1, i, i + 1 < len(pages), "ready", p, [], None) for i, p in enumerate(pages)
    ]
    back = [codec.decode(codec.encode(r)) for r in replies]
    assert back == replies
    snap = snapshot_from({"p": [r for r in back if isinstance(r, TreeReply)]})
    assert sorted(len(n.pieces) for n in snap.nodes) == [1, 25]
    assert len({p.key for n in snap.nodes for p in n.pieces}) == 25


def test_a_malformed_tree_reply_is_refused() -> None:
    codec = wire_codec(RUNTIME_TABLE)
    good = codec.encode(TreeRequest(3, 0))
    with pytest.raises(WireError):
        codec.decode(good[:-1])
    too_many = [WireHosted("s", WireTid(0, 0, 0), True, True, [], [])] * (TREE_PAGE_ITEMS + 1)
    with pytest.raises(WireError):
        codec.decode(b"\x01" + codec.raw_encode(TreeReply(1, 0, False, "ready", too_many, [])))


def test_live_allowances_and_a_lost_copy() -> None:
    """A node with one copy too few is reported, live or strict; an extra stale copy only
    strict."""
    from rangecast.testkit.snapshot import Domain, HostedNode, TreeConfig, TreeSnapshot

    root = TreeId(0, 0, 0)
    schemas = {"s": (Domain("a", 0.0, 1.0),)}

    def snap(holders: int) -> TreeSnapshot:
        nodes = [HostedNode(str(i), "s", root, i == 0, True) for i in range(holders)]
        return TreeSnapshot(tuple(str(i) for i in range(5)), tuple(nodes), schemas, TreeConfig())

    assert check_live(snap(3)) == [] and check_live(snap(3), strict=True) == []
    assert check_live(snap(4)) == []
    assert [v.kind for v in check_live(snap(4), strict=True)] == [Kind.REPLICAS_EXTRA]
    assert [v.kind for v in check_live(snap(2))] == [Kind.REPLICAS_MISSING]


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--dir", "/nonexistent/swarm"], "/nonexistent/swarm"),
        (["--via", "127.0.0.1:notaport"], "127.0.0.1:notaport"),
        (["--via", "127.0.0.1:1"], "127.0.0.1:1"),
        (["--via", "127.0.0.1:1", "--skip", "nosuch"], "nosuch"),
    ],
)
def test_bad_input_is_one_line(
    args: list[str], names: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from rangecast.cli.main import main

    assert main(["swarm", "check", *args, "--timeout", "2"]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and names in lines[0] and "Traceback" not in err


# ------------------------------------------------------------------- acceptance 2 (slow)

REPLICA_KINDS = {str(Kind.REPLICAS_MISSING), str(Kind.REPLICA_ORPHAN)}


def _check(swarm_dir: Path) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        [*RANGECAST, "swarm", "check", "--dir", str(swarm_dir), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


@pytest.mark.slow
def test_sixteen_peers_clean_then_lost_copies_then_clean(tmp_path: Path) -> None:
    import trio

    from rangecast.pubsub.schema import THESIS_SCHEMA
    from rangecast.runtime.client import connect
    from rangecast.sim.workload import thesis_workload
    from rangecast.testkit.live import collect

    n = 16
    base = free_base(n)
    swarm_dir = tmp_path / "swarm"
    # A small leaf capacity: the trees split and their nodes spread over the swarm.
    up = rc(
        "swarm", "up", "-n", str(n), "--dir", str(swarm_dir), "--base-port", str(base),
        "--capacity", "20", "--id-difficulty", "0",
    )  # fmt: skip
    assert up.returncode == 0, up.stderr
    info = json.loads((swarm_dir / "swarm.json").read_text())
    addresses = [p["address"] for p in info["peers"]]
    rng = random.Random(20)
    workload = thesis_workload(random.Random(200))
    subs = [workload.subscription(rng).describe(THESIS_SCHEMA) for _ in range(500)]
    seen: dict[str, tuple[int, dict[str, Any]]] = {}
    victim = ""
    victim_nodes: set[str] = set()

    async def main() -> None:
        nonlocal victim, victim_nodes
        # The clients stay connected: a subscription lives as long as its connection.
        async with connect("127.0.0.1", base) as a, connect("127.0.0.1", base + 1) as b:
            for k, expr in enumerate(subs):
                await (a, b)[k % 2].subscribe(expr)
            seen["healthy"] = await trio.to_thread.run_sync(_check, swarm_dir)
            before = await collect(addresses)
            held: dict[str, set[str]] = {}
            for node in before.snapshot.nodes:
                held.setdefault(node.peer, set()).add(before.snapshot.name(node.schema, node.tid))
            # The victim: the peer holding the most copies, not one the clients use.
            victim = max(addresses[2:], key=lambda p: (len(held.get(p, ())), p))
            victim_nodes = held.get(victim, set())
            os.kill(info["peers"][addresses.index(victim)]["pid"], signal.SIGKILL)
            seen["lost"] = await trio.to_thread.run_sync(_check, swarm_dir)
            for _ in range(60):  # detection (12 s), promotions, new replica sets
                await trio.sleep(2.0)
                code, out = await trio.to_thread.run_sync(_check, swarm_dir)
                seen["repaired"] = (code, out)
                if code == 0:
                    break

    try:
        trio.run(main)
    finally:
        down = rc("swarm", "down", "--dir", str(swarm_dir))
    for stage in ("healthy", "lost", "repaired"):  # what -s shows
        code, out = seen[stage]
        kinds = Counter(v["kind"] for v in out["violations"])
        print(stage, code, len(out["peers"]), out["copies"], dict(kinds), out["unreachable"])
        for v in [v for v in out["violations"] if v["kind"] in REPLICA_KINDS][:4]:
            print("   ", v)
    healthy_code, healthy = seen["healthy"]
    assert (healthy_code, healthy["violations"], len(healthy["peers"])) == (0, [], n)
    lost_code, lost = seen["lost"]
    assert lost_code == 1 and victim in lost["unreachable"]
    named = {name for v in lost["violations"] if v["kind"] in REPLICA_KINDS for name in v["nodes"]}
    assert named and named <= victim_nodes
    print(f"victim {victim}: {len(victim_nodes)} copies held, {len(named)} named")
    repaired_code, repaired = seen["repaired"]
    assert (repaired_code, repaired["violations"]) == (0, [])
    assert down.returncode == 0, down.stderr
