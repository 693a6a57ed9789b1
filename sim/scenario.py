"""The experiment harness: what every simulated experiment shares, written once.

A scenario is a subclass of ``Scenario`` with three parts:

* a **parameter dataclass** (frozen) whose fields carry their default and, for those the command
  line offers, their help (``param``): ``cli.options`` builds a scenario's options from it and the
  sweep plans (``analysis.sweep.plan``) take their keys from it, so a default is written once;
* a **result dataclass** (a ``Result``), typed, whose ``json()`` is what ``--json`` prints and
  ``run.json`` stores; ``summary()`` is the readable form and ``succeeded()`` the exit status;
* the **run**: ``Scenario.run`` checks the parameters, prepares the run log directory, pauses the
  cyclic garbage collector, then calls ``setup`` (latency model, simulator, substrate, bootstrap:
  the harness does it, a scenario overrides only the part it changes), ``workload`` (schedule the
  scenario's events and run the simulator through its phases) and ``check`` (compare with the
  scenario's oracle and fill in the result), and writes the run log (docs/run-logs.md).

Random numbers come from named streams of the run seed (``self.stream(name)``, sim.streams), never
from a stream shared by unrelated parts. Progress goes to ``self.say`` (sim.progress): notes, and
``say.phase`` bars while the simulator runs. ``docs/scenarios.md`` walks through a complete
example (``sim/crash_root_experiment.py``).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import MISSING, Field, asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from rangecast.dht.errors import FieldError, LocalProtocolError
from rangecast.dht.messages import DHT_TABLE
from rangecast.dht.node import PastryNode
from rangecast.dht.wire import MessageTable, codec_for
from rangecast.multicast.topic import TopicConfig, TopicPeer
from rangecast.pubsub.base import OverlayConfig
from rangecast.pubsub.peer import OverlayPeer
from rangecast.pubsub.schema import SchemaRegistry
from rangecast.sim.engine import Core, Simulator, cyclic_gc_paused
from rangecast.sim.hugepages import use_huge_pages
from rangecast.sim.latency import LatencyModel, latency_model
from rangecast.sim.network import ROOT_CACHE, DhtConfig, SimNetwork, dht_config
from rangecast.sim.options import require_finite
from rangecast.sim.progress import Progress, as_progress
from rangecast.sim.streams import stream

if TYPE_CHECKING:
    # The run log brings pyarrow and numpy (about 60 MB): a peer process that only reads the
    # option tables (``cli/options.py``) must not pay for them, so it is imported where used.
    from rangecast.sim import runlog

# ---------------------------------------------------------------------------- parameters


@dataclass(frozen=True, slots=True)
class Option:
    """How one parameter appears on the command line (``cli.options`` reads it)."""

    help: str
    #: The option's name; default ``--`` and the field name with dashes.
    flag: str | None = None
    #: Parses the text (sim.options' ``finite_float`` and friends); default from the field's
    #: type: ``int``, ``finite_float`` for floats, the text itself for strings.
    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    #: A bool shown as ``--flag {on,off}`` ("on-off") or as a ``--no-...`` switch ("negated").
    style: str = "value"


#: The ``--latency`` help of the scenarios that offer the measured matrix by name.
LATENCY_HELP = (
    "'synthetic', 'planetlab' (the measured 490-host matrix shipped with Rangecast) or the "
    "path of a square RTT matrix (ms)"
)

#: Metadata keys of a parameter field.
OPTION, GROUP, DHT = "option", "group", "dht"


def param(default: Any, help: str | None = None, **option: Any) -> Any:
    """A parameter with its default and, with ``help``, its command-line option."""
    meta = {OPTION: Option(help, **option)} if help is not None else {}
    return field(default=default, metadata=meta)


def group(config: type, *, plan_exclude: tuple[str, ...] = (), **options: Option) -> Any:
    """A nested config dataclass (``OverlayConfig``): its defaults stay its own; ``options``
    offers some of its fields on the command line, under the field's own name."""
    return field(
        default_factory=config,
        metadata={GROUP: {"config": config, "options": options, "plan_exclude": plan_exclude}},
    )


def dht_param(default: Any) -> Any:
    """``dht``, ``lookup`` or ``root_cache``: one option builder serves every command."""
    return field(default=default, metadata={DHT: True})


@dataclass(frozen=True, slots=True, kw_only=True)
class OnDht:
    """Base of the parameters of a run over a chosen DHT: ``--dht``, ``--lookup`` and
    ``--root-cache`` (after the scenario's own options: cli.options.add_dht_options)."""

    dht: str = dht_param("pastry")
    lookup: str = dht_param("iterative")
    #: Kademlia iterative lookups: roots remembered per node (0: a lookup per message).
    root_cache: int = dht_param(ROOT_CACHE)

    def check_common(self, nodes: int | None = None) -> None:
        """Refuse non-finite numbers (``check_finite``), an unknown DHT or lookup mode, a
        negative root cache and, given the run's node count ``nodes``, an empty network."""
        check_finite(self)
        if nodes is not None and nodes < 1:
            raise LocalProtocolError("--nodes must be at least 1")
        dht_config(self.dht, lookup=self.lookup, root_cache=self.root_cache)


def require(params: object, *rules: tuple[str, Callable[[Any], bool], str]) -> None:
    """Refuse the first field of ``params`` whose value fails its rule, as
    ``FieldError(field, value, why)``: the command line names it by its option and value
    (``--nodes 1: must be at least 2``, cli.options.field_error). One field per complaint,
    never a list of conditions to check by hand."""
    for name, ok, why in rules:
        value = getattr(params, name)
        if not ok(value):
            raise FieldError(name, value, why)


def available_bytes() -> int | None:
    """``MemAvailable`` of /proc/meminfo (None where there is none to read)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def refuse_beyond_memory(
    nodes: int, need: float, basis: str, have: Callable[[], int | None] | None = None
) -> None:
    """Refuse, naming ``--nodes``, a run whose estimated peak memory ``need`` (bytes; ``basis``
    says how it was measured) exceeds what the machine has available (``have()``, by default
    ``available_bytes``): said before minutes of node placement, not found out at the end of
    them (or by the kernel's OOM killer)."""
    # ``available_bytes`` looked up at the call, not bound as a default: a test that replaces
    # this module's ``available_bytes`` then reaches every experiment's check.
    free = (have or available_bytes)()
    if free is not None and need > free:
        raise LocalProtocolError(
            f"--nodes {nodes:,}: needs about {need / 2**30:,.1f} GiB ({basis}), this machine "
            f"has {free / 2**30:,.1f} GiB available"
        )


def check_finite(params: Any) -> None:
    """Refuse NaN and infinities in every float parameter (a nested config's offered ones
    included), naming its option as the command line would (the field's name if it has none):
    callers that build parameters in Python get the command line's error."""
    values: dict[str, float | None] = {}
    for f in fields(params):
        value = getattr(params, f.name)
        if GROUP in f.metadata:
            for name, opt in f.metadata[GROUP]["options"].items():
                inner = getattr(value, name)
                if isinstance(inner, float):
                    values[opt.flag or "--" + name.replace("_", "-")] = inner
        elif isinstance(value, float):
            opt = f.metadata.get(OPTION)
            values[(opt.flag or "--" + f.name.replace("_", "-")) if opt else f.name] = value
    require_finite(values)


class Params(Protocol):
    """What the harness needs of a parameter dataclass."""

    seed: int
    latency: str

    def check(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Entry:
    """One command-line parameter: its path in the dataclass, option, default and type."""

    path: tuple[str, ...]
    option: Option | None  # None: one of the DHT options
    default: Any
    hint: Any

    @property
    def name(self) -> str:
        return self.path[-1]


def _default(f: Field[Any]) -> Any:
    if f.default is not MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not MISSING else MISSING  # type: ignore[misc]


def entries(params_type: type) -> Iterator[Entry]:
    """The command-line parameters of a parameter dataclass, in field order."""
    hints = _hints(params_type)
    for f in fields(params_type):
        if OPTION in f.metadata:
            yield Entry((f.name,), f.metadata[OPTION], _default(f), hints[f.name])
        elif DHT in f.metadata:
            yield Entry((f.name,), None, _default(f), hints[f.name])
        elif GROUP in f.metadata:
            inner = f.metadata[GROUP]["config"]
            inner_hints = _hints(inner)
            defaults = {g.name: _default(g) for g in fields(inner)}
            for name, opt in f.metadata[GROUP]["options"].items():
                yield Entry((f.name, name), opt, defaults[name], inner_hints[name])


def _hints(cls: type) -> dict[str, Any]:
    import typing

    return typing.get_type_hints(cls)


def plan_keys(params_type: type) -> dict[str, Any]:
    """Keys a sweep plan may set, with their types: every field but ``seed`` (the plan's seeds),
    a nested config's fields spread out (less those it leaves to the outer dataclass)."""
    keys: dict[str, Any] = {}
    hints = _hints(params_type)
    for f in fields(params_type):
        if f.name == "seed":
            continue
        if GROUP in f.metadata:
            excluded = f.metadata[GROUP]["plan_exclude"]
            inner = _hints(f.metadata[GROUP]["config"])
            keys.update({k: v for k, v in inner.items() if k not in excluded})
        else:
            keys[f.name] = hints[f.name]
    return keys


P = TypeVar("P")


def build_params(params_type: type[P], values: Mapping[str, Any]) -> P:
    """The parameter dataclass from ``{name: value}`` (a nested config's fields by their own
    names); names not given keep their defaults."""
    top: dict[str, Any] = {}
    for f in fields(params_type):  # type: ignore[arg-type]
        if GROUP in f.metadata:
            inner = f.metadata[GROUP]["config"]
            given = {g.name: values[g.name] for g in fields(inner) if g.name in values}
            if given:
                top[f.name] = inner(**given)
        elif f.name in values:
            top[f.name] = values[f.name]
    return params_type(**top)


# -------------------------------------------------------------------------------- results


def flat(**kw: Any) -> Any:
    """A field holding a part of the result that exists only in some runs (a nested result
    dataclass or None): its keys appear at the top level of the JSON when it is there."""
    return field(default=None, metadata={"flat": True}, **kw)


def optional() -> Any:
    """A key present in the JSON only when not None."""
    return field(default=None, metadata={"optional": True})


@dataclass(kw_only=True, slots=True)
class Result:
    """Base of the result dataclasses. The JSON is generated from the fields."""

    #: Fields that depend on the machine, not on the seed: left out when comparing two runs.
    WALL_FIELDS: ClassVar[tuple[str, ...]] = ("wall_s",)

    def json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None and (f.metadata.get("flat") or f.metadata.get("optional")):
                continue
            if f.metadata.get("flat"):
                out.update(value.json())
            else:
                out[f.name] = value
        return out

    def summary(self) -> str:
        """The readable form of the result (what the command prints without ``--json``)."""
        return "\n".join(f"{k}: {v}" for k, v in sorted(self.json().items()))

    def succeeded(self) -> bool:
        """The command's exit status: 0 when True."""
        return True


@dataclass(kw_only=True, slots=True)
class Part(Result):
    """A part of a result that only some runs have (see ``flat``)."""


# ------------------------------------------------------------------------------ the harness

R = TypeVar("R", bound=Result)


class Scenario(Generic[P, R]):
    """One simulated experiment. An instance is one run: ``Thesis().run(params)``."""

    #: The registry's name, the run log's ``kind`` and the progress label.
    name: ClassVar[str]
    #: The words after ``rangecast sim``: ``("route",)``, ``("run", "thesis")``.
    command: ClassVar[tuple[str, ...]]
    help: ClassVar[str]
    params_type: ClassVar[type]
    #: Whether the run log is one ``rangecast report`` reads (said in ``--out``'s help).
    reportable: ClassVar[bool] = True

    params: P
    say: Progress
    out_dir: Path | None
    model: LatencyModel
    sim: Simulator
    net: SimNetwork
    messages_log: runlog.MessageLog | None
    #: Capacities the pub/sub cores drew (the run log's nodes table), if any.
    capacities: list[int] | None = None

    def run(
        self,
        params: P,
        progress: Callable[[str], None] | None = None,
        out: Path | str | None = None,
        *,
        force: bool = False,
    ) -> R:
        """Run the experiment; with ``out``, also write its run log there (docs/run-logs.md)."""
        variant = self.scenario_for(params)
        if variant is not type(self):
            return variant().run(params, progress, out, force=force)
        params.check()  # type: ignore[attr-defined]
        from rangecast.sim import runlog

        out_dir = runlog.prepare_dir(out, force=force) if out is not None else None
        # Before the nodes are built, so that their state lands on huge pages too.
        use_huge_pages()
        with cyclic_gc_paused():
            self.prepare(params, as_progress(progress, self.name), out_dir)
            self.workload()
            result = self.check()
        if out_dir is not None and self.messages_log is not None:
            self.write_log(result)
        return result

    @classmethod
    def run_json(
        cls,
        params: P,
        progress: Callable[[str], None] | None = None,
        out: Path | str | None = None,
        *,
        force: bool = False,
    ) -> dict[str, Any]:
        """``run`` on a fresh instance, as JSON (the experiments' ``run_<name>`` functions)."""
        return cls().run(params, progress, out, force=force).json()

    @classmethod
    def scenario_for(cls, params: P) -> type[Scenario[P, R]]:
        """The scenario that runs ``params``: this one, unless a setting picks a variant."""
        return cls

    def prepare(self, params: P, say: Progress, out_dir: Path | None = None) -> None:
        """Set-up without a workload: also how a scenario builds a second network."""
        self.params, self.say, self.out_dir = params, say, out_dir
        self.wall0 = time.perf_counter()
        self.phases: dict[str, float] = {}
        self.setup()

    # ---- hooks

    def setup(self) -> None:
        """Latency model, simulator, run log, substrate and bootstrap."""
        self.setup_engine()
        p: Any = self.params
        self.net = SimNetwork(
            self.sim, p.seed, config=self.dht_config(), progress=self.say, **self.stack()
        )
        self.bootstrap()

    def setup_engine(self) -> None:
        """The part of ``setup`` every network shares: latency model, simulator and run log
        (a scenario that runs no DHT, such as the broker systems', builds its nodes after it)."""
        from rangecast.sim import runlog

        p: Any = self.params
        self.model = latency_model(p.latency, p.seed)
        self.sim = self.simulator()
        self.messages_log = None
        if self.out_dir is not None:
            self.messages_log = runlog.MessageLog(self.out_dir / "messages.parquet", self.sim.codec)
            self.sim.message_log = self.messages_log.record

    #: The engine; a scenario may use a subclass (lbdd's gives hosts random addresses).
    simulator_type: ClassVar[type[Simulator]] = Simulator
    #: The message tables of the stack every node runs: the engine's one codec is built from
    #: them (explicit wiring, docs/wire.md); a core refuses a codec that lacks its table.
    tables: ClassVar[tuple[MessageTable, ...]] = (DHT_TABLE,)

    def simulator(self) -> Simulator:
        return self.simulator_type(
            self.model,
            self.stream("network"),
            codec=codec_for(*self.tables),
            progress=self.say.engine_hook,
            **self.simulator_options(),
        )

    def simulator_options(self) -> dict[str, Any]:
        """More keyword arguments of the engine (route's message ``loss``)."""
        return {}

    def dht_config(self) -> DhtConfig:
        p: Any = self.params
        return dht_config(p.dht, lookup=p.lookup, root_cache=p.root_cache)

    def stack(self) -> dict[str, Any]:
        """What each DHT node carries: ``{"core_factory": ...}`` or ``{"app_factory": ...}``
        (SimNetwork's arguments); nothing: the engine drives bare DHT nodes."""
        return {}

    def bootstrap(self) -> None:
        """Create the nodes and give them their routing state (default: the oracle's)."""
        self.net.oracle_bootstrap(self.net.create(self.size()))

    def size(self) -> int:
        return int(self.params.nodes)  # type: ignore[attr-defined]

    def workload(self) -> None:
        """Schedule the scenario's events and run the simulator."""
        raise NotImplementedError

    def check(self) -> R:
        """Compare what happened with the oracle; the result."""
        raise NotImplementedError

    def logged_params(self) -> dict[str, Any]:
        """The parameters as ``run.json`` records them."""
        return {**asdict(self.params), "scenario": self.name}  # type: ignore[call-overload]

    def write_more_logs(self, out_dir: Path) -> None:
        """Tables beyond messages and nodes (the thesis' installs and trees)."""

    # ---- services

    def stream(self, name: str) -> random.Random:
        """The run's random stream ``name`` (sim.streams)."""
        return stream(self.params.seed, name)  # type: ignore[attr-defined]

    def common_fields(self, wall_s: float | None = None) -> dict[str, Any]:
        """The fields every result shares (``RunResult``, and ``SubstrateResult``'s for a run
        on a DHT): seed, latency model, wall seconds (default: until now)."""
        p: Any = self.params
        out = {
            "seed": p.seed,
            "latency_model": self.model.describe(),
            "wall_s": self.elapsed() if wall_s is None else wall_s,
        }
        if isinstance(p, OnDht):
            out.update(dht_fields_of(p))
        return out

    def elapsed(self) -> float:
        """Wall seconds since the set-up began."""
        return time.perf_counter() - self.wall0

    def pubsub_stack(self, registry: SchemaRegistry, overlay: OverlayConfig) -> dict[str, Any]:
        """Pub/sub peers (``OverlayPeer``) on every node, each with a leaf capacity drawn from
        the ``capacity`` stream in the params' range (recorded for the run log)."""
        cap_rng = self.stream("capacity")
        low, high = self.params.capacity  # type: ignore[attr-defined]
        capacities: list[int] = []
        self.capacities = capacities

        def make_core(i: int, node: PastryNode) -> Core:
            cap = cap_rng.randint(low, high)
            capacities.append(cap)
            return OverlayPeer(node, schemas=registry, capacity=cap, rng=node.rng, overlay=overlay)

        return {"core_factory": make_core}

    def topic_stack(self, config: TopicConfig) -> dict[str, Any]:
        """Topic peers (``TopicPeer``, multicast.topic) on every node."""

        def make_core(i: int, node: PastryNode) -> Core:
            return TopicPeer(node, node.rng, config)

        return {"core_factory": make_core}

    def write_log(self, result: R) -> None:
        """Messages, nodes, the scenario's own tables, then ``run.json`` (docs/run-logs.md)."""
        from rangecast.sim import runlog

        out_dir, log = self.out_dir, self.messages_log
        assert out_dir is not None and log is not None
        self.say(f"writing the run log to {out_dir}")
        log.close()
        self.sim.message_log = None
        runlog.write_nodes(out_dir, self.sim, self.capacities)
        self.write_more_logs(out_dir)
        runlog.write_run(out_dir, self.name, self.logged_params(), result.json())


def substrate_title(r: Mapping[str, Any]) -> str:
    """The substrate of a result's JSON in words: "Pastry", "Kademlia (iterative, root cache
    1024)"."""
    from rangecast.dht.substrate import SUBSTRATES

    spec = SUBSTRATES[r.get("dht") or "pastry"]
    if spec.has_lookup:
        cache = r.get("root_cache")
        if cache is None:
            return f"{spec.title} ({r['lookup']})"
        return f"{spec.title} ({r['lookup']}, root cache {cache or 'off'})"
    return spec.title


def dht_fields_of(params: Any) -> dict[str, Any]:
    """``dht``, ``lookup`` and ``root_cache`` as a result records them (sim.network)."""
    from rangecast.sim.network import dht_fields

    return dht_fields(params.dht, params.lookup, params.root_cache)


@dataclass(kw_only=True, slots=True)
class Verdict(Part):
    """An oracle's verdict on (subscription, event) deliveries."""

    expected_deliveries: int
    deliveries: int
    missed: int
    duplicates: int
    false_positives: int

    def succeeded(self) -> bool:
        return self.missed == self.duplicates == self.false_positives == 0


@dataclass(kw_only=True, slots=True)
class RunResult(Result):
    """The fields every simulated run reports."""

    seed: int
    latency_model: dict[str, Any]
    wall_s: float


@dataclass(kw_only=True, slots=True)
class SubstrateResult(RunResult):
    """A run over a chosen DHT: how its JSON names the substrate (sim.network.dht_fields)."""

    dht: str
    lookup: str | None
    root_cache: int | None


@dataclass(kw_only=True, slots=True)
class TimedResult(SubstrateResult):
    """A run of ``nodes`` simulated nodes timed by phase: its ``wall_phases_s`` and
    ``sim_messages_per_s`` (fields of the subclass) depend on the machine, not on the seed."""

    WALL_FIELDS = ("wall_s", "sim_messages_per_s", "wall_phases_s")

    nodes: int


__all__ = [
    "DHT",
    "LATENCY_HELP",
    "ROOT_CACHE",
    "Entry",
    "OnDht",
    "Option",
    "Part",
    "Result",
    "RunResult",
    "Scenario",
    "SubstrateResult",
    "TimedResult",
    "Verdict",
    "available_bytes",
    "build_params",
    "check_finite",
    "dht_fields_of",
    "dht_param",
    "entries",
    "flat",
    "group",
    "optional",
    "param",
    "plan_keys",
    "refuse_beyond_memory",
    "substrate_title",
]
