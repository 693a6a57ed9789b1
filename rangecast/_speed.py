"""Two speeds from one source: the hot modules (``rangecast._compiled.MODULES``) load as the C
extensions Cython built from their ``.py`` files, or as those ``.py`` files themselves.

Which one loads is decided here, before any of them is imported (``rangecast/__init__.py``
installs the finder):

* ``RANGECAST_PURE_PYTHON=1``: the source, always. Results are the same bit for bit (a CI test
  runs a small experiment both ways and compares its JSON summary).
* An extension older than its source (the source was edited after the last build): the source,
  with one warning naming the module. A stale build must never run code the tree no longer
  holds; ``make`` (or ``pip install -e .``) rebuilds.
* Otherwise the extension if one was built (a C compiler was present at install), else the
  source.

``speed()`` says which, for ``rangecast --version`` and the benchmarks.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

from rangecast._compiled import MODULES

PURE_ENV = "RANGECAST_PURE_PYTHON"
_NAMES = frozenset(MODULES)


def pure_python() -> bool:
    """Whether ``RANGECAST_PURE_PYTHON=1`` forces the interpreted modules."""
    return os.environ.get(PURE_ENV, "") == "1"


def _extension_of(directory: str, name: str) -> str | None:
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = os.path.join(directory, name + suffix)
        if os.path.exists(path):
            return path
    return None


class SourceWhenNeeded(importlib.abc.MetaPathFinder):
    """Hands a compiled module's ``.py`` to the import system when the extension must not be
    used (forced interpreted, or stale); otherwise steps aside, and the ordinary path finder,
    which tries extensions before sources, loads the extension."""

    def __init__(self) -> None:
        self.stale: list[str] = []

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _NAMES or path is None:
            return None
        name = fullname.rpartition(".")[2]
        for directory in path:
            source = os.path.join(directory, name + ".py")
            if not os.path.exists(source):
                continue
            if not pure_python():
                ext = _extension_of(directory, name)
                if ext is None:
                    return None
                if os.path.getmtime(ext) >= os.path.getmtime(source):
                    return None
                self.stale.append(fullname)
                warnings.warn(
                    f"{ext} is older than {source}: running {fullname} interpreted; "
                    "`make` or `pip install -e .` rebuilds it",
                    RuntimeWarning,
                    stacklevel=2,
                )
            return importlib.util.spec_from_file_location(fullname, source)
        return None


FINDER = SourceWhenNeeded()


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once)."""
    if FINDER not in sys.meta_path:
        sys.meta_path.insert(0, FINDER)


def compiled_modules() -> dict[str, bool]:
    """For each hot module: whether it runs compiled (imports them all)."""
    out = {}
    for name in MODULES:
        module = importlib.import_module(name)
        out[name] = not (getattr(module, "__file__", "") or "").endswith(".py")
    return out


def speed() -> str:
    """One line: compiled, interpreted and why, or partly compiled."""
    done = compiled_modules()
    n, total = sum(done.values()), len(done)
    if pure_python():
        return f"interpreted ({PURE_ENV}=1)"
    if n == total:
        return f"compiled ({total} modules)"
    if FINDER.stale:
        return f"{n} of {total} modules compiled; stale, run interpreted: {', '.join(FINDER.stale)}"
    if n == 0:
        return "interpreted (not compiled: no C compiler or no Cython at install)"
    slow = [name for name, ok in done.items() if not ok]
    return f"{n} of {total} modules compiled; interpreted: {', '.join(slow)}"


__all__ = ["FINDER", "PURE_ENV", "compiled_modules", "install", "pure_python", "speed"]
