"""LBDD sweeps: tree shape for N = 100..500, the 256 MiB transfer against point-to-point, the
acceptance run (16 MiB, seeds 1..7) and the rate and publisher load on our testbed model.

Usage::

    nice -n 5 .venv/bin/python bench/lbdd_transfer.py --jobs 1   # everything below
    .venv/bin/python bench/lbdd_transfer.py trees           # N = 100..500 x 20 seeds, both rules
    .venv/bin/python bench/lbdd_transfer.py transfer        # 11 subscribers, 256 MiB, 20 seeds
    .venv/bin/python bench/lbdd_transfer.py acceptance      # 11 subscribers, 16 MiB, seeds 1..7
    .venv/bin/python bench/lbdd_transfer.py testbed         # n = 1..11 x 5 seeds, f cap on/off
    .venv/bin/python bench/lbdd_transfer.py paper           # the paper's 12 LAN hosts

``trees`` runs the whole topic mode (DHT rendezvous, membership pushes, every node computing its
tree from its own list, checked from outside) without data, once per rule (the paper's, then our
near-bucket variant). ``transfer`` runs ``sim lbdd --data-bytes`` (LBDD, then the point-to-point
baseline) on 100 Mbit/s uplinks alone, once per rule. ``testbed`` runs the reproduction's
``lbdd-rate`` and ``lbdd-rate-nocap`` parts (the same seeds, so the same values): uplinks U and a
per-flow cap f (sim.lbdd_experiment.TESTBED_*), then without the cap. Runs go to a process pool
(``--jobs``). Prints the tables and writes ``bench/results/lbdd_transfer.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PAPER_PUBLISHER = "10.3.17.74"
PAPER_SUBSCRIBERS = [f"10.3.17.{h}" for h in (97, 234, 90, 98, 64, 61, 184, 72, 88, 44, 68)]


def _run(kw: dict[str, Any]) -> dict[str, Any]:
    from rangecast.sim.lbdd_experiment import LbddParams, run_lbdd

    r = run_lbdd(LbddParams(**kw))
    r.pop("messages_by_type", None)
    r.pop("latency_model", None)
    return r


def _pool_map(jobs: int, kws: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if jobs <= 1:
        return [_run(kw) for kw in kws]
    sys.stdout.flush()  # a forked worker must not inherit (and repeat) buffered output
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(_run, kws, chunksize=1))


def _hist(values: list[int]) -> str:
    c = Counter(values)
    return " ".join(f"{k}:{c[k]}" for k in sorted(c))


def trees(sizes: list[int], seeds: int, jobs: int) -> dict[str, Any]:
    kws = [
        {"subscribers": n, "seed": s, "near_bucket": nb}
        for nb in (False, True)
        for n in sizes
        for s in range(1, seeds + 1)
    ]
    t0 = time.perf_counter()
    results = _pool_map(jobs, kws)
    wall = time.perf_counter() - t0
    rows = []
    for nb in (False, True):
        for n in sizes:
            rs = [r for r in results if r["subscribers"] == n and r["near_bucket"] == nb]
            depths = [r["depth"] for r in rs]
            rows.append(
                {
                    "rule": "near (ours)" if nb else "paper",
                    "n": n,
                    "runs": len(rs),
                    "tree_valid": sum(r["tree_valid"] for r in rs),
                    "depth_hist": dict(sorted(Counter(depths).items())),
                    "depth_min": min(depths),
                    "depth_max": max(depths),
                    "depth_mean": statistics.fmean(depths),
                    "mean_out_degree": statistics.fmean(r["mean_out_degree"] for r in rs),
                    "max_out_degree_hist": dict(
                        sorted(Counter(r["max_out_degree"] for r in rs).items())
                    ),
                    "publisher_copies_mean": statistics.fmean(r["publisher_copies"] for r in rs),
                    "publisher_contribution_mean": statistics.fmean(
                        r["publisher_contribution"] for r in rs
                    ),
                    "bucket_min_hist": dict(sorted(Counter(r["bucket_min"] for r in rs).items())),
                    "bucket_max_hist": dict(sorted(Counter(r["bucket_max"] for r in rs).items())),
                }
            )
    print(f"\nTree shape, {seeds} seeds per N ({len(kws)} runs, {wall:.0f} s wall)")
    print(
        f"{'rule':<12}{'N':>5}{'valid':>7}  {'depth: runs':<26}{'mean out':>9}  "
        f"{'max out-degree: runs':<34}{'pub copies':>11}{'contrib':>9}  lowest bucket: runs"
    )
    for row in rows:
        depth_hist = " ".join(f"{k}:{v}" for k, v in row["depth_hist"].items())
        maxo = " ".join(f"{k}:{v}" for k, v in row["max_out_degree_hist"].items())
        low = " ".join(f"{k}:{v}" for k, v in row["bucket_min_hist"].items())
        print(
            f"{row['rule']:<12}{row['n']:>5}{row['tree_valid']:>4}/{row['runs']:<2} "
            f"{depth_hist:<26}{row['mean_out_degree']:>9.2f}  {maxo:<34}"
            f"{row['publisher_copies_mean']:>11.2f}{row['publisher_contribution_mean']:>9.4f}  "
            f"{low}"
        )
    return {"seeds": seeds, "wall_s": wall, "rows": rows}


def transfer(
    subscribers: int,
    data_bytes: int,
    seeds: int,
    jobs: int,
    near_bucket: bool = False,
    defaults: bool = False,
) -> dict[str, Any]:
    """``defaults``: sim lbdd's defaults (the testbed model); else 100 Mbit/s uplinks alone."""
    from rangecast.sim.lbdd_experiment import TESTBED_FLOW_MBPS, TESTBED_UPLINK_MBPS

    link = {} if defaults else {"uplink_mbps": 100.0, "flow_mbps": 0.0}
    kws = [
        {
            "subscribers": subscribers,
            "seed": s,
            "data_bytes": data_bytes,
            "near_bucket": near_bucket,
            **link,
        }
        for s in range(1, seeds + 1)
    ]
    t0 = time.perf_counter()
    results = _pool_map(jobs, kws)
    wall = time.perf_counter() - t0
    rule = "our near-bucket variant" if near_bucket else "the paper's rule"
    print(
        f"\nTransfer, {rule}: {subscribers} subscribers, {data_bytes:,} bytes in 64 KiB slices, "
        + (
            f"the defaults (uplinks {TESTBED_UPLINK_MBPS:g} Mbit/s, flow cap "
            f"{TESTBED_FLOW_MBPS:g} Mbit/s)"
            if defaults
            else "100 Mbit/s uplinks, no flow cap"
        )
        + f" ({len(kws)} seeds, {wall:.0f} s wall with {jobs} jobs)"
    )
    print(
        f"{'seed':>5}{'max out':>8}{'pub copies':>11}{'LBDD s':>9}{'ideal s':>9}{'p2p s':>9}"
        f"{'p2p/LBDD':>10}{'ideal':>7}{'once':>6}{'wall s':>8}"
    )
    rows = []
    for r in results:
        row = {
            "seed": r["seed"],
            "max_out_degree": r["max_out_degree"],
            "publisher_copies": r["publisher_copies"],
            "lbdd_time_s": r["lbdd_time_s"],
            "lbdd_ideal_time_s": r["lbdd_ideal_time_s"],
            "p2p_time_s": r["p2p_time_s"],
            "ratio": r["p2p_over_lbdd"],
            "ideal_ratio": r["ideal_ratio"],
            "exactly_once": r["all_bytes_exactly_once"] and r["p2p_all_bytes_exactly_once"],
            "wall_s": r["wall_s"],
        }
        rows.append(row)
        print(
            f"{row['seed']:>5}{row['max_out_degree']:>8}{row['publisher_copies']:>11}"
            f"{row['lbdd_time_s']:>9.1f}{row['lbdd_ideal_time_s']:>9.1f}{row['p2p_time_s']:>9.1f}"
            f"{row['ratio']:>10.2f}{row['ideal_ratio']:>7.2f}{row['exactly_once']!s:>6}"
            f"{row['wall_s']:>8.1f}"
        )
    ratios = sorted(row["ratio"] for row in rows)
    summary = {
        "ratio_min": ratios[0],
        "ratio_median": statistics.median(ratios),
        "ratio_max": ratios[-1],
        "ratio_at_least_2_5": sum(x >= 2.5 for x in ratios),
        "max_out_degree_hist": dict(sorted(Counter(r["max_out_degree"] for r in rows).items())),
        "all_exactly_once": all(r["exactly_once"] for r in rows),
        "wall_per_run_s": statistics.fmean(r["wall_s"] for r in rows),
    }
    print(
        f"ratio min {summary['ratio_min']:.2f}, median {summary['ratio_median']:.2f}, "
        f"max {summary['ratio_max']:.2f}; >= 2.5 in {summary['ratio_at_least_2_5']}/{len(rows)}; "
        f"max out-degree {_hist([r['max_out_degree'] for r in rows])}; "
        f"every byte exactly once: {summary['all_exactly_once']}; "
        f"{summary['wall_per_run_s']:.1f} s wall per run (LBDD + p2p)"
    )
    return {
        "subscribers": subscribers,
        "data_bytes": data_bytes,
        "near_bucket": near_bucket,
        "seeds": seeds,
        "rows": rows,
        "summary": summary,
        "wall_s": wall,
    }


def testbed(ns: list[int], data_bytes: int, seeds: int, jobs: int) -> dict[str, Any]:
    """Figs 2 and 3 on our testbed model, with the per-flow cap and without it."""
    from rangecast.sim.lbdd_experiment import TESTBED_FLOW_MBPS, TESTBED_UPLINK_MBPS

    caps = (TESTBED_FLOW_MBPS, 0.0)
    kws = [
        {
            "subscribers": n,
            "seed": s,
            "data_bytes": data_bytes,
            "uplink_mbps": TESTBED_UPLINK_MBPS,
            "flow_mbps": f,
        }
        for f in caps
        for n in ns
        for s in range(1, seeds + 1)
    ]
    t0 = time.perf_counter()
    results = _pool_map(jobs, kws)
    wall = time.perf_counter() - t0
    keys = (
        "lbdd_rate_mbps",
        "p2p_rate_mbps",
        "lbdd_publisher_load",
        "p2p_publisher_load",
        "max_out_degree",
        "publisher_copies",
        "p2p_over_lbdd",
    )
    rows = []
    print(
        f"\nTestbed model: uplinks {TESTBED_UPLINK_MBPS:g} Mbit/s, {data_bytes:,} bytes, the "
        f"paper's rule, {seeds} seeds per point ({len(kws)} runs, {wall:.0f} s wall)"
    )
    print(
        f"{'flow cap':>9}{'n':>4}{'LBDD Mbit/s':>18}{'p2p Mbit/s':>12}{'LBDD load':>18}"
        f"{'p2p load':>10}{'max out':>9}{'pub copies':>11}{'p2p/LBDD':>10}"
    )
    for f in caps:
        for n in ns:
            rs = [r for r in results if r["subscribers"] == n and r["flow_mbps"] == f]
            row: dict[str, Any] = {"flow_mbps": f, "n": n, "runs": len(rs)}
            for k in keys:
                vals = [r[k] for r in rs]
                row[k] = {"mean": statistics.fmean(vals), "min": min(vals), "max": max(vals)}
            row["exactly_once"] = all(
                r["all_bytes_exactly_once"] and r["p2p_all_bytes_exactly_once"] for r in rs
            )
            rows.append(row)
            lr, ll = row["lbdd_rate_mbps"], row["lbdd_publisher_load"]
            print(
                f"{(f'{f:g}' if f else 'off'):>9}{n:>4}"
                f"{lr['mean']:>7.1f} ({lr['min']:.1f}..{lr['max']:.1f})"
                f"{row['p2p_rate_mbps']['mean']:>12.1f}"
                f"{ll['mean']:>7.0%} ({ll['min']:.0%}..{ll['max']:.0%})"
                f"{row['p2p_publisher_load']['mean']:>10.0%}"
                f"{row['max_out_degree']['mean']:>9.1f}{row['publisher_copies']['mean']:>11.1f}"
                f"{row['p2p_over_lbdd']['mean']:>10.2f}"
            )
    return {"data_bytes": data_bytes, "seeds": seeds, "wall_s": wall, "rows": rows}


def paper() -> dict[str, Any]:
    from rangecast.multicast.lbdd import build_tree

    out: dict[str, Any] = {}
    for nb in (True, False):
        t = build_tree(PAPER_PUBLISHER, PAPER_SUBSCRIBERS, near_bucket=nb)
        deg = t.out_degrees()
        edges = {PAPER_PUBLISHER: [PAPER_SUBSCRIBERS[c] for c in t.source_children]}
        for i, ch in enumerate(t.children):
            if ch:
                edges[PAPER_SUBSCRIBERS[i]] = [PAPER_SUBSCRIBERS[c] for c in ch]
        out["near (ours)" if nb else "paper"] = {
            "depth": t.depth,
            "out_degrees": deg,
            "max_out_degree": max(deg),
            "ideal_ratio": len(PAPER_SUBSCRIBERS) / max(deg),
            "edges": edges,
        }
    r = out["paper"]
    print("\nThe paper's LAN (publisher 10.3.17.74, 11 subscribers):")
    for src, dst in r["edges"].items():
        print(f"  {src:<12} -> {', '.join(dst)}")
    print(
        f"  depth {r['depth']}, max out-degree {r['max_out_degree']}: ideal point-to-point/LBDD "
        f"= 11/{r['max_out_degree']} = {r['ideal_ratio']:.2f} (paper measured 7810/3020 = 2.59); "
        f"same tree with our near-bucket variant: {out['near (ours)']['edges'] == r['edges']}"
    )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "what",
        nargs="?",
        default="all",
        choices=("all", "trees", "transfer", "acceptance", "testbed", "paper"),
    )
    ap.add_argument("--rate-subscribers", type=int, nargs="*", default=list(range(1, 12)))
    ap.add_argument("--rate-seeds", type=int, default=5)
    ap.add_argument("--sizes", type=int, nargs="*", default=[100, 200, 300, 400, 500])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--subscribers", type=int, default=11)
    ap.add_argument("--data-bytes", type=int, default=256 * 1024 * 1024)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", default=str(HERE / "results" / "lbdd_transfer.json"))
    args = ap.parse_args()
    report: dict[str, Any] = {}
    if args.what in ("all", "paper"):
        report["paper_lan"] = paper()
    if args.what in ("all", "trees"):
        report["trees"] = trees(args.sizes, args.seeds, args.jobs)
    if args.what in ("all", "transfer"):
        report["transfer"] = transfer(args.subscribers, args.data_bytes, args.seeds, args.jobs)
        report["transfer_near"] = transfer(
            args.subscribers, args.data_bytes, args.seeds, args.jobs, near_bucket=True
        )
    if args.what in ("all", "acceptance"):
        # The acceptance run: sim lbdd's defaults (the paper's rule on the testbed model).
        report["acceptance"] = transfer(args.subscribers, 16 * 1024**2, 7, args.jobs, defaults=True)
    if args.what in ("all", "testbed"):
        report["testbed"] = testbed(
            args.rate_subscribers, args.data_bytes, args.rate_seeds, args.jobs
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    old = json.loads(out.read_text()) if out.exists() else {}
    old.update(report)
    out.write_text(json.dumps(old, indent=1, sort_keys=True) + "\n")
    print(f"\nwrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
