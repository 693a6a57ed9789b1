"""Output directories, checked before a run starts: a run, a sweep or a report that would only
find out at its end that it cannot write (a read-only mount, /proc, a missing permission) must
refuse at once, naming the path, instead of losing the work."""

from __future__ import annotations

import tempfile
from pathlib import Path


def ensure_writable_dir(path: Path) -> None:
    """Create ``path`` (and its parents) and prove a file can be written into it; ``OSError``
    otherwise. Creating a directory can succeed where writing a file fails, hence the probe."""
    path.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile(dir=path):
        pass
