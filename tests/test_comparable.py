"""The one rule deciding whether a run is the thesis' setting (sim.comparable), as the run's
summary, the report and the reproduction's page apply it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from rangecast.sim.comparable import (
    THESIS_EVENTS,
    THESIS_NETWORK_SIZES,
    THESIS_NODES,
    THESIS_SUBSCRIPTIONS,
    thesis_comparison,
)
from rangecast.sim.thesis_experiment import ThesisParams
from rangecast.sim.thesis_experiment import thesis_comparison as summary_rule


def _params(**kw: object) -> dict[str, object]:
    return dataclasses.asdict(ThesisParams(**kw))  # type: ignore[arg-type]


def test_our_defaults_are_the_thesis_setting() -> None:
    got = thesis_comparison(_params(), THESIS_SUBSCRIPTIONS, THESIS_EVENTS)
    assert got.applies and got.differences == ()
    # A plan that names only the size: the rest is the thesis'.
    assert thesis_comparison({"nodes": 1000, "events": 10_000}).applies


def test_differences_are_named() -> None:
    got = thesis_comparison(_params(nodes=100, events_from="x/air.csv", lb=True), 500, 10_000)
    assert not got.applies
    assert got.differences == (
        "100 nodes, thesis ran 1,000",
        "500 subscriptions, thesis installed 5,000",
        "events from air.csv, thesis generated its own (Table 4.3)",
        "load balancing on, thesis' figures are without it",
    )
    assert got.text().startswith("Not the thesis' setting (100 nodes")


def test_run_json_params_read_like_the_dataclass() -> None:
    # run.json nests the overlay's knobs and writes tuples as lists.
    params = json.loads(json.dumps(_params(), default=lambda x: None))
    params["overlay"]["probe"] = "multicast"
    got = thesis_comparison(params, 5000, 10_000)
    assert got.differences == ("multicast probes, thesis probed by unicast",)
    assert thesis_comparison(params, 5000, 10_000, vary=("probe",)).applies


def test_vary_nodes_takes_table_4_5_sizes() -> None:
    assert thesis_comparison({"nodes": 3000}, vary=("nodes",)).applies
    got = thesis_comparison({"nodes": 200}, vary=("nodes",))
    assert got.differences[0] == "200 nodes, thesis ran 1,000, 1,740, 3,000, 4,000, 5,000"
    assert not thesis_comparison({"nodes": 3000}).applies
    with pytest.raises(ValueError):
        thesis_comparison({}, vary=("seed",))


def test_the_summary_calls_the_rule() -> None:
    p = ThesisParams(nodes=200, events=2000)
    assert (
        summary_rule(p, 1000, 2000)
        == thesis_comparison(dataclasses.asdict(p), 1000, 2000).as_dict()
    )
    assert summary_rule(ThesisParams(), THESIS_SUBSCRIPTIONS, THESIS_EVENTS)["applies"]
    assert THESIS_NODES == 1000


def test_report_and_reproduce_call_the_rule() -> None:
    # One rule: the report and the reproduction's page import it rather than decide alone.
    root = Path(__file__).resolve().parent.parent
    users = (
        "analysis/report/build.py",
        "analysis/report/paper.py",
        "analysis/reproduce/page.py",
        "analysis/reproduce/notes.py",
        "analysis/reproduce/evaluate.py",
    )
    for path in users:
        assert "rangecast.sim.comparable" in (root / path).read_text(), path


def test_the_thesis_setting_is_written_once() -> None:
    # No second copy of the thesis' size that could drift from the rule's.
    import rangecast.analysis.report.paper as paper

    root = Path(__file__).resolve().parent.parent
    for folder in ("analysis", "sim", "cli"):
        for path in (root / folder).rglob("*.py"):
            if path.name != "comparable.py":
                assert "THESIS_NODES =" not in path.read_text(), path
    assert tuple(paper.THESIS_RTT_BY_SIZE_MS) == THESIS_NETWORK_SIZES
