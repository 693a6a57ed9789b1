"""``rangecast swarm up|status|down|check``: the parser of runtime.swarm's local swarm of peers.

The defaults of ``up`` are ``SwarmSpec``'s; ``--dht``, ``--lookup`` and ``--root-cache`` come
from the one builder every command uses (cli.options.add_dht_options, as ``peer start``'s)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rangecast.cli.options import add_dht_options
from rangecast.cli.swarm_check import add_check_parser
from rangecast.runtime import swarm
from rangecast.runtime.identity import SWARM_KEY_FILE
from rangecast.runtime.swarm import SwarmSpec

#: ``--swarm-key`` without FILE: the swarm directory's own key, made on first use.
_DIR_KEY = object()


def _up(args: argparse.Namespace) -> int:
    own_key = args.swarm_key is _DIR_KEY
    key: Path | None = None
    if own_key:
        key = Path(args.dir) / SWARM_KEY_FILE
    elif args.swarm_key is not None:
        key = Path(args.swarm_key)
    return swarm.up(
        SwarmSpec(
            n=args.n,
            dir=Path(args.dir),
            base_port=args.base_port,
            schema=args.schema,
            capacity=args.capacity,
            dht=args.dht,
            lookup=args.lookup,
            root_cache=args.root_cache,
            id_difficulty=args.id_difficulty,
            timeout=args.timeout,
            quiet=args.quiet,
            client_tokens=Path(args.client_tokens) if args.client_tokens else None,
            swarm_key=key,
            create_swarm_key=own_key,
            signed_acks=args.signed_acks,
        )
    )


def _status(args: argparse.Namespace) -> int:
    return swarm.status(Path(args.dir), as_json=args.json)


def _down(args: argparse.Namespace) -> int:
    return swarm.down(Path(args.dir), grace_s=args.grace)


def add_swarm_parser(top: Any) -> None:
    """``swarm`` and its actions, under the top-level subparsers ``top``."""
    parser = top.add_parser("swarm", help="a local swarm of peers as background processes")
    acts = parser.add_subparsers(dest="swarm_command", required=True, metavar="ACTION")
    up = acts.add_parser(
        "up",
        help="start N peers on 127.0.0.1; returns once the swarm is ready (on the directory "
        "of a stopped swarm: restarts its peers, same ids)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    spec = SwarmSpec  # the defaults
    up.add_argument("-n", type=int, required=True, help="number of peers")
    up.add_argument("--dir", required=True, help="swarm directory (state, logs, swarm.json)")
    port_help = "peer i listens on base-port + i"
    up.add_argument("--base-port", type=int, default=spec.base_port, help=port_help)
    up.add_argument("--schema", metavar="NAME|FILE", help="schema (default: thesis)")
    cap_help = "leaf capacity before a split"
    up.add_argument("--capacity", type=int, default=spec.capacity, help=cap_help)
    add_dht_options(up, dht=spec.dht, root_cache=spec.root_cache, peer=True)
    puzzle_help = "id puzzle: leading zero bits every peer's key must have (0: off)"
    up.add_argument(
        "--id-difficulty", type=int, default=spec.id_difficulty, metavar="BITS", help=puzzle_help
    )
    wait_help = "seconds to wait for the swarm to be ready"
    up.add_argument("--timeout", type=float, default=spec.timeout, help=wait_help)
    up.add_argument("--quiet", action="store_true", help="no progress on stderr")
    up.add_argument(
        "--signed-acks", action="store_true", help="every peer signs its end-to-end acks"
    )
    tokens_help = "every peer requires client tokens from FILE (one a line; default: none)"
    up.add_argument("--client-tokens", metavar="FILE", help=tokens_help)
    key_help = (
        "peer admission: every peer links only to peers proving the swarm key in FILE; "
        f"without FILE, DIR/{SWARM_KEY_FILE} (made, mode 0600, if missing; default: no key)"
    )
    up.add_argument("--swarm-key", metavar="FILE", nargs="?", const=_DIR_KEY, help=key_help)
    up.set_defaults(func=_up)
    st = acts.add_parser("status", help="each peer's process and overlay state")
    st.add_argument("--dir", required=True, help="the swarm directory `swarm up` made")
    st.add_argument("--json", action="store_true", help="print the status as JSON")
    st.set_defaults(func=_status)
    down = acts.add_parser("down", help="stop every peer (graceful leave, then SIGKILL)")
    down.add_argument("--dir", required=True, help="the swarm directory `swarm up` made")
    down.add_argument("--grace", type=float, default=10.0, help="seconds before SIGKILL")
    down.set_defaults(func=_down)
    add_check_parser(acts)


__all__ = ["add_swarm_parser"]
