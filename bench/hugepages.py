"""Huge pages on and off, side by side: the same thesis run alternated in child processes with
``RANGECAST_HUGE_PAGES=1`` and ``=0`` (rangecast.sim.hugepages), each child's CPU time and peak
RSS taken by ``wait4``, and the results checked equal bit for bit (wall-clock fields aside).

Usage::

    .venv/bin/python bench/hugepages.py                       # 30,000 nodes, 100 events, 2 rounds
    .venv/bin/python bench/hugepages.py --nodes 1000 --events 10000 --repeat 1

Prints one line per run and the CPU ratio (off / on: > 1 means huge pages are faster); writes
``bench/results/hugepages.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rangecast.sim.scenario import TimedResult

HERE = Path(__file__).resolve().parent


def run_child(nodes: int, events: int, seed: int, huge: bool) -> dict[str, object]:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as fh:
        out = fh.name
    code = (
        "import json, sys\n"
        "from rangecast.sim.hugepages import huge_page_bytes\n"
        "from rangecast.sim.thesis_experiment import ThesisParams, run_thesis\n"
        f"r = run_thesis(ThesisParams(nodes={nodes}, events={events}, seed={seed}))\n"
        "r['huge_page_bytes'] = huge_page_bytes()\n"
        f"json.dump(r, open({out!r}, 'w'))\n"
    )
    env = dict(os.environ, RANGECAST_HUGE_PAGES="1" if huge else "0")
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code], env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if status != 0:
        raise SystemExit(f"bench/hugepages.py: child failed with status {status}")
    result = json.loads(Path(out).read_text())
    os.unlink(out)
    return {
        "huge": huge,
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "rss_mib": usage.ru_maxrss / 1024.0,
        "huge_page_mib": int(result.pop("huge_page_bytes")) / 2**20,
        "sim_messages": result["sim_messages"],
        "result": {k: v for k, v in result.items() if k not in TimedResult.WALL_FIELDS},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=30_000)
    ap.add_argument("--events", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=2, help="rounds of (on, off)")
    args = ap.parse_args()
    runs: list[dict[str, object]] = []
    for rnd in range(args.repeat):
        for huge in (True, False):
            r = run_child(args.nodes, args.events, args.seed, huge)
            runs.append(r)
            print(
                f"round {rnd + 1} huge pages {'on ' if huge else 'off'}: CPU {r['cpu_s']:7.1f} s"
                f"  wall {r['wall_s']:7.1f} s  peak RSS {r['rss_mib']:7.0f} MiB"
                f"  on huge pages {r['huge_page_mib']:6.0f} MiB"
                f"  {r['sim_messages'] / r['cpu_s']:9,.0f} msgs/CPU s",  # type: ignore[operator]
                flush=True,
            )
    same = all(r["result"] == runs[0]["result"] for r in runs)
    on = statistics.median(r["cpu_s"] for r in runs if r["huge"])  # type: ignore[misc]
    off = statistics.median(r["cpu_s"] for r in runs if not r["huge"])  # type: ignore[misc]
    print(f"CPU off/on (medians): {off / on:.3f}x; results identical: {same}")
    (HERE / "results").mkdir(exist_ok=True)
    for r in runs:
        r.pop("result")
    summary = {"nodes": args.nodes, "events": args.events, "seed": args.seed, "runs": runs}
    summary.update(cpu_ratio_off_over_on=off / on, identical=same)
    (HERE / "results" / "hugepages.json").write_text(json.dumps(summary, indent=2) + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
