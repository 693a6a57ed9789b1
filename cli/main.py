"""The ``rangecast`` command line."""

from __future__ import annotations

import argparse
import os
import sys
import typing
from collections.abc import Sequence

from rangecast.dht.errors import FieldError, RangecastError


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rangecast")
    except PackageNotFoundError:
        return "unknown"


class _Version(argparse.Action):
    """``--version``: the version, and whether the hot modules run compiled (``rangecast._speed``:
    importing them to tell costs a moment, so only when asked)."""

    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        from rangecast import _speed

        print(f"rangecast {_version()}, {_speed.speed()}")
        parser.exit()


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


#: The real peers' commands (cli.peer). Their command lines build only their own parsers:
#: the rest of the tree imports the simulator and the analysis (numpy, the scenario registry),
#: which would double the start-up time of every ``peer start``, ``publish`` and ``subscribe``.
RUNTIME_COMMANDS = frozenset({"peer", "swarm", "subscribe", "publish"})


def _command(argv: Sequence[str]) -> str | None:
    """The top-level command of ``argv``: its first word that is not an option (the top-level
    options, ``--help`` and ``--version``, take no value)."""
    return next((a for a in argv if not a.startswith("-")), None)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command tree, from the sub-command modules: ``sim`` (cli.sim, generated from the
    scenario registry, with ``sim sweep``; ``sim compare`` from cli.compare), ``report``
    (cli.report), and the real peers' ``peer``, ``swarm``, ``subscribe`` and ``publish``
    (cli.peer). For a ``command`` of ``RUNTIME_COMMANDS``, only the peers' part."""
    from rangecast.cli.peer import add_runtime_parsers

    parser = _Parser(
        prog="rangecast",
        description="Content-based publish/subscribe over a Pastry-style DHT: simulator and tools.",
    )
    parser.add_argument(
        "--version", action=_Version, nargs=0, help="show the version and speed, and exit"
    )
    top = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    if command not in RUNTIME_COMMANDS:
        from rangecast.cli.compare import add_compare_parser
        from rangecast.cli.report import add_report_parser
        from rangecast.cli.reproduce import add_reproduce_parser
        from rangecast.cli.sim import add_sim_parser

        add_sim_parser(top)
        add_compare_parser(top)
        add_report_parser(top)
        add_reproduce_parser(top)
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
    words = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_command(words))
    if not words:  # a bare ``rangecast``: what it can do, as ``rangecast --help`` says it
        parser.print_help()
        return 0
    args = parser.parse_args(words)
    try:
        try:
            return int(args.func(args))
        except BaseExceptionGroup as group:
            raise _leaf_error(group) from None
    except FieldError as exc:  # a configuration's field: named as the command's option
        from rangecast.cli.options import field_error

        print(f"rangecast: error: {field_error(exc, args)}", file=sys.stderr)
        return 2
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
