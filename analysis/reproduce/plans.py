"""The experiments a reproduction runs, as sweep plans (analysis.sweep.plan), merged into one.

Each evaluation is a few small plans, written as TOML text and parsed by the sweep's own
``parse_plan`` (so every value is checked exactly as a hand-written plan's is, before any run
starts):

* thesis: ``thesis-base``, the base run of Figs 4.1-4.4 (the thesis' 1,000 nodes, synthetic
  latencies); ``thesis-probe`` / ``thesis-lb``, that run again with multicast probes (Figs
  4.5/4.6) and with load balancing (Figs 4.7/4.8); ``thesis-scale-<model>``, the other points of
  the scalability series (network sizes x latency models, Figs 4.9/4.10), which the base run
  joins as its synthetic point. The pairs of Figs 4.5-4.8 differ from the base run in the
  one parameter and nothing else, which is how the report pairs them.
* lbdd: ``lbdd-trees`` (tree shape for the paper's n = 100..500), ``lbdd-rate`` (one transfer
  per subscriber count: the rate as subscribers grow) and ``lbdd-8gb`` (the paper's 8 GB to 11
  subscribers, LBDD against point-to-point).

The base run and its pairs have ``seeds``; the other scalability points ``scale_seeds`` (fewer:
they are the largest runs). The merged plan (``reproduction_plan``) runs as one sweep, one
Spark job, so the longest runs of any part start first; run directories are named
``rNNN_<part>_<grid values>_seed-S``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from rangecast.analysis.sweep.plan import Plan, RunSpec, parse_plan

EVALUATIONS = ("thesis", "lbdd", "all")
#: The paper's transfer: 8 GB in 64 KB slices (read as GiB and KiB: 131,072 slices).
PAPER_BYTES = 8 * 1024**3


@dataclass(frozen=True, slots=True)
class Size:
    """How big a reproduction is: every count a plan uses, defined once per size."""

    name: str
    seeds: tuple[int, ...]
    #: Figs 4.1-4.8: the base network (the thesis: 1,000 nodes, 10,000 events).
    nodes: int
    events: int
    #: Figs 4.9/4.10: network sizes (``nodes`` must be one of them), latency models, and the
    #: seeds of the points other than the base run (which has ``seeds``).
    scale_nodes: tuple[int, ...]
    latencies: tuple[str, ...]
    scale_seeds: tuple[int, ...]
    #: LBDD tree shape: subscriber counts.
    tree_subscribers: tuple[int, ...]
    #: LBDD rate as subscribers grow: subscriber counts and bytes per transfer.
    rate_subscribers: tuple[int, ...]
    rate_bytes: int
    #: The 8 GB comparison: bytes sent to 11 subscribers.
    transfer_bytes: int


#: The evaluations as the papers ran them (``--quick`` off): the thesis' 1,000 nodes and 10,000
#: events, its five network sizes under both latency models, the LBDD paper's n = 100..500 and
#: its 8 GB. Three seeds per point.
FULL = Size(
    name="full",
    seeds=(1, 2, 3),
    nodes=1000,
    events=10_000,
    scale_nodes=(1000, 1740),
    latencies=("synthetic", "planetlab"),
    scale_seeds=(1, 2),
    tree_subscribers=(100, 200, 300, 400, 500),
    rate_subscribers=(2, 4, 6, 8, 11),
    rate_bytes=256 * 1024**2,
    transfer_bytes=PAPER_BYTES,
)
#: ``--quick``: every figure from tiny networks and two seeds, in about a minute: what CI runs
#: (tests/test_reproduce.py), to show the whole chain works; its values are not the papers'
#: setting (the full size is).
QUICK = Size(
    name="quick",
    seeds=(1, 2),
    nodes=30,
    events=60,
    scale_nodes=(30, 50),
    latencies=("synthetic", "planetlab"),
    scale_seeds=(1, 2),
    tree_subscribers=(8, 16),
    rate_subscribers=(3, 11),
    rate_bytes=256 * 1024,
    transfer_bytes=1024**2,
)
SIZES = {s.name: s for s in (FULL, QUICK)}


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return repr(value)


def _plan(
    name: str, scenario: str, seeds: tuple[int, ...], base: dict[str, Any], grid: dict[str, Any]
) -> Plan:
    lines = [f'name = "{name}"', f'scenario = "{scenario}"', f"seeds = {_toml(seeds)}", "[base]"]
    lines += [f"{k} = {_toml(v)}" for k, v in base.items()]
    if grid:
        lines += ["[grid]", *(f"{k} = {_toml(v)}" for k, v in grid.items())]
    return parse_plan("\n".join(lines) + "\n", f"<reproduce>/{name}.toml")


def thesis_plans(size: Size) -> list[Plan]:
    """Figs 4.1-4.10: the scalability series (whose base point is Figs 4.1-4.4's run) and the
    probe and load-balancing variants of the base run."""
    if size.nodes not in size.scale_nodes or "synthetic" not in size.latencies:
        raise ValueError(f"size {size.name}: the base run must be a synthetic scalability point")
    common = {"events": size.events, "subs_per_node": 5.0}
    base = {**common, "nodes": size.nodes, "latency": "synthetic"}
    plans = [
        _plan("thesis-base", "thesis", size.seeds, base, {}),
        _plan("thesis-probe", "thesis", size.seeds, base, {"probe": ("multicast",)}),
        _plan("thesis-lb", "thesis", size.seeds, base, {"lb": (True,)}),
    ]
    # The scalability series: every (size, model) but the base run's, which it shares.
    others = tuple(n for n in size.scale_nodes if n != size.nodes)
    for model in size.latencies:
        nodes = others if model == "synthetic" else size.scale_nodes
        if nodes:
            grid = {"nodes": nodes}
            plans.append(
                _plan(
                    f"thesis-scale-{model}",
                    "thesis",
                    size.scale_seeds,
                    {**common, "latency": model},
                    grid,
                )
            )
    return plans


def lbdd_plans(size: Size) -> list[Plan]:
    """The LBDD paper's table and figures: tree shape, rate as subscribers grow, 8 GB."""
    return [
        _plan("lbdd-trees", "lbdd", size.seeds, {}, {"subscribers": size.tree_subscribers}),
        _plan(
            "lbdd-rate",
            "lbdd",
            size.seeds,
            {"data_bytes": size.rate_bytes},
            {"subscribers": size.rate_subscribers},
        ),
        _plan(
            "lbdd-8gb",
            "lbdd",
            size.seeds,
            {"data_bytes": size.transfer_bytes},
            {"subscribers": (11,)},
        ),
    ]


def parts(evaluation: str, size: Size) -> list[Plan]:
    """The plans ``evaluation`` (thesis, lbdd or all) needs at ``size``."""
    if evaluation not in EVALUATIONS:
        raise ValueError(f"unknown evaluation {evaluation!r} (one of {', '.join(EVALUATIONS)})")
    chosen: list[Plan] = []
    if evaluation in ("thesis", "all"):
        chosen += thesis_plans(size)
    if evaluation in ("lbdd", "all"):
        chosen += lbdd_plans(size)
    return chosen


def reproduction_plan(evaluation: str, size: Size) -> tuple[Plan, dict[str, list[int]]]:
    """One plan of every run of ``parts`` (renumbered), and each part's run indices."""
    runs: list[RunSpec] = []
    members: dict[str, list[int]] = {}
    plans = parts(evaluation, size)
    total = sum(len(p.runs) for p in plans)
    width = max(3, len(str(total - 1)))
    for p in plans:
        members[p.name] = []
        for spec in p.runs:
            index = len(runs)
            rest = spec.run_id.split("_", 1)[1]
            runs.append(
                dataclasses.replace(
                    spec,
                    index=index,
                    run_id=f"r{index:0{width}d}_{p.name}_{rest}",
                    label=f"{p.name}: {spec.label}",
                )
            )
            members[p.name].append(index)
    scenarios = tuple(dict.fromkeys(s for p in plans for s in p.scenarios))
    merged = Plan(
        name=f"reproduce-{evaluation}-{size.name}",
        description=f"rangecast reproduce {evaluation} ({size.name}): "
        + ", ".join(p.name for p in plans),
        scenario=",".join(scenarios),
        seeds=size.seeds,
        base={},
        grid={},
        source="<reproduce>",
        runs=tuple(runs),
        scenarios=scenarios,
    )
    return merged, members
