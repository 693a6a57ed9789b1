"""Where the probe bandwidth goes, and what load balancing and multicast probes save (thesis Figs
4.5-4.8), measured on ``rangecast sim run thesis`` runs.

Usage::

    .venv/bin/python bench/lb_saving.py run --nodes 1000 --seed 1 --lb off
    .venv/bin/python bench/lb_saving.py run --nodes 1000 --seed 1 --lb on --cutoff 0.1
    .venv/bin/python bench/lb_saving.py run --nodes 1000 --probe multicast [--forward unicast]
    .venv/bin/python bench/lb_saving.py report        # pairs the stored runs, prints the savings

docs/overlay.md ("Load balancing", "Multicast probes and the busiest node") gives the runs made
and what they measured.

``run`` runs one thesis experiment in this process and adds its row to
``bench/results/lb_saving.json`` (a row with the same setting is replaced). Besides the run's own
JSON figures it records, from the simulator's message-log hook (set only here, so the
simulator's hot path is unchanged for every other run), every probe message a node sends during
the publishing phase, by

* *kind*: ``publish`` (the publisher's own first hop towards a zone RndRegionProbe selected),
  ``relay`` (a DHT hop forwarding someone else's routed probe), ``lrt`` (an internal tree node
  forwarding to the leaves of its LeafNodeRoutingTable), ``jump`` (a probe that guessed a zone
  that does not exist going up to an ancestor);
* the *depth* of the tree node it is addressed to (multicast: of each target it carries);
* the *zone class* of that tree node (``gap_class``): how far above the diagonal the zone's
  lowest point lies. A zone wholly above the cut-off line ``y = x + c`` lies in the thesis' "hot
  area" that load balancing crops from every search; the classes let a run without load
  balancing be split by the ``c`` of the run it is paired with.

and per node: probe bytes sent, by kind, with the tree nodes the node hosts at the end of the run
(depth, leaf or internal, leaf-table rows) and the events it published. ``report`` pairs rows that
differ only in ``lb`` (Fig 4.7) or only in ``probe`` (Fig 4.5/4.6), seed by seed, and writes
every pair's breakdown to ``bench/results/lb_saving_report.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from rangecast.dht.messages import Route
from rangecast.pubsub.messages import ProbePub, ProbePubMulticast
from rangecast.pubsub.space import TreeId
from rangecast.sim.thesis_experiment import Thesis, ThesisParams

RESULTS = Path(__file__).resolve().parent / "results" / "lb_saving.json"
PROBE_NAMES = ("ProbePub", "ProbePubMulticast")
KINDS = ("publish", "relay", "lrt", "jump")
KEY_FIELDS = (
    "nodes",
    "events",
    "seed",
    "lb",
    "cutoff",
    "probe",
    "forward",
    "min_level",
    "max_level",
    "p",
)
#: Zones are classed by how far above the diagonal their lowest point lies (the least y - x in
#: the zone, as a fraction of the domain): a zone of class ``>c`` is cropped by every cut-off
#: c' <= c. Classes are shared by all runs, so a run without load balancing can be split by
#: the cut-off of the run it is paired with.
GAPS = (0.02, 0.05, 0.1, 0.2, 0.3, 0.5)


def gap_class(gap: float) -> str:
    """``>c`` for the largest c of ``GAPS`` that ``gap`` exceeds, else ``band``."""
    for c in reversed(GAPS):
        if gap > c:
            return f">{c:g}"
    return "band"


def cropped_by(zone: str, cutoff: float) -> bool:
    """Is a zone of class ``zone`` above the cut-off line y = x + ``cutoff``?"""
    return zone != "band" and float(zone[1:]) >= cutoff - 1e-12


class _Recorder:
    """The message-log hook: every probe message sent while events are published."""

    def __init__(self) -> None:
        self.on = False
        self.sim: Any = None
        self.spaces: dict[int, Any] = {}
        self.per_node: dict[str, list[int]] = {}
        # (kind, depth, zone class) -> [messages, bytes]; a multicast message's bytes are
        # shared equally among its targets.
        self.cells: dict[tuple[str, int, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
        self.multicast_targets = 0
        self._zone_class: dict[tuple[int, int, int], str] = {}

    def attach(self, sim: Any, spaces: dict[int, Any]) -> None:
        self.sim = sim
        self.spaces = spaces
        n = len(sim.cores)
        self.per_node = {k: [0] * n for k in KINDS}

    def zone_class(self, attr: int, depth: int, path: int) -> str:
        key = (attr, depth, path)
        got = self._zone_class.get(key)
        if got is None:
            space = self.spaces[attr]
            z = space.zone(TreeId(attr, depth, path))
            got = gap_class((z.y_lo - z.x_hi) / (space.max - space.min))
            self._zone_class[key] = got
        return got

    def __call__(
        self,
        now: float,
        i: int,
        dst: int,
        name: str,
        size: int,
        msg: Any,
        dropped: bool,
        delay_ms: float,
    ) -> None:
        if not self.on or name not in PROBE_NAMES:
            return
        codec = self.sim.codec
        inner = codec.decode(msg.payload)
        if isinstance(msg, Route) and isinstance(inner, ProbePub):
            origin = self.sim.index_of.get(msg.origin.addr)
            t = inner.target
            if origin != i:
                kind = "relay"
            elif inner.via_lrt:
                kind = "lrt"
            elif inner.jumps:
                kind = "jump"
            else:
                kind = "publish"
            self.per_node[kind][i] += size
            cell = self.cells[(kind, t.depth, self.zone_class(t.attr, t.depth, t.path))]
            cell[0] += 1
            cell[1] += size
            return
        assert isinstance(inner, ProbePubMulticast), type(inner)
        # A multicast hop: the first (hops == 1) is its originator's, the publisher's or an
        # internal tree node's (targets via its leaf table); later hops relay.
        first = inner.hops == 1
        lrt = any(t.via_lrt for t in inner.targets)
        kind = ("lrt" if lrt else "publish") if first else "relay"
        self.per_node[kind][i] += size
        share = size / len(inner.targets)
        self.multicast_targets += len(inner.targets)
        for t in inner.targets:
            cell = self.cells[(kind, t.depth, self.zone_class(t.attr, t.depth, t.path))]
            cell[0] += 1 / len(inner.targets)
            cell[1] += share


class _Measured(Thesis):
    """The thesis scenario with the recorder switched on for the publishing phase only."""

    def __init__(self, recorder: _Recorder, inspect: Any) -> None:
        super().__init__(inspect)
        self.recorder = recorder

    def prepare_workload(self) -> None:
        super().prepare_workload()
        peer = self.peers[0].overlay
        spaces = {a: peer._space(self.schema.name, a) for a in range(len(self.schema.attributes))}
        self.recorder.attach(self.sim, spaces)
        self.sim.message_log = self.recorder

    def workload(self) -> None:
        # On for the whole workload: the install phase sends no ProbePub (its probes are
        # ProbeSub), so only the publishing phase is recorded.
        self.recorder.on = True
        super().workload()


def _tree_roles(peers: list[Any], spaces: dict[int, Any]) -> list[list[Any]]:
    """Per node: the tree nodes it hosts, as [attr, depth, leaf?, rows or entries, zone class]."""
    out: list[list[Any]] = []
    for p in peers:
        rows = []
        for _, node in p.overlay.tree_nodes():
            tid = node.tid
            space = spaces[tid.attr]
            z = space.zone(tid)
            cls = gap_class((z.y_lo - z.x_hi) / (space.max - space.min))
            size = len(node.index) if node.is_leaf else len(node.table)
            rows.append([tid.attr, tid.depth, node.is_leaf, size, cls])
        out.append(rows)
    return out


def measure(params: ThesisParams) -> dict[str, Any]:
    rec = _Recorder()
    state: dict[str, Any] = {}

    def inspect(s: dict[str, Any]) -> None:
        rec.on = False
        peers = s["peers"]
        spaces = rec.spaces
        state["roles"] = _tree_roles(peers, spaces)
        published = defaultdict(int)
        for i in s["publisher"].values():
            published[i] += 1
        state["published"] = [published.get(i, 0) for i in range(len(peers))]
        leaves: dict[str, int] = defaultdict(int)
        points: dict[str, int] = defaultdict(int)
        for p in peers:
            for _, node in p.overlay.tree_nodes():
                if node.is_leaf:
                    leaves[f"{node.tid.depth}"] += 1
                    for sp in node.index:
                        space = spaces[sp.base]
                        points[gap_class((sp.y - sp.x) / (space.max - space.min))] += 1
        state["leaves_by_depth"] = dict(sorted(leaves.items(), key=lambda kv: int(kv[0])))
        state["stored_points"] = dict(points)

    result = _Measured(rec, inspect).run(params).json()
    n_events = result["events"]
    cells = [
        {
            "kind": k,
            "depth": d,
            "zone": z,
            "messages_per_event": v[0] / n_events,
            "bytes_per_event": v[1] / n_events,
        }
        for (k, d, z), v in sorted(rec.cells.items())
    ]
    o = params.overlay
    return {
        "nodes": params.nodes,
        "events": params.events,
        "seed": params.seed,
        "lb": params.lb,
        "cutoff": o.cutoff if params.lb else None,
        "probe": o.probe,
        "forward": o.forward,
        "min_level": o.min_level,
        "max_level": o.max_level,
        "p": o.p,
        "missed": result["missed"],
        "duplicates": result["duplicates"],
        "false_positives": result["false_positives"],
        "expected_deliveries": result["expected_deliveries"],
        "probe_bytes_per_event_per_node": result["probe_bytes_per_event_per_node"],
        "messages_by_type": {
            k: v for k, v in result["messages_by_type"].items() if k in PROBE_NAMES
        },
        "tree": result["tree"],
        "overlay": result["overlay"],
        "leaves_by_depth": state["leaves_by_depth"],
        "stored_points": state["stored_points"],
        "cells": cells,
        "multicast_targets_per_event": rec.multicast_targets / n_events,
        "per_node_bytes_per_event": {k: [b / n_events for b in v] for k, v in rec.per_node.items()},
        "roles": state["roles"],
        "published": state["published"],
        "wall_s": result["wall_s"],
    }


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(row.get(k) for k in KEY_FIELDS)


def _load() -> list[dict[str, Any]]:
    if RESULTS.exists():
        return list(json.loads(RESULTS.read_text())["runs"])
    return []


def _save(rows: list[dict[str, Any]]) -> None:
    RESULTS.parent.mkdir(exist_ok=True)
    rows.sort(key=lambda r: tuple(str(x) for x in _key(r)))
    RESULTS.write_text(json.dumps({"runs": rows}, separators=(",", ":")) + "\n")


def cmd_run(args: argparse.Namespace) -> int:
    base = ThesisParams()
    overlay = base.overlay.__class__(
        min_level=args.min_level,
        max_level=args.max_level,
        p=args.p,
        cutoff=args.cutoff,
        probe=args.probe,
        forward=args.forward,
    )
    params = ThesisParams(
        nodes=args.nodes,
        events=args.events,
        seed=args.seed,
        lb=args.lb == "on",
        overlay=overlay,
    )
    row = measure(params)
    rows = [r for r in _load() if _key(r) != _key(row)]
    rows.append(row)
    _save(rows)
    pb = row["probe_bytes_per_event_per_node"]
    print(
        f"nodes {row['nodes']} events {row['events']} seed {row['seed']} lb {row['lb']} "
        f"cutoff {row['cutoff']} probe {row['probe']}: missed {row['missed']} dup "
        f"{row['duplicates']} false+ {row['false_positives']}; probe B/event/node mean "
        f"{pb['mean']:.2f} max {pb['max']:.1f} top20 {pb['top20_mean']:.1f}; wall "
        f"{row['wall_s']:.0f} s"
    )
    return 0


# ------------------------------------------------------------------------------------ report


def _sum_cells(row: dict[str, Any], by: str, cutoff: float | None) -> dict[Any, list[float]]:
    """Messages and bytes per event by ``by``; zones as ``cropped``/``band`` for ``cutoff``."""
    out: dict[Any, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for c in row["cells"]:
        key = c[by]
        if by == "zone":
            key = "cropped" if cutoff is not None and cropped_by(key, cutoff) else "band"
        cell = out[key]
        cell[0] += c["messages_per_event"]
        cell[1] += c["bytes_per_event"]
    return out


def _mean_node(row: dict[str, Any]) -> float:
    """Mean probe bytes per event per node (as the run reports it)."""
    return float(row["probe_bytes_per_event_per_node"]["mean"])


def _node_totals(row: dict[str, Any]) -> list[float]:
    per = row["per_node_bytes_per_event"]
    return [sum(per[k][i] for k in KINDS) for i in range(row["nodes"])]


def _describe_node(row: dict[str, Any], i: int) -> dict[str, Any]:
    per = row["per_node_bytes_per_event"]
    roles = row["roles"][i]
    return {
        "node": i,
        "bytes_per_event": sum(per[k][i] for k in KINDS),
        "by_kind": {k: per[k][i] for k in KINDS},
        "published": row["published"][i],
        "hosts": sorted(roles, key=lambda r: (r[1], r[0]))[:8],
    }


def pair_report(off: dict[str, Any], on: dict[str, Any], what: str) -> dict[str, Any]:
    """What changes from ``off`` to ``on`` (same setting but ``what``)."""
    n = off["nodes"]
    total_off = _mean_node(off) * n
    total_on = _mean_node(on) * n
    out: dict[str, Any] = {
        "mean_off": _mean_node(off),
        "mean_on": _mean_node(on),
        "saving_mean": 1 - _mean_node(on) / _mean_node(off),
        "max_off": off["probe_bytes_per_event_per_node"]["max"],
        "max_on": on["probe_bytes_per_event_per_node"]["max"],
        "saving_max": 1
        - on["probe_bytes_per_event_per_node"]["max"]
        / off["probe_bytes_per_event_per_node"]["max"],
        "top20_off": off["probe_bytes_per_event_per_node"]["top20_mean"],
        "top20_on": on["probe_bytes_per_event_per_node"]["top20_mean"],
    }
    cutoff = on["cutoff"] if what == "lb" else 0.1
    out["zones_cropped_at"] = cutoff
    for by in ("kind", "zone", "depth"):
        a, b = _sum_cells(off, by, cutoff), _sum_cells(on, by, cutoff)
        keys = sorted(set(a) | set(b), key=str)
        out[f"by_{by}"] = {
            str(k): {
                "messages_off": a[k][0],
                "messages_on": b[k][0],
                "bytes_off": a[k][1],
                "bytes_on": b[k][1],
                # the share of the whole saving (bytes per event over all nodes)
                "share_of_saving": (a[k][1] - b[k][1]) / (total_off - total_on)
                if total_off != total_on
                else math.nan,
            }
            for k in keys
        }
    t_off, t_on = _node_totals(off), _node_totals(on)
    busiest_off = max(range(n), key=t_off.__getitem__)
    busiest_on = max(range(n), key=t_on.__getitem__)
    out["busiest_off"] = _describe_node(off, busiest_off)
    out["busiest_off_in_on"] = _describe_node(on, busiest_off)
    out["busiest_on"] = _describe_node(on, busiest_on)
    # Which nodes shed load: the saving of the nodes ranked by their load without.
    order = sorted(range(n), key=lambda i: -t_off[i])
    groups = {"top 1%": order[: max(1, n // 100)], "top 10%": order[: n // 10]}
    groups["rest"] = order[n // 10 :]
    out["saving_by_rank_group"] = {
        g: {
            "off": sum(t_off[i] for i in idx),
            "on": sum(t_on[i] for i in idx),
            "share_of_saving": (sum(t_off[i] - t_on[i] for i in idx)) / (total_off - total_on)
            if total_off != total_on
            else math.nan,
        }
        for g, idx in groups.items()
    }
    # Nodes by role at the end of the run without: hosts of cropped zones (thesis kind 1), hosts
    # of internal tree nodes (kind 2's tree part), the rest (kind 2's DHT relays and kind 3).
    role_of = []
    for i in range(n):
        r = off["roles"][i]
        if any(cropped_by(x[4], cutoff) for x in r):
            role_of.append("hosts a cropped zone")
        elif any(not x[2] for x in r):
            role_of.append("hosts an internal tree node")
        elif r:
            role_of.append("hosts band leaves only")
        else:
            role_of.append("hosts no tree node")
    by_role: dict[str, dict[str, float]] = defaultdict(lambda: {"nodes": 0, "off": 0.0, "on": 0.0})
    for i in range(n):
        g = by_role[role_of[i]]
        g["nodes"] += 1
        g["off"] += t_off[i]
        g["on"] += t_on[i]
    out["by_role_without"] = dict(by_role)
    return out


def _pairs(rows: list[dict[str, Any]], what: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    out = []
    for on in rows:
        if what == "lb" and not on["lb"]:
            continue
        if what == "probe" and (on["probe"] != "multicast" or on["lb"]):
            continue
        for off in rows:
            if off is on:
                continue
            same = all(
                off[k] == on[k] for k in ("nodes", "events", "seed", "min_level", "max_level", "p")
            )
            if what == "lb":
                ok = same and not off["lb"] and off["probe"] == on["probe"]
            else:
                ok = same and off["probe"] == "unicast" and not off["lb"]
            if ok:
                out.append((off, on))
    return out


def cmd_report(args: argparse.Namespace) -> int:
    rows = _load()
    report: dict[str, Any] = {"lb": [], "probe": []}
    for what in ("lb", "probe"):
        for off, on in _pairs(rows, what):
            r = pair_report(off, on, what)
            r["setting"] = {k: on.get(k) for k in KEY_FIELDS}
            report[what].append(r)
    # Summaries per setting (seeds pooled).
    summary: dict[str, Any] = {}
    for what in ("lb", "probe"):
        groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in report[what]:
            s = r["setting"]
            label = f"{s['nodes']} nodes, {s['events']} events, probe {s['probe']}"
            if s["probe"] == "multicast" and s.get("forward") == "unicast":
                label += ", forward unicast"
            if (s["min_level"], s["max_level"], s["p"]) != (3, 10, 0.7):
                label += f", levels {s['min_level']}-{s['max_level']} p {s['p']:g}"
            if what == "lb":
                label += f", c {s['cutoff']}"
            groups[label].append(r)
        summary[what] = {
            label: {
                "seeds": [r["setting"]["seed"] for r in rs],
                "saving_mean": [round(r["saving_mean"], 4) for r in rs],
                "saving_max": [round(r["saving_max"], 4) for r in rs],
                "saving_mean_avg": statistics.fmean(r["saving_mean"] for r in rs),
                "saving_max_avg": statistics.fmean(r["saving_max"] for r in rs),
            }
            for label, rs in sorted(groups.items())
        }
    out = {"summary": summary, "pairs": report}
    (RESULTS.parent / "lb_saving_report.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="one measured thesis run, added to the results")
    run.add_argument("--nodes", type=int, default=1000)
    run.add_argument("--events", type=int, default=10_000)
    run.add_argument("--seed", type=int, default=1)
    run.add_argument("--lb", choices=("on", "off"), default="off")
    run.add_argument("--cutoff", type=float, default=0.1)
    run.add_argument("--probe", choices=("unicast", "multicast"), default="unicast")
    run.add_argument("--forward", choices=("probe", "unicast"), default="probe")
    run.add_argument("--min-level", type=int, default=3)
    run.add_argument("--max-level", type=int, default=10)
    run.add_argument("--p", type=float, default=0.7)
    run.set_defaults(fn=cmd_run)
    rep = sub.add_parser("report", help="pair the stored runs and print the savings")
    rep.set_defaults(fn=cmd_report)
    args = ap.parse_args()
    return int(args.fn(args))


if __name__ == "__main__":
    sys.exit(main())
