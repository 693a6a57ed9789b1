"""Sweep plans' ``[for.<scenario>]`` tables (a scenario's own settings) and the shipped plans of
the papers' setups: they parse, and name only options their systems take."""

from __future__ import annotations

import pytest

from rangecast.analysis.sweep.plan import PlanError, load_plan, parse_plan, shipped_plans
from rangecast.analysis.sweep.table import render

TWO = "scenarios = ['octopia', 'padres']\n[base]\nnodes = 20\nevents = 5\n"


def test_a_scenarios_own_base_and_grid() -> None:
    text = TWO + "[for.padres.base]\ncyclic = true\ncovering = false\n"
    text += "[for.octopia.grid]\ndynamic = [false, true]\n"
    plan = parse_plan(text, "p.toml")
    assert [(r.scenario, r.settings.get("dynamic"), r.params.cyclic) for r in plan.runs] == [
        ("octopia", False, False),
        ("octopia", True, False),
        ("padres", None, True),
    ]
    assert plan.runs[1].run_id == "r001_scenario-octopia_dynamic-on_seed-1"
    assert plan.swept() == ["dynamic"]
    assert plan.describe()["for"]["padres"]["base"] == {"cyclic": True, "covering": False}
    assert "dynamic" in render(plan, [])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("[for.kyra.base]\nmax_size = 3\n", r"\[for.kyra\]: not a scenario of this plan"),
        ("[for.padres.base]\nbogus = 1\n", r"\[for.padres.base\] bogus: unknown parameter"),
        ("[for.padres.base]\nnodes = 30\n", r"\[for.padres.base\] nodes: also set by"),
        ("[for.padres.grid]\ncyclic = true\n", r"\[for.padres.grid\] cyclic: expected a list"),
        ("[for.padres.other]\ncyclic = true\n", "holds only 'base' and 'grid'"),
        # PADRES' tree-ID routing needs covering off: the run's own check, named.
        ("[for.padres.base]\ncyclic = true\n", "padres run r001.*--covering off"),
    ],
)
def test_bad_own_tables(extra: str, message: str) -> None:
    with pytest.raises(PlanError, match=message):
        parse_plan(TWO + extra, "p.toml")


def test_papers_plans_are_shipped() -> None:
    assert {"baselines", "octopia70", "popgrape63"} <= set(shipped_plans())
    octopia = load_plan("octopia70")
    assert len(octopia.runs) == 9 * 3  # three seeds
    by = {(r.scenario, r.params.hrp_rate, r.params.dynamic) for r in octopia.runs}
    assert by == {
        *(("octopia", rate, d) for rate in (167.0, 133.0, 100.0) for d in (False, True)),
        *(("padres", rate, False) for rate in (167.0, 133.0, 100.0)),
    }
    for r in octopia.runs:
        p = r.params
        assert (p.nodes, p.clusters, p.tree, p.arity, p.workload) == (70, 5, "kary", 4, "burst")
        assert p.cyclic == (r.scenario == "padres")
        assert (p.service_ms, p.match_us, p.send_ms, p.link_mbps) == (1.0, 20.0, 1.0, 0.0)
    pg = load_plan("popgrape63")
    one_x = {
        (r.scenario, r.params.priority, r.params.link_delay)
        for r in pg.runs
        if r.params.sub_brokers == 1 and r.seed == 1
    }
    assert one_x == {
        ("padres", "load", False),
        ("pop", "load", False),
        *(("grape", pr, ld) for pr in ("load", "delay") for ld in (False, True)),
    }
    assert {r.params.sub_brokers for r in pg.runs} == {0, 1, 4, 8}
    assert len(pg.runs) == 6 * 4 * 3 and all(r.params.warmup == 0.5 for r in pg.runs)
    # Service times on: the trace answers carry queueing and matching delays.
    assert all((r.params.service_ms, r.params.match_us, r.params.send_ms) == (1.0, 20.0, 1.0)
               for r in pg.runs)  # fmt: skip
    assert all(
        (r.params.nodes, r.params.arity, r.params.latency, r.params.workload)
        == (63, 2, "planetlab", "clustered")
        for r in pg.runs
    )


def test_octopia_against_tid_varies_placement_and_the_service_model() -> None:
    """Every (rate, placement, service) cell runs OctopiA SNR, IDR and PADRES-TID on the same
    seeds, so each is a like-for-like comparison."""
    plan = load_plan("octopia-tid")
    cells: dict[tuple[float, str, float, float, int], set[tuple[str, bool]]] = {}
    for r in plan.runs:
        p = r.params
        key = (p.hrp_rate, p.placement, p.service_ms, p.match_us, r.seed)
        cells.setdefault(key, set()).add((r.scenario, p.dynamic))
        assert p.cyclic == (r.scenario == "padres") and p.send_ms == 1.0
    assert len(cells) == 2 * 2 * 2 * 2 * 3
    assert all(
        v == {("octopia", False), ("octopia", True), ("padres", False)} for v in cells.values()
    )
    assert {(k[2], k[3]) for k in cells} == {(1.0, 20.0), (1.0, 0.0), (7.0, 20.0), (7.0, 0.0)}


def test_popgrape_studies_are_shipped() -> None:
    """The random workload (Fig. 5g), the weight study (Fig. 5h) and the thresholds (Figs.
    6d-h), each on the popgrape63 set-up with service times on."""
    studies = {"popgrape-random": 36, "grape-weights": 60, "popgrape-thresholds": 33}
    subscribers = load_plan("octopia-subscribers")
    assert len(subscribers.runs) == 2 * 6 * 3
    assert {round(r.params.nodes * r.params.subs_per_node) for r in subscribers.runs} == {
        500,
        1000,
        2000,
        3000,
        4000,
        5000,
    }
    for name, runs in studies.items():
        plan = load_plan(name)
        assert len(plan.runs) == runs, name
        for r in plan.runs:
            p = r.params
            assert (p.nodes, p.latency, p.warmup, p.service_ms) == (63, "planetlab", 0.5, 1.0)
    weights = load_plan("grape-weights")
    assert {r.params.weight for r in weights.runs} == {1.0, 25.0, 50.0, 75.0, 100.0}
    assert {r.params.workload for r in weights.runs} == {"clustered", "random"}
    assert {r.params.workload for r in load_plan("popgrape-random").runs} == {"random"}
    thresholds = load_plan("popgrape-thresholds")
    assert {r.params.threshold for r in thresholds.runs if r.scenario != "padres"} == {
        10,
        25,
        50,
        100,
        200,
    }
