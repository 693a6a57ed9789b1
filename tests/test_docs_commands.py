"""Every ``rangecast`` command written in the README's and the docs' shell blocks parses with the
command line as it is: options that exist, values of the right type and choice. (Running them is
other tests' work; many take minutes. This catches a renamed option or a dropped choice the day
it happens, in every place a user would copy a command from.)"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from rangecast.cli.main import build_parser

ROOT = Path(__file__).resolve().parent.parent
_BLOCK = re.compile(r"```(?:sh|bash|console)?\n(.*?)```", re.S)


def _commands() -> list[tuple[str, str]]:
    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in _BLOCK.findall(page.read_text(encoding="utf-8")):
            for line in block.splitlines():
                line = line.strip().removeprefix("$ ").removeprefix(".venv/bin/")
                if line.startswith("rangecast "):
                    # The command alone: no comment, nothing it is piped into.
                    line = re.split(r"\s+#\s|\s\|\s?", line)[0]
                    found.append((page.relative_to(ROOT).as_posix(), line))
    return found


COMMANDS = _commands()


def test_the_pages_hold_commands() -> None:
    assert len(COMMANDS) > 40
    assert {page for page, _ in COMMANDS} >= {"README.md", "docs/runtime.md", "docs/sweeps.md"}


@pytest.mark.parametrize(("page", "command"), COMMANDS)
def test_a_documented_command_parses(page: str, command: str) -> None:
    argv = shlex.split(command)[1:]
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse's way of saying no
        pytest.fail(f"{page}: `{command}` does not parse (exit {exc.code})")
    assert callable(args.func)
