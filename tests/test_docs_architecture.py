"""docs/architecture.md names modules and functions; they must exist, so the map cannot rot.

Every backticked reference in the page is checked against the source, read with ``ast`` (nothing
is imported):

* a path (``dht/core.py``, ``analysis/report/``, ``docs/wire.md``) must exist in the repository;
* a dotted name that starts with a package (``pubsub.subscriber.Subscriber.subscribe``) must
  resolve: the longest prefix that is a module file, then each further part defined in the
  body of the part before it (a function, a class, an assignment or a class-level field);
* a ``Class.member`` (``DhtCore.route``) must name a class of the packages that defines that
  member in its own body;
* a bare name (``ProbeSub``, ``T_PARK``, ``take_messages()``, ``_advance``) must be defined
  somewhere in the packages.

A trailing call, ``name(args)``, is read as ``name``. Text that is not a reference (an option,
a command line, a placeholder such as ``run_<name>``) has spaces or characters a name cannot
have and is skipped.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
PACKAGES = ("dht", "multicast", "pubsub", "brokers", "sim", "runtime", "analysis", "testkit", "cli")

_TICKS = re.compile(r"`([^`\n]+)`")
_PATH = re.compile(r"^[A-Za-z0-9_./-]+(\.py|\.md|/)$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_CALL = re.compile(r"^([A-Za-z_][A-Za-z0-9_.]*)\(.*\)$")
#: Backticked words that are values or the console script, not names of our code.
_NOT_NAMES = frozenset({"None", "True", "False", "rangecast"})


def references() -> list[str]:
    return [m.group(1).strip() for m in _TICKS.finditer(DOC.read_text(encoding="utf-8"))]


def _defined_in(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """Names a module or class body defines, with their node (a class's node, to look inside)."""
    names: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                for leaf in ast.walk(target):
                    if isinstance(leaf, ast.Name):
                        names[leaf.id] = node
                    elif isinstance(leaf, ast.Attribute):  # PastryNode._handlers = {...}
                        names.setdefault(f"{_dotted(leaf)}", node)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
        elif isinstance(node, ast.If):  # TYPE_CHECKING blocks and the like
            names.update(_defined_in(node.body))
    return names


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Name):
        return node.id
    return "?"


@cache
def _module(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _modules() -> Iterator[Path]:
    for package in PACKAGES:
        yield from sorted((ROOT / package).rglob("*.py"))


@cache
def _everything() -> tuple[set[str], dict[str, list[ast.ClassDef]]]:
    """Every name defined anywhere in the packages (at any depth), and every class by name."""
    names: set[str] = set()
    classes: dict[str, list[ast.ClassDef]] = {}
    for path in _modules():
        for node in ast.walk(_module(path)):
            # Module and class bodies define names; a function's locals are not ours to cite.
            if isinstance(node, (ast.Module, ast.ClassDef)):
                for name in _defined_in(node.body):
                    names.add(name.rsplit(".", 1)[-1])
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            if isinstance(node, ast.ClassDef):
                classes.setdefault(node.name, []).append(node)
                names.update(_instance_attributes(node))
    return names, classes


def _instance_attributes(cls: ast.ClassDef) -> set[str]:
    """``self.x = ...`` (or ``self.x: T = ...``) in the class's methods."""
    out: set[str] = set()
    for node in ast.walk(cls):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        for t in targets:
            if (
                isinstance(t, ast.Attribute)
                and isinstance(t.value, ast.Name)
                and t.value.id == "self"
            ):
                out.add(t.attr)
    return out


def _class_defines(cls: ast.ClassDef, member: str) -> bool:
    return (
        member in _defined_in(cls.body)
        or f"{cls.name}.{member}" in _table_assignments()
        or member in _instance_attributes(cls)
    )


@cache
def _table_assignments() -> set[str]:
    """``Class.attr = ...`` at module level (the handler tables set after the class)."""
    out: set[str] = set()
    for path in _modules():
        out.update(k for k in _defined_in(_module(path).body) if "." in k)
    return out


def _resolve_dotted(ref: str) -> str | None:
    """None if ``ref`` (package.module.Name.member) resolves, else why not."""
    parts = ref.split(".")
    for cut in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:cut])
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                rest = parts[cut:]
                scope: list[ast.stmt] = _module(candidate).body
                for k, part in enumerate(rest):
                    found = _defined_in(scope).get(part)
                    if found is None:
                        return f"{part!r} is not defined in {'.'.join(parts[: cut + k])}"
                    if k < len(rest) - 1:
                        if not isinstance(found, ast.ClassDef):
                            return f"{part!r} in {candidate.name} is not a class"
                        if not _class_defines(found, rest[k + 1]):
                            return f"class {part} has no {rest[k + 1]!r}"
                        return None
                return None
    return f"no module for {ref}"


def check(ref: str) -> str | None:
    """None if the reference holds (or is not a reference), else what is wrong."""
    call = _CALL.match(ref)
    if call is not None:
        ref = call.group(1)
    if any(c in ref for c in " <>*=,:"):
        return None
    if _PATH.match(ref) and ("/" in ref or ref.endswith((".py", ".md"))):
        if ref.startswith(("http:", "https:")):
            return None
        path = ROOT / ref
        if not (path.is_dir() if ref.endswith("/") else path.is_file()):
            return f"no such path {ref}"
        return None
    if not _NAME.match(ref) or ref in _NOT_NAMES:
        return None
    parts = ref.split(".")
    if parts[0] in PACKAGES:
        return _resolve_dotted(ref) if len(parts) > 1 else None
    names, classes = _everything()
    if len(parts) == 1:
        return None if ref in names else f"{ref!r} is defined nowhere in {', '.join(PACKAGES)}"
    if parts[0] in classes:
        if len(parts) != 2:
            return f"{ref}: name the module for deeper references"
        if any(_class_defines(c, parts[1]) for c in classes[parts[0]]):
            return None
        return f"no class {parts[0]} defines {parts[1]!r}"
    return None  # a value's attribute (core.receive, sim.now): prose, not a name of ours


def test_the_page_names_things() -> None:
    refs = references()
    assert len(refs) > 150  # the checks below run on a real map, not an empty page


@pytest.mark.parametrize("ref", sorted(set(references())))
def test_reference_exists(ref: str) -> None:
    problem = check(ref)
    assert problem is None, f"docs/architecture.md: `{ref}`: {problem}"


@pytest.mark.parametrize(
    ("ref", "ok"),
    [
        ("pubsub.subscriber.Subscriber.subscribe", True),
        ("pubsub.subscriber.Subscriber.no_such_method", False),
        ("pubsub.no_such_module.thing", False),
        ("dht/timers.py", True),
        ("dht/no_such.py", False),
        ("analysis/report/", True),
        ("DhtCore.route", True),
        ("DhtCore.no_such", False),
        ("PastryNode._handlers", True),  # a table set after the class
        ("take_messages()", True),
        ("no_such_function()", False),
        ("T_PARK", True),
        ("Simulator.on_events", True),  # set in __init__
        ("Simulator.no_such_hook", False),
        ("NoSuchMessage", False),
        ("runtime", True),  # a package
        ("--delivery lbdd", True),  # not a reference
    ],
)
def test_the_checker_itself(ref: str, ok: bool) -> None:
    assert (check(ref) is None) is ok
