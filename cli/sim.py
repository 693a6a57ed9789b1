"""``rangecast sim``: one sub-command per scenario of the registry (sim.registry), its options
generated from the scenario's parameter dataclass (cli.options), and ``sim sweep`` (cli.sweep).

Adding a scenario to the registry adds its command here; nothing in this module names one.
"""

from __future__ import annotations

import argparse
import functools
from typing import Any

from rangecast.cli.options import add_out_option, add_output_options, add_params, params_from_args
from rangecast.cli.output import emit, progress_for
from rangecast.sim.registry import SCENARIOS
from rangecast.sim.scenario import Scenario

#: Words that group scenarios under ``sim`` (``sim run thesis``): help, dest and metavar.
GROUPS = {"run": ("run a publish/subscribe scenario", "scenario", "SCENARIO")}


def _run(scenario: type[Scenario[Any, Any]], args: argparse.Namespace) -> int:
    params = params_from_args(scenario.params_type, args)
    result = scenario().run(
        params, progress=progress_for(args, scenario.name), out=args.out, force=args.force
    )
    emit(args, result.json(), result.summary)
    return 0 if result.succeeded() else 1


def add_scenario_parser(
    subs: argparse._SubParsersAction,  # type: ignore[type-arg]
    word: str,
    scenario: type[Scenario[Any, Any]],
) -> None:
    """One scenario's command: its parameters, ``--out``/``--force``, ``--json``/``--quiet``."""
    p = subs.add_parser(
        word, help=scenario.help, formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    add_params(p, scenario.params_type)
    add_out_option(p, for_report=scenario.reportable)
    add_output_options(p)
    p.set_defaults(func=functools.partial(_run, scenario))


def add_sim_parser(top: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``sim`` and its sub-commands."""
    from rangecast.cli.sweep import add_sweep_parser

    sim = top.add_parser("sim", help="run a simulated experiment")
    sims = sim.add_subparsers(dest="experiment", required=True, metavar="EXPERIMENT")
    groups: dict[str, argparse._SubParsersAction] = {}  # type: ignore[type-arg]
    for scenario in SCENARIOS.values():
        *path, word = scenario.command
        subs = sims
        for g in path:
            if g not in groups:
                text, dest, metavar = GROUPS[g]
                parent = sims.add_parser(g, help=text)
                groups[g] = parent.add_subparsers(dest=dest, required=True, metavar=metavar)
            subs = groups[g]
        add_scenario_parser(subs, word, scenario)
    add_sweep_parser(sims)
