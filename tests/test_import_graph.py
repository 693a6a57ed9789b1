"""The import graph, read from the source: no circles, and every edge points down the layers
(docs/architecture.md): cores ``dht`` <- ``multicast`` <- ``pubsub`` <- drivers ``sim`` and
``runtime``. Every import counts, lazy and type-checking-only ones included: a circle hidden in a
function body is still a circle for whoever reads or moves the code."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORES = ("dht", "multicast", "pubsub")
DRIVERS = ("sim", "runtime")
#: The one edge left that points sideways: the ``rangecast`` command is still built in
#: ``sim/cli.py`` and takes the real-peer subcommands from the runtime. It goes when the command
#: line gets a package of its own above both drivers.
FRONT_DOOR = {("sim.cli", "runtime.cli")}


def _modules() -> dict[str, Path]:
    found = {}
    for top in CORES + DRIVERS:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            name = ".".join(rel.parts).removesuffix(".__init__")
            found[name] = path
    return found


def _imports(path: Path) -> set[str]:
    """Every module name an import statement in ``path`` names (``from a.b import c`` names
    ``a.b`` and, if that is a module, ``a.b.c``)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return {n.removeprefix("rangecast.") for n in names}


MODULES = _modules()
EDGES = {m: {n for n in _imports(p) if n in MODULES and n != m} for m, p in sorted(MODULES.items())}


def _layer(module: str) -> tuple[str, int]:
    top = module.split(".")[0]
    if top in CORES:
        return "core", CORES.index(top)
    return "driver", 0


def test_the_graph_is_read() -> None:
    assert "dht.core" in MODULES and "pubsub.node" in MODULES and "sim.engine" in MODULES
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
    kind, level = _layer(module)
    top = module.split(".")[0]
    wrong = []
    for target in sorted(EDGES[module]):
        t_kind, t_level = _layer(target)
        t_top = target.split(".")[0]
        if kind == "core" and (t_kind == "driver" or t_level > level):
            wrong.append(target)  # a core reaches up
        if (
            kind == "driver"
            and t_kind == "driver"
            and t_top != top
            and (module, target) not in FRONT_DOOR
        ):
            wrong.append(target)  # one driver uses the other
    assert wrong == [], f"{module} imports {wrong}"
