"""The scalable route experiment (issue 15): the vectorised oracle bootstrap builds exactly the
tables the per-node bisection loop builds, and keep-alives leave a failure-free run's routing
untouched."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from rangecast.dht.ids import IdSpace
from rangecast.dht.messages import DHT_TABLE
from rangecast.dht.node import PastryConfig
from rangecast.dht.routing import Peer
from rangecast.dht.wire import codec_for
from rangecast.sim.engine import Simulator
from rangecast.sim.latency import LatencyModel, SyntheticLatency, latency_model
from rangecast.sim.network import SimNetwork, _PnsTables
from rangecast.sim.route_experiment import WALL_FIELDS, RouteParams, run_route
from rangecast.sim.streams import stream


class _NoTerms(SyntheticLatency):
    """The synthetic model without ``nearest_terms``: the bootstrap must fall back to
    ``nearest``, one slot at a time."""

    def nearest_terms(self) -> None:
        return None


def _overlay(n: int, space: IdSpace, model: LatencyModel) -> SimNetwork:
    sim = Simulator(model, stream(1, "network"), codec=codec_for(DHT_TABLE))
    net = SimNetwork(sim, 1, config=PastryConfig(space=space, keepalive_s=float("inf")))
    net.create(n)
    return net


def _tables(net: SimNetwork) -> list[tuple[list[int], list[int], list[list[int | None]]]]:
    def ident(p: Peer | None) -> int | None:
        return None if p is None else p.id

    return [
        (
            [p.id for p in node.leaves.left],
            [p.id for p in node.leaves.right],
            [[ident(p) for p in row] for row in node.table.rows],
        )
        for node in net.nodes
    ]


def _by_loop(net: SimNetwork) -> list[list[list[int]]]:
    """Every node's rows from the per-node Python loop (sorted positions)."""
    peers = net.peers
    order = sorted(range(len(peers)), key=lambda i: peers[i].id)
    tables = _PnsTables(net.space, [peers[i].id for i in order], order, net.sim.latency, 16)
    by_node: list[list[list[int]]] = [[] for _ in order]
    for k, i in enumerate(order):
        by_node[i] = [
            [-1 if p < 0 else peers[order[p]].id for p in row] for row in tables._rows_py(k)
        ]
    return by_node


@pytest.mark.parametrize(
    ("n", "space"),
    [
        (1, IdSpace()),
        (3, IdSpace()),
        (17, IdSpace()),
        (1500, IdSpace()),
        # 16-bit ids: deep rows, crowded slots and many nodes sharing long prefixes.
        (3000, IdSpace(bits=16, b=4)),
        (400, IdSpace(bits=16, b=2)),
    ],
)
def test_vectorised_bootstrap_equals_the_bisection_loop(n: int, space: IdSpace) -> None:
    net = _overlay(n, space, latency_model("synthetic", 1))
    net.oracle_bootstrap(range(n))
    want = _by_loop(net)
    got = [[[-1 if e is None else e for e in row] for row in t[2]] for t in _tables(net)]
    assert got == want
    # Leaf sets: the oracle's.
    leaves = net.oracle_leaf_sets()
    assert [t[:2] for t in _tables(net)] == [leaves[i] for i in range(n)]


def test_bootstrap_without_nearest_terms_uses_nearest() -> None:
    slow = _overlay(800, IdSpace(), _NoTerms(1))
    slow.oracle_bootstrap(range(800))
    fast = _overlay(800, IdSpace(), latency_model("synthetic", 1))
    fast.oracle_bootstrap(range(800))
    assert _tables(slow) == _tables(fast)


def _routing_fields(r: dict[str, object]) -> dict[str, object]:
    skip = {*WALL_FIELDS, "keepalives", "sim_messages", "sim_bytes", "lookup_phase"}
    out = {k: v for k, v in r.items() if k not in skip}
    by_type = dict(out.pop("messages_by_type"))  # type: ignore[call-overload]
    by_type.pop("Ping", None)
    out["messages_by_type"] = by_type
    return out


def test_keepalives_off_when_nothing_can_fail_changes_no_routing_decision() -> None:
    auto = run_route(RouteParams(nodes=400, lookups=800, seed=5))
    on = run_route(RouteParams(nodes=400, lookups=800, seed=5, keepalives="on"))
    assert auto["keepalives"] is False and on["keepalives"] is True
    assert "Ping" not in auto["messages_by_type"] and on["messages_by_type"]["Ping"]["messages"]
    assert auto["correct_root_fraction"] == 1.0
    assert _routing_fields(auto) == _routing_fields(on)
    # Failures, loss or the join protocol need them: "auto" keeps them on.
    assert RouteParams(fail=0.1).keepalives_on() and RouteParams(loss=0.01).keepalives_on()
    assert RouteParams(bootstrap="join").keepalives_on()
    assert not RouteParams(keepalives="off", fail=0.1).keepalives_on()


def test_nearest_terms_describe_nearest() -> None:
    model = latency_model("synthetic", 3)
    model.place(50, random.Random(1))
    hosts, table, addend = model.nearest_terms()  # type: ignore[misc]
    assert addend is not None
    for a in range(0, 50, 7):
        cands: Sequence[int] = [c for c in range(50) if c != a]
        best = min(cands, key=lambda c: (table[hosts[a]][hosts[c]] + addend[c], cands.index(c)))
        assert model.nearest(a, cands) == best
