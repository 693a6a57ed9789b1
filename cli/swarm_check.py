"""``rangecast swarm check``: the tree invariants on a running swarm (``rangecast.testkit.live``).

Exit 0: every peer that answered agrees with every invariant; 1: violations (each printed with
its peers and tree nodes); 2: bad input (no swarm in the directory, a malformed address, an
unknown checker) or no peer answered at all."""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import trio

from rangecast.dht.errors import LocalProtocolError
from rangecast.runtime import swarm
from rangecast.runtime.tokens import client_token
from rangecast.testkit.invariants import CHECKS
from rangecast.testkit.live import PEER_TIMEOUT_S, check_live, collect

_ALLOWANCES = (
    "live allowances: stale extra copies, internal replica sets widened lazily, "
    "tables may lag the leaves"
)


def _names(text: str | None) -> list[str]:
    return [s.strip() for s in text.split(",") if s.strip()] if text else []


def run(args: argparse.Namespace) -> int:
    if args.dir is not None:
        where = f"the swarm in {args.dir}"
        targets = swarm.addresses(Path(args.dir))
    else:
        where = "--via " + args.via
        targets = _names(args.via)
        if not targets:
            raise LocalProtocolError("--via: no address given (HOST:PORT,...)")
    skip = _names(args.skip)
    unknown = sorted(set(skip) - CHECKS.keys())
    if unknown:
        raise LocalProtocolError(
            f"--skip: no checker named {', '.join(unknown)} (they are {', '.join(CHECKS)})"
        )
    if not args.timeout > 0:
        raise LocalProtocolError(f"--timeout must be a positive number, got {args.timeout}")
    token = client_token(args.token, dict(os.environ))
    live = trio.run(lambda: collect(targets, timeout_s=args.timeout, token=token))
    if not live.states:
        first = next(iter(live.unreachable.items()), ("", "no peers listed"))
        raise LocalProtocolError(f"no peer of {where} answered ({first[0]}: {first[1]})")
    found = check_live(live, strict=args.strict, skip=skip)
    snap = live.snapshot
    checks = [c for c in CHECKS if c not in skip]
    if args.json:
        out: dict[str, Any] = {
            "peers": dict(live.states),
            "unreachable": dict(live.unreachable),
            "copies": len(snap.nodes),
            "nodes": len({(n.schema, n.tid) for n in snap.nodes}),
            "checks": checks,
            "strict": args.strict,
            "violations": [v.to_json() for v in found],
            "ok": not found,
        }
        print(json.dumps(out, indent=2))
        return 1 if found else 0
    nodes = len({(n.schema, n.tid) for n in snap.nodes})
    print(
        f"swarm check: {len(live.states)} of {len(targets)} peers answered; "
        f"{len(snap.nodes)} copies of {nodes} tree nodes"
    )
    for address, why in live.unreachable.items():
        print(f"  unreachable: {address} ({why})")
    not_ready = {a: s for a, s in live.states.items() if s != "ready"}
    for address, state in not_ready.items():
        print(f"  not ready: {address} ({state})")
    print(f"  checks: {', '.join(checks)}" + ("" if args.strict else f" ({_ALLOWANCES})"))
    for v in found:
        print(v)
    if found:
        kinds = Counter(str(v.kind) for v in found)
        detail = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
        print(f"{len(found)} violations ({detail})")
        return 1
    print("no violation")
    return 0


def add_check_parser(acts: Any) -> None:
    """``swarm check`` under ``swarm``'s action subparsers ``acts``."""
    check = acts.add_parser(
        "check",
        help="collect every peer's tree state and check the tree's invariants (exit 1 on any "
        "violation; docs/testing.md)",
    )
    target = check.add_mutually_exclusive_group(required=True)
    target.add_argument("--dir", help="the peers of this `swarm up` directory")
    target.add_argument("--via", metavar="ADDR,...", help="these peers (HOST:PORT,...)")
    check.add_argument("--json", action="store_true", help="the result as JSON")
    check.add_argument(
        "--skip",
        default="",
        metavar="CHECK,...",
        help=f"checkers to leave out ({', '.join(CHECKS)})",
    )
    check.add_argument(
        "--strict",
        action="store_true",
        help="no live allowances: exact replica counts, tables exactly the leaves below",
    )
    check.add_argument(
        "--timeout", type=float, default=PEER_TIMEOUT_S, help="seconds to wait for each peer"
    )
    check.add_argument(
        "--token",
        help="client token, for peers started with --client-tokens (default: $RANGECAST_TOKEN)",
    )
    check.set_defaults(func=run)


__all__ = ["add_check_parser", "run"]
