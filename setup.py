"""The compiled modules, which pyproject.toml cannot yet declare without a warning.

* The simulator's object arenas on huge pages (``rangecast.sim.hugepages``, ``sim/_hugepages.c``).
* The hot modules Cython compiles from their own ``.py`` files (pure-Python mode,
  ``rangecast/_compiled.py``; docs/simulator.md, "Two speeds").

Both are optional: where they cannot be built (no C compiler, no Cython, not Linux) the install
goes on, says so in one line, and runs the same ``.py`` files interpreted, with the same
results. ``RANGECAST_PURE_PYTHON=1`` at install builds none of the Cython modules."""

import hashlib
import os
import runpy
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
MODULES = runpy.run_path(os.path.join(HERE, "rangecast", "_compiled.py"))["MODULES"]

#: Cython's settings for the hot modules: Python's semantics exactly. Annotations are not taken as
#: C types (an ``int`` there is a 160-bit id, a ``float`` may be given an int, and a bad
#: argument must reach the module's own check, not Cython's); types are inferred only where
#: that is safe (no C integer that could overflow); negative indices and bounds checks stay.
#: Static types come from what a module declares for Cython itself, nowhere else.
DIRECTIVES = {
    "language_level": 3,
    "annotation_typing": False,
    "binding": False,
    "embedsignature": False,
}


class SayWhatRunsInterpreted(build_ext):
    """Every extension is ``optional`` (setuptools leaves out one that fails to build, as where
    there is no C compiler); this adds the one line saying which modules run interpreted."""

    def run(self) -> None:
        super().run()
        missing = [
            e.name for e in self.extensions if not os.path.exists(self.get_ext_fullpath(e.name))
        ]
        if missing:
            print(f"rangecast: not compiled, run interpreted: {', '.join(missing)}",
                  file=sys.stderr)  # fmt: skip


def _cython_extensions() -> list[Extension]:
    if os.environ.get("RANGECAST_PURE_PYTHON", "") == "1":
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        print("rangecast: Cython not installed; the hot modules run interpreted", file=sys.stderr)
        return []
    exts = [Extension(name, [name.replace(".", "/") + ".py"]) for name in MODULES]
    # The generated C goes under build/, not beside the sources, in a folder named after the
    # directives: cythonize regenerates a module when its source changes, not when they do.
    tag = hashlib.sha1(repr(sorted(DIRECTIVES.items())).encode()).hexdigest()[:8]
    built = cythonize(
        exts,
        compiler_directives=DIRECTIVES,
        build_dir=os.path.join("build", f"cython-{tag}"),
        quiet=True,
    )
    for ext in built:
        ext.optional = True  # cythonize does not carry it over from the Extension it is given
    return built


setup(
    ext_modules=[
        Extension("rangecast.sim._hugepages", sources=["sim/_hugepages.c"], optional=True),
        *_cython_extensions(),
    ],
    cmdclass={"build_ext": SayWhatRunsInterpreted},
)
