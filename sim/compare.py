"""``rangecast sim compare``: the thesis' DHT overlay and the broker systems on one workload.

Every system runs the thesis workload of the same seed and sizes on the same nodes and latency
model (``sim run thesis`` for ``thesis``, sim.broker_experiment for the others) and is checked by
the same oracle; each run becomes one typed ``Row`` of the same metrics:

===========================  ==================================================================
column                       definition
===========================  ==================================================================
messages, bytes per event    every message of the event phase (all types) / events
traffic ms per event         latency-weighted traffic: the one-way propagation delays of every
                             message of the event phase, summed, / events (a 66 ms hop weighs
                             ten times a 7 ms one; NetStats.delay_ms)
matchings per event          subscription entries an event is tested against, summed over the
                             nodes that match it: brokers, the whole PRT of every broker the
                             publication reaches (each matches to route it); thesis, the
                             pieces stored at each leaf that matches it (inner tree nodes route
                             by their leaf routing tables and test no subscription)
hops per delivery            broker-overlay hops from the publishing broker to the delivering
                             one (brokers); not measured for the thesis (DHT hops per probe and
                             per delivery message differ in kind): None
latency mean/p90/max         ms from the publish call to the subscriber, expected deliveries
false-positive receptions    publications a broker received, neither delivered nor forwarded;
                             None for the thesis (its nodes do not filter-forward)
table entries mean/max       per broker: SRT + PRT entries over its overlays; thesis: the
                             subscription pieces stored at each peer's tree nodes
neighbours mean/max          routing state in peers: the other nodes a node keeps links to
                             (brokers: overlay neighbours over all overlays; thesis: the
                             peers of its DHT routing table and leaf set, ``known_peers``)
load max/mean, Gini          messages sent + received per node in the event phase
setup messages               every message until the subscriptions (and ads) are installed
missed, duplicates, false    the oracle's verdict (false: deliveries it did not expect)
migrations                   publishers moved (POP, GRAPE); None for the systems without
inactive                     why the row's own mechanism did not act in this run (None: it
                             did): POP/GRAPE that moved no publisher, PADRES under full-domain
                             advertisements (it then routes as SIENA), OctopiA whose CIVs
                             name every cluster (events go to all of them), K-means groups
                             that each span every server
===========================  ==================================================================

Workloads (``--workload``): ``thesis``, the thesis workload (a random publisher per event,
full-domain advertisements); ``clustered``, POP/GRAPE's (sim.workloads.paper_plan:
``publishers`` long-lived publishers, one advertisement box each, 5 % of the subscribers
high-rated at one broker), which the thesis overlay runs too (``sim run thesis --workload``). Its
default publisher count gives each publisher twice the POP/GRAPE threshold of publications,
the least for their relocation to act (a trace count, then a walk or a session decision).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from rangecast.dht.errors import LocalProtocolError
from rangecast.sim import runlog
from rangecast.sim.broker_experiment import (
    BY_SYSTEM,
    SYSTEMS,
    BrokerParams,
    BrokerResult,
    gini,
)
from rangecast.sim.event_source import NO_CSV, CsvSource
from rangecast.sim.thesis_experiment import Thesis, ThesisParams, ThesisResult

__all__ = [
    "ALL_SYSTEMS",
    "COMPARE_FILE",
    "COMPARE_WORKLOADS",
    "Comparison",
    "Row",
    "compare",
    "inactive",
]

ALL_SYSTEMS = ("thesis", *SYSTEMS)
#: The workloads every system can run (``--workload``).
COMPARE_WORKLOADS = ("thesis", "clustered")

T = TypeVar("T")
#: The table of a ``--out DIR`` comparison, beside one run log per system in ``DIR/<system>/``.
COMPARE_FILE = "compare.json"


@dataclass(slots=True)
class Row:
    system: str
    messages_per_event: float
    bytes_per_event: float
    traffic_ms_per_event: float
    matchings_per_event: float
    hops_per_delivery: float | None
    latency_mean_ms: float
    latency_p90_ms: float
    latency_max_ms: float
    false_positive_receptions: int | None
    table_entries_mean: float
    table_entries_max: float
    neighbours_mean: float
    neighbours_max: float
    load_max_over_mean: float
    load_gini: float
    setup_messages: int
    expected_deliveries: int
    missed: int
    duplicates: int
    false_deliveries: int
    migrations: int | None
    inactive: str | None
    wall_s: float

    def ok(self) -> bool:
        """Exact against the oracle: nothing missed, nothing twice, nothing unexpected."""
        return self.missed == self.duplicates == self.false_deliveries == 0


@dataclass(slots=True)
class Comparison:
    nodes: int
    subs_per_node: float
    events: int
    seed: int
    latency: str
    rows: list[Row] = field(default_factory=list)
    #: The CSV file whose rows every system published (``--events-from``), or None.
    events_from: str | None = None
    workload: str = "thesis"
    #: The clustered workload's publishers (None on the thesis workload).
    publishers: int | None = None

    def succeeded(self) -> bool:
        return all(r.ok() for r in self.rows)

    def json(self) -> dict[str, Any]:
        return {
            "nodes": self.nodes,
            "subs_per_node": self.subs_per_node,
            "events": self.events,
            "seed": self.seed,
            "latency": self.latency,
            "events_from": self.events_from,
            "workload": self.workload,
            "publishers": self.publishers,
            "rows": [asdict(r) for r in self.rows],
        }

    def table(self) -> str:
        """The rows as a Markdown table (what the command prints)."""
        head = (
            "| system | msgs/event | bytes/event | traffic ms/event | matchings/event "
            "| hops/delivery "
            "| latency mean/p90/max (ms) | false-pos. receptions | table entries mean/max "
            "| neighbours mean/max | load max/mean | Gini | set-up msgs | migrations "
            "| missed/dup./false |"
        )
        workload = (
            f", {self.workload} workload ({self.publishers} publishers)"
            if self.workload != "thesis"
            else ", thesis workload"
        )
        lines = [
            f"{self.nodes} nodes, {round(self.nodes * self.subs_per_node):,} subscriptions, "
            f"{self.events:,} events, seed {self.seed}, latency {self.latency}{workload}"
            + (f", events from {self.events_from}" if self.events_from else ""),
            "",
            head,
            "|" + "---|" * 15,
        ]

        def opt(x: float | None, spec: str) -> str:
            return "-" if x is None else format(x, spec)

        for r in self.rows:
            lines.append(
                f"| {r.system}{' *' if r.inactive else ''} | {r.messages_per_event:.1f} "
                f"| {r.bytes_per_event:,.0f} | {r.traffic_ms_per_event:,.0f} "
                f"| {r.matchings_per_event:,.0f} "
                f"| {opt(r.hops_per_delivery, '.2f')} "
                f"| {r.latency_mean_ms:.0f} / {r.latency_p90_ms:.0f} / {r.latency_max_ms:.0f} "
                f"| {opt(r.false_positive_receptions, ',')} "
                f"| {r.table_entries_mean:,.0f} / {r.table_entries_max:,.0f} "
                f"| {r.neighbours_mean:,.1f} / {r.neighbours_max:,.0f} "
                f"| {r.load_max_over_mean:.2f} | {r.load_gini:.3f} | {r.setup_messages:,} "
                f"| {opt(r.migrations, ',')} | {r.missed}/{r.duplicates}/{r.false_deliveries} |"
            )
        notes = [f"* {r.system}: did not act: {r.inactive}" for r in self.rows if r.inactive]
        return "\n".join(lines + (["", *notes] if notes else []))


class _MeasuredThesis(Thesis):
    """The thesis run, plus what the comparison needs and its result lacks: each node's
    messages when the first event is published (the event phase's load) and the pieces each
    peer stores."""

    def setup(self) -> None:
        super().setup()
        self.setup_load: list[int] | None = None

    def record_published(self, eid: int, matches: Any) -> None:
        if self.setup_load is None:
            stats = self.sim.stats
            self.setup_load = [
                s + r for s, r in zip(stats.sent_messages, stats.received_messages, strict=True)
            ]
        super().record_published(eid, matches)

    def check(self) -> ThesisResult:
        result = super().check()
        stats = self.sim.stats
        before = self.setup_load or [0] * len(stats.sent_messages)
        self.load = [
            s + r - b
            for s, r, b in zip(stats.sent_messages, stats.received_messages, before, strict=True)
        ]
        self.pieces = [
            sum(len(n.index) for n in p.overlay.nodes.values() if n.index is not None)
            for p in self.peers
        ]
        self.neighbours = [len(p.dht.known_peers()) for p in self.peers]
        return result


def _thesis_row(sc: _MeasuredThesis, r: ThesisResult) -> Row:
    dl, load, pieces = r.delivery_latency_ms, sc.load, sc.pieces
    mean_load = sum(load) / len(load) if load else 0.0
    return Row(
        system="thesis",
        messages_per_event=r.messages_per_event,
        bytes_per_event=r.bytes_per_event,
        hops_per_delivery=None,
        latency_mean_ms=dl["mean"],
        latency_p90_ms=dl["p90"],
        latency_max_ms=dl["max"],
        false_positive_receptions=None,
        table_entries_mean=sum(pieces) / len(pieces) if pieces else 0.0,
        table_entries_max=float(max(pieces, default=0)),
        neighbours_mean=sum(sc.neighbours) / len(sc.neighbours) if sc.neighbours else 0.0,
        neighbours_max=float(max(sc.neighbours, default=0)),
        load_max_over_mean=max(load) / mean_load if mean_load else 0.0,
        load_gini=gini(load),
        setup_messages=r.install_phase_messages,
        expected_deliveries=r.verdict.expected_deliveries,
        missed=r.verdict.missed,
        duplicates=r.verdict.duplicates,
        false_deliveries=r.verdict.false_positives,
        migrations=None,
        inactive=None,
        traffic_ms_per_event=r.traffic_ms_per_event,
        matchings_per_event=r.matchings_per_event,
        wall_s=r.wall_s,
    )


def inactive(
    system: str, workload: str, migrations: int | None, layout: dict[str, Any]
) -> str | None:
    """Why a system's own mechanism did not act in a run (None: it did, or it has none to
    speak of), from what the run reports: its workload, migrations and layout."""
    if system in ("pop", "grape") and migrations == 0:
        return (
            f"no publisher migrated (threshold {layout.get('threshold', '?')} publications): "
            "the row is PADRES plus the relocation's own messages"
        )
    if system == "padres" and workload == "thesis":
        return "full-domain advertisements: every subscription reaches every broker, as in SIENA"
    target, clusters = layout.get("target_clusters_mean"), layout.get("clusters")
    if (
        system == "octopia"
        and isinstance(target, int | float)
        and isinstance(clusters, int)
        and target >= clusters
    ):
        return f"every publisher's CIV names all {clusters} clusters: no cluster is pruned"
    least, servers = layout.get("group_members_min"), layout.get("servers")
    if system == "kmeans" and isinstance(servers, int) and least == servers:
        return f"every multicast group spans all {servers} servers: no server is pruned"
    return None


def _broker_row(r: BrokerResult) -> Row:
    dl, te = r.delivery_latency_ms, r.table_entries
    return Row(
        system=r.system,
        messages_per_event=r.messages_per_event,
        bytes_per_event=r.bytes_per_event,
        hops_per_delivery=r.hops_per_delivery,
        latency_mean_ms=dl["mean"],
        latency_p90_ms=dl["p90"],
        latency_max_ms=dl["max"],
        false_positive_receptions=r.false_positive_receptions,
        table_entries_mean=te["mean"],
        table_entries_max=te["max"],
        neighbours_mean=r.neighbours["mean"],
        neighbours_max=r.neighbours["max"],
        load_max_over_mean=r.load_max_over_mean,
        load_gini=r.load_gini,
        setup_messages=r.setup_messages,
        expected_deliveries=r.verdict.expected_deliveries,
        missed=r.verdict.missed,
        duplicates=r.verdict.duplicates,
        false_deliveries=r.verdict.false_positives,
        migrations=r.migrations if r.system in ("pop", "grape") else None,
        inactive=inactive(r.system, r.workload, r.migrations, r.layout),
        traffic_ms_per_event=r.traffic_ms_per_event,
        matchings_per_event=r.matchings_per_event,
        wall_s=r.wall_s,
    )


def compare(
    systems: Sequence[str] = ALL_SYSTEMS,
    *,
    nodes: int = 500,
    subs_per_node: float = 5.0,
    events: int = 1000,
    seed: int = 1,
    latency: str = "synthetic",
    progress: Callable[[str], Callable[[str], None] | None] | None = None,
    out_dir: Path | str | None = None,
    force: bool = False,
    csv: CsvSource = NO_CSV,
    workload: str = "thesis",
    publishers: int = 0,
) -> Comparison:
    """Run ``systems`` (in the order given) on one workload; ``progress(system)`` gives each
    run's progress callback. ``out_dir``: each system's run log in ``out_dir/<system>/`` and
    the table in ``out_dir/compare.json`` (written last: its presence means all finished);
    ``force`` replaces an earlier comparison there. ``csv``: with a file, every system publishes
    its rows (``--events-from``, as ``sim run thesis``). ``workload``: ``thesis`` or
    ``clustered`` (every system, the thesis overlay included, on POP/GRAPE's workload with
    ``publishers`` publishers; 0: events // (2 x the threshold), at least 1)."""
    unknown = [s for s in systems if s not in ALL_SYSTEMS]
    if unknown or not systems:
        raise LocalProtocolError(
            f"--systems takes some of {','.join(ALL_SYSTEMS)}; got {','.join(systems)}"
        )
    if workload not in COMPARE_WORKLOADS:
        raise LocalProtocolError(f"--workload {workload}: one of {', '.join(COMPARE_WORKLOADS)}")
    defaults = BrokerParams()
    clustered = workload != "thesis"
    if clustered:
        if csv.events_from is not None:
            raise LocalProtocolError(
                f"--events-from {csv.events_from}: needs --workload thesis (the clustered "
                "workload draws its own events, one advertisement box per publisher)"
            )
        publishers = publishers or max(1, min(nodes // 2, events // (2 * defaults.threshold)))
        if not 1 <= publishers <= nodes // 2:
            raise LocalProtocolError(f"--publishers {publishers}: must be in [1, --nodes/2]")
        if "octopia" in systems and nodes % defaults.clusters:
            raise LocalProtocolError(
                f"--nodes {nodes}: the clustered workload with octopia needs a multiple of its "
                f"{defaults.clusters} clusters (every system then draws it over the same brokers)"
            )
    order = list(dict.fromkeys(systems))
    base = _prepare(Path(out_dir), order, force) if out_dir is not None else None
    out = Comparison(
        nodes,
        subs_per_node,
        events,
        seed,
        latency,
        events_from=csv.events_from,
        workload=workload,
        publishers=publishers if clustered else None,
    )
    shared = {"workload": workload, "publishers": publishers} if clustered else {}

    def params(cls: Callable[..., T], **extra: Any) -> T:
        """One system's parameters: the comparison's workload, the system's defaults."""
        return cls(
            nodes=nodes,
            subs_per_node=subs_per_node,
            events=events,
            seed=seed,
            latency=latency,
            events_from=csv.events_from,
            missing=csv.missing,
            columns=csv.columns,
            **extra,
        )

    # Every system's parameters built and checked before the first run: a value one system
    # refuses must not cost the runs of the systems before it.
    every: dict[str, ThesisParams | BrokerParams] = {}
    for system in order:
        if system == "thesis":
            every[system] = params(ThesisParams, **shared)
        else:
            every[system] = params(BY_SYSTEM[system].params_type, **shared)
    for p in every.values():
        p.check()
    for system in order:
        say = progress(system) if progress is not None else None
        log = base / system if base is not None else None
        if system == "thesis":
            sc = _MeasuredThesis()
            tp = every[system]
            assert isinstance(tp, ThesisParams)
            out.rows.append(_thesis_row(sc, sc.run(tp, say, log, force=force)))
        else:
            bp = every[system]
            assert isinstance(bp, BrokerParams)
            out.rows.append(_broker_row(BY_SYSTEM[system]().run(bp, say, log, force=force)))
    if base is not None:
        doc = {"format": "rangecast-compare", "systems": order, **out.json()}
        (base / COMPARE_FILE).write_text(json.dumps(doc, indent=1, sort_keys=True))
    return out


def _prepare(base: Path, systems: Sequence[str], force: bool) -> Path:
    """Refuse, before any run, a ``--out`` that holds anything but an earlier comparison (or
    one without ``force``); each system's directory is then checked as its run starts."""
    try:
        if base.exists() and not base.is_dir():
            raise LocalProtocolError(f"--out {base}: exists and is not a directory")
        if base.is_dir() and any(base.iterdir()):
            if not force:
                raise LocalProtocolError(
                    f"--out {base}: directory is not empty (an earlier comparison?); use "
                    "--force to replace"
                )
            (base / COMPARE_FILE).unlink(missing_ok=True)
        base.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LocalProtocolError(
            f"--out {base}: cannot write the comparison there ({exc.strerror or exc})"
        ) from None
    for system in systems:
        runlog.prepare_dir(base / system, force=force)
    return base
