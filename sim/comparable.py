"""The one rule that decides whether a run may be set next to the thesis' figures.

The thesis' Chapter 4 states its numbers (331 ms, 333 ms, 14.32 B, 1.32 kB, ...) for one
setting; a run of another setting may still be drawn beside them for shape, but its values are
not the thesis' to compare. Three places ask: the run's own summary (``rangecast sim run
thesis``), the report's tables (``analysis.report.build``) and the reproduction's page
(``analysis.reproduce.page``); all three call ``thesis_comparison`` so they never disagree.

The thesis' setting is written out here as the thesis states it, not read from our parameters'
defaults: a change of default must not change what the thesis ran.

The latency model is not part of the rule: the thesis' King data set is not available, and
latencies are compared in units of each side's mean RTT (docs/overlay.md).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The thesis' run of Figs 4.1-4.8 (4.3.1: "a 1000-node network with 5 subscriptions per node
#: on average"; Tables 4.1-4.3), in the names of a run's parameters (run.json ``params``).
THESIS_NODES = 1000
THESIS_SUBSCRIPTIONS = 5_000
THESIS_EVENTS = 10_000
THESIS_SETTING: dict[str, Any] = {
    "workload": "thesis",
    "dht": "pastry",
    "lb": False,
    "probe": "unicast",
    "delivery": "unicast",
    "min_level": 3,
    "max_level": 10,
    "p": 0.7,
    "capacity": (10, 30),
    "sub_gap_ms": 2000.0,
    "pub_gap_ms": 1000.0,
}
#: Table 4.5's network sizes: the scalability figures (4.9/4.10) ran each of them.
THESIS_NETWORK_SIZES = (1000, 1740, 3000, 4000, 5000)
#: Subscriptions per node at every size (4.3.1).
THESIS_SUBS_PER_NODE = THESIS_SUBSCRIPTIONS // THESIS_NODES
#: What a figure may vary and still be the thesis' setting (``vary``): the network size among
#: Table 4.5's (Figs 4.9/4.10), the probes (Figs 4.5/4.6), load balancing (Figs 4.7/4.8).
VARIABLE = ("nodes", "probe", "lb")


@dataclass(frozen=True, slots=True)
class Comparison:
    """Whether the run is the thesis' setting (``applies``) and, if not, each way it differs
    (``differences``, readable, in the order the rule checks them)."""

    applies: bool
    differences: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"applies": self.applies, "differences": list(self.differences)}

    def text(self) -> str:
        """One sentence for a page or a caption."""
        if self.applies:
            return "The thesis' own setting: its values may be set beside ours."
        return "Not the thesis' setting (" + "; ".join(self.differences) + ")."


def _count(n: int, word: str) -> str:
    """``1 node``, ``2 nodes``."""
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


def _setting(params: Mapping[str, Any], name: str) -> Any:
    """A parameter of the run, top-level or among the overlay's knobs (``overlay.probe``)."""
    overlay = params.get("overlay") or {}
    if name in ("probe", "delivery", "min_level", "max_level", "p") and name in overlay:
        return overlay[name]
    return params.get(name, THESIS_SETTING.get(name))


def thesis_comparison(
    params: Mapping[str, Any],
    subscriptions: int | None = None,
    events: int | None = None,
    *,
    vary: Collection[str] = (),
) -> Comparison:
    """Compare a thesis run's parameters (run.json ``params``, the overlay's knobs nested under
    ``overlay``) with the thesis' setting.

    ``subscriptions``/``events``: the counts the run installed and published (a run's summary
    has them; ``events_from`` may publish fewer than ``events`` says); None takes them from
    ``params`` (``nodes`` x ``subs_per_node``, ``events``). A setting ``params`` does not name
    is the thesis' (a plan that sets only the size). ``vary``: settings the figure at hand
    varies itself (``VARIABLE``); ``nodes`` then may be any of Table 4.5's sizes, with the
    thesis' 5 subscriptions per node.
    """
    unknown = set(vary) - set(VARIABLE)
    if unknown:
        raise ValueError(f"vary: {', '.join(sorted(unknown))} is not one of {VARIABLE}")
    t = THESIS_SETTING
    diffs: list[str] = []
    nodes = int(params.get("nodes", THESIS_NODES))
    if subscriptions is None:
        subscriptions = round(nodes * float(params.get("subs_per_node", THESIS_SUBS_PER_NODE)))
    if events is None:
        events = int(params.get("events", THESIS_EVENTS))
    if "nodes" in vary:
        if nodes not in THESIS_NETWORK_SIZES:
            sizes = ", ".join(f"{n:,}" for n in THESIS_NETWORK_SIZES)
            diffs.append(f"{_count(nodes, 'node')}, thesis ran {sizes}")
        want = nodes * THESIS_SUBS_PER_NODE
        if subscriptions != want:
            diffs.append(
                f"{_count(subscriptions, 'subscription')}, thesis installed "
                f"{THESIS_SUBS_PER_NODE} per node"
            )
    else:
        if nodes != THESIS_NODES:
            diffs.append(f"{_count(nodes, 'node')}, thesis ran {THESIS_NODES:,}")
        if subscriptions != THESIS_SUBSCRIPTIONS:
            diffs.append(
                f"{_count(subscriptions, 'subscription')}, thesis installed "
                f"{THESIS_SUBSCRIPTIONS:,}"
            )
    if events != THESIS_EVENTS:
        diffs.append(f"{_count(events, 'event')}, thesis published {THESIS_EVENTS:,}")
    workload = _setting(params, "workload")
    if workload != t["workload"]:
        diffs.append(f"the {workload} workload, thesis ran its own (Table 4.3)")
    events_from = params.get("events_from")
    if events_from is not None:
        diffs.append(
            f"events from {Path(str(events_from)).name}, thesis generated its own (Table 4.3)"
        )
    dht = _setting(params, "dht")
    if dht != t["dht"]:
        diffs.append(f"{dht} DHT, thesis ran {t['dht']}")
    if "lb" not in vary and bool(_setting(params, "lb")) != t["lb"]:
        diffs.append("load balancing on, thesis' figures are without it")
    probe = _setting(params, "probe")
    if "probe" not in vary and probe != t["probe"]:
        diffs.append(f"{probe} probes, thesis probed by {t['probe']}")
    delivery = _setting(params, "delivery")
    if delivery != t["delivery"]:
        diffs.append(f"{delivery} delivery, thesis delivered by {t['delivery']}")
    levels = tuple(_setting(params, k) for k in ("min_level", "max_level", "p"))
    if levels != (t["min_level"], t["max_level"], t["p"]):
        lo, hi, p = levels
        diffs.append(
            f"probe levels {lo}-{hi} with p {float(p):g}, thesis used "
            f"{t['min_level']}-{t['max_level']} with p {t['p']:g}"
        )
    capacity = tuple(_setting(params, "capacity"))
    if capacity != t["capacity"]:
        diffs.append(f"capacity {capacity}, thesis drew {t['capacity']}")
    gaps = (float(_setting(params, "sub_gap_ms")), float(_setting(params, "pub_gap_ms")))
    if gaps != (t["sub_gap_ms"], t["pub_gap_ms"]):
        diffs.append("arrival gaps differ from the thesis' (2 s, 1 s)")
    return Comparison(not diffs, tuple(diffs))
