"""The import graph, read from the source: no circles, and every edge points down the layers
(docs/architecture.md): cores ``dht`` <- ``multicast`` <- ``pubsub`` <- drivers ``sim`` and
``runtime`` <- ``analysis`` and the testing kit ``testkit`` <- ``cli``. Every import counts, lazy
and type-checking-only ones included: a circle hidden in a function body is still a circle for
whoever reads or moves the code.

Every module is imported under the one ``rangecast`` namespace; a bare ``import dht`` (the folder
name) would load a second copy of the module, so it is refused too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: Lowest first. Packages on one rank (the two drivers) do not import each other.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("dht",),
    ("multicast",),
    ("pubsub",),
    ("brokers",),
    ("sim", "runtime"),
    ("analysis", "testkit"),
    ("cli",),
)
PACKAGES = tuple(p for rank in LAYERS for p in rank)
RANK = {p: i for i, rank in enumerate(LAYERS) for p in rank}


def _modules() -> dict[str, Path]:
    found = {}
    for top in PACKAGES:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            found[".".join(rel.parts).removesuffix(".__init__")] = path
    return found


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module name) of every import statement in ``path`` (``from a.b import c`` names
    ``a.b`` and, if that is a module, ``a.b.c``)."""
    names: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append((node.lineno, node.module))
            names += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return names


MODULES = _modules()
IMPORTS = {m: _imports(p) for m, p in sorted(MODULES.items())}
EDGES = {
    m: {n.removeprefix("rangecast.") for _, n in names} & MODULES.keys() - {m}
    for m, names in IMPORTS.items()
}


def test_the_graph_is_read() -> None:
    assert {"dht.core", "pubsub.node", "sim.engine", "analysis.report.build", "cli.main"} <= set(
        MODULES
    )
    assert "dht.wire" in EDGES["dht.core"]


def test_no_import_circle() -> None:
    state: dict[str, int] = {}
    stack: list[str] = []
    circles: list[str] = []

    def visit(u: str) -> None:
        state[u] = 1
        stack.append(u)
        for v in sorted(EDGES[u]):
            if state.get(v) == 1:
                circles.append(" -> ".join([*stack[stack.index(v) :], v]))
            elif v not in state:
                visit(v)
        stack.pop()
        state[u] = 2

    for m in sorted(EDGES):
        if m not in state:
            visit(m)
    assert circles == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down(module: str) -> None:
    top = module.split(".")[0]
    wrong = []
    for target in sorted(EDGES[module]):
        t_top = target.split(".")[0]
        if t_top != top and RANK[t_top] >= RANK[top]:
            wrong.append(target)  # up, or sideways between the two drivers
    assert wrong == [], f"{module} imports {wrong}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_name_the_namespace(module: str) -> None:
    bare = [
        f"line {line}: {name}" for line, name in IMPORTS[module] if name.split(".")[0] in PACKAGES
    ]
    assert bare == [], f"{module} imports outside the rangecast namespace: {bare}"
