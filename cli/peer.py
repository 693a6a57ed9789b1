"""The real-peer commands of ``rangecast``: ``peer start|status``, ``swarm up|status|down``,
``subscribe`` and ``publish``."""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import signal
import sys
from pathlib import Path
from typing import Any

import msgspec
import trio

from rangecast.cli.options import add_dht_options
from rangecast.cli.swarm import add_swarm_parser
from rangecast.dht.errors import LocalProtocolError, RangecastError, RemoteProtocolError
from rangecast.dht.substrate import SUBSTRATES
from rangecast.pubsub.schema import Schema, SchemaRegistry, builtin_schemas
from rangecast.runtime.identity import (
    DEFAULT_ID_DIFFICULTY,
    Identity,
    StateDir,
    SwarmKey,
    check_difficulty,
    parse_endpoint,
)

log = logging.getLogger("rangecast.cli")


def _schemas(name_or_file: str | None) -> tuple[SchemaRegistry, str]:
    reg = builtin_schemas()
    if name_or_file is None:
        return reg, "thesis"
    return reg, reg.resolve(name_or_file).name


def _client_schema(name_or_file: str | None) -> tuple[Schema | None, str]:
    """What ``subscribe`` and ``publish`` send: the schema's name. A built-in name or a schema
    file is resolved here (the file's own name goes to the peer, not its path); any other name
    may be one the peers loaded from a file, so the peer decides (None: nothing to check here)."""
    if name_or_file is None:
        return builtin_schemas().get("thesis"), "thesis"
    reg = builtin_schemas()
    if name_or_file in reg or Path(name_or_file).is_file():
        schema = reg.resolve(name_or_file)
        return schema, schema.name
    if Path(name_or_file).suffix.lower() in (".toml", ".json"):
        raise LocalProtocolError(f"schema file {name_or_file} not found")
    return None, name_or_file


async def _check_peer_schema(client: Any, name: str, via: str) -> None:
    """A schema name unknown here must be one the peer knows; say which ones it does."""
    known = list((await client.hello()).schemas)
    if name not in known:
        raise LocalProtocolError(
            f"unknown schema {name!r}: not built in, not a schema file here, and the peer at "
            f"{via} knows only {', '.join(known)}"
        )


# ----------------------------------------------------------------------------- peer start


def _peer_start(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from rangecast.runtime.peer import RUNTIME_KADEMLIA, RUNTIME_OVERLAY, PeerConfig, PeerRuntime
    from rangecast.runtime.tokens import load_tokens

    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    schemas, _ = _schemas(args.schema)
    # A bad token or swarm key file fails here, before a key is ground or a state directory
    # written.
    tokens = load_tokens(Path(args.client_tokens)) if args.client_tokens else None
    swarm_key = SwarmKey.load(Path(args.swarm_key)) if args.swarm_key else None
    if args.alone and args.join:
        raise LocalProtocolError("--alone starts a new swarm; it cannot go with --join")
    if args.root_cache < 0:
        raise LocalProtocolError(f"--root-cache must be >= 0, got {args.root_cache}")
    state = StateDir(args.state) if args.state else None
    # Read-only: what an earlier run saved (the address, the peers it knew, the DHT).
    saved = state.read() if state is not None else {}
    listen = args.listen
    if listen is None:
        previous = saved.get("address")
        listen = previous if isinstance(previous, str) else "127.0.0.1:0"
    host, port = parse_endpoint(listen)
    contacts = [parse_endpoint(j) for j in args.join]
    remembered = False
    if not contacts and not args.alone:
        known = saved.get("known_peers")
        if isinstance(known, list) and known:
            contacts = [parse_endpoint(str(k)) for k in known]
            remembered = True
    dht = str(args.dht or saved.get("dht") or "pastry")
    if saved.get("dht") not in (None, dht):
        raise LocalProtocolError(
            f"this state directory belongs to a {saved['dht']} peer; --dht {dht} cannot reuse it"
        )
    kademlia = replace(RUNTIME_KADEMLIA, lookup=args.lookup, root_cache=args.root_cache)
    spec = SUBSTRATES.get(dht)  # an unknown name: PeerConfig says which ones there are
    if args.lookup != "iterative" and not (spec is not None and spec.has_lookup):
        raise LocalProtocolError("--lookup applies to --dht kademlia only")
    # The whole configuration is built, hence checked, before the state directory is touched:
    # a bad option leaves no key pair behind.
    config = PeerConfig(
        host=host,
        port=port,
        dht=dht,
        kademlia=kademlia,
        capacity=args.capacity,
        overlay=replace(RUNTIME_OVERLAY, probe=args.probe, delivery=args.delivery),
        # Remembered peers may all be gone for a while (a whole swarm restarting): keep trying.
        join_retry_max_s=30.0 if remembered else 0.0,
        alone_if_unreachable=args.alone_if_unreachable,
        id_difficulty=args.id_difficulty,
        client_tokens=tokens,
        swarm_key=swarm_key,
        signed_acks=args.signed_acks,
    )
    if state is not None:
        try:
            identity, created = state.load_identity(check_difficulty(args.id_difficulty))
            epoch = state.next_epoch()
        except OSError as exc:
            # Name the file at fault if it lies inside the directory, else the directory given
            # (mkdir reports the first missing parent, which says less).
            inside = str(exc.filename or "").startswith(str(args.state))
            raise LocalProtocolError(
                f"cannot use the state directory {exc.filename if inside else args.state}: "
                f"{exc.strerror or exc}"
            ) from None
        log.info(
            "%s identity %s in %s",
            "created" if created else "loaded",
            identity.node_id.hex(),
            args.state,
        )
    else:
        identity, epoch = Identity.generate(check_difficulty(args.id_difficulty)), None
        log.info("no --state: a fresh identity %s, forgotten on exit", identity.node_id.hex())
    if remembered:
        log.info("rejoining through %d peers remembered in the state directory", len(contacts))
    if state is not None and saved.get("dht") is None:
        try:
            state.write({**state.read(), "dht": dht})
        except OSError as exc:
            raise LocalProtocolError(
                f"cannot write the state directory {args.state}: {exc.strerror or exc}"
            ) from None
    peer = PeerRuntime(identity, schemas, config, state=state, epoch=epoch)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_on_signals, peer, nursery.cancel_scope)
            await nursery.start(peer.run, contacts)
            assert peer.address is not None
            print(
                json.dumps({"id": identity.node_id.hex(), "address": peer.address.endpoint}),
                flush=True,
            )
            nursery.start_soon(_report_rejections, peer)
            await peer.stopped.wait()
            nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    except (OSError, BaseExceptionGroup) as exc:
        err = _first_os_error(exc)
        if err is None:
            raise
        if err.filename:
            raise LocalProtocolError(f"{err.filename}: {err.strerror or err}") from None
        if peer.address is None:
            raise LocalProtocolError(f"cannot listen on {listen}: {err.strerror or err}") from None
        raise LocalProtocolError(
            f"peer at {peer.address.endpoint} stopped: {err.strerror or err}"
        ) from None
    return 0


def _first_os_error(exc: BaseException) -> OSError | None:
    """The OSError a trio run ended with, possibly inside (nested) exception groups."""
    if isinstance(exc, OSError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for sub in exc.exceptions:
            found = _first_os_error(sub)
            if found is not None:
                return found
    return None


async def _on_signals(peer: Any, scope: trio.CancelScope) -> None:
    """SIGINT/SIGTERM: leave gracefully if the peer is in the overlay, else just stop."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            if peer.ready and not peer.stopped.is_set():
                log.info("%s: leaving", signal.Signals(signum).name)
                peer.stop()
            else:
                log.info("%s: stopping", signal.Signals(signum).name)
                scope.cancel()
            return


async def _report_rejections(peer: Any) -> None:
    """A line in the log whenever the peer has refused input since the last one."""
    seen = 0
    while True:
        await trio.sleep(10.0)
        total = peer.rejections.total
        if total != seen:
            log.warning(
                "refused %d frames so far: %s",
                total,
                ", ".join(f"{k} {v}" for k, v in sorted(peer.rejections.by_reason.items())),
            )
            seen = total


# ----------------------------------------------------------------------------- client commands


def _token(args: argparse.Namespace) -> str | None:
    """The client token: ``--token``, else the environment (``runtime/tokens.py``)."""
    from rangecast.runtime.tokens import client_token

    return client_token(args.token, dict(os.environ))


def _via(text: str) -> tuple[str, int]:
    host, port = parse_endpoint(text)
    if port == 0:
        raise LocalProtocolError("--via needs the peer's port")
    return host, port


def _peer_status(args: argparse.Namespace) -> int:
    from rangecast.runtime.client import connect

    host, port = _via(args.via)
    token = _token(args)
    where = f"the peer at {args.via}"

    async def main() -> object:
        async with connect(host, port, token=token) as client:
            try:
                return await client.status()
            except (ValueError, RecursionError) as exc:  # the reply's text is not JSON
                raise RemoteProtocolError(
                    f"{where} sent a status that is not JSON: {exc}"
                ) from None

    st = trio.run(main)
    # Checked for both outputs: what the peer sent is input like any other (exit 2, one line).
    view = _status_view(st, where)
    if args.json:
        print(json.dumps(st, indent=2))
        return 0
    print(_render(view, where))
    return 0


# What the text output reads of a status, with the types it must have (docs/runtime.md lists
# the fields). Fields a peer of an older version may lack have defaults; others are ignored.


class _Routing(msgspec.Struct):
    entries: int
    buckets: int | None = None
    per_bucket: dict[str, int] | None = None
    rows: int | None = None
    per_row: list[int] | None = None


class _LeafSet(msgspec.Struct):
    left: list[str] = msgspec.field(default_factory=list)
    right: list[str] = msgspec.field(default_factory=list)


class _Hosted(msgspec.Struct):
    leaf: bool
    subscriptions: int = 0


class _Rejected(msgspec.Struct):
    total: int
    runtime: dict[str, int]
    dht_malformed: int
    overlay_malformed: int


class _Transport(msgspec.Struct):
    frames_in: int
    frames_out: int
    dropped_out: int
    connections_open: int = 0
    refused_connections: int = 0


class _Overlay(msgspec.Struct):
    expired: int = 0
    retries: int = 0


class _Admission(msgspec.Struct):
    rate_per_s: float | None = None


class _Clients(msgspec.Struct):
    connections: int = 0
    addresses: int = 0
    publishes_accepted: int = 0
    refused: dict[str, int] = msgspec.field(default_factory=dict)
    lag_s: float = 0.0
    admission: _Admission = msgspec.field(default_factory=_Admission)


class _SecondHand(msgspec.Struct):
    candidates: int = 0
    admitted_after_proof: int = 0


class _LinkCaps(msgspec.Struct):
    refused: dict[str, int] = msgspec.field(default_factory=dict)


class _Untrusted(msgspec.Struct):
    second_hand: _SecondHand = msgspec.field(default_factory=_SecondHand)
    links: _LinkCaps = msgspec.field(default_factory=_LinkCaps)


class _EndToEnd(msgspec.Struct):
    confirmed: int
    losses: int
    demoted: int
    quarantined: list[str]


class _Healing(msgspec.Struct):
    remembered: int
    pings: int
    healed: int


class _Dht(msgspec.Struct):
    end_to_end: _EndToEnd | None = None
    healing: _Healing | None = None


class _Status(msgspec.Struct):
    id: str
    address: str
    state: str
    uptime_s: float
    routing_table: _Routing
    tree_nodes: list[_Hosted]
    subscriptions: int
    rejected: _Rejected
    transport: _Transport
    links: int
    dht_kind: str = "pastry"
    neighbours: list[str] = msgspec.field(default_factory=list)
    leaf_set: _LeafSet = msgspec.field(default_factory=_LeafSet)
    overlay: _Overlay = msgspec.field(default_factory=_Overlay)
    internal_errors: int = 0
    save_failures: int = 0
    pauses: int = 0
    clients: _Clients | None = None
    untrusted: _Untrusted | None = None
    dht: _Dht = msgspec.field(default_factory=_Dht)


def _status_view(st: object, where: str = "the peer") -> _Status | None:
    """``st`` (a peer's status, as its JSON decoded) type-checked, or None for a peer that is
    still starting (its status says only that); ``RemoteProtocolError``, one line naming
    ``where`` and what was wrong, for anything else."""
    if isinstance(st, dict) and st.get("state") == "starting" and "id" not in st:
        return None
    try:
        view = msgspec.convert(st, _Status)
    except msgspec.ValidationError as exc:
        raise RemoteProtocolError(f"{where} sent a status this client cannot read: {exc}") from None
    rt = view.routing_table
    if not (
        (rt.per_bucket is not None and rt.buckets is not None)
        or (rt.rows is not None and rt.per_row is not None)
    ):
        raise RemoteProtocolError(
            f"{where} sent a status this client cannot read: its routing_table has neither "
            "buckets and per_bucket nor rows and per_row"
        )
    return view


def _format_status(st: dict[str, Any], where: str = "the peer") -> str:
    """``peer status``'s text; ``RemoteProtocolError`` (one line) if ``st`` is not a status
    of the shape it reads (``_status_view``)."""
    return _render(_status_view(st, where), where)


def _render(view: _Status | None, where: str) -> str:
    if view is None:
        return f"{where} is starting"
    rt, rej, tr = view.routing_table, view.rejected, view.transport
    lines = [
        f"peer      {view.id}  {view.address}  ({view.state}, up {view.uptime_s:.0f} s, "
        f"{view.dht_kind})",
    ]
    if rt.per_bucket is not None:
        lines.append(f"siblings  {len(view.neighbours)} closest by XOR")
        lines.extend(f"          {p}" for p in view.neighbours)
        lines.append(
            f"routing   {rt.entries} contacts in {rt.buckets} k-buckets "
            f"(by shared prefix: {rt.per_bucket})"
        )
    else:
        lines.append(f"leaf set  {len(view.leaf_set.left)} left, {len(view.leaf_set.right)} right")
        for side, peers in (("left", view.leaf_set.left), ("right", view.leaf_set.right)):
            for p in peers:
                lines.append(f"          {side:<5} {p}")
        lines.append(f"routing   {rt.entries} entries in {rt.rows} rows (per row: {rt.per_row})")
    leaves = [t for t in view.tree_nodes if t.leaf]
    lines.append(
        f"tree      {len(view.tree_nodes)} tree nodes hosted ({len(leaves)} leaves, "
        f"{sum(t.subscriptions for t in leaves)} stored subscriptions, "
        f"{view.overlay.expired} pieces expired unrefreshed)"
    )
    lines.append(f"subs      {view.subscriptions} subscriptions of this peer's clients")
    reasons = ", ".join(f"{k}: {v}" for k, v in rej.runtime.items()) or "none"
    lines.append(
        f"rejected  {rej.total} inputs (runtime: {reasons}; dht malformed "
        f"{rej.dht_malformed}; overlay malformed {rej.overlay_malformed})"
    )
    lines.append(
        f"transport {tr.frames_in} frames in, {tr.frames_out} out, "
        f"{tr.dropped_out} dropped on send, {view.links} open links"
    )
    # Defaults: a peer of an older version does not report these.
    lines.append(
        f"health    {view.internal_errors} internal errors, "
        f"{tr.connections_open} incoming connections open, "
        f"{tr.refused_connections} refused, "
        f"{view.save_failures} failed state saves, {view.pauses} pauses, "
        f"{view.overlay.retries} install/removal retries"
    )
    cl = view.clients
    if cl is not None:
        rate = cl.admission.rate_per_s
        lines.append(
            f"clients   {cl.connections} connections from {cl.addresses} "
            f"addresses, {cl.publishes_accepted} publishes accepted, {sum(cl.refused.values())} "
            f"requests refused, loop lag {cl.lag_s} s, admission "
            f"{'-' if rate is None else rate}/s"
        )
    un = view.untrusted
    if un is not None:
        lines.append(
            f"untrusted {un.second_hand.candidates} second-hand candidates waiting, "
            f"{un.second_hand.admitted_after_proof} admitted after proof, "
            f"{sum(un.links.refused.values())} link refusals"
        )
    e2e = view.dht.end_to_end
    if e2e is not None:
        lines.append(
            f"e2e       {e2e.confirmed} routed messages confirmed, {e2e.losses} lost "
            f"and re-routed, {e2e.demoted} next hops demoted, "
            f"{len(e2e.quarantined)} quarantined now"
        )
    heal = view.dht.healing
    if heal is not None:
        lines.append(
            f"healing   {heal.remembered} peers declared failed asked again now and then, "
            f"{heal.pings} asked, {heal.healed} back"
        )
    return "\n".join(lines)


def _subscribe(args: argparse.Namespace) -> int:
    from rangecast.pubsub.subscription import parse_subscription
    from rangecast.runtime.client import connect

    host, port = _via(args.via)
    # An unknown schema, a bad file or a bad expression fails here, before connecting.
    known, schema = _client_schema(args.schema)
    if known is not None:
        parse_subscription(args.expr, known)
    if args.count is not None and args.count < 1:
        raise LocalProtocolError("--count must be >= 1")
    if args.timeout is not None and not (math.isfinite(args.timeout) and args.timeout > 0):
        raise LocalProtocolError(
            f"--timeout must be a positive number of seconds, got {args.timeout}"
        )
    timeout = math.inf if args.timeout is None else args.timeout
    token = _token(args)

    async def main() -> int | None:
        deadline = trio.current_time() + timeout
        async with connect(host, port, token=token) as client:
            if known is None:
                await _check_peer_schema(client, schema, args.via)
            with trio.move_on_at(deadline) as installing:
                sub = await client.subscribe(args.expr, schema)
            if installing.cancelled_caught:
                return None  # not installed in time (the peer drops it with the connection)
            # The peer replies once every piece is stored and acknowledged: from here on, any
            # event published reaches this subscription.
            print(json.dumps({"subscribed": sub.sid}), flush=True)
            n = 0
            with trio.move_on_at(deadline):
                async for d in sub:
                    print(
                        json.dumps(
                            {"sid": d.sid, "event": d.eid, "schema": d.schema, "values": d.values}
                        ),
                        flush=True,
                    )
                    n += 1
                    if args.count is not None and n >= args.count:
                        break
            await sub.unsubscribe()
            return n

    n = trio.run(main)
    if n is None:
        print(
            f"rangecast: subscribe timed out after {args.timeout:g} s before the subscription "
            "was installed",
            file=sys.stderr,
        )
        return 1
    if args.count is not None and n < args.count:
        print(
            f"rangecast: subscribe timed out after {args.timeout:g} s with {n} of {args.count} "
            "deliveries",
            file=sys.stderr,
        )
        return 1
    return 0


def _publish(args: argparse.Namespace) -> int:
    from rangecast.runtime.client import connect

    host, port = _via(args.via)
    values: dict[str, float | None] = {}
    for item in args.values:
        name, sep, raw = item.partition("=")
        if not sep or not name:
            raise LocalProtocolError(f"expected ATTR=VALUE, got {item!r}")
        try:
            v = float(raw)
        except ValueError:
            raise LocalProtocolError(f"{name}: {raw!r} is not a number") from None
        if name in values:
            raise LocalProtocolError(f"{name} given twice")
        values[name] = v
    known, schema = _client_schema(args.schema)
    if known is not None:
        known.event(values)  # validate here for a clear error before connecting
    token = _token(args)

    async def main() -> int:
        async with connect(host, port, token=token) as client:
            if known is None:
                await _check_peer_schema(client, schema, args.via)
            return await client.publish(values, schema)

    eid = trio.run(main)
    print(json.dumps({"published": eid}), flush=True)
    return 0


# ----------------------------------------------------------------------------- the parsers


def _add_token(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--token",
        help="client token, for a peer started with --client-tokens (default: $RANGECAST_TOKEN)",
    )


def _add_via_and_schema(parser: argparse.ArgumentParser) -> None:
    """``--via`` and ``--schema`` of ``subscribe`` and ``publish``."""
    parser.add_argument("--via", metavar="HOST:PORT", required=True, help="a peer of the swarm")
    _add_token(parser)
    parser.add_argument(
        "--schema",
        metavar="NAME|FILE",
        help="schema: built in, a .toml/.json file, or a name the peers loaded (default: thesis)",
    )


def add_runtime_parsers(top: Any) -> None:
    peer = top.add_parser("peer", help="run or inspect one real peer")
    peers = peer.add_subparsers(dest="peer_command", required=True, metavar="ACTION")
    start = peers.add_parser(
        "start",
        help="run one peer in the foreground (Ctrl-C leaves gracefully)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    start.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help="where to listen (default: the address saved in --state, else 127.0.0.1 and a "
        "free port)",
    )
    start.add_argument(
        "--join",
        metavar="HOST:PORT",
        action="append",
        default=[],
        help="a peer of the swarm to join through (repeatable; default: the peers remembered "
        "in --state, else start a new swarm)",
    )
    start.add_argument(
        "--state",
        metavar="DIR",
        help="state directory: the peer's key pair (hence its id) and whom it knew",
    )
    start.add_argument(
        "--alone",
        action="store_true",
        help="start a new swarm, ignoring the peers remembered in --state (what `swarm up` "
        "does for its first peer when it restarts a stopped swarm)",
    )
    start.add_argument(
        "--alone-if-unreachable",
        action="store_true",
        help="if no peer to join through answers, start a new swarm alone (default: retry "
        "the peers remembered in --state with backoff; fail if --join peers do not answer)",
    )
    start.add_argument("--schema", metavar="NAME|FILE", help="schema (default: thesis)")
    start.add_argument(
        "--signed-acks",
        action="store_true",
        help="sign end-to-end acks with the peer's key, so a peer that drops a routed message "
        "cannot answer for its root (costs throughput; every peer of a swarm should agree)",
    )
    add_dht_options(start, dht=None, peer=True)
    start.add_argument(
        "--capacity", type=int, default=100, help="subscriptions a tree leaf holds before it splits"
    )
    start.add_argument(
        "--id-difficulty",
        type=int,
        default=DEFAULT_ID_DIFFICULTY,
        metavar="BITS",
        help="id puzzle: leading zero bits a key must have; a new key is ground to it, and "
        "peers whose keys fall short are refused (0: off; every peer of a swarm should agree)",
    )
    start.add_argument(
        "--probe",
        choices=("unicast", "multicast"),
        default="unicast",
        help="how an event's probes travel: one message per target (the thesis' baseline) or "
        "grouped per next hop (thesis 3.4.2); every peer of a swarm should use the same",
    )
    start.add_argument(
        "--delivery",
        choices=("unicast", "multicast", "lbdd"),
        default="unicast",
        help="how a leaf notifies its matched subscribers: one message each, grouped per next "
        "hop, or LBDD's load-balanced dissemination tree",
    )
    start.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        default="info",
        help="the least severe log records written to stderr (default: info)",
    )
    start.add_argument(
        "--client-tokens",
        metavar="FILE",
        help="require clients to present one of the tokens in FILE (one a line; default: no "
        "tokens, any client is served)",
    )
    start.add_argument(
        "--swarm-key",
        metavar="FILE",
        help="peer admission: link only to peers that prove the swarm key in FILE (64 hex "
        "digits; every peer of the swarm needs it; default: none, any peer may join)",
    )
    start.set_defaults(func=_peer_start)

    status = peers.add_parser("status", help="a peer's id, leaf set, tables and counters")
    status.add_argument("--via", metavar="HOST:PORT", required=True, help="the peer to ask")
    _add_token(status)
    status.add_argument("--json", action="store_true", help="print the status as JSON")
    status.set_defaults(func=_peer_status)

    add_swarm_parser(top)

    sub = top.add_parser(
        "subscribe",
        help="subscribe through a peer; print one JSON line per delivered event",
        description='Prints {"subscribed": SID} once every piece of the subscription is stored '
        "and acknowledged (from then on, every event published reaches it), then one JSON line "
        "per delivered event. Exit status: 0 after --count deliveries (or at --timeout without "
        "--count), 1 if --timeout runs out before --count deliveries, 2 on a mistake.",
    )
    _add_via_and_schema(sub)
    sub.add_argument("expr", metavar="EXPR", help='e.g. "Attr1 between 10 and 20 and Attr4 < 5"')
    sub.add_argument("--count", type=int, help="exit after this many deliveries")
    sub.add_argument(
        "--timeout",
        type=float,
        help="exit after this many seconds (status 1 if --count deliveries have not come)",
    )
    sub.set_defaults(func=_subscribe)

    pub = top.add_parser(
        "publish",
        help="publish one event through a peer",
        description="Publishes one event, given as ATTR=VALUE pairs of the schema's attributes "
        "(an attribute left out is absent: a partial event), and prints its event id as JSON. "
        "Exit status: 0 once the peer accepted it, 2 on a mistake or a refusal (the peer's "
        "reason on one line).",
    )
    _add_via_and_schema(pub)
    pub.add_argument(
        "values", metavar="ATTR=VALUE", nargs="+", help="e.g. Attr1=12.5 Attr4=3 (finite numbers)"
    )
    pub.set_defaults(func=_publish)


__all__ = ["RangecastError", "add_runtime_parsers"]
