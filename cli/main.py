"""The ``rangecast`` command line."""

from __future__ import annotations

import argparse
import os
import sys
import typing
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rangecast.dht.errors import RangecastError
from rangecast.sim.options import (
    add_out_option,
    finite_float,
    missing_value,
    non_negative_float,
    positive_float,
)
from rangecast.sim.outputs import emit_result
from rangecast.sim.progress import progress_for

if TYPE_CHECKING:
    pass


def _route(args: argparse.Namespace) -> int:
    from rangecast.sim.route_experiment import RouteParams, run_route

    params = RouteParams(
        nodes=args.nodes,
        lookups=args.lookups,
        seed=args.seed,
        bootstrap=args.bootstrap,
        fail=args.fail,
        latency=args.latency,
        repair_s=args.repair_s,
        lookup_rate_per_s=args.lookup_rate,
        loss=args.loss,
        dht=args.dht,
        lookup=args.lookup,
        keepalives=args.keepalives,
        root_cache=args.root_cache,
    )
    result = run_route(
        params,
        progress=progress_for(args, "route"),
        out=args.out,
        force=args.force,
    )
    emit_result(result, args.json, _print_route_summary)
    return 0


def _thesis(args: argparse.Namespace) -> int:
    from rangecast.pubsub.node import OverlayConfig
    from rangecast.sim.thesis_experiment import ThesisParams, run_thesis

    params = ThesisParams(
        nodes=args.nodes,
        subs_per_node=args.subs_per_node,
        events=args.events,
        seed=args.seed,
        lb=args.lb == "on",
        partial=args.partial,
        events_from=args.events_from,
        missing=args.missing,
        columns=args.columns,
        latency=args.latency,
        dht=args.dht,
        lookup=args.lookup,
        root_cache=args.root_cache,
        overlay=OverlayConfig(
            min_level=args.min_level,
            max_level=args.max_level,
            p=args.p,
            cutoff=args.cutoff,
            probe=args.probe,
            delivery=args.delivery,
        ),
    )
    result = run_thesis(
        params,
        progress=progress_for(args, "thesis"),
        out=args.out,
        force=args.force,
    )
    emit_result(result, args.json, _print_thesis_summary)
    return 0 if result["missed"] == result["duplicates"] == result["false_positives"] == 0 else 1


def _churn(args: argparse.Namespace) -> int:
    from rangecast.sim.churn_experiment import ChurnParams, run_churn

    params = ChurnParams(
        nodes=args.nodes,
        fail_fraction=args.fail_fraction,
        replicas=args.replicas,
        seed=args.seed,
        subs_per_node=args.subs_per_node,
        events=args.events,
        repair_s=args.repair_s,
        latency=args.latency,
        joins=args.joins,
        session_median_s=args.session_median,
        duration_s=args.duration_s,
        dht=args.dht,
        lookup=args.lookup,
        root_cache=args.root_cache,
    )
    result = run_churn(params, progress=progress_for(args, "churn"), out=args.out, force=args.force)
    emit_result(result, args.json, _print_churn_summary)
    bad = result["subscriptions_lost"] + result["duplicates"] + result["false_positives"]
    return 0 if bad == 0 else 1


def _print_churn_summary(r: dict[str, Any]) -> None:
    if "session_median_s" in r:
        print(
            f"{r['nodes']} peers, median session {r['session_median_s']:.0f} s, "
            f"{r['duration_s']:.0f} s of events: {r['departures']} crashes, "
            f"{r['arrivals']} joins, k = {r['replicas']}\n"
            f"subscriptions: {r['subscriptions_installed']:,} installed of {r['subscriptions']:,},"
            f" {r['subscriptions_lost']} lost\n"
            f"deliveries: {r['deliveries']:,} of {r['expected_deliveries']:,} "
            f"(recall {r['delivery_recall']:.6f}), {r['duplicates']} duplicates, "
            f"{r['false_positives']} false positives\n"
            f"replication: {r['repair_messages']:,} messages, {r['repair_bytes']:,} bytes; "
            f"{r['overlay'].get('promoted', 0)} promotions, "
            f"{r['overlay'].get('handed_off', 0)} hand-offs\n"
            f"wall {r['wall_s']:.1f} s"
        )
        return
    print(
        f"{r['nodes']} peers, {r['crashed']} crashed at once, k = {r['replicas']}\n"
        f"subscriptions: {r['subscriptions_installed']:,} installed, "
        f"{r['subscriptions_live']:,} of live subscribers, {r['subscriptions_lost']} lost\n"
        f"deliveries after repair: {r['deliveries']:,} of {r['expected_deliveries']:,} "
        f"(recall {r['delivery_recall']:.6f}), {r['duplicates']} duplicates, "
        f"{r['false_positives']} false positives\n"
        f"replica repair: {r['repair_messages']:,} messages, {r['repair_bytes']:,} bytes; "
        f"{r['overlay'].get('promoted', 0)} replicas promoted; "
        f"replica sets lost whole: {r['whole_sets_lost']}\n"
        f"wall {r['wall_s']:.1f} s"
    )


def _print_thesis_summary(r: dict[str, Any]) -> None:
    lm = r["latency_model"]
    il, dl = r["install_latency_ms"], r["delivery_latency_ms"]
    pb, pr = r["publish_bytes_per_event_per_node"], r["probe_bytes_per_event_per_node"]
    dv = r["delivery_bytes_per_event_per_node"]
    tree = r["tree"]
    verdict = (
        "every matching subscriber got every event exactly once"
        if r["missed"] == r["duplicates"] == r["false_positives"] == 0
        else "MISMATCH against the oracle"
    )
    cmp = r.get("thesis_comparison", {"applies": True, "differences": []})

    def thesis(text: str) -> str:
        # The thesis' figures belong next to a run of the thesis' own setting only.
        return f"   (thesis: {text})" if cmp["applies"] else ""

    lines = [
        f"Content-based pub/sub, thesis workload: {r['nodes']:,} nodes on {_dht_name(r)}, "
        f"{r['subscriptions']:,} subscriptions, {r['events']:,} events, seed {r['seed']}",
        f"  schema {r['schema']} ({r['partial']}), load balancing {'on' if r['lb'] else 'off'}, "
        f"latency model {lm['name']} (mean RTT {lm['mean_rtt_ms']:.0f} ms)",
    ]
    if "csv" in r:
        c = r["csv"]
        lines.append(
            f"  events from        {c['path']}: {c['events']:,} events; columns used: "
            + ", ".join(c["columns_used"])
        )
        if c["skipped_columns"]:
            lines.append(
                "  skipped columns    "
                + "; ".join(f"{k['name']} ({k['reason']})" for k in c["skipped_columns"])
            )
        if c["renamed_columns"]:
            lines.append(
                "  renamed columns    "
                + ", ".join(f"{k['column']!r} -> {k['attribute']}" for k in c["renamed_columns"])
            )
    lines += [
        f"  oracle             {r['expected_deliveries']:,} expected deliveries; "
        f"missed {r['missed']}, duplicates {r['duplicates']}, "
        f"false positives {r['false_positives']}: {verdict}",
        f"  install latency    mean {il['mean']:.0f} ms, p50 {il['p50']:.0f}, "
        f"p90 {il['p90']:.0f}, p99 {il['p99']:.0f}" + thesis("mean 331 ms"),
        f"  delivery latency   mean {dl['mean']:.0f} ms, p50 {dl['p50']:.0f}, "
        f"p90 {dl['p90']:.0f}, max {dl['max']:.0f}" + thesis("mean 333 ms"),
        f"  install bandwidth  {r['install_bytes_per_sub_per_node_mean']:.2f} bytes per "
        f"subscription per node" + thesis("14.32"),
        f"  publish bandwidth  mean {pb['mean']:.0f} B per event per node, p90 {pb['p90']:.0f}, "
        f"max {pb['max']:.0f}" + thesis("mean 1.32 KB"),
        f"  probe bandwidth    mean {pr['mean']:.0f} B per event per node, "
        f"top-20 {pr['top20_mean']:.0f}, max {pr['max']:.0f}   ({r['probe']} probes)",
        f"  delivery bandwidth mean {dv['mean']:.0f} B per event per node, "
        f"top-20 {dv['top20_mean']:.0f}, max {dv['max']:.0f}   ({r['delivery']} delivery)",
        f"  2d-tree            {tree['leaves']:,} leaves, {tree['internal']:,} internal, "
        f"max depth {tree['max_depth']}",
        f"  simulated messages {r['sim_messages']:,}; wall {r['wall_s']:.1f} s "
        f"({r['sim_messages_per_s']:,.0f} messages/s)",
    ]
    if not cmp["applies"]:
        lines.append("  no thesis comparison: " + "; ".join(cmp["differences"]))
    print("\n".join(lines))


def _add_dht(parser: argparse.ArgumentParser) -> None:
    from rangecast.dht.kademlia import LOOKUP_MODES, ROOT_CACHE
    from rangecast.dht.substrate import DHTS

    parser.add_argument(
        "--dht",
        choices=DHTS,
        default="pastry",
        help="the DHT under the overlay (docs/kademlia.md compares the two)",
    )
    parser.add_argument(
        "--lookup",
        choices=LOOKUP_MODES,
        default="iterative",
        help="Kademlia only: iterative lookups from the origin (alpha queries in flight), or "
        "hop-by-hop forwarding to the XOR-closest contact",
    )
    parser.add_argument(
        "--root-cache",
        type=int,
        default=ROOT_CACHE,
        metavar="N",
        help="Kademlia iterative lookups: each node remembers the roots found for its N most "
        "recently used keys and sends to them without a lookup; 0: a lookup per message",
    )


def _dht_name(r: dict[str, Any]) -> str:
    from rangecast.dht.substrate import SUBSTRATES

    spec = SUBSTRATES[r.get("dht") or "pastry"]
    if spec.has_lookup:
        cache = r.get("root_cache")
        if cache is None:
            return f"{spec.title} ({r['lookup']})"
        return f"{spec.title} ({r['lookup']}, root cache {cache or 'off'})"
    return spec.title


def _print_route_summary(r: dict[str, Any]) -> None:
    lm = r["latency_model"]
    lines = [
        f"{_dht_name(r)} routing: {r['nodes']:,} nodes ({r['bootstrap']} bootstrap), "
        f"{r['lookups']:,} lookups, seed {r['seed']}",
        f"  latency model      {lm['name']} (mean RTT {lm['mean_rtt_ms']:.1f} ms)",
    ]
    if r["failed_nodes"]:
        lines.append(f"  crashed nodes      {r['failed_nodes']:,} (live {r['live_nodes']:,})")
    if "join" in r:
        j = r["join"]
        lines.append(
            f"  joins              {j['completed']:,}/{j['joins']:,} completed, "
            f"{j['leafset_mismatches']} leaf sets differ from the oracle"
        )
    lines += [
        f"  correct root       {r['correct_root_fraction']:.4%} "
        f"({r['delivered']:,} delivered, {r['duplicate_deliveries']} duplicates)",
        f"  hops               mean {r['mean_hops']:.3f}  p99 {r['p99_hops']:g}  "
        f"max {r['max_hops']}  (log16 N = {r['log16_n']:.2f})",
        f"  latency            mean {r['mean_latency_ms']:.1f} ms",
        f"  simulated messages {r['sim_messages']:,} ({r['sim_bytes']:,} bytes)",
        f"  wall               {r['wall_s']:.1f} s ({r['sim_messages_per_s']:,.0f} messages/s)",
    ]
    print("\n".join(lines))


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rangecast")
    except PackageNotFoundError:
        return "unknown"


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows an option's default once: not when it is None or False (nothing to show), nor when
    the help text already says what the default is ("(default: thesis)")."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            default is None
            or default is False
            or default is argparse.SUPPRESS
            or "default" in text
            or "%(default)" in text
        ):
            return text
        return super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    """Usage mistakes in one line (the rule for every bad input), exit 2; ``--help`` has the
    usage. Sub-commands inherit the class (argparse builds them with the parent's)."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (usage: {self.prog} --help)\n")


def _same_help(parser: argparse.ArgumentParser) -> None:
    """One help formatter for the whole command tree, sub-commands registered elsewhere (the
    runtime's, the report's) included, so that no help says a default twice."""
    parser.formatter_class = HelpFormatter
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _same_help(sub)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="rangecast",
        description="Content-based publish/subscribe over a Pastry-style DHT: simulator and tools.",
    )
    parser.add_argument("--version", action="version", version=f"rangecast {_version()}")
    top = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sim = top.add_parser("sim", help="run a simulated experiment")
    sims = sim.add_subparsers(dest="experiment", required=True, metavar="EXPERIMENT")
    from rangecast.cli.report import add_report_parser

    add_report_parser(top)

    route = sims.add_parser(
        "route",
        help="route random lookups through a simulated DHT, checked by an oracle",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    route.add_argument("--nodes", type=int, default=1000, help="overlay size N")
    route.add_argument("--lookups", type=int, default=10000, help="number of lookups L")
    route.add_argument("--seed", type=int, default=1, help="seed of every random stream")
    route.add_argument(
        "--bootstrap",
        choices=("oracle", "join"),
        default="oracle",
        help="build routing state directly, or run the join protocol node by node",
    )
    route.add_argument(
        "--fail",
        type=finite_float,
        default=0.0,
        help="fraction of nodes to crash before the lookups",
    )
    route.add_argument(
        "--repair-s",
        type=non_negative_float,
        default=60.0,
        help="simulated seconds of failure detection and repair after crashing",
    )
    route.add_argument(
        "--latency", default="synthetic", help="'synthetic' or the path of a square RTT matrix (ms)"
    )
    route.add_argument(
        "--lookup-rate",
        type=finite_float,
        default=10000.0,
        help="lookups injected per simulated second (Poisson)",
    )
    route.add_argument("--loss", type=finite_float, default=0.0, help="message loss probability")
    route.add_argument(
        "--keepalives",
        choices=("auto", "on", "off"),
        default="auto",
        help="leaf-set keep-alives; auto: off when nothing can fail (oracle bootstrap, "
        "no --fail, no --loss)",
    )
    _add_dht(route)
    add_out_option(route)
    route.add_argument("--json", action="store_true", help="print one JSON object")
    route.add_argument("--quiet", action="store_true", help="no progress on stderr")
    route.set_defaults(func=_route)

    run = sims.add_parser("run", help="run a publish/subscribe scenario")
    scen = run.add_subparsers(dest="scenario", required=True, metavar="SCENARIO")
    thesis = scen.add_parser(
        "thesis",
        help="the thesis' evaluation workload, every delivery checked by a brute-force oracle",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    thesis.add_argument("--nodes", type=int, default=1000, help="overlay size")
    thesis.add_argument(
        "--subs-per-node",
        type=positive_float,
        default=5.0,
        help="subscriptions per node on average",
    )
    thesis.add_argument("--events", type=int, default=10_000, help="events to publish")
    thesis.add_argument("--seed", type=int, default=1, help="seed of every random stream")
    thesis.add_argument(
        "--lb",
        choices=("on", "off"),
        default="off",
        help="load balancing with a cut-off line per attribute",
    )
    thesis.add_argument(
        "--partial",
        choices=("strict", "lenient"),
        default="strict",
        help="rule for events that lack an attribute a subscription constrains",
    )
    thesis.add_argument(
        "--events-from",
        metavar="CSV",
        help="publish the rows of a CSV file instead of generated events",
    )
    thesis.add_argument(
        "--missing",
        type=missing_value,
        metavar="VALUE",
        help="a CSV cell marking an absent value: a number (-200) or a word (NA); empty cells "
        "are always absent",
    )
    thesis.add_argument(
        "--columns",
        metavar="COL[=NAME],...",
        help="publish only these CSV columns, in this order, optionally under another attribute "
        "name ('temp C=temp,RH'); by default every numeric column, names made valid "
        "('temp C' -> temp_C, '0' -> _0)",
    )
    thesis.add_argument(
        "--latency",
        default="synthetic",
        help="'synthetic', 'planetlab' (the measured 490-host matrix shipped with Rangecast) or "
        "the path of a square RTT matrix (ms)",
    )
    thesis.add_argument("--min-level", type=int, default=3, help="RndRegionProbe min level")
    thesis.add_argument("--max-level", type=int, default=10, help="RndRegionProbe max level")
    thesis.add_argument("--p", type=finite_float, default=0.7, help="RndRegionProbe probability")
    thesis.add_argument(
        "--cutoff",
        type=finite_float,
        default=0.1,
        help="load-balancing cut-off c as a fraction of each domain",
    )
    thesis.add_argument(
        "--probe",
        choices=("unicast", "multicast"),
        default="unicast",
        help="event probes: one message per target tree node (the thesis' baseline), or "
        "grouped per next hop (prefix-grouped application-layer multicast)",
    )
    thesis.add_argument(
        "--delivery",
        choices=("unicast", "multicast", "lbdd"),
        default="unicast",
        help="notifications: one message per matched subscriber, grouped per next hop towards "
        "the subscribers' ids, or down an LBDD tree in which subscribers relay",
    )
    _add_dht(thesis)
    add_out_option(thesis)
    thesis.add_argument("--json", action="store_true", help="print one JSON object")
    thesis.add_argument("--quiet", action="store_true", help="no progress on stderr")
    thesis.set_defaults(func=_thesis)

    churn = sims.add_parser(
        "churn",
        help="crash a fraction of the peers at once; check that replication loses nothing",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    churn.add_argument("--nodes", type=int, default=2000, help="overlay size")
    churn.add_argument(
        "--fail-fraction",
        type=finite_float,
        default=0.2,
        help="fraction of peers that crash at once",
    )
    churn.add_argument(
        "--replicas", type=int, default=3, help="copies of every tree node (1: no replication)"
    )
    churn.add_argument("--seed", type=int, default=1, help="seed of every random stream")
    churn.add_argument(
        "--subs-per-node",
        type=positive_float,
        default=1.0,
        help="subscriptions per node on average",
    )
    churn.add_argument("--events", type=int, default=1000, help="events published after repair")
    churn.add_argument(
        "--repair-s",
        type=non_negative_float,
        default=60.0,
        help="simulated seconds of repair after the crash",
    )
    churn.add_argument(
        "--joins", type=int, default=0, help="peers that join while the events are published"
    )
    churn.add_argument(
        "--session-median",
        type=positive_float,
        metavar="SECONDS",
        help="continuous churn: sessions of this median end in crashes, newcomers replace them",
    )
    churn.add_argument(
        "--duration-s",
        type=positive_float,
        default=7200.0,
        help="continuous churn: simulated seconds of events",
    )
    churn.add_argument("--latency", default="synthetic", help="'synthetic', 'planetlab' or a path")
    _add_dht(churn)
    add_out_option(churn, for_report=False)
    churn.add_argument("--json", action="store_true", help="print one JSON object")
    churn.add_argument("--quiet", action="store_true", help="no progress on stderr")
    churn.set_defaults(func=_churn)

    from rangecast.analysis.sweep import add_sweep_parser
    from rangecast.sim.lbdd_experiment import add_lbdd_parser

    add_lbdd_parser(sims)
    add_sweep_parser(sims)

    from rangecast.cli.peer import add_runtime_parsers

    add_runtime_parsers(top)
    _same_help(parser)
    return parser


def _leaf_error(exc: BaseException) -> BaseException:
    """The error to report from a trio run: the first RangecastError or OSError inside
    (possibly nested) exception groups, else the exception itself."""
    if isinstance(exc, BaseExceptionGroup):
        for sub in exc.exceptions:
            leaf = _leaf_error(sub)
            if isinstance(leaf, RangecastError | OSError | KeyboardInterrupt):
                return leaf
    return exc


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        try:
            return int(args.func(args))
        except BaseExceptionGroup as group:
            raise _leaf_error(group) from None
    except RangecastError as exc:
        print(f"rangecast: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rangecast: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (e.g. output piped into head): not an error of ours.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:  # a refused connection, a port in use: say so, no traceback
        # Name the file when the error has one ("/proc/x: No such file or directory").
        where = f"{exc.filename}: " if exc.filename is not None else ""
        print(f"rangecast: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
