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

The base run and its pairs have ``seeds``; the other scalability points ``scale_seeds`` (five
each at the full size, as every point). Cause parts (``CAUSE_PARTS``): the same figure with one
cause removed or varied, registered by whoever measures the cause; their runs reach the figure
builders (evaluate.CAUSE_EXPLAINERS), which attach the measured cause to the checks they explain.
The merged plan (``reproduction_plan``) runs as one sweep, one
Spark job, so the longest runs of any part start first; run directories are named
``rNNN_<part>_<grid values>_seed-S``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rangecast.analysis.sweep.plan import Plan, RunSpec, parse_plan
from rangecast.sim.lbdd_experiment import TESTBED_FLOW_MBPS, TESTBED_UPLINK_MBPS

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
    #: What the size's values can be used for (on the page and in reproduction.json).
    note: str = ""


#: The evaluations as the papers ran them (``--quick`` off): the thesis' 1,000 nodes and 10,000
#: events, its five network sizes (Table 4.5: 1,000, 1,740, 3,000, 4,000, 5,000) under both
#: latency models, the LBDD paper's n = 100..500 and its 8 GB. Five seeds for every point, so
#: every 95% interval is a Student t over at least five independent runs.
FULL = Size(
    name="full",
    seeds=(1, 2, 3, 4, 5),
    nodes=1000,
    events=10_000,
    scale_nodes=(1000, 1740, 3000, 4000, 5000),
    latencies=("synthetic", "planetlab"),
    scale_seeds=(1, 2, 3, 4, 5),
    tree_subscribers=(100, 200, 300, 400, 500),
    rate_subscribers=tuple(range(1, 12)),
    rate_bytes=256 * 1024**2,
    transfer_bytes=PAPER_BYTES,
    note="the papers' setting: every point over five seeds",
)
#: ``--quick``: every figure from tiny networks and two seeds: what CI runs
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
    rate_subscribers=(1, 6, 11),
    rate_bytes=16 * 1024**2,
    transfer_bytes=16 * 1024**2,
    note="quick: tiny networks and two seeds; its values only show that the chain works "
    "(runs, recomputation, comparison, page), they are not the papers' setting and say "
    "nothing about how close we are",
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


def thesis_common(size: Size) -> dict[str, Any]:
    """The base run's settings (Figs 4.1-4.8), which every variant and cause part starts from."""
    return {
        "events": size.events,
        "subs_per_node": 5.0,
        "nodes": size.nodes,
        "latency": "synthetic",
    }


def thesis_plans(size: Size) -> list[Plan]:
    """Figs 4.1-4.10: the scalability series (whose base point is Figs 4.1-4.4's run) and the
    probe and load-balancing variants of the base run, then the registered cause parts."""
    if size.nodes not in size.scale_nodes or "synthetic" not in size.latencies:
        raise ValueError(f"size {size.name}: the base run must be a synthetic scalability point")
    base = thesis_common(size)
    common = {k: base[k] for k in ("events", "subs_per_node")}
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
    plans += [c.build(size) for c in CAUSE_PARTS.values() if c.evaluation == "thesis"]
    return plans


# ------------------------------------------------------------------------------ cause parts


@dataclass(frozen=True, slots=True)
class CausePart:
    """A part of the reproduction that measures why a figure differs: the same figure with one
    cause removed or varied."""

    #: The part's name (a plan name: letters, digits, "-" and "."; no "_", which separates the
    #: run directory's fields), e.g. "thesis-lb-c0.5".
    name: str
    #: The figures whose checks it explains (evaluate.CAUSE_EXPLAINERS attaches the causes).
    figures: tuple[str, ...]
    #: One line: which cause it removes or varies (shown in the dry-run and the JSON).
    what: str
    #: Its plan at a size (``variant`` builds the usual one).
    build: Callable[[Size], Plan]
    evaluation: str = "thesis"


#: Every cause part by name, in registration order; ``parts`` adds them to their evaluation.
CAUSE_PARTS: dict[str, CausePart] = {}


def register_cause_part(part: CausePart) -> CausePart:
    """Add ``part`` to every reproduction of its evaluation (full and quick)."""
    if "_" in part.name or not part.name.startswith(part.evaluation + "-"):
        raise ValueError(f"cause part {part.name!r}: no '_', and start with {part.evaluation}-")
    CAUSE_PARTS[part.name] = part
    return part


def variant(
    name: str, overrides: dict[str, Any], grid: dict[str, Any] | None = None
) -> Callable[[Size], Plan]:
    """A builder of "the base run with ``overrides``" (and an optional grid), over the size's
    seeds: ``register_cause_part(CausePart("thesis-lb-c0.5", ("4.7",), "cut-off c = 0.5",
    variant("thesis-lb-c0.5", {"lb": True, "cutoff": 0.5})))``."""

    def build(size: Size) -> Plan:
        return _plan(name, "thesis", size.seeds, {**thesis_common(size), **overrides}, grid or {})

    return build


#: Fig 4.7: load balancing's saving against RndRegionProbe's p, which is ours (the thesis names
#: "a probability p" in 3.4.1 without a value). The values were chosen before the runs, around
#: our default 0.7 (the base pair); causes.py explains with them.
LB_P_PART = "thesis-lb-p"
LB_P_VALUES = (0.5, 0.9)
register_cause_part(
    CausePart(
        LB_P_PART,
        ("4.7",),
        "RndRegionProbe p (ours) at 0.5 and 0.9, without and with load balancing",
        variant(LB_P_PART, {}, {"p": LB_P_VALUES, "lb": (False, True)}),
    )
)
#: Fig 4.6: multicast probes with the leaf-table forwards of internal tree nodes sent one by
#: one (section 4.2.1's reading) instead of grouped (ours, Program 3.3's).
FWD_UNICAST_PART = "thesis-probe-fwd-unicast"
register_cause_part(
    CausePart(
        FWD_UNICAST_PART,
        ("4.6",),
        "multicast probes, leaf-table forwards sent one by one (forward = unicast)",
        variant(FWD_UNICAST_PART, {"probe": "multicast", "forward": "unicast"}),
    )
)

#: Fig 4.6: how concentrated the probe load is against RndRegionProbe's minimum level, which is
#: ours (3.4.1 uses "a minimum and maximum tree level: mini and maxi" and states only maxi, 10).
#: A publisher selects no zone above the minimum level, so every probe of an event goes first
#: to the few peers hosting the zones at and just below it. The values were chosen before the
#: runs: 5 and 7, between ours (3) and the maximum (10), with unicast and multicast probes.
PROBE_LEVELS_PART = "thesis-probe-levels"
PROBE_LEVELS_VALUES = (5, 7)
register_cause_part(
    CausePart(
        PROBE_LEVELS_PART,
        ("4.6",),
        "RndRegionProbe min level (ours) at 5 and 7, unicast and multicast probes",
        variant(
            PROBE_LEVELS_PART,
            {},
            {"min_level": PROBE_LEVELS_VALUES, "probe": ("unicast", "multicast")},
        ),
    )
)


def lbdd_plans(size: Size) -> list[Plan]:
    """The LBDD paper's table and figures, every run with the paper's bucket rule unless named
    otherwise: ``lbdd-trees`` (tree shape, n = 100..500), ``lbdd-rate`` (Figs 2 and 3: rate and
    publisher load as subscribers grow, on our model of the paper's testbed: uplinks U and a
    per-flow cap f, sim.lbdd_experiment.TESTBED_*), ``lbdd-rate-nocap`` (the same without the
    flow cap: the cause removed), ``lbdd-8gb`` (8 GB to 11 subscribers on the testbed model),
    and ``lbdd-near`` (our near-bucket variant, 11 subscribers, with and without the cap)."""
    # Written out although they are sim lbdd's defaults: the plan says what it runs.
    uplink = {"uplink_mbps": TESTBED_UPLINK_MBPS}
    testbed = {**uplink, "flow_mbps": TESTBED_FLOW_MBPS}
    nocap = {**uplink, "flow_mbps": 0.0}
    rate = {"subscribers": size.rate_subscribers}
    return [
        _plan("lbdd-trees", "lbdd", size.seeds, {}, {"subscribers": size.tree_subscribers}),
        _plan("lbdd-rate", "lbdd", size.seeds, {"data_bytes": size.rate_bytes, **testbed}, rate),
        _plan(
            "lbdd-rate-nocap", "lbdd", size.seeds, {"data_bytes": size.rate_bytes, **nocap}, rate
        ),
        _plan(
            "lbdd-8gb",
            "lbdd",
            size.seeds,
            {"data_bytes": size.transfer_bytes, **testbed},
            {"subscribers": (11,)},
        ),
        _plan(
            "lbdd-near",
            "lbdd",
            size.seeds,
            {"data_bytes": size.rate_bytes, **uplink, "subscribers": 11, "near_bucket": True},
            {"flow_mbps": (TESTBED_FLOW_MBPS, 0.0)},
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


def only_parts(
    plan: Plan, members: dict[str, list[int]], chosen: Sequence[str]
) -> tuple[Plan, dict[str, list[int]]]:
    """``plan`` cut down to the runs of the ``chosen`` parts (``reproduce --parts``).

    The runs keep their names (``run_id``, so their directories), and so a later
    ``reproduce --resume`` of the whole plan into the same directory finds them; only the
    indices are renumbered, as a sweep wants them (``plan.runs[i].index == i``)."""
    unknown = [c for c in chosen if c not in members]
    if unknown:
        raise ValueError(
            f"--parts {','.join(unknown)}: not a part of this reproduction (its parts: "
            f"{', '.join(members)})"
        )
    wanted = {i for c in chosen for i in members[c]}
    kept = [spec for spec in plan.runs if spec.index in wanted]
    runs = tuple(dataclasses.replace(spec, index=i) for i, spec in enumerate(kept))
    by_id = {spec.run_id: spec.index for spec in runs}
    cut = {
        part: [by_id[plan.runs[i].run_id] for i in idx]
        for part, idx in members.items()
        if part in chosen
    }
    return dataclasses.replace(plan, runs=runs, name=f"{plan.name}-parts"), cut
