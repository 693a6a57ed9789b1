"""An installed Rangecast adds one import name, ``rangecast``, to ``sys.path``: it installs next to
PyPubSub (whose import name is ``pubsub``, a folder name of ours) and both stay importable.

The test builds the wheel of this checkout, installs it with PyPubSub into a fresh virtual
environment (nothing else installed there; Rangecast's dependencies come from this environment's
site-packages through a ``.pth`` line, which adds the directory but does not run the editable
install's import hook, so the fresh environment sees only the wheel), and runs the installed
``rangecast`` there: its version, a small simulated run on the shipped RTT matrix, and PyPubSub's
own publish/subscribe."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(*argv: str | Path, cwd: Path, **extra: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(extra)
    proc = subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, f"{argv}: {proc.stderr[-2000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("install")
    # Build from a copy (links kept as links), so the build leaves nothing in the checkout.
    src = tmp / "src"
    skip = shutil.ignore_patterns(
        ".*", "build", "*.egg-info", "runs", "bench", "__pycache__", "*.so"
    )
    shutil.copytree(ROOT, src, symlinks=True, ignore=skip)
    wheels = tmp / "wheels"
    # The layout is what is tested here, not the compiled modules (tests/test_two_speeds.py):
    # the wheel is built without them, a minute and a half sooner.
    _run(
        sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", wheels, src,
        cwd=tmp, RANGECAST_PURE_PYTHON="1",
    )  # fmt: skip
    (wheel,) = wheels.glob("rangecast-*.whl")
    env = tmp / "env"
    venv.create(env, with_pip=True)
    py = env / "bin" / "python"
    _run(py, "-m", "pip", "install", "-q", "--no-deps", wheel, "PyPubSub", cwd=tmp)
    site = _run(py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))", cwd=tmp)
    ours = sysconfig.get_path("purelib")
    (Path(site.strip()) / "rangecast-test-deps.pth").write_text(ours + "\n")
    return wheel, env


def test_the_wheel_holds_one_top_level_name(installed: tuple[Path, Path]) -> None:
    wheel, _ = installed
    with zipfile.ZipFile(wheel) as z:
        tops = {n.split("/")[0] for n in z.namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"rangecast"}


def test_rangecast_and_pypubsub_are_both_importable(installed: tuple[Path, Path]) -> None:
    _, env = installed
    probe = """
import json, rangecast, pubsub
import rangecast.pubsub.node, rangecast.sim.engine, rangecast.cli.main
from pubsub import pub
got = []
def listener(value):  # PyPubSub keeps weak references: a named function, not a lambda
    got.append(value)
pub.subscribe(listener, "temperature")
pub.sendMessage("temperature", value=21.5)
print(json.dumps({
    "rangecast": rangecast.__file__,
    "ours": rangecast.pubsub.node.__file__,
    "pubsub": pubsub.__file__,
    "got": got,
    "version": rangecast.__version__,
}))
"""
    # Run from an empty directory: nothing of this checkout is on the path.
    out = json.loads(_run(env / "bin" / "python", "-c", probe, cwd=env))
    assert out["rangecast"].startswith(str(env)) and out["ours"].startswith(str(env))
    assert out["pubsub"].startswith(str(env)) and "rangecast" not in out["pubsub"]
    assert out["got"] == [21.5]
    assert out["version"] == "0.1.0"


def test_the_installed_command_runs(installed: tuple[Path, Path]) -> None:
    _, env = installed
    rangecast = env / "bin" / "rangecast"
    assert _run(rangecast, "--version", cwd=env).strip().startswith("rangecast ")
    route = ["sim", "route", "--nodes", "40", "--lookups", "40", "--latency", "planetlab"]
    result = json.loads(_run(rangecast, *route, "--json", "--quiet", cwd=env))
    assert result["delivered"] == 40 and result["correct_root_fraction"] == 1.0


def test_the_testing_kit_is_installed_and_typed(installed: tuple[Path, Path]) -> None:
    """The kit (docs/testing.md) comes with the wheel, not only with a checkout: a user's own
    tests import it, and its type hints ship with it (``py.typed``)."""
    wheel, env = installed
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    assert "rangecast/py.typed" in names and "rangecast/testkit/invariants.py" in names
    probe = """
import json
from rangecast.testkit import invariants, machine, strategies, simnet
from rangecast.pubsub.schema import THESIS_SCHEMA
net = simnet.Net(12, 1, THESIS_SCHEMA)
print(json.dumps({"file": invariants.__file__, "checks": sorted(invariants.CHECKS),
                  "machine": machine.OverlayMachine.__name__,
                  "violations": len(invariants.check_tree(net.snapshot()))}))
"""
    out = json.loads(_run(env / "bin" / "python", "-c", probe, cwd=env))
    assert out["file"].startswith(str(env))
    assert "partition" in out["checks"] and out["machine"] == "OverlayMachine"
    assert out["violations"] == 0
