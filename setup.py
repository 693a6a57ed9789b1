"""The one compiled module, which pyproject.toml cannot yet declare without a warning: the
simulator's object arenas on huge pages (``rangecast.sim.hugepages``). Optional: where it cannot
be built (no C compiler, not Linux), the install goes on and runs use the interpreter's own
arenas, with the same results."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("rangecast.sim._hugepages", sources=["sim/_hugepages.c"], optional=True),
    ]
)
