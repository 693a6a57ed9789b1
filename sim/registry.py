"""The scenarios the command line offers (``rangecast sim ...``), by name, in help order.

A new experiment is a module with a ``Scenario`` subclass (sim.scenario; docs/scenarios.md) and
one line here; the ``rangecast sim`` commands are generated from this table."""

from __future__ import annotations

from typing import Any

from rangecast.sim.broker_experiment import BY_SYSTEM
from rangecast.sim.churn_experiment import Churn
from rangecast.sim.crash_root_experiment import CrashRoot
from rangecast.sim.lbdd_experiment import Lbdd
from rangecast.sim.partition_experiment import Partition
from rangecast.sim.route_experiment import Route
from rangecast.sim.scenario import Scenario
from rangecast.sim.thesis_experiment import Thesis

_IN_HELP_ORDER: tuple[type[Scenario[Any, Any]], ...] = (
    Route,
    Thesis,
    Churn,
    Lbdd,
    CrashRoot,
    Partition,
    *BY_SYSTEM.values(),
)
SCENARIOS: dict[str, type[Scenario[Any, Any]]] = {s.name: s for s in _IN_HELP_ORDER}
