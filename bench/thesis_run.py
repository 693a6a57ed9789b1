"""Wall time and memory of the thesis experiment (``rangecast sim run thesis``).

Usage::

    .venv/bin/python bench/thesis_run.py                 # thesis defaults, seed 1
    .venv/bin/python bench/thesis_run.py --lb on --latency PATH/TO/RTT_MATRIX.txt

Runs the experiment in this process and prints wall time per phase, simulated messages per second,
peak memory (max RSS) and the oracle check; writes ``bench/results/thesis_run.json``.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
from pathlib import Path

from rangecast.sim.thesis_experiment import ThesisParams, run_thesis


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--events", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--lb", choices=("on", "off"), default="off")
    ap.add_argument("--latency", default="synthetic")
    args = ap.parse_args()
    r = run_thesis(
        ThesisParams(
            nodes=args.nodes,
            events=args.events,
            seed=args.seed,
            lb=args.lb == "on",
            latency=args.latency,
        )
    )
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    row = {
        "nodes": r["nodes"],
        "subscriptions": r["subscriptions"],
        "events": r["events"],
        "expected_deliveries": r["expected_deliveries"],
        "missed": r["missed"],
        "duplicates": r["duplicates"],
        "false_positives": r["false_positives"],
        "sim_messages": r["sim_messages"],
        "wall_s": r["wall_s"],
        "wall_phases_s": r["wall_phases_s"],
        "sim_messages_per_s": r["sim_messages_per_s"],
        "max_rss_mib": rss,
    }
    print(json.dumps(row, indent=1))
    dest = Path(__file__).resolve().parent / "results"
    dest.mkdir(exist_ok=True)
    (dest / "thesis_run.json").write_text(json.dumps(row, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
