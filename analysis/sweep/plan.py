"""Sweep plans: a TOML file naming scenarios, parameter values and seeds (docs/sweeps.md).

A plan expands into independent runs, one per (grid combination, seed), in a fixed order: the
cartesian product of ``[grid]`` in the order its keys are written (the last key varies fastest),
each with every seed. That order numbers the runs and their directories, so a plan always gives
the same runs whatever executes them.

Everything is checked before any run starts, naming the plan file and the key, and every
combination's parameters are built once (the scenario's ``check``, a nested config's own checks),
so a typo or an impossible value fails in a second instead of an hour into a sweep.

A plan runs any scenario of the registry (sim.registry), or several (``scenarios = [...]``,
crossed with the grid: the scenario varies slowest); its keys are the fields of that scenario's
parameter dataclass, read from the dataclass itself. ``[for.<scenario>.base]`` and
``[for.<scenario>.grid]`` give one listed scenario settings of its own (PADRES' tree-ID routing
next to OctopiA, GRAPE's two priorities next to POP): its grid is crossed with the shared one.
"""

from __future__ import annotations

import itertools
import math
import re
import tomllib
import types
import typing
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from rangecast.dht.errors import RangecastError
from rangecast.sim.latency import NAMED_MATRICES
from rangecast.sim.registry import SCENARIOS as REGISTRY
from rangecast.sim.scenario import build_params, plan_keys
from rangecast.sim.thesis_experiment import ThesisParams

TOP_KEYS = ("name", "description", "scenario", "scenarios", "seeds", "base", "grid", "for")
#: Scenarios a plan may name: every registered one (sim.registry), in its order.
SCENARIOS = tuple(REGISTRY)
#: The scenario whose runs the report reads and whose figures the table was made for.
THESIS = "thesis"
#: Parameters a thesis plan may set, with their types: the scenario's parameter dataclass, the
#: same one its command-line options come from (sim.scenario.plan_keys: every field but
#: ``seed``, which comes from ``seeds``, the nested OverlayConfig spread out but for
#: ``load_balancing``, which is ThesisParams' ``lb``). ``param_keys`` gives any scenario's.
PARAM_KEYS: dict[str, Any] = plan_keys(ThesisParams)
#: Keys whose string values may be file paths, resolved against the plan file's directory.
PATH_KEYS = ("latency", "events_from")
LATENCY_NAMES = ("synthetic", *NAMED_MATRICES)


class PlanError(RangecastError, ValueError):
    """A sweep plan cannot be read or is invalid."""


def param_keys(scenario: str) -> dict[str, Any]:
    """The keys a plan of ``scenario`` may set, with their types (sim.scenario.plan_keys)."""
    if scenario == THESIS:
        return PARAM_KEYS
    return plan_keys(REGISTRY[scenario].params_type)


@dataclass(frozen=True, slots=True)
class RunSpec:
    """One simulator run of a sweep. Picklable: it crosses process and Spark boundaries."""

    index: int
    #: Directory name under ``DIR/runs/``: the index, then the grid values and the seed.
    run_id: str
    scenario: str
    seed: int
    #: The plan's own values for this run (base and grid keys), as written in the plan.
    settings: dict[str, Any]
    #: The scenario's parameter dataclass (ThesisParams, SienaParams, ...) with defaults filled
    #: in and plan-relative paths resolved.
    params: Any
    #: The run's grid values and seed, for progress and error messages: ``nodes=60 seed=1``.
    label: str

    def cost(self) -> float:
        """Rough relative run time, to start long runs first (it never changes the results):
        nodes x events, or just nodes (or 1) for a scenario without events (or nodes)."""
        nodes = getattr(self.params, "nodes", 1)
        events = getattr(self.params, "events", 1)
        if not isinstance(nodes, int) or isinstance(nodes, bool):
            nodes = 1
        if not isinstance(events, int) or isinstance(events, bool):
            events = 1
        return float(nodes) * max(1, events)


@dataclass(frozen=True, slots=True)
class Plan:
    name: str
    description: str
    #: The scenario, or the scenarios joined by "," when the plan lists several.
    scenario: str
    seeds: tuple[int, ...]
    base: dict[str, Any]
    grid: dict[str, list[Any]]
    #: Where the plan came from: a file path, or ``<shipped>/name.toml``.
    source: str
    runs: tuple[RunSpec, ...]
    #: Every scenario the plan runs, in plan order (one, unless ``scenarios = [...]``).
    scenarios: tuple[str, ...] = (THESIS,)
    #: ``[for.<scenario>]``: scenario -> {"base": {...}, "grid": {...}} of its own settings.
    own: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)

    def swept(self) -> list[str]:
        """Every swept key: the shared grid's, then the scenarios' own grids'."""
        own = [k for parts in self.own.values() for k in parts.get("grid", {})]
        return list(dict.fromkeys((*self.grid, *own)))

    @property
    def thesis_only(self) -> bool:
        """Whether every run is a thesis run (its table and report are the thesis' own)."""
        return self.scenarios == (THESIS,)

    def describe(self) -> dict[str, Any]:
        """The plan as JSON (for sweep.json)."""
        return {
            "name": self.name,
            "description": self.description,
            "scenario": self.scenario,
            **({"scenarios": list(self.scenarios)} if len(self.scenarios) > 1 else {}),
            "seeds": list(self.seeds),
            "base": _jsonable(self.base),
            "grid": {k: [_jsonable(v) for v in vs] for k, vs in self.grid.items()},
            **({"for": self.own} if self.own else {}),
            "source": self.source,
        }

    def param_columns(self) -> list[str]:
        """The table's parameter columns: seed, nodes and latency always (a thesis plan's
        columns), the scenario first for a plan of other scenarios, then the plan's keys (the
        scenarios' own ones last)."""
        cols = [] if self.thesis_only else ["scenario"]
        cols += ["seed", "nodes", "latency"]
        own = [k for spec in self.runs for k in spec.settings]
        cols += [k for k in dict.fromkeys((*self.base, *self.grid, *own)) if k not in cols]
        return cols


def _jsonable(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def shipped_plans() -> list[str]:
    """Names of the plans shipped in ``analysis/plans/``."""
    folder = resources.files("rangecast.analysis") / "plans"
    return sorted(
        p.name.removesuffix(".toml") for p in folder.iterdir() if p.name.endswith(".toml")
    )


def find_plan(name_or_path: str) -> tuple[str, str, Path | None]:
    """(TOML text, source label, directory for relative paths) of a plan file or shipped name."""
    path = Path(name_or_path)
    if path.is_file():
        try:
            return path.read_text(encoding="utf-8"), str(path), path.resolve().parent
        except (OSError, UnicodeDecodeError) as exc:
            raise PlanError(f"{path}: cannot read the plan: {exc}") from exc
    name = name_or_path.removesuffix(".toml")
    if re.fullmatch(r"[A-Za-z0-9_.-]+", name) and name in shipped_plans():
        text = (resources.files("rangecast.analysis") / "plans" / f"{name}.toml").read_text(
            encoding="utf-8"
        )
        return text, f"<shipped>/{name}.toml", None
    raise PlanError(
        f"{name_or_path}: no such plan file, and not a shipped plan "
        f"(shipped: {', '.join(shipped_plans())})"
    )


def load_plan(name_or_path: str) -> Plan:
    """Read, check and expand a plan (a file path, or the name of a shipped plan)."""
    text, source, folder = find_plan(name_or_path)
    return parse_plan(text, source, folder)


def _type_name(hint: Any) -> str:
    if hint is float:
        return "a number"
    if hint is int:
        return "an integer"
    if hint is bool:
        return "true or false"
    if hint is str:
        return "a string"
    if typing.get_origin(hint) is tuple:
        args = typing.get_args(hint)
        plural = {int: "integers", float: "numbers", str: "strings", bool: "booleans"}
        return f"a list of {len(args)} {plural.get(args[0], str(args[0]))}"
    return str(hint)


def _coerce(value: Any, hint: Any, where: str) -> Any:
    """``value`` as the dataclass field type ``hint`` wants, or a PlanError naming ``where``."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        # TOML has no null, so an optional field is just its non-None types here; the first
        # that takes the value wins (``missing``: a number, else a word).
        inner = [a for a in typing.get_args(hint) if a is not type(None)]
        if isinstance(value, float) and not math.isfinite(value):
            raise PlanError(f"{where}: expected a finite number, got {value!r}")
        for a in inner[:-1]:
            try:
                return _coerce(value, a, where)
            except PlanError:
                continue
        try:
            return _coerce(value, inner[-1], where)
        except PlanError:
            if len(inner) == 1:
                raise
            kinds = " or ".join(_type_name(a) for a in inner)
            raise PlanError(f"{where}: expected {kinds}, got {value!r}") from None
    ok = False
    if hint is bool:
        ok = isinstance(value, bool)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif hint is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if ok:
            value = float(value)
            # TOML spells nan and inf; every comparison with NaN is false, so such a value
            # would pass every range check and fail each run instead.
            if not math.isfinite(value):
                raise PlanError(f"{where}: expected a finite number, got {value!r}")
    elif hint is str:
        ok = isinstance(value, str)
    elif origin is tuple:
        args = typing.get_args(hint)
        if isinstance(value, list) and len(value) == len(args):
            return tuple(_coerce(v, a, where) for v, a in zip(value, args, strict=True))
    if not ok:
        raise PlanError(f"{where}: expected {_type_name(hint)}, got {value!r}")
    return value


def _resolve_path(key: str, value: str, folder: Path | None, where: str) -> str:
    """A plan's file path, made absolute against the plan's directory; names pass through."""
    if key == "latency" and value in LATENCY_NAMES:
        return value
    raw = value.removeprefix("matrix:") if key == "latency" else value
    path = Path(raw)
    if not path.is_absolute() and folder is not None:
        path = folder / path
    if not path.is_file():
        expected = (
            f"one of {', '.join(LATENCY_NAMES)} or an RTT matrix file"
            if key == "latency"
            else "a CSV file"
        )
        rel = " (relative paths are relative to the plan file)" if folder is not None else ""
        raise PlanError(f"{where}: {value!r} is not a file{rel}; expected {expected}")
    # Absolute: a Spark task's working directory is not the driver's.
    return str(path.absolute())


def _slug(value: Any) -> str:
    """A short, filesystem-safe rendering of a parameter value for a run directory name."""
    if isinstance(value, bool):
        text = "on" if value else "off"
    elif isinstance(value, list | tuple):
        text = "-".join(_slug(v) for v in value)
    elif isinstance(value, str) and ("/" in value or value.endswith((".txt", ".csv"))):
        text = Path(value.removeprefix("matrix:")).stem
    else:
        text = str(value)
    return re.sub(r"[^A-Za-z0-9.+-]+", "-", text).strip("-")[:40] or "x"


def _params(scenario: str, settings: dict[str, Any], seed: int) -> Any:
    """The scenario's parameters for one run: plan values over the defaults (checks run here)."""
    params: Any = build_params(REGISTRY[scenario].params_type, {**settings, "seed": seed})
    params.check()
    return params


def _own_tables(
    doc: dict[str, Any], source: str, keys_of: dict[str, Any], shared: tuple[str, ...]
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """``[for.<scenario>.base]`` and ``[for.<scenario>.grid]``: (base, grid) tables of each
    scenario that has its own, checked for shape and names (the values are checked later)."""
    table = doc.get("for", {})
    if not isinstance(table, dict):
        raise PlanError(f"{source}: 'for' must be a table ([for.<scenario>.base]), got {table!r}")
    bases: dict[str, dict[str, Any]] = {}
    grids: dict[str, dict[str, Any]] = {}
    for scenario, parts in table.items():
        if scenario not in keys_of:
            raise PlanError(
                f"{source}: [for.{scenario}]: not a scenario of this plan ({', '.join(keys_of)})"
            )
        if not isinstance(parts, dict) or not set(parts) <= {"base", "grid"}:
            raise PlanError(f"{source}: [for.{scenario}] holds only 'base' and 'grid' tables")
        seen: set[str] = set()
        for part, into in (("base", bases), ("grid", grids)):
            values = parts.get(part, {})
            if not isinstance(values, dict):
                raise PlanError(f"{source}: [for.{scenario}.{part}] must be a table")
            for k in values:
                where = f"{source}: [for.{scenario}.{part}] {k}"
                if k == "seed":
                    raise PlanError(f"{where}: seeds are set by the top-level 'seeds'")
                if k not in keys_of[scenario]:
                    raise PlanError(
                        f"{where}: unknown parameter of scenario {scenario!r} "
                        f"(known: {', '.join(keys_of[scenario])})"
                    )
                if k in shared or k in seen:
                    raise PlanError(f"{where}: also set by [base], [grid] or the other table")
                seen.add(k)
            into[scenario] = dict(values)
    return bases, grids


def parse_plan(text: str, source: str, folder: Path | None = None) -> Plan:
    """Check and expand plan text. ``folder`` anchors relative paths (None: the working dir)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PlanError(f"{source}: not valid TOML: {exc}") from exc
    unknown = [k for k in doc if k not in TOP_KEYS]
    if unknown:
        raise PlanError(
            f"{source}: unknown key {unknown[0]!r} (a plan has: {', '.join(TOP_KEYS)}; "
            "parameters go under [base] or [grid])"
        )

    def text_key(key: str, default: str) -> str:
        value = doc.get(key, default)
        if not isinstance(value, str):
            raise PlanError(f"{source}: {key!r} must be a string, got {value!r}")
        return value

    fallback = Path(source).stem if not source.startswith("<") else "sweep"
    name = text_key("name", fallback)
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise PlanError(f"{source}: 'name' must be letters, digits, '.', '_' or '-', got {name!r}")
    description = text_key("description", "")
    if "scenario" in doc and "scenarios" in doc:
        raise PlanError(f"{source}: give 'scenario' or 'scenarios', not both")
    if "scenarios" in doc:
        listed = doc["scenarios"]
        if (
            not isinstance(listed, list)
            or not listed
            or not all(isinstance(s, str) for s in listed)
        ):
            raise PlanError(
                f"{source}: 'scenarios' must be a non-empty list of names, got {listed!r}"
            )
        if len(set(listed)) != len(listed):
            raise PlanError(f"{source}: 'scenarios' lists a scenario twice: {listed!r}")
        scenarios: tuple[str, ...] = tuple(listed)
        what = "'scenarios'"
    else:
        scenarios = (text_key("scenario", THESIS),)
        what = "'scenario'"
    for scenario in scenarios:
        if scenario not in SCENARIOS:
            raise PlanError(
                f"{source}: {what} {scenario!r} is not known (known: {', '.join(SCENARIOS)})"
            )
    keys_of = {s: param_keys(s) for s in scenarios}

    seeds = doc.get("seeds", [1])
    if (
        not isinstance(seeds, list)
        or not seeds
        or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)
    ):
        raise PlanError(f"{source}: 'seeds' must be a non-empty list of integers, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise PlanError(f"{source}: 'seeds' lists a seed twice: {seeds!r}")

    def param_table(key: str) -> dict[str, Any]:
        table = doc.get(key, {})
        if not isinstance(table, dict):
            raise PlanError(f"{source}: '{key}' must be a table ([{key}]), got {table!r}")
        for k in table:
            if k == "seed":
                raise PlanError(f"{source}: [{key}] seed: seeds are set by the top-level 'seeds'")
            for scenario, keys in keys_of.items():
                if k not in keys:
                    raise PlanError(
                        f"{source}: [{key}] {k}: unknown parameter of scenario {scenario!r} "
                        f"(known: {', '.join(keys)})"
                    )
        return table

    raw_base = param_table("base")
    raw_grid = param_table("grid")
    if "grid" in doc and not raw_grid:
        raise PlanError(f"{source}: [grid] is empty; give each swept parameter a list of values")
    for k in raw_grid:
        if k in raw_base:
            raise PlanError(f"{source}: {k!r} is in both [base] and [grid]")
    own_base, own_grid = _own_tables(doc, source, keys_of, (*raw_base, *raw_grid))

    def check_value(key: str, value: Any, where: str, only: str | None = None) -> Any:
        # Every listed scenario must take the value (their types agree in practice; the last
        # one's coerced value is kept); a scenario's own value, that scenario.
        coerced = value
        for scenario, keys in keys_of.items():
            if only is not None and scenario != only:
                continue
            plain = list(keys_of) == [THESIS]  # (a thesis plan's errors read as they always did)
            shown = where if plain else f"{where} (scenario {scenario!r})"
            coerced = _coerce(value, keys[key], shown)
        value = coerced
        if key in PATH_KEYS:
            # Validate now (the path must exist); the run resolves it again from the same text.
            _resolve_path(key, value, folder, where)
        return value

    def check_grid(table: dict[str, Any], label: str, only: str | None = None) -> dict[str, Any]:
        grid: dict[str, list[Any]] = {}
        for k, values in table.items():
            where = f"{source}: [{label}] {k}"
            if not isinstance(values, list):
                raise PlanError(f"{where}: expected a list of values, got {values!r}")
            if not values:
                raise PlanError(f"{where}: the list of values is empty")
            checked = [check_value(k, v, f"{where}[{i}]", only) for i, v in enumerate(values)]
            if len(set(map(repr, checked))) != len(checked):
                raise PlanError(f"{where}: a value is listed twice: {values!r}")
            grid[k] = checked
        return grid

    base = {k: check_value(k, v, f"{source}: [base] {k}") for k, v in raw_base.items()}
    grid = check_grid(raw_grid, "grid")
    # Each scenario's own base and grid (``[for.<scenario>...]``), over the shared ones.
    bases = {
        s: {
            **base,
            **{
                k: check_value(k, v, f"{source}: [for.{s}.base] {k}", s)
                for k, v in own_base.get(s, {}).items()
            },
        }
        for s in scenarios
    }
    grids = {s: {**grid, **check_grid(own_grid.get(s, {}), f"for.{s}.grid", s)} for s in scenarios}

    def combos_of(s: str) -> list[tuple[Any, ...]]:
        return list(itertools.product(*grids[s].values())) if grids[s] else [()]

    total = sum(len(combos_of(s)) for s in scenarios) * len(seeds)
    width = max(3, len(str(total - 1)))
    # Several scenarios: the scenario is the slowest-varying "grid key" of the run names.
    several = len(scenarios) > 1
    runs: list[RunSpec] = []
    for scenario in scenarios:
        for combo in combos_of(scenario):
            chosen = dict(zip(grids[scenario], combo, strict=True))
            settings = {**bases[scenario], **chosen}
            resolved = {
                k: _resolve_path(k, v, folder, source) if k in PATH_KEYS else v
                for k, v in settings.items()
            }
            named = {"scenario": scenario, **chosen} if several else chosen
            for seed in seeds:
                index = len(runs)
                parts = [f"{k}-{_slug(v)}" for k, v in named.items()] + [f"seed-{seed}"]
                run_id = f"r{index:0{width}d}_" + "_".join(parts)
                try:
                    params = _params(scenario, resolved, seed)
                except RangecastError as exc:
                    shown = ", ".join(f"{k}={v!r}" for k, v in settings.items())
                    on = f"{scenario} " if several or scenario != THESIS else ""
                    raise PlanError(
                        f"{source}: {on}run {run_id} ({shown}, seed={seed}): {exc}"
                    ) from exc
                label = " ".join([*(f"{k}={v}" for k, v in named.items()), f"seed={seed}"])
                runs.append(RunSpec(index, run_id, scenario, seed, settings, params, label))
    return Plan(
        name,
        description,
        ",".join(scenarios),
        tuple(seeds),
        base,
        grid,
        source,
        tuple(runs),
        scenarios,
        {
            s: {
                **({"base": own_base[s]} if own_base.get(s) else {}),
                **({"grid": own_grid[s]} if own_grid.get(s) else {}),
            }
            for s in scenarios
            if own_base.get(s) or own_grid.get(s)
        },
    )
