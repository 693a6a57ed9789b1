"""Issue 29: subscription load within every client quota, against separate ``rangecast peer
start`` processes at their default limits, must not turn into false failures. Two attacks the
red team ran on a 6-12 peer swarm, each followed by the suite's checks: every peer process
alive, its memory bounded, no peer declared failed or demoted by another (every peer here is
honest), nothing of the attack left as an internal error, and a subscribe/publish round equal
to the brute-force oracle once the attacker has gone.

* 10,000 random subscriptions from 3 client addresses (4 connections each, under the 1,000 per
  connection and 4,000 per address defaults);
* 4,500 near-identical subscriptions (the same ranges but one bound nudged by 0.001) through
  one peer from 2 addresses (before: an equality check passed them all; 270-566 KB
  replication messages, honest peers declaring 151-280 peers failed): now of one kind for the
  identical-subscription quota (``quotas.similar``), 16 per address;
* 3,000 subscriptions whose base is one point of Attr1 (each of its own kind, so only the leaf
  can bound them): the leaf refuses past half a frame and past one subscriber peer's share
  (``max_leaf_bytes``, ``max_leaf_share``; tests/test_leaf_bytes.py).

Figures measured: docs/runtime.md, "Attack suite"."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import AsyncExitStack
from typing import Any

import pytest
import trio
from live_swarm import (
    LiveSwarm,
    exchange,
    leaf_sets_full,
    open_from,
    sample_rss,
    status,
    wait_for,
)
from runtime_harness import oracle_round

from rangecast.pubsub.schema import THESIS_SCHEMA
from rangecast.pubsub.subscription import parse_subscription
from rangecast.runtime.messages import SubscribeReply, SubscribeRequest
from rangecast.runtime.quotas import similar

pytestmark = pytest.mark.slow

N = 6
#: Resident memory any peer may reach (MiB): a peer at rest is about 121 MiB; 10,000
#: subscriptions' pieces and replicas spread over 6 peers add a few tens.
RSS_BOUND_MIB = 320.0
MEASURED: dict[str, dict[str, Any]] = {}


@pytest.fixture(scope="module")
def swarm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveSwarm]:
    s = LiveSwarm(tmp_path_factory.mktemp("subload"), N, {}, ["--id-difficulty", "0"])
    try:
        assert trio.run(wait_for, lambda: leaf_sets_full(s.ports), 120)
        yield s
    finally:
        s.stop()
        for name, m in MEASURED.items():
            print(f"{name}: {m}")


def _random_expr(rng: random.Random) -> str:
    a, b = sorted(rng.uniform(0.0, 200.0) for _ in range(2))
    c, d = sorted(rng.uniform(0.0, 200.0) for _ in range(2))
    return f"Attr1 between {a:.3f} and {b:.3f} and Attr3 between {c:.3f} and {d:.3f}"


def _near_identical(k: int) -> str:
    return f"Attr1 between 10 and 20 and Attr2 between 10 and 20 and Attr4 >= {1 + k * 0.001:.3f}"


async def _flood(port: int, sources: list[str], exprs: list[str], per_conn: int) -> dict[str, Any]:
    """Send ``exprs`` over connections of ``per_conn`` each, round robin over ``sources``,
    holding every connection open until all are answered, then closing them."""
    accepted = refused = 0
    errors: set[str] = set()
    async with AsyncExitStack() as held:
        chunks = [exprs[i : i + per_conn] for i in range(0, len(exprs), per_conn)]
        for c, chunk in enumerate(chunks):
            stream = await held.enter_async_context(
                await open_from(sources[c % len(sources)], port)
            )
            reqs = [SubscribeRequest(k + 1, "thesis", e) for k, e in enumerate(chunk)]
            for r in await exchange(stream, reqs):
                assert isinstance(r, SubscribeReply)
                accepted += not r.error
                refused += bool(r.error)
                if r.error:
                    errors.add(r.error)
    return {"accepted": accepted, "refused": refused, "errors": sorted(errors)}


def _failures(states: list[dict[str, Any]]) -> tuple[int, int]:
    """Peers declared failed and next hops demoted, over every peer's status."""
    failed = sum(int(st["dht"]["peers_failed"]) for st in states)
    e2e = [st["dht"]["end_to_end"] for st in states if st["dht"]["end_to_end"]]
    return failed, sum(int(e["demoted"]) for e in e2e)


def _check(swarm: LiveSwarm, name: str, peaks: list[float], seed: int) -> list[dict[str, Any]]:
    assert swarm.alive() == [True] * N, [swarm.log(i)[-2000:] for i in range(N)]
    assert max(peaks) < RSS_BOUND_MIB, (name, peaks)
    ports = swarm.ports

    async def round_and_states() -> tuple[tuple[int, int, int], list[dict[str, Any]]]:
        with trio.fail_after(30):  # the oracle round within 30 s of the attack's end
            oracle = await oracle_round((ports[2], ports[3]), (ports[4], ports[5]), seed, 30, 40)
        return oracle, [await status(p) for p in ports]

    oracle, states = trio.run(round_and_states)
    assert oracle == (0, 0, 0), name
    failed, demoted = _failures(states)
    assert (failed, demoted) == (0, 0), (name, failed, demoted)
    for st in states:
        assert st["state"] == "ready" and st["internal_errors"] == 0, st["internal_errors"]
    return states


def test_random_subscriptions_from_three_addresses(swarm: LiveSwarm) -> None:
    rng = random.Random(29)
    exprs = [_random_expr(rng) for _ in range(10_000)]
    sources = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
    port = swarm.ports[1]
    out, _, peaks = trio.run(sample_rss, swarm, lambda: _flood(port, sources, exprs, 834))
    assert out["accepted"] + out["refused"] == 10_000
    states = _check(swarm, "10,000 random subscriptions", peaks, seed=291)
    MEASURED["random"] = {
        **out,
        "rss_peak_mib": round(max(peaks), 1),
        "pieces_refused": sum(st["overlay"]["refused"] for st in states),
    }


def test_near_identical_subscriptions_are_bounded_not_fatal(swarm: LiveSwarm) -> None:
    exprs = [_near_identical(k) for k in range(4_500)]
    port = swarm.ports[0]
    out, _, peaks = trio.run(
        sample_rss, swarm, lambda: _flood(port, ["127.0.0.5", "127.0.0.6"], exprs, 900)
    )
    states = _check(swarm, "4,500 near-identical subscriptions", peaks, seed=292)
    # At most 16 of a kind an address (the identical-subscription quota), the rest refused.
    kinds = {similar(parse_subscription(e, THESIS_SCHEMA), THESIS_SCHEMA) for e in exprs}
    assert 0 < out["accepted"] <= 2 * 16 * len(kinds) < 4_500
    assert out["errors"] and all("at most 16 subscriptions identical" in e for e in out["errors"])
    refused = sum(st["overlay"]["refused"] + st["overlay"]["refused_share"] for st in states)
    MEASURED["near-identical"] = {
        **out,
        "rss_peak_mib": round(max(peaks), 1),
        "pieces_refused": refused,
    }


def test_subscriptions_at_one_point_are_refused_past_the_leaf_bound(swarm: LiveSwarm) -> None:
    """3,000 subscriptions spanning Attr1's whole domain (and each of its own kind on Attr2):
    whichever
    picks Attr1 as its base is stored at the one point (min, max), which no split separates;
    that leaf refuses what would take it past half a frame or past the subscriber peer's
    share, and the swarm goes on."""
    # Attr2's bound 5 apart (a cell of the identical-subscription quota is 20,000 / 4,096):
    # each of another kind, so that the client quotas pass them and the leaf is what bounds.
    exprs = [f"Attr1 >= 0 and Attr2 >= {-10_000 + k * 5.0:.1f}" for k in range(3_000)]
    port = swarm.ports[5]
    out, _, peaks = trio.run(
        sample_rss, swarm, lambda: _flood(port, ["127.0.0.7", "127.0.0.8"], exprs, 750)
    )
    states = _check(swarm, "3,000 subscriptions at one point", peaks, seed=293)
    refused = sum(st["overlay"]["refused"] + st["overlay"]["refused_share"] for st in states)
    assert out["refused"] > 0 and refused > 0
    assert all("a tree leaf is full" in e for e in out["errors"])
    MEASURED["one point"] = {**out, "rss_peak_mib": round(max(peaks), 1), "pieces_refused": refused}


#: A peer of the attacker's own, started with its client limits raised past anything the
#: subscriptions below would reach (``RANGECAST_TEST_TUNING`` stands for the attacker's build).
RAISED = ",".join(
    (
        "quotas.subscriptions_per_connection=20000",
        "quotas.subscriptions_per_address=100000",
        "quotas.identical_subscriptions_per_address=100000",
    )
)


def test_a_peer_of_ones_own_with_raised_limits_is_bounded_by_the_others(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The red team's peer of its own with raised client limits put 7,626 subscriptions into
    the swarm. Its own quotas are its own; what bounds it is what the storing peers charge to
    it as the subscriber peer: at most ``max_leaf_share`` of a leaf's bytes
    (``overlay.refused_share``). Through it, from one address: 7,626 near-identical
    subscriptions (leaves split on their distinct bounds: stored, and measured), then 7,626
    whose base is one point of Attr1 (no split separates them: the storing peer refuses past
    its share). Every peer stays up within the memory bound, no peer is declared failed or
    demoted, and a round through the other peers equals the oracle within 30 s."""
    env = {0: {"RANGECAST_TEST_TUNING": RAISED}}
    s = LiveSwarm(tmp_path_factory.mktemp("raised"), N, env, ["--id-difficulty", "0"])
    try:
        assert trio.run(wait_for, lambda: leaf_sets_full(s.ports), 120)
        near = [_near_identical(k) for k in range(7_626)]
        point = [f"Attr1 >= 0 and Attr2 >= {-10_000 + k * 2.5:.1f}" for k in range(7_626)]
        port = s.ports[0]

        async def both() -> tuple[dict[str, Any], dict[str, Any]]:
            return (
                await _flood(port, ["127.0.0.9"], near, 7_626),
                await _flood(port, ["127.0.0.10"], point, 7_626),
            )

        (spread, bounded), _, peaks = trio.run(sample_rss, s, both)
        states = _check(s, "7,626 + 7,626 subscriptions through raised limits", peaks, 294)
        share = sum(st["overlay"]["refused_share"] for st in states[1:])
        MEASURED["raised limits"] = {
            "near_identical": spread,
            "one_point": {k: v for k, v in bounded.items() if k != "errors"},
            "rss_peak_mib": round(max(peaks), 1),
            "refused_share": share,
        }
        print(f"raised limits: {MEASURED['raised limits']}")
        assert spread["accepted"] == 7_626  # its own limits let them through, the tree holds them
        assert bounded["refused"] > 0 and share > 0
        assert all("a tree leaf is full" in e for e in bounded["errors"])
    finally:
        s.stop()
