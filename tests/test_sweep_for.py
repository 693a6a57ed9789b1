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
    assert len(octopia.runs) == 9
    by = {(r.scenario, r.params.hrp_rate, r.params.dynamic) for r in octopia.runs}
    assert by == {
        *(("octopia", rate, d) for rate in (167.0, 133.0, 100.0) for d in (False, True)),
        *(("padres", rate, False) for rate in (167.0, 133.0, 100.0)),
    }
    for r in octopia.runs:
        p = r.params
        assert (p.nodes, p.clusters, p.tree, p.arity, p.workload) == (70, 5, "kary", 4, "burst")
        assert p.cyclic == (r.scenario == "padres") and p.link_mbps == 0.05
    pg = load_plan("popgrape63")
    assert [(r.scenario, r.params.priority) for r in pg.runs] == [
        ("padres", "load"),
        ("pop", "load"),
        ("grape", "load"),
        ("grape", "delay"),
    ]
    assert all(
        (r.params.nodes, r.params.arity, r.params.latency, r.params.workload)
        == (63, 2, "planetlab", "clustered")
        for r in pg.runs
    )
