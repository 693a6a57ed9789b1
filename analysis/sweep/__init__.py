"""Parameter sweeps: a TOML plan of scenarios x parameters x seeds, run as independent simulator
runs in local processes or as Spark tasks, collected into one table and one report.

``plan`` reads and checks plans, ``runs`` runs them (one run; the local process pool),
``spark`` runs them on Spark, ``table`` collects the results, ``command`` runs a whole sweep
(its command line, ``rangecast sim sweep``, is cli.sweep). docs/sweeps.md describes the plan
format and what a sweep produces.
"""

from rangecast.analysis.sweep.command import SweepResult, run_sweep
from rangecast.analysis.sweep.plan import Plan, PlanError, RunSpec, load_plan, parse_plan

__all__ = [
    "Plan",
    "PlanError",
    "RunSpec",
    "SweepResult",
    "load_plan",
    "parse_plan",
    "run_sweep",
]
