"""``sim route`` side by side: commit a5c21ca (before issue 15) against this tree (HEAD).

The old code is ``git archive``-d once into a cache directory and run with the same interpreter
and ``PYTHONPATH`` pointing at it; each run is its own process (so that its peak RSS is its
own), and the old and new runs alternate, so that a busy machine slows both alike. Each child
reports which ``sim`` package it imported, so a mix-up shows. Usage::

    .venv/bin/python bench/route_scale.py                        # 10,000 nodes, 2 rounds
    .venv/bin/python bench/route_scale.py --nodes 10000 100000 --rounds 1
    .venv/bin/python bench/route_scale.py --keepalives on         # HEAD with the same messages

Prints, per size, each run's wall time, simulated messages per wall second and peak RSS, the
medians' ratios (old / HEAD for time and memory, HEAD / old for messages/s), and the routing
figures of both (mean hops and latency must agree: the protocol did not change). HEAD leaves
keep-alives out of failure-free runs (``--keepalives auto``), so it simulates fewer messages
than a5c21ca for the same lookups; ``--keepalives on`` compares the same message stream.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OLD = "a5c21ca"

_CHILD = """
import contextlib, io, json, os, resource, sys
if os.path.isdir(os.path.join(os.environ["PYTHONPATH"], "rangecast")):
    import rangecast.sim as sim
    from rangecast.cli.main import main
else:  # a tree from before the rangecast namespace (the folders were top-level packages)
    import sim
    from sim.cli import main
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    code = main(sys.argv[1:])
r = json.loads(buf.getvalue())
r["max_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
r["sim_package"] = os.path.realpath(sim.__path__[0])
r["exit"] = code
print(json.dumps(r))
"""


def old_tree(cache: Path) -> Path:
    """The files of commit ``OLD``, extracted once."""
    dest = cache / f"rangecast-{OLD}"
    if not (dest / "sim" / "cli.py").exists():
        tar = subprocess.run(
            ["git", "-C", str(ROOT), "archive", OLD], check=True, capture_output=True
        ).stdout
        with tarfile.open(fileobj=BytesIO(tar)) as tf:
            tf.extractall(dest, filter="data")
    return dest


def run(tree: Path, args: list[str]) -> dict[str, Any]:
    t0 = time.perf_counter()
    # cwd outside both trees, so that only PYTHONPATH decides which ``sim`` is imported.
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, *args],
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
        cwd=tempfile.gettempdir(),
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        sys.exit(f"run failed in {tree}: {proc.stderr.strip().splitlines()[-1:]}")
    r = json.loads(proc.stdout)
    r["process_wall_s"] = time.perf_counter() - t0
    if Path(r["sim_package"]).resolve() != (tree / "sim").resolve():
        sys.exit(f"expected the sim package of {tree}, the child imported {r['sim_package']}")
    return r


def _ratio(runs: dict[str, list[dict[str, Any]]], key: str) -> float:
    """Median of the old runs' ``key`` over the median of HEAD's."""
    old = statistics.median(r[key] for r in runs["a5c21ca"])
    return old / statistics.median(r[key] for r in runs["HEAD"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[10_000])
    ap.add_argument("--lookups", type=int, default=None, help="default: as many as nodes")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=2, help="old/HEAD pairs per size")
    ap.add_argument("--keepalives", choices=("auto", "on", "off"), default="auto")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()))
    ap.add_argument("--json", type=Path, help="also write every run's figures here")
    args = ap.parse_args()
    trees = {"a5c21ca": old_tree(args.cache), "HEAD": ROOT}
    every: list[dict[str, Any]] = []
    for n in args.nodes:
        lookups = args.lookups or n
        base = ["sim", "route", "--nodes", str(n), "--lookups", str(lookups)]
        base += ["--seed", str(args.seed), "--json", "--quiet"]
        runs: dict[str, list[dict[str, Any]]] = {"a5c21ca": [], "HEAD": []}
        print(f"\nsim route --nodes {n:,} --lookups {lookups:,} --seed {args.seed}")
        print(f"{'code':8} {'wall s':>8} {'run s':>8} {'msgs':>10} {'msgs/s':>9} {'RSS MiB':>8}")
        for _ in range(args.rounds):
            for name, tree in trees.items():
                extra = ["--keepalives", args.keepalives] if name == "HEAD" else []
                r = run(tree, base + extra)
                r["code"] = name
                runs[name].append(r)
                every.append(r)
                print(
                    f"{name:8} {r['process_wall_s']:8.2f} {r['wall_s']:8.2f} "
                    f"{r['sim_messages']:10,} {r['sim_messages_per_s']:9,.0f} "
                    f"{r['max_rss_mib']:8.0f}",
                    flush=True,
                )

        print(
            f"ratios (medians): wall old/HEAD {_ratio(runs, 'process_wall_s'):.2f}, "
            f"run wall old/HEAD {_ratio(runs, 'wall_s'):.2f}, "
            f"msgs/s HEAD/old {1.0 / _ratio(runs, 'sim_messages_per_s'):.2f}, "
            f"RSS old/HEAD {_ratio(runs, 'max_rss_mib'):.2f}"
        )
        for name in runs:
            r = runs[name][0]
            print(
                f"{name:8} correct {r['correct_root_fraction']:.4f}  mean hops "
                f"{r['mean_hops']:.5f}  mean latency {r['mean_latency_ms']:.3f} ms  "
                f"lookup-phase messages {r['lookup_phase']['messages']:,}  "
                f"phases {json.dumps({k: round(v, 2) for k, v in r['wall_phases_s'].items()})}"
            )
    if args.json:
        args.json.write_text(json.dumps(every, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
