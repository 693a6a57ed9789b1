"""The one output path of every command: ``--json`` prints one JSON object on stdout, otherwise
a readable summary; progress and notes go to stderr, and ``--quiet`` silences them."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from rangecast.sim.progress import Progress


def emit(
    args: argparse.Namespace,
    document: dict[str, Any],
    summary: str | Callable[[], str],
    *,
    default: Callable[[Any], Any] | None = None,
) -> None:
    """A command's result on stdout: ``document`` as one JSON object under ``--json``, else the
    readable ``summary`` (text, or a function making it: only called when shown)."""
    if args.json:
        print(json.dumps(document, sort_keys=True, default=default))
    else:
        print(summary if isinstance(summary, str) else summary())


def progress_for(args: argparse.Namespace, label: str) -> Progress | None:
    """Progress on stderr for a command: bars with an ETA on a terminal, a few plain notes
    otherwise, nothing under ``--quiet`` (docs/simulator.md)."""
    return None if args.quiet else Progress(label)


def note(args: argparse.Namespace, label: str) -> Callable[[str], None] | None:
    """Plain notes ``[label] message`` on stderr; None under ``--quiet``."""
    if args.quiet:
        return None

    def say(message: str) -> None:
        print(f"[{label}] {message}", file=sys.stderr, flush=True)

    return say
