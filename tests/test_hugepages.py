"""Object arenas on huge pages (rangecast.sim.hugepages): in effect where built, arenas reused,
and a run's results the same bit for bit with it and without it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from rangecast.sim import hugepages
from rangecast.sim.scenario import TimedResult

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


def _python(code: str, *, huge: bool) -> str:
    env = dict(os.environ)
    env[hugepages.ENV] = "1" if huge else "0"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return out.stdout


@linux_only
def test_arenas_come_from_the_huge_page_region_and_are_reused() -> None:
    code = """
from rangecast.sim.hugepages import use_huge_pages, huge_page_bytes
assert use_huge_pages() and use_huge_pages()  # idempotent
objs = [[i] for i in range(300_000)]
first = huge_page_bytes()
assert sum(len(o) for o in objs) == 300_000
del objs
objs = [[i] for i in range(300_000)]  # the arenas just given back serve again
print(first, huge_page_bytes())
"""
    first, second = map(int, _python(code, huge=True).split())
    assert first > 8 << 20  # 300,000 small lists: tens of MB of arenas
    assert second <= first + (2 << 20)


def test_the_switch_turns_it_off() -> None:
    code = "from rangecast.sim.hugepages import *; print(use_huge_pages(), huge_page_bytes())"
    assert _python(code, huge=False).split() == ["False", "0"]


@linux_only
def test_a_run_is_the_same_bit_for_bit_with_and_without_huge_pages() -> None:
    code = f"""
import json
from rangecast.sim.hugepages import huge_page_bytes
from rangecast.sim.thesis_experiment import ThesisParams, run_thesis
r = run_thesis(ThesisParams(nodes=120, events=300, seed=3))
for k in {TimedResult.WALL_FIELDS!r}:
    r.pop(k, None)
r["huge"] = huge_page_bytes() > 0  # the run itself turned it on
print(json.dumps(r, sort_keys=True))
"""
    on = json.loads(_python(code, huge=True))
    off = json.loads(_python(code, huge=False))
    assert on.pop("huge") is True and off.pop("huge") is False
    assert on["missed"] == on["duplicates"] == on["false_positives"] == 0
    assert on == off
