"""The experiment harness (sim.scenario): options generated from the parameter dataclasses,
results whose JSON keeps the documented keys, a scenario defined here running end to end, and
the crash-root example of docs/scenarios.md."""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import pytest

from rangecast.cli.main import build_parser, main
from rangecast.cli.options import add_params, params_from_args
from rangecast.sim.crash_root_experiment import CrashRoot, CrashRootParams
from rangecast.sim.registry import SCENARIOS
from rangecast.sim.scenario import (
    Option,
    Result,
    RunResult,
    Scenario,
    build_params,
    entries,
    group,
    param,
    plan_keys,
)
from rangecast.sim.thesis_experiment import ThesisParams

#: The keys each command's --json printed before the harness (small runs, default modes).
KEYS = {
    "route": "bootstrap correct_root_fraction delivered dht duplicate_deliveries failed_nodes "
    "keepalives latency_model live_nodes log16_n lookup lookup_phase lookups max_hops "
    "mean_hops mean_latency_ms messages_by_type nodes p99_hops root_cache seed sim_bytes "
    "sim_messages sim_messages_per_s sim_time_s wall_phases_s wall_s",
    "thesis": "bytes_per_event bytes_per_subscription deliveries delivery "
    "delivery_bytes_per_event_per_node delivery_latency_ms delivery_latency_rtt dht "
    "dht_totals duplicates events events_from expected_deliveries false_positives installed "
    "install_bytes_per_sub_per_node install_bytes_per_sub_per_node_mean install_latency_ms "
    "install_latency_rtt install_phase_bytes install_phase_messages latency_model lb lookup "
    "matchings_per_event mean_rtt_ms messages_by_type messages_per_event "
    "messages_per_subscription missed nodes "
    "overlay partial probe probe_bytes_per_event_per_node publish_bytes_per_event_per_node "
    "root_cache schema seed sim_messages sim_messages_per_s sim_time_s subscriptions "
    "thesis_comparison traffic_ms_per_event tree wall_phases_s wall_s",
    "churn": "crashed deliveries delivery_recall dht dht_repair_bytes dht_repair_messages "
    "duplicates events expected_deliveries fail_fraction false_positives joins "
    "joins_completed latency_model lookup nodes overlay pieces_in_lost_sets repair_bytes "
    "repair_messages replicas replication_bytes_while_installing "
    "replication_messages_while_installing root_cache seed sim_messages sim_time_s "
    "subscriptions subscriptions_installed subscriptions_live subscriptions_lost "
    "whole_sets_lost wall_s",
    "lbdd": "bucket_max bucket_min depth ideal_ratio latency_model list_version "
    "max_out_degree mean_out_degree near_bucket near_floor ok other_rule out_degree_histogram "
    "publisher_contribution publisher_copies seed subscribers tree_problems tree_valid "
    "wall_phases_s wall_s",
}
SMALL = {
    "route": ["sim", "route", "--nodes", "40", "--lookups", "20"],
    "thesis": ["sim", "run", "thesis", "--nodes", "40", "--subs-per-node", "1", "--events", "10"],
    "churn": ["sim", "churn", "--nodes", "40", "--events", "10"],
    "lbdd": ["sim", "lbdd", "--subscribers", "5"],
}


@pytest.mark.parametrize("name", sorted(KEYS))
def test_json_keys_are_the_documented_ones(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*SMALL[name], "--json", "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert sorted(json.loads(out)) == sorted(KEYS[name].split())


def test_options_come_from_the_dataclass_with_one_default_and_help() -> None:
    parser = argparse.ArgumentParser()
    add_params(parser, ThesisParams)
    actions = {a.dest: a for a in parser._actions}
    for entry in entries(ThesisParams):
        action = actions[entry.name]
        if entry.option is not None and entry.option.style == "value":
            assert action.default == entry.default, entry.name
            assert action.help == entry.option.help
    # The nested OverlayConfig keeps its own defaults; "lb" is shown as on/off.
    assert actions["min_level"].default == 3 and actions["lb"].default == "off"
    params = params_from_args(ThesisParams, parser.parse_args([]))
    assert params == ThesisParams()
    args = parser.parse_args(["--lb", "on", "--probe", "multicast", "--nodes", "7"])
    got = params_from_args(ThesisParams, args)
    assert (got.lb, got.overlay.probe, got.nodes) == (True, "multicast", 7)


def test_plan_keys_and_cli_build_the_same_params() -> None:
    keys = plan_keys(ThesisParams)
    assert "seed" not in keys and "overlay" not in keys and "load_balancing" not in keys
    assert {"nodes", "min_level", "probe", "capacity", "dht"} <= set(keys)
    built = build_params(ThesisParams, {"nodes": 9, "probe": "multicast"})
    assert built.nodes == 9 and built.overlay.probe == "multicast"


def test_every_registered_scenario_has_a_command() -> None:
    parser = build_parser()
    for scenario in SCENARIOS.values():
        args = parser.parse_args(["sim", *scenario.command, "--quiet"])
        assert args.func is not None
        assert params_from_args(scenario.params_type, args) == scenario.params_type()


# ---------------------------------------------------------------- a scenario defined here


@dataclass(frozen=True, slots=True)
class EchoParams:
    nodes: int = param(30, "overlay size")
    seed: int = param(1, "seed of every random stream")
    latency: str = "synthetic"
    dht: str = "pastry"
    lookup: str = "iterative"
    root_cache: int = 0

    def check(self) -> None:
        pass


@dataclass(kw_only=True, slots=True)
class EchoResult(RunResult):
    nodes: int
    messages: int


class Echo(Scenario[EchoParams, EchoResult]):
    """Crash nobody, route nothing: the harness alone (set-up, bootstrap, result, run log)."""

    name = "echo"
    command = ("echo",)
    help = "a toy"
    params_type = EchoParams

    def workload(self) -> None:
        self.sim.run(until=1.0)

    def check(self) -> EchoResult:
        return EchoResult(
            nodes=len(self.net.nodes),
            messages=self.sim.stats.messages,
            seed=self.params.seed,
            latency_model=self.model.describe(),
            wall_s=self.elapsed(),
        )


def test_a_toy_scenario_runs_end_to_end(tmp_path: Any) -> None:
    result = Echo().run(EchoParams(), out=tmp_path / "log")
    assert result.json()["nodes"] == 30 and result.succeeded()
    doc = json.loads((tmp_path / "log" / "run.json").read_text())
    assert doc["kind"] == "echo" and doc["params"]["scenario"] == "echo"
    assert doc["summary"] == result.json()
    parser = argparse.ArgumentParser()
    add_params(parser, EchoParams)
    assert params_from_args(EchoParams, parser.parse_args(["--nodes", "5"])).nodes == 5


def test_optional_and_grouped_fields() -> None:
    assert [f.name for f in fields(Result)] == []
    opt = Option("x", choices=("a", "b"))
    assert opt.style == "value"
    assert group(dict).metadata["group"]["config"] is dict


# ----------------------------------------------------------------- the crash-root example


def test_crash_root_loses_nothing_with_three_replicas() -> None:
    params = CrashRootParams(nodes=60, subs_per_node=1.0, events=60, repair_s=40.0)
    result = CrashRoot().run(params)
    assert result.pieces_at_crashed_root > 0
    verdict = result.verdict
    assert verdict.expected_deliveries > 0
    assert verdict.missed == verdict.duplicates == verdict.false_positives == 0
    assert result.subscriptions_lost == 0 and result.succeeded()
    assert verdict.deliveries == verdict.expected_deliveries


def test_the_example_in_the_docs_is_the_module() -> None:
    """docs/scenarios.md shows the whole module, less its header: the text is the code."""
    root = Path(__file__).resolve().parent.parent
    doc = (root / "docs" / "scenarios.md").read_text()
    section = doc.split("## The example: crash the root of the busiest tree node", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None
    source = (root / "sim" / "crash_root_experiment.py").read_text()
    assert match.group(1) == source[source.index("from __future__") :]
    assert len(source.splitlines()) < 100 and "type: ignore" not in source
