"""Our model of the LBDD paper's testbed (issue 27): host uplinks U and a per-flow cap f.

The paper states neither number; the model says LBDD's rate is min(f, U / max out-degree) and
point-to-point's min(f, U / n), and the publisher's load is what its flows send over U. These
tests check the simulator does that (values of simulated time, deterministic per seed), that the
reproduction's plans run the paper's rule, and that the LBDD figures' verdicts and causes follow
the numbers.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rangecast.analysis.reproduce.evaluate import LBDD_FIGURES, RunRecord
from rangecast.analysis.reproduce.lbdd import lbdd_figures
from rangecast.analysis.reproduce.plans import FULL, QUICK, lbdd_plans
from rangecast.sim.lbdd_experiment import (
    TESTBED_FLOW_MBPS,
    TESTBED_UPLINK_MBPS,
    LbddParams,
    run_lbdd,
)

RANGECAST = str(Path(sys.executable).parent / "rangecast")
U, F = TESTBED_UPLINK_MBPS, TESTBED_FLOW_MBPS


def test_the_testbed_numbers_follow_from_the_papers_sentences() -> None:
    # 11 copies of 8 GiB in 7,810 s; LBDD "around 24 Mbit/s".
    assert pytest.approx(11 * 8 * 2**30 * 8 / 7810 / 1e6, abs=0.05) == U
    assert F == 24.0


@pytest.mark.parametrize("n", [3, 6])
def test_flow_cap_sets_rates_and_publisher_load(n: int) -> None:
    r = run_lbdd(
        LbddParams(subscribers=n, seed=2, data_bytes=32 * 1024**2, uplink_mbps=U, flow_mbps=F)
    )
    assert r["ok"] and r["all_bytes_exactly_once"] and r["p2p_all_bytes_exactly_once"]
    # Point-to-point: n flows of at most f share the publisher's U.
    p2p = min(F, U / n)
    assert r["p2p_rate_mbps"] == pytest.approx(p2p, rel=0.1)
    assert r["p2p_publisher_load"] == pytest.approx(min(1.0, n * F / U), rel=0.1)
    # LBDD: the busiest forwarder gives each child min(f, U / children).
    lbdd = min(F, U / r["max_out_degree"])
    assert r["lbdd_rate_mbps"] == pytest.approx(lbdd, rel=0.1)
    assert r["lbdd_publisher_load"] == pytest.approx(r["publisher_copies"] * lbdd / U, rel=0.1)
    assert r["flow_mbps"] == F


def test_without_the_cap_one_flow_fills_the_uplink() -> None:
    r = run_lbdd(
        LbddParams(subscribers=1, seed=1, data_bytes=64 * 1024**2, uplink_mbps=U, flow_mbps=0.0)
    )
    assert r["flow_mbps"] == 0.0
    assert r["p2p_rate_mbps"] == pytest.approx(U, rel=0.1)
    assert r["p2p_publisher_load"] == pytest.approx(1.0, abs=0.1)


def test_negative_flow_cap_is_one_line_exit_2() -> None:
    p = subprocess.run(
        [RANGECAST, "sim", "lbdd", "--flow-mbps", "-1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "--flow-mbps" in lines[0]


def test_plans_run_the_papers_rule_on_the_testbed_model() -> None:
    for size in (FULL, QUICK):
        plans = {p.name: p for p in lbdd_plans(size)}
        assert set(plans) == {"lbdd-trees", "lbdd-rate", "lbdd-rate-nocap", "lbdd-8gb", "lbdd-near"}
        for name, plan in plans.items():
            for run in plan.runs:
                p = run.params
                assert p.near_bucket is (name == "lbdd-near")
                if name in ("lbdd-rate", "lbdd-8gb"):
                    assert (p.uplink_mbps, p.flow_mbps) == (U, F)
                if name == "lbdd-rate-nocap":
                    assert (p.uplink_mbps, p.flow_mbps) == (U, 0.0)
    assert len(FULL.seeds) >= 5
    assert tuple(FULL.rate_subscribers) == tuple(range(1, 12))


# ---------------------------------------------------------------- figures from the numbers


def _rec(part: str, seed: int, n: int, **values: Any) -> RunRecord:
    params = {"subscribers": n, "data_bytes": values.get("data_bytes", 2**28)}
    params.update({k: values.pop(k) for k in ("flow_mbps",) if k in values})
    return RunRecord(f"/r/{part}-{n}-{seed}", part, seed, params, values, "synthetic", 147.0)


def _transfer(n: int, maxdeg: int, copies: int, cap: bool) -> dict[str, Any]:
    """The model's values for one run (no simulator)."""
    f = F if cap else float("inf")
    lb = min(f, U / maxdeg)
    pp = min(f, U / n)
    size = 2**28
    return {
        "data_bytes": size,
        "max_out_degree": maxdeg,
        "publisher_copies": copies,
        "lbdd_rate_mbps": lb,
        "p2p_rate_mbps": pp,
        "lbdd_publisher_load": copies * lb / U,
        "p2p_publisher_load": min(1.0, n * pp / U),
        "lbdd_time_s": size * 8 / lb / 1e6,
        "p2p_time_s": size * 8 / pp / 1e6,
        "p2p_over_lbdd": lb / pp,
    }


def _records(copies: int) -> list[RunRecord]:
    recs = []
    for seed in (1, 2, 3):
        for n in range(1, 12):
            maxdeg = min(n, 2 + seed % 2)
            pub = min(n, copies)
            recs.append(_rec("lbdd-rate", seed, n, **_transfer(n, maxdeg, pub, True)))
            recs.append(_rec("lbdd-rate-nocap", seed, n, **_transfer(n, maxdeg, pub, False)))
        recs.append(_rec("lbdd-8gb", seed, 11, **_transfer(11, 2 + seed % 2, copies, True)))
    return recs


def _figure(figs: list[Any], name: str) -> Any:
    return next(f for f in figs if f.figure == name)


def test_model_values_reproduce_fig2_and_fig3_and_name_the_cause_removed_run() -> None:
    figs = lbdd_figures(_records(copies=2))
    # No lbdd-trees or lbdd-near runs here: the figures the runs allow, in page order.
    assert [f.figure for f in figs] == [f for f in LBDD_FIGURES if f != "LBDD-near"]
    rate = _figure(figs, "LBDD-rate")
    verdicts = {c.quantity: c.verdict for c in rate.checks}
    assert verdicts[next(q for q in verdicts if q.startswith("LBDD rate, n = 11"))] == "reproduced"
    flat = next(c for c in rate.checks if "over n = 1 (flat" in c.quantity)
    assert flat.reproduced and flat.ours is not None and flat.ours.mean == pytest.approx(1.0)
    removed = next(c for c in rate.checks if c.quantity.startswith("cause removed"))
    assert removed.verdict == "n/a" and removed.ours is not None and removed.ours.mean < 0.5
    # The caption's numbers are the series' numbers.
    lb0 = dict(rate.series["LBDD, no flow cap"])
    assert f"{lb0[1].mean:.1f}" in rate.caption and f"{lb0[11].mean:.1f}" in rate.caption
    load = _figure(figs, "LBDD-load")
    under = next(c for c in load.checks if c.quantity.startswith("LBDD publisher load, highest"))
    assert under.reproduced and under.cause is None  # 2 copies x 24 / 96.8 = 50%
    six = next(c for c in load.checks if "n = 6" in c.quantity)
    assert six.reproduced
    big = _figure(figs, "LBDD-8GB")
    assert all(c.verdict in ("reproduced", "n/a") for c in big.checks)


def test_a_check_outside_tolerance_carries_a_cause_measured_by_a_part() -> None:
    figs = lbdd_figures(_records(copies=3))  # 3 copies x 24 / 96.8 = 74% > 70%
    load = _figure(figs, "LBDD-load")
    under = next(c for c in load.checks if c.quantity.startswith("LBDD publisher load, highest"))
    assert under.verdict == "differs, explained"
    assert under.cause is not None and under.cause.measured_by == ("lbdd-rate",)
    assert "3.00 x 24 / 96.8 = 74%" in under.cause.text
