"""Where the memory of a thesis run goes, per component, at several sizes.

Usage::

    .venv/bin/python bench/memory.py                            # 1,000 / 10,000 / 100,000 nodes
    .venv/bin/python bench/memory.py --nodes 1000 10000 --events 200 --out-log

Each size runs ``run_thesis`` (5 subscriptions per node, ``--events`` events, seed 1) in its
own process. Once the events have been delivered (before the oracle check) the live objects are
walked (``sys.getsizeof`` over ``gc.get_referents``, every object counted once, by the first
component that reaches it), in this order:

* latency model: the synthetic model's site table (fixed size) and each node's placement;
* engine: the simulator without the cores (addresses, per-node counters, timers, the event
  heap);
* DHT: the Pastry nodes (leaf sets, routing tables, their peers, counters);
* overlay dedup: the subscribers' record of recent (sid, event) receipts (``Subscriber._got``),
  which grows with deliveries;
* overlay: the rest of the pub/sub cores, in parts: the 2d-tree nodes a peer hosts (with their
  stored subscription pieces and leaf tables), its per-attribute spaces (with their zone
  caches), its own subscriptions, and the rest (counters, timers, key caches);
* experiment: the workload (subscription and event lists), the oracle's bound arrays, the record
  of deliveries (two flat arrays, 16 bytes a receipt) and of expected matches (4 bytes each),
  the install times;
* run log: with ``--out-log``, the message log's row buffers (bounded by ``runlog.ROW_GROUP``).

It prints one table (bytes per node for the per-node components, bytes per delivery for the
delivery-proportional ones, MiB in total) and writes ``bench/results/memory.json``. The gap
between the walked total and the process' RSS is the interpreter, the libraries' code and
allocator slack (pymalloc arenas and freed memory not returned to the system).
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import rangecast.pubsub.space

#: Shared code and metadata, not state: never entered.
_SKIP = (
    type,
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.CodeType,
    types.FrameType,
)


def _walk(roots: Iterable[Any], seen: set[int], stop: set[int]) -> tuple[int, int]:
    """Bytes and objects reachable from ``roots`` not yet ``seen``, not entering ``stop``."""
    size = count = 0
    stack = list(roots)
    getsizeof = sys.getsizeof
    referents = gc.get_referents
    while stack:
        o = stack.pop()
        i = id(o)
        if i in seen or i in stop or isinstance(o, _SKIP):
            continue
        seen.add(i)
        size += getsizeof(o)
        count += 1
        # msgspec structs declared ``gc=False`` (messages, stored pieces) hide their fields
        # from the collector: read them by name.
        fields = getattr(type(o), "__struct_fields__", None)
        if fields is not None:
            stack.extend(getattr(o, f) for f in fields)
        else:
            stack.extend(referents(o))
    return size, count


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def measure(state: dict[str, Any]) -> dict[str, Any]:
    """Bytes per component of a run's live state (``run_thesis(inspect=...)``)."""
    rss_kib = _rss_kib()  # before the walk, whose own bookkeeping costs ~60 bytes an object
    sim, net = state["sim"], state["net"]
    peers = state["peers"]
    overlays = [p.overlay for p in peers]
    dht_nodes = list(net.nodes)
    seen: set[int] = set()
    # Objects that belong to another component: a walk stops at them, the owner walks them.
    owners = [*peers, *overlays, *dht_nodes, net, state["collector"]]
    if state["messages_log"] is not None:
        owners.append(state["messages_log"])
    stop = {id(o) for o in owners}
    out: dict[str, Any] = {}

    def part(name: str, roots: Iterable[Any], own: Iterable[Any] = ()) -> None:
        roots = list(roots)
        inner = stop - {id(o) for o in roots} - {id(o) for o in own}
        t = time.perf_counter()
        size, count = _walk(roots, seen, inner)
        out[name] = {"bytes": size, "objects": count, "walk_s": time.perf_counter() - t}

    part("latency_model", [sim.latency])
    part("engine", [sim])
    part("dht", dht_nodes)
    # The overlay's parts (pubsub.base): the subscriber's dedup record and subscriptions; the
    # attribute spaces every part shares (read through the host).
    subscribers = [getattr(o, "subscriber", o) for o in overlays]
    shared = [getattr(o, "host", o) for o in overlays]
    part("overlay_dedup", [getattr(s, "_got", {}) for s in subscribers])
    # Private fields, read only to split the overlay's state (empty if a core lacks them).
    part("overlay_tree", [getattr(o, "nodes", {}) for o in overlays])
    # The spaces' zone caches, shared by every space over the same domain (module-level).
    shared_zones = getattr(rangecast.pubsub.space, "_zone_cache_of", None)
    part("overlay_spaces", [*(getattr(o, "_spaces", {}) for o in shared), shared_zones])
    part("overlay_own_subs", [getattr(s, "_subs", {}) for s in subscribers])
    part("overlay_other", [*overlays, *peers])
    deliveries = state["deliveries"]
    part("receipt_record", [deliveries])
    part("oracle", [state["oracle"]])
    part("workload", [state["subscriptions"], state["event_values"]])
    part(
        "experiment_other",
        [state["collector"], state["called"], state["published"], state["publisher"], net],
    )
    if state["messages_log"] is not None:
        part("run_log", [state["messages_log"], state["trees"]])
    out["receipts"] = len(deliveries.keys) + sum(int(n) for _, n in deliveries.strays.values())
    out["expected_pairs"] = int(sum(len(e) for e in deliveries.expected))
    out["rss_at_inspect_kib"] = rss_kib
    return out


def one(nodes: int, events: int, out_log: bool) -> dict[str, Any]:
    from rangecast.sim.thesis_experiment import ThesisParams, run_thesis

    base_kib = _rss_kib()
    got: dict[str, Any] = {}
    t = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="rangecast-memory-") as tmp:
        result = run_thesis(
            ThesisParams(nodes=nodes, subs_per_node=5, events=events, seed=1),
            out=Path(tmp) / "run" if out_log else None,
            inspect=lambda state: got.update(measure(state)),
        )
    got.update(
        nodes=nodes,
        events=events,
        subscriptions=result["subscriptions"],
        deliveries=result["deliveries"],
        missed=result["missed"],
        duplicates=result["duplicates"],
        false_positives=result["false_positives"],
        wall_s=time.perf_counter() - t,
        rss_baseline_kib=base_kib,
        peak_rss_kib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    )
    return got


PER_NODE = (
    "engine",
    "dht",
    "overlay_tree",
    "overlay_spaces",
    "overlay_own_subs",
    "overlay_other",
)
PER_RECEIPT = ("overlay_dedup", "receipt_record")
REST = ("latency_model", "oracle", "workload", "experiment_other", "run_log")


def table(rows: list[dict[str, Any]]) -> str:
    mib = 1 << 20
    head = ["", *(f"{r['nodes']:,} nodes" for r in rows)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def line(label: str, cells: Iterable[str]) -> None:
        lines.append("| " + " | ".join([label, *cells]) + " |")

    for k in PER_NODE:
        line(f"{k}, bytes per node", (f"{r[k]['bytes'] / r['nodes']:,.0f}" for r in rows))
    line("subscriptions / receipts", (f"{r['subscriptions']:,} / {r['receipts']:,}" for r in rows))
    for k in PER_RECEIPT:
        line(
            f"{k}, bytes per receipt",
            (f"{r[k]['bytes'] / max(1, r['receipts']):,.1f}" for r in rows),
        )
    for k in REST:
        if all(k in r for r in rows):
            line(f"{k}, MiB", (f"{r[k]['bytes'] / mib:,.1f}" for r in rows))
    parts = (*PER_NODE, *PER_RECEIPT, *REST)
    line(
        "walked total, MiB",
        (f"{sum(r[k]['bytes'] for k in parts if k in r) / mib:,.0f}" for r in rows),
    )
    line("RSS after imports, MiB", (f"{r['rss_baseline_kib'] / 1024:,.0f}" for r in rows))
    line("RSS at the check, MiB", (f"{r['rss_at_inspect_kib'] / 1024:,.0f}" for r in rows))
    line(
        "peak RSS (the walk's own included), MiB",
        (f"{r['peak_rss_kib'] / 1024:,.0f}" for r in rows),
    )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[1000, 10_000, 100_000])
    ap.add_argument("--events", type=int, default=200)
    ap.add_argument("--out-log", action="store_true", help="also write a run log (--out)")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one is not None:
        print(json.dumps(one(args.one, args.events, args.out_log)))
        return 0
    rows = []
    for n in args.nodes:
        cmd = [sys.executable, __file__, "--one", str(n), "--events", str(args.events)]
        if args.out_log:
            cmd.append("--out-log")
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            sys.stderr.write(done.stderr)
            return 1
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"{n:,} nodes: {rows[-1]['wall_s']:.0f} s", file=sys.stderr)
    print(table(rows))
    dest = Path(__file__).resolve().parent / "results"
    dest.mkdir(exist_ok=True)
    (dest / "memory.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
