"""One source, two speeds (``rangecast._speed``): the hot modules run compiled where the install
built them, interpreted with ``RANGECAST_PURE_PYTHON=1``, and a run's results are the same bit for
bit either way: a thesis run, a churn run and a broker comparison, small."""

from __future__ import annotations

import importlib.machinery
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rangecast import _speed
from rangecast._compiled import MODULES

#: Small runs of the three kinds the acceptance names, through the CLI as a user runs them.
RUNS = {
    "thesis": ["sim", "run", "thesis", "--nodes", "120", "--events", "300", "--seed", "3"],
    "churn": ["sim", "churn", "--nodes", "80", "--events", "100", "--seed", "2"],
    "compare": ["sim", "compare", "--nodes", "40", "--events", "100", "--seed", "1"],
}
#: What differs between two runs of the same seed: time on the machine, not the simulation.
WALL = frozenset({"wall_s", "sim_messages_per_s", "wall_phases_s"})


def _stable(x: object) -> object:
    if isinstance(x, dict):
        return {k: _stable(v) for k, v in x.items() if k not in WALL}
    if isinstance(x, list):
        return [_stable(v) for v in x]
    return x


def _python(code: str, *, pure: bool) -> str:
    env = dict(os.environ)
    env.pop(_speed.PURE_ENV, None)
    if pure:
        env[_speed.PURE_ENV] = "1"
    out = subprocess.run(
        [sys.executable, "-W", "error::RuntimeWarning", "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def _compiled_here() -> bool:
    return all(_speed.compiled_modules().values())


def test_a_build_with_a_compiler_compiled_every_hot_module() -> None:
    """Where a C compiler is on PATH (CI's machine, every developer's), the install must have
    built them all: otherwise the comparison below would compare the interpreter with itself."""
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler: the install runs interpreted, as documented")
    assert _speed.speed() == f"compiled ({len(MODULES)} modules)"


def test_the_switch_forces_every_hot_module_interpreted() -> None:
    code = "from rangecast import _speed; import json; print(json.dumps(_speed.compiled_modules()))"
    assert not any(json.loads(_python(code, pure=True)).values())
    line = _python("from rangecast import _speed; print(_speed.speed())", pure=True)
    assert line.strip() == "interpreted (RANGECAST_PURE_PYTHON=1)"


@pytest.mark.parametrize("run", sorted(RUNS))
def test_a_run_is_the_same_bit_for_bit_compiled_and_interpreted(run: str) -> None:
    if not _compiled_here():
        pytest.skip("not compiled here (no C compiler at install): one speed only")
    code = (
        "import sys; from rangecast.cli.main import main; "
        f"sys.exit(main({[*RUNS[run], '--json', '--quiet']!r}))"
    )
    fast = json.loads(_python(code, pure=False))
    slow = json.loads(_python(code, pure=True))
    assert _stable(fast) == _stable(slow)


def test_a_stale_extension_is_not_run(tmp_path: Path) -> None:
    """A source edited after the build runs interpreted, with one warning naming it."""
    finder = _speed.SourceWhenNeeded()
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    source = pkg / "engine.py"
    source.write_text("X = 1\n")
    ext = pkg / ("engine" + importlib.machinery.EXTENSION_SUFFIXES[0])
    ext.write_bytes(b"")
    os.utime(ext, (1_000, 1_000))  # built long before the source's last edit
    name = MODULES[0]
    with pytest.warns(RuntimeWarning, match="older than"):
        spec = finder.find_spec(name, [str(pkg)])
    assert spec is not None and spec.origin == str(source)
    assert finder.stale == [name]
    os.utime(ext, None)  # rebuilt: the ordinary finder loads the extension
    assert finder.find_spec(name, [str(pkg)]) is None


def test_the_interpreted_modules_run_where_cython_is_not_installed() -> None:
    """A wheel installed without Cython runs the hot modules interpreted: their ``import cython``
    falls back to ``rangecast._nocython`` and a run gives the results it gives with Cython."""
    hide = (
        "import sys\n"
        "class NoCython:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('cython', 'Cython'):\n"
        "            raise ImportError(name)\n"
        "sys.meta_path.insert(0, NoCython())\n"
    )
    code = (
        "from rangecast.cli.main import main\n"
        f"sys.exit(main({[*RUNS['thesis'], '--json', '--quiet']!r}))\n"
    )
    without = json.loads(_python(hide + code + "", pure=True))
    with_cython = json.loads(_python("import sys\n" + code, pure=True))
    assert _stable(without) == _stable(with_cython)
    assert without["missed"] == without["duplicates"] == without["false_positives"] == 0
