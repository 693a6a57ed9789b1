"""Output directories, checked before a run starts: a run, a sweep or a report that would only
find out at its end that it cannot write (a read-only mount, /proc, a missing permission) must
refuse at once, naming the path, instead of losing the work."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def ensure_writable_dir(path: Path) -> None:
    """Create ``path`` (and its parents) and prove a file can be written into it; ``OSError``
    otherwise. Creating a directory can succeed where writing a file fails, hence the probe."""
    path.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile(dir=path):
        pass


def emit_result(
    result: dict[str, Any], as_json: bool, summary: Callable[[dict[str, Any]], None]
) -> None:
    """A command's result: one JSON object on stdout (``--json``), or the readable summary."""
    if as_json:
        print(json.dumps(result, sort_keys=True))
    else:
        summary(result)
