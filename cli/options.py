"""Command-line options built from the scenarios' parameter dataclasses, and the options every
command shares (the DHT choice, the run log, the output).

A scenario's options are generated from its parameter dataclass (sim.scenario: ``param``,
``group``, ``dht_param``): name, default, help, choices, metavar and value parser are read from
the field, so each is written once, in the dataclass. ``params_from_args`` builds the dataclass
back from the parsed arguments.
"""

from __future__ import annotations

import argparse
import types
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rangecast.dht.errors import FieldError
from rangecast.dht.kademlia import LOOKUP_MODES, ROOT_CACHE
from rangecast.dht.substrate import DHTS
from rangecast.sim.options import OptionValueError, finite_float

if TYPE_CHECKING:
    from rangecast.sim.scenario import Entry


def _argparse_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """``parse`` with its complaint shown as argparse shows its own (one line, exit 2)."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except OptionValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = getattr(parse, "__name__", "value")
    return convert


def _flag(entry: Entry) -> str:
    assert entry.option is not None
    if entry.option.flag:
        return entry.option.flag
    prefix = "--no-" if entry.option.style == "negated" else "--"
    return prefix + entry.name.replace("_", "-")


def _value_type(entry: Entry) -> Callable[[str], Any] | None:
    assert entry.option is not None
    if entry.option.type is not None:
        return _argparse_type(entry.option.type)
    hint = entry.hint
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if hint is int:
        return int
    if hint is float:
        return _argparse_type(finite_float)
    return None


def add_params(parser: argparse.ArgumentParser, params_type: type) -> None:
    """One option per command-line field of ``params_type``, in field order."""
    from rangecast.sim.scenario import entries  # the simulator: not for the peers' commands

    dht = {e.name: e.default for e in entries(params_type) if e.option is None}
    for entry in entries(params_type):
        opt = entry.option
        if opt is None:
            continue
        kw: dict[str, Any] = {"dest": entry.name, "help": opt.help}
        if opt.style == "negated":
            kw.update(action="store_true")
        elif opt.style == "on-off":
            kw.update(choices=("on", "off"), default="on" if entry.default else "off")
        else:
            kw.update(default=entry.default, type=_value_type(entry))
            if opt.choices is not None:
                kw["choices"] = opt.choices
        if opt.metavar is not None:
            kw["metavar"] = opt.metavar
        elif opt.flag and "type" in kw and "choices" not in kw:
            # Named after the option, as argparse would without ``dest``: --window WINDOW.
            kw["metavar"] = opt.flag.lstrip("-").replace("-", "_").upper()
        parser.add_argument(_flag(entry), **kw)
    if dht:
        # After the scenario's own options, as every command lists them.
        add_dht_options(parser, dht=dht["dht"], root_cache=dht["root_cache"])


def params_from_args(params_type: type, args: argparse.Namespace) -> Any:
    """The parameter dataclass of a parsed command line."""
    from rangecast.sim.scenario import build_params, entries

    values: dict[str, Any] = {}
    for entry in entries(params_type):
        value = getattr(args, entry.name)
        if entry.option is not None and entry.option.style == "negated":
            value = not value
        elif entry.option is not None and entry.option.style == "on-off":
            value = value == "on"
        values[entry.name] = value
    return build_params(params_type, values)


def add_dht_options(
    parser: argparse.ArgumentParser,
    *,
    dht: str | None = "pastry",
    root_cache: int = ROOT_CACHE,
    peer: bool = False,
) -> None:
    """``--dht``, ``--lookup`` and ``--root-cache``: of the simulated runs, and (``peer``) of
    ``peer start``, where the default DHT is the one its state directory saved."""
    if peer:
        dht_help = (
            "the DHT under the overlay"
            + ("" if dht else " (default: the one saved in --state, else pastry)")
            + "; every peer of a swarm must use the same"
        )
        lookup_help = "Kademlia routing: iterative lookups from the origin, or hop by hop"
        cache_help = (
            "Kademlia iterative lookups: roots remembered for the N most recently used keys "
            "(0: a lookup per routed message)"
        )
    else:
        dht_help = "the DHT under the overlay (docs/kademlia.md compares the two)"
        lookup_help = (
            "Kademlia only: iterative lookups from the origin (alpha queries in flight), or "
            "hop-by-hop forwarding to the XOR-closest contact"
        )
        cache_help = (
            "Kademlia iterative lookups: each node remembers the roots found for its N most "
            "recently used keys and sends to them without a lookup; 0: a lookup per message"
        )
    parser.add_argument("--dht", choices=DHTS, default=dht, help=dht_help)
    parser.add_argument("--lookup", choices=LOOKUP_MODES, default="iterative", help=lookup_help)
    parser.add_argument("--root-cache", type=int, default=root_cache, metavar="N", help=cache_help)


def add_out_option(parser: argparse.ArgumentParser, *, for_report: bool = True) -> None:
    """``--out DIR`` (the run log) and ``--force`` (replace one already there)."""
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="write the run log (Parquet, docs/run-logs.md) into DIR"
        + (" for 'rangecast report'" if for_report else ""),
    )
    parser.add_argument(
        "--force", action="store_true", help="replace a run log already in the --out DIR"
    )


def add_output_options(parser: argparse.ArgumentParser, *, json_help: str | None = None) -> None:
    """``--json`` (one JSON object on stdout) and ``--quiet`` (no progress on stderr)."""
    parser.add_argument("--json", action="store_true", help=json_help or "print one JSON object")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")


__all__ = [
    "add_dht_options",
    "add_out_option",
    "add_output_options",
    "add_params",
    "params_from_args",
]


#: Fields whose option is not ``--`` and the field's name with dashes: (option's dest, flag).
_FIELD_OPTIONS = {"load_balancing": ("lb", "--lb")}


def field_error(exc: FieldError, args: argparse.Namespace) -> str:
    """A configuration's complaint (``cutoff 2.0: must be in (4 x widen, 1]``) as the command
    line says it: every field the command offers as an option named by that option
    (``--cutoff 2.0: ...``), the others by their own names. The one place field names become
    option names, for every command (the parsed ``args`` say which options it has)."""

    def name_of(name: str) -> str:
        dest, flag = _FIELD_OPTIONS.get(name, (name, "--" + name.replace("_", "-")))
        return flag if dest in vars(args) else name

    return exc.message(name_of)
