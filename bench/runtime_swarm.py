"""Real trio peers on loopback: publish-to-delivery latency and sustained events/s (32 peers).

What it measures
----------------
A local swarm of ``--peers`` real ``PeerRuntime`` peers (own keys, own sockets, signed frames)
is started with ``runtime.inprocess.start_local_swarm``. ``--subs`` thesis-workload
subscriptions are installed through one client per peer (spread over the whole swarm), and
events are published through ``--pub-clients`` clients attached to peers spread over the ring.

1. Latency phase: ``--latency-events`` events offered open-loop at ``--rate`` events/s (each
   publish in its own task at its scheduled time, so a slow reply never delays the schedule and
   the figures are free of coordinated omission). The latency of a (subscription, event) pair is
   the trio clock when the subscriber's application code got the delivery minus the clock just
   before the publish request was sent: it includes the client-to-peer hop, the overlay, and the
   peer-to-client hop.
2. Throughput phase: ``--events`` events published as fast as ``--publishers`` concurrent tasks
   can (each awaits its publish reply before the next one). Sustained throughput is the number
   of events from the first publish until the last expected delivery arrived, per second.
3. Overload phase: ``--overload-events`` events offered open-loop at ``--overload-factor``
   times the sustained rate just measured. The entry peers refuse publishes while saturated
   (``Overloaded``, counted by reason); for the accepted events it reports delivery latency and
   the oracle's missed / duplicate / false-positive counts. ``--no-admission`` lifts the quotas
   and saturation bounds (what the peers did before they had them), for a before/after.

Both phases compare every delivery with a brute-force oracle (``Subscription.matches``) and
report missed / duplicate / false-positive deliveries. Frames and bytes are the peers' overlay
traffic (``PeerRuntime.transport``, peer-to-peer links only; client connections are not in it).

Caveat: all peers, all clients and the bench itself share ONE Python process and therefore one
core (trio runs everything on one thread). Every hop's CPU work is serialised, so these figures
are a lower bound of what the same peers would give as separate processes on separate cores (or
machines); the ``cpu_utilisation`` fields show how close the phases came to saturating that core.

Usage::

    .venv/bin/python bench/runtime_swarm.py                # 32 peers, 320 subs, 2000 events
    .venv/bin/python bench/runtime_swarm.py --json         # one JSON object on stdout

Progress goes to stderr. Node ids come from fresh keys, so runs with the same ``--seed`` share
the workload but not the ring layout.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field, replace
from typing import Any

import trio

from rangecast.pubsub.schema import THESIS_SCHEMA
from rangecast.pubsub.subscription import Subscription
from rangecast.runtime.admission import AdmissionConfig
from rangecast.runtime.client import (
    Client,
    ClientSubscription,
    ConnectionLost,
    Overloaded,
    RequestError,
    connect,
)
from rangecast.runtime.inprocess import start_local_swarm
from rangecast.runtime.peer import RUNTIME_KADEMLIA, PeerConfig, PeerRuntime
from rangecast.runtime.quotas import DEFAULT_QUOTAS
from rangecast.sim.percentiles import percentile
from rangecast.sim.workload import thesis_workload

NAMES = [a.name for a in THESIS_SCHEMA.attributes]
EventValues = tuple[float | None, ...]

_T0 = time.monotonic()


def progress(msg: str) -> None:
    print(f"[{time.monotonic() - _T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------- records


@dataclass
class Phase:
    """One phase's events, what became of their publishes, and what the oracle expects."""

    name: str
    events: list[EventValues]
    #: Event index -> subscription indices whose predicates match it (the oracle).
    want: list[list[int]]
    eids: list[int | None] = field(default_factory=list)
    sent_at: list[float] = field(default_factory=list)
    replied_at: list[float] = field(default_factory=list)
    publish_errors: list[str] = field(default_factory=list)
    publish_timeouts: int = 0
    #: Publishes the entry peer refused for load (``Overloaded``): not accepted, not expected.
    refused: int = 0
    #: (leaf, event) pairs of this phase: what the lower bound of frames counts (``leaves_hit``).
    leaves_hit: int = 0

    def __post_init__(self) -> None:
        n = len(self.events)
        self.eids = [None] * n
        self.sent_at = [math.nan] * n
        self.replied_at = [math.nan] * n


@dataclass
class Snapshot:
    """Counters at one instant, to report per-phase deltas."""

    t: float
    cpu: float
    frames_out: int
    bytes_out: int
    messages_out: int = 0

    @staticmethod
    def take(peers: list[PeerRuntime]) -> Snapshot:
        return Snapshot(
            trio.current_time(),
            time.process_time(),
            sum(p.transport.frames_out for p in peers),
            sum(p.transport.bytes_out for p in peers),
            sum(p.transport.messages_out for p in peers),
        )


def leaves_hit(peers: list[PeerRuntime], phase: Phase) -> int:
    """(leaf, event) pairs of ``phase``: every leaf tree node remembers the events it matched
    in the last ``dedup_window_s`` (120 s, longer than a phase) to drop duplicate probes, so
    counting the phase's event ids there, right after it, gives the leaves each event reached.
    The lower bound of peer-to-peer messages per event is then leaves hit plus deliveries (one
    message to each leaf and one per delivery; a few are local, so the bound is generous)."""
    eids = {e for e in phase.eids if e is not None}
    return sum(
        sum(1 for e in node.seen if e in eids)
        for p in peers
        if p.core is not None
        for _, node in p.core.overlay.tree_nodes()
        if node.index is not None
    )


# ---------------------------------------------------------------------------------- statistics


def summarize_ms(xs_s: list[float]) -> dict[str, float | int]:
    """p50 / p99 / mean / max of durations given in seconds, reported in milliseconds."""
    if not xs_s:
        return {"n": 0}
    s = sorted(xs_s)
    return {
        "n": len(s),
        "p50_ms": round(percentile(s, 0.50) * 1e3, 3),
        "p99_ms": round(percentile(s, 0.99) * 1e3, 3),
        "mean_ms": round(sum(s) / len(s) * 1e3, 3),
        "max_ms": round(s[-1] * 1e3, 3),
        "min_ms": round(s[0] * 1e3, 3),
    }


def traffic(
    before: Snapshot, after: Snapshot, events: int, bound: int | None = None
) -> dict[str, Any]:
    frames = after.frames_out - before.frames_out
    messages = after.messages_out - before.messages_out
    data = after.bytes_out - before.bytes_out
    wall = after.t - before.t
    return {
        "frames_out": frames,
        "bytes_out": data,
        "frames_per_event": round(frames / events, 2) if events else None,
        "bytes_per_event": round(data / events, 1) if events else None,
        "messages_per_event": round(messages / events, 2) if events else None,
        # Leaves hit plus deliveries, per event (``leaves_hit``): no design can send fewer.
        "lower_bound_per_event": round(bound / events, 2) if events and bound else None,
        "wall_s": round(wall, 3),
        "cpu_s": round(after.cpu - before.cpu, 3),
        # CPU of this process over wall time: near 1.0 means the single core was the bottleneck.
        "cpu_utilisation": round((after.cpu - before.cpu) / wall, 3) if wall > 0 else None,
    }


def oracle_check(
    phase: Phase, arrivals: list[dict[int, list[float]]], installed: list[bool]
) -> dict[str, Any]:
    """Compare this phase's deliveries with the oracle; latencies of every expected pair."""
    eid_to_j = {eid: j for j, eid in enumerate(phase.eids) if eid is not None}
    want_sets = [{k for k in ks if installed[k]} for ks in phase.want]
    expected = missed = duplicates = false_positives = delivered = 0
    latencies: list[float] = []
    last_expected = -math.inf
    for j, ks in enumerate(want_sets):
        eid = phase.eids[j]
        if eid is None:
            continue  # never published (its failure is reported separately)
        for k in ks:
            expected += 1
            times = arrivals[k].get(eid)
            if not times:
                missed += 1
                continue
            delivered += 1
            first = min(times)
            latencies.append(first - phase.sent_at[j])
            last_expected = max(last_expected, first)
    for k, got in enumerate(arrivals):
        for eid, times in got.items():
            j = eid_to_j.get(eid)
            if j is None:
                continue  # another phase's event
            duplicates += len(times) - 1
            if k not in want_sets[j]:
                false_positives += 1
    return {
        "expected": expected,
        "delivered": delivered,
        "missed": missed,
        "duplicates": duplicates,
        "false_positives": false_positives,
        "latencies": latencies,
        "last_expected_at": last_expected,
    }


# ---------------------------------------------------------------------------------- actions


async def collect(
    k: int, handle: ClientSubscription, arrivals: list[dict[int, list[float]]]
) -> None:
    # The time the application sees the delivery, which is what a subscriber experiences.
    async for d in handle:
        arrivals[k].setdefault(d.eid, []).append(trio.current_time())


async def publish_one(
    phase: Phase, j: int, client: Client, timeout_s: float, busy_wait_s: float = 30.0
) -> None:
    values = dict(zip(NAMES, phase.events[j], strict=True))
    phase.sent_at[j] = trio.current_time()
    with trio.move_on_after(timeout_s) as cs:
        try:
            phase.eids[j] = await client.publish(values, busy_wait_s=busy_wait_s)
        except Overloaded:
            phase.refused += 1
        except (RequestError, ConnectionLost) as exc:
            phase.publish_errors.append(f"{type(exc).__name__}: {exc}")
        phase.replied_at[j] = trio.current_time()
    if cs.cancelled_caught:
        phase.publish_timeouts += 1


async def paced(
    phase: Phase, pubs: list[Client], rate: float, timeout_s: float, busy_wait_s: float = 30.0
) -> None:
    """Open loop: each publish starts at its scheduled instant in its own task."""
    start = trio.current_time() + 0.05
    n = len(phase.events)
    every = max(1, int(rate * 5))
    j = 0
    async with trio.open_nursery() as nursery:
        while j < n:
            await trio.sleep_until(start + j / rate)
            now = trio.current_time()
            # A saturated loop wakes the pacer late: start every publish already due, or one
            # per wake-up would quietly turn the offered rate into the achieved one.
            while j < n and start + j / rate <= now:
                client = pubs[j % len(pubs)]
                nursery.start_soon(publish_one, phase, j, client, timeout_s, busy_wait_s)
                j += 1
                if j % every == 0:
                    progress(f"{phase.name}: {j}/{n} events offered")


async def flood(phase: Phase, pubs: list[Client], workers: int, timeout_s: float) -> None:
    """Closed loop: ``workers`` tasks, each publishing the next event once its last one is
    acknowledged; a shared iterator hands out each event exactly once."""
    todo = iter(range(len(phase.events)))
    step = max(1, len(phase.events) // 5)

    async def worker(w: int) -> None:
        client = pubs[w % len(pubs)]
        for j in todo:
            await publish_one(phase, j, client, timeout_s)
            if j and j % step == 0:
                progress(f"{phase.name}: {j}/{len(phase.events)} events published")

    async with trio.open_nursery() as nursery:
        for w in range(workers):
            nursery.start_soon(worker, w)


async def await_deliveries(
    phase: Phase,
    arrivals: list[dict[int, list[float]]],
    installed: list[bool],
    timeout_s: float,
) -> bool:
    """Wait (bounded) until every expected (subscription, event) pair has been delivered."""
    pending = [
        (k, eid)
        for j, ks in enumerate(phase.want)
        if (eid := phase.eids[j]) is not None
        for k in ks
        if installed[k]
    ]
    last_note = trio.current_time()
    with trio.move_on_after(timeout_s):
        while True:
            # Shrinking list: each pair is checked until it has arrived, then dropped.
            pending = [(k, eid) for k, eid in pending if eid not in arrivals[k]]
            if not pending:
                return True
            if trio.current_time() - last_note >= 5.0:
                progress(f"{phase.name}: waiting for {len(pending)} deliveries")
                last_note = trio.current_time()
            await trio.sleep(0.01)
    progress(f"{phase.name}: gave up waiting, {len(pending)} deliveries still missing")
    return False


# ---------------------------------------------------------------------------------- the run


def spread(n: int, k: int, offset: float = 0.0) -> list[int]:
    """``k`` indices spread evenly over ``0..n-1``."""
    return [int((i + offset) * n / k) % n for i in range(k)]


async def bench(
    args: argparse.Namespace,
    subs: list[Subscription],
    lat_phase: Phase,
    thr_phase: Phase,
    ovl_phase: Phase,
) -> dict[str, Any]:
    result: dict[str, Any] = {}
    arrivals: list[dict[int, list[float]]] = [{} for _ in subs]
    installed = [False] * len(subs)
    async with trio.open_nursery() as swarm:
        progress(f"starting {args.peers} peers")
        t0 = trio.current_time()
        with trio.fail_after(args.setup_timeout):
            peers = await start_local_swarm(
                swarm,
                args.peers,
                seed=args.seed,
                config=PeerConfig(
                    dht=args.dht,
                    kademlia=replace(RUNTIME_KADEMLIA, lookup=args.lookup),
                    quotas=_UNBOUNDED
                    if args.no_admission
                    else DEFAULT_QUOTAS
                    if args.saturation_lag_s is None
                    else replace(DEFAULT_QUOTAS, saturation_lag_s=args.saturation_lag_s),
                    signed_acks=args.signed_acks,
                ),
                converge_timeout_s=args.setup_timeout,
            )
        setup_s = trio.current_time() - t0
        progress(f"swarm up and converged in {setup_s:.2f}s")
        ports = [p.address.port for p in peers if p.address is not None]
        snap_setup = Snapshot.take(peers)

        async with AsyncExitStack() as stack:
            n_sub_clients = min(args.sub_clients or args.peers, args.peers)
            sub_clients = [
                await stack.enter_async_context(connect("127.0.0.1", ports[i]))
                for i in spread(args.peers, n_sub_clients)
            ]
            # Half a step off the subscriber clients' peers, so publishers enter elsewhere too.
            n_pub = min(args.pub_clients, args.peers)
            pub_clients = [
                await stack.enter_async_context(connect("127.0.0.1", ports[i]))
                for i in spread(args.peers, n_pub, 0.5)
            ]
            readers = await stack.enter_async_context(trio.open_nursery())

            # ---- subscription install: sequential, so each time is one install alone.
            progress(f"installing {len(subs)} subscriptions")
            install_times: list[float] = []
            install_errors: list[str] = []
            install_timeouts = 0
            t_inst = trio.current_time()
            for k, s in enumerate(subs):
                client = sub_clients[k % len(sub_clients)]
                t = trio.current_time()
                with trio.move_on_after(args.op_timeout) as cs:
                    try:
                        handle = await client.subscribe(s.describe(THESIS_SCHEMA))
                    except (RequestError, ConnectionLost) as exc:
                        install_errors.append(f"{type(exc).__name__}: {exc}")
                        continue
                    install_times.append(trio.current_time() - t)
                    installed[k] = True
                    readers.start_soon(collect, k, handle, arrivals)
                if cs.cancelled_caught:
                    install_timeouts += 1
            install_total = trio.current_time() - t_inst
            snap_installed = Snapshot.take(peers)
            progress(f"{sum(installed)} subscriptions installed in {install_total:.2f}s")

            # ---- idle baseline: keep-alive traffic that is in every phase's frame count.
            await trio.sleep(args.idle_s)
            snap_idle = Snapshot.take(peers)

            # ---- latency phase
            progress(
                f"latency phase: {len(lat_phase.events)} events at {args.rate:g}/s "
                f"through {len(pub_clients)} clients"
            )
            snap_lat0 = Snapshot.take(peers)
            await paced(lat_phase, pub_clients, args.rate, args.op_timeout)
            lat_complete = await await_deliveries(lat_phase, arrivals, installed, args.wait_timeout)
            snap_lat1 = Snapshot.take(peers)
            lat_phase.leaves_hit = leaves_hit(peers, lat_phase)
            # A quiet spell in which a late duplicate or false positive would still show up.
            await trio.sleep(args.quiet_s)

            # ---- throughput phase
            progress(
                f"throughput phase: {len(thr_phase.events)} events, "
                f"{args.publishers} concurrent publishers"
            )
            snap_thr0 = Snapshot.take(peers)
            await flood(thr_phase, pub_clients, args.publishers, args.op_timeout)
            snap_thr_pub = Snapshot.take(peers)
            thr_complete = await await_deliveries(thr_phase, arrivals, installed, args.wait_timeout)
            snap_thr1 = Snapshot.take(peers)
            thr_phase.leaves_hit = leaves_hit(peers, thr_phase)
            await trio.sleep(args.quiet_s)

            # ---- overload phase: open loop at a multiple of the rate just sustained.
            sustained_now = _events_per_s(thr_phase, arrivals, installed)
            ovl_rate = args.overload_rate or args.overload_factor * (sustained_now or args.rate)
            progress(f"overload phase: {len(ovl_phase.events)} events at {ovl_rate:.1f}/s")
            refused0 = _refusals(peers)
            dropped0 = sum(p.transport.dropped_out for p in peers)
            failed0 = sum(p.dht.stats.peers_failed for p in peers)
            snap_ovl0 = Snapshot.take(peers)
            load: dict[str, list[float]] = {"lag_s": [], "backlog": []}
            async with trio.open_nursery() as sampler:
                sampler.start_soon(_sample_load, peers, load)
                # Open loop: a refused publish is counted, not retried.
                await paced(ovl_phase, pub_clients, ovl_rate, args.op_timeout, busy_wait_s=0)
                sampler.cancel_scope.cancel()
            ovl_complete = await await_deliveries(ovl_phase, arrivals, installed, args.wait_timeout)
            snap_ovl1 = Snapshot.take(peers)
            ovl_refused = _delta(_refusals(peers), refused0)
            ovl_dropped = sum(p.transport.dropped_out for p in peers) - dropped0
            ovl_failed = sum(p.dht.stats.peers_failed for p in peers) - failed0
            await trio.sleep(args.quiet_s)

            readers.cancel_scope.cancel()
            overflowed = sum(c.overflowed for c in sub_clients + pub_clients)

        # ---- peer-side counters, before the peers leave (a leave is traffic of its own).
        statuses = [p.status() for p in peers]
        snap_end = Snapshot.take(peers)
        progress("stopping peers")
        for p in peers:
            p.stop()
        with trio.move_on_after(30.0):
            for p in peers:
                await p.stopped.wait()
        swarm.cancel_scope.cancel()

    # ------------------------------------------------------------------ assemble the report
    reasons: dict[str, int] = {}
    for st in statuses:
        for reason, n in st["rejected"]["runtime"].items():
            reasons[reason] = reasons.get(reason, 0) + n
    all_phase_eids = {
        e for ph in (lat_phase, thr_phase, ovl_phase) for e in ph.eids if e is not None
    }
    unknown = sum(
        len(times) for got in arrivals for eid, times in got.items() if eid not in all_phase_eids
    )

    idle_wall = snap_idle.t - snap_installed.t
    result["config"] = {
        "peers": args.peers,
        "dht": args.dht,
        "signed_acks": args.signed_acks,
        "lookup": args.lookup if args.dht == "kademlia" else None,
        "subs": len(subs),
        "sub_clients": n_sub_clients,
        "pub_clients": n_pub,
        "latency_events": len(lat_phase.events),
        "offered_rate_per_s": args.rate,
        "events": len(thr_phase.events),
        "publishers": args.publishers,
        "seed": args.seed,
        "process": "one Python process, one trio thread: figures are a lower bound",
    }
    result["setup"] = {
        "swarm_up_and_converged_s": round(setup_s, 3),
        "frames_out": snap_setup.frames_out,
        "bytes_out": snap_setup.bytes_out,
    }
    result["install"] = {
        "installed": sum(installed),
        "errors": install_errors[:5],
        "error_count": len(install_errors),
        "timeouts": install_timeouts,
        "total_s": round(install_total, 3),
        "mean_per_sub_ms": round(sum(install_times) / len(install_times) * 1e3, 3)
        if install_times
        else None,
        "per_sub": summarize_ms(install_times),
        "frames_out": snap_installed.frames_out - snap_setup.frames_out,
        "bytes_out": snap_installed.bytes_out - snap_setup.bytes_out,
    }
    result["idle"] = {
        "wall_s": round(idle_wall, 3),
        "frames_out_per_s": round((snap_idle.frames_out - snap_installed.frames_out) / idle_wall, 1)
        if idle_wall > 0
        else None,
    }

    lat = oracle_check(lat_phase, arrivals, installed)
    sent = [t for t in lat_phase.sent_at if not math.isnan(t)]
    achieved = (len(sent) - 1) / (max(sent) - min(sent)) if len(sent) > 1 else None
    result["latency_phase"] = {
        "events": len(lat_phase.events),
        "published": sum(e is not None for e in lat_phase.eids),
        "publish_errors": lat_phase.publish_errors[:5],
        "publish_error_count": len(lat_phase.publish_errors),
        "publish_timeouts": lat_phase.publish_timeouts,
        "offered_rate_per_s": args.rate,
        "achieved_offer_rate_per_s": round(achieved, 2) if achieved else None,
        "all_delivered_before_timeout": lat_complete,
        "latency": summarize_ms(lat["latencies"]),
        "publish_reply": summarize_ms(_reply_times(lat_phase)),
        "oracle": {k: lat[k] for k in _ORACLE_KEYS},
        "traffic": traffic(
            snap_lat0, snap_lat1, len(lat_phase.events), lat_phase.leaves_hit + lat["delivered"]
        ),
    }

    thr = oracle_check(thr_phase, arrivals, installed)
    first_pub = min((t for t in thr_phase.sent_at if not math.isnan(t)), default=math.nan)
    last_reply = max((t for t in thr_phase.replied_at if not math.isnan(t)), default=math.nan)
    end = thr["last_expected_at"] if thr["delivered"] else last_reply
    sustained = end - first_pub
    published = sum(e is not None for e in thr_phase.eids)
    pub_span = last_reply - first_pub
    result["throughput_phase"] = {
        "events": len(thr_phase.events),
        "published": published,
        "publish_errors": thr_phase.publish_errors[:5],
        "publish_error_count": len(thr_phase.publish_errors),
        "publish_timeouts": thr_phase.publish_timeouts,
        "all_delivered_before_timeout": thr_complete,
        "first_publish_to_last_delivery_s": round(sustained, 3),
        "events_per_s": round(published / sustained, 1) if sustained > 0 else None,
        "deliveries_per_s": round(thr["delivered"] / sustained, 1) if sustained > 0 else None,
        "publish_span_s": round(pub_span, 3),
        "publish_accepted_per_s": round(published / pub_span, 1) if pub_span > 0 else None,
        "latency_under_load": summarize_ms(thr["latencies"]),
        "publish_reply": summarize_ms(_reply_times(thr_phase)),
        "oracle": {k: thr[k] for k in _ORACLE_KEYS},
        "traffic": traffic(
            snap_thr0, snap_thr1, len(thr_phase.events), thr_phase.leaves_hit + thr["delivered"]
        ),
        "traffic_while_publishing": traffic(snap_thr0, snap_thr_pub, len(thr_phase.events)),
    }
    # An offered rate above what the swarm sustains turns the latency phase into a measure of
    # queueing: flag it rather than let a reader take those figures for the unloaded latency.
    sustained_rate = result["throughput_phase"]["events_per_s"]
    result["latency_phase"]["offered_above_sustained_rate"] = bool(
        sustained_rate and args.rate > sustained_rate
    )
    ovl = oracle_check(ovl_phase, arrivals, installed)
    result["overload_phase"] = {
        "admission": not args.no_admission,
        "events_offered": len(ovl_phase.events),
        "offered_rate_per_s": round(ovl_rate, 1),
        "sustained_rate_per_s": sustained_now,
        "accepted": sum(e is not None for e in ovl_phase.eids),
        "refused": ovl_phase.refused,
        "refused_by_reason": ovl_refused,
        "publish_errors": ovl_phase.publish_errors[:5],
        "publish_error_count": len(ovl_phase.publish_errors),
        "publish_timeouts": ovl_phase.publish_timeouts,
        "all_delivered_before_timeout": ovl_complete,
        "latency_accepted": summarize_ms(ovl["latencies"]),
        "publish_reply": summarize_ms(_reply_times(ovl_phase)),
        "oracle_accepted": {k: ovl[k] for k in _ORACLE_KEYS},
        "dropped_out": ovl_dropped,
        "dht_peers_failed": ovl_failed,
        # What the admission saw while offering (sampled every 50 ms, over all peers).
        "loop_lag_s": _spread(load["lag_s"]),
        "link_backlog_frames": _spread(load["backlog"]),
        "traffic": traffic(
            snap_ovl0, snap_ovl1, max(sum(e is not None for e in ovl_phase.eids), 1)
        ),
    }
    result["totals"] = {
        "frames_out": snap_end.frames_out,
        "bytes_out": snap_end.bytes_out,
        "events": len(lat_phase.events) + len(thr_phase.events),
        "frames_per_event_incl_setup": round(
            snap_end.frames_out / (len(lat_phase.events) + len(thr_phase.events)), 2
        ),
        "rejections_total": sum(st["rejected"]["total"] for st in statuses),
        "rejections_by_reason": dict(sorted(reasons.items())),
        "dropped_out": sum(st["transport"]["dropped_out"] for st in statuses),
        "connect_failures": sum(st["transport"]["connect_failures"] for st in statuses),
        "overlay_lost": sum(st["overlay"]["lost"] for st in statuses),
        "dht_peers_failed": sum(st["dht"]["peers_failed"] for st in statuses),
        "dht_reroutes": sum(st["dht"]["reroutes"] for st in statuses),
        "client_overflowed": overflowed,
        "deliveries_of_unknown_events": unknown,
    }
    return result


_ORACLE_KEYS = ("expected", "delivered", "missed", "duplicates", "false_positives")

#: ``--no-admission``: quotas and saturation bounds no run reaches (the peers before them).
_UNBOUNDED = replace(
    DEFAULT_QUOTAS,
    publish_rate_per_s=1e12,
    publish_burst=1e12,
    address_publish_rate_per_s=1e12,
    address_publish_burst=1e12,
    saturation_backlog=1 << 62,
    saturation_lag_s=1e12,
    admission=AdmissionConfig(target_lag_s=1e12),
)


def _events_per_s(
    phase: Phase, arrivals: list[dict[int, list[float]]], installed: list[bool]
) -> float | None:
    """The rate ``phase`` sustained: published events from the first publish to the last
    expected delivery (as the throughput phase's report computes it)."""
    r = oracle_check(phase, arrivals, installed)
    first = min((t for t in phase.sent_at if not math.isnan(t)), default=math.nan)
    last = max((t for t in phase.replied_at if not math.isnan(t)), default=math.nan)
    end = r["last_expected_at"] if r["delivered"] else last
    published = sum(e is not None for e in phase.eids)
    span = end - first
    return round(published / span, 1) if span > 0 else None


async def _sample_load(peers: list[PeerRuntime], into: dict[str, list[float]]) -> None:
    while True:
        await trio.sleep(0.05)
        into["lag_s"].append(max(p.clients.lag_s for p in peers))
        into["backlog"].append(max(p.backlog() for p in peers))


def _spread(xs: list[float]) -> dict[str, float]:
    if not xs:
        return {}
    s = sorted(xs)
    return {"p50": round(percentile(s, 0.5), 3), "p99": round(percentile(s, 0.99), 3), "max": s[-1]}


def _refusals(peers: list[PeerRuntime]) -> dict[str, int]:
    out: dict[str, int] = {}
    for p in peers:
        for reason, n in p.clients.refused.items():
            out[reason] = out.get(reason, 0) + n
    return out


def _delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in sorted(after.items()) if v != before.get(k, 0)}


def _reply_times(phase: Phase) -> list[float]:
    return [
        r - s
        for s, r, e in zip(phase.sent_at, phase.replied_at, phase.eids, strict=True)
        if e is not None
    ]


def print_human(r: dict[str, Any], wall_s: float) -> None:
    c = r["config"]
    print(
        f"runtime swarm: {c['peers']} peers, {c['subs']} subscriptions "
        f"({c['sub_clients']} subscriber clients, {c['pub_clients']} publisher clients); "
        "one process, one core: a lower bound"
    )
    print(f"  setup (swarm up + converged): {r['setup']['swarm_up_and_converged_s']:.2f} s")
    ins = r["install"]
    print(
        f"  install: {ins['installed']} subs in {ins['total_s']:.2f} s, "
        f"mean {ins['mean_per_sub_ms']} ms per subscription"
    )
    for key, label, lat_key in (
        ("latency_phase", "latency phase", "latency"),
        ("throughput_phase", "throughput phase", "latency_under_load"),
    ):
        ph = r[key]
        lat = ph[lat_key]
        o = ph["oracle"]
        print(f"  {label}: {ph['published']}/{ph['events']} events published")
        if lat.get("n"):
            print(
                f"    publish->delivery ms: p50 {lat['p50_ms']:.2f}  p99 {lat['p99_ms']:.2f}  "
                f"mean {lat['mean_ms']:.2f}  max {lat['max_ms']:.2f}  (n={lat['n']})"
            )
        print(
            f"    oracle: expected {o['expected']}, delivered {o['delivered']}, missed "
            f"{o['missed']}, duplicates {o['duplicates']}, false positives {o['false_positives']}"
        )
        t = ph["traffic"]
        print(
            f"    traffic: {t['frames_out']} frames, {t['bytes_out']} bytes; "
            f"{t['frames_per_event']} frames/event ({t['messages_per_event']} messages), "
            f"{t['bytes_per_event']} bytes/event; lower bound {t['lower_bound_per_event']} "
            f"(leaves hit + deliveries); cpu {t['cpu_utilisation']}"
        )
    thr = r["throughput_phase"]
    print(
        f"  sustained: {thr['events_per_s']} events/s, {thr['deliveries_per_s']} deliveries/s "
        f"(first publish to last delivery {thr['first_publish_to_last_delivery_s']:.2f} s)"
    )
    if r["latency_phase"]["offered_above_sustained_rate"]:
        print(
            f"  NOTE: offered {c['offered_rate_per_s']:g} events/s is above the sustained rate: "
            "the latency phase measured queueing; lower --rate for the unloaded latency"
        )
    ov = r["overload_phase"]
    lat = ov["latency_accepted"]
    o = ov["oracle_accepted"]
    print(
        f"  overload phase ({'admission on' if ov['admission'] else 'no admission'}): "
        f"{ov['events_offered']} events offered at {ov['offered_rate_per_s']}/s "
        f"(sustained {ov['sustained_rate_per_s']}/s): {ov['accepted']} accepted, "
        f"{ov['refused']} refused {ov['refused_by_reason']}"
    )
    if lat.get("n"):
        print(
            f"    accepted publish->delivery ms: p50 {lat['p50_ms']:.2f}  p99 {lat['p99_ms']:.2f}"
            f"  max {lat['max_ms']:.2f}  (n={lat['n']})"
        )
    print(
        f"    oracle (accepted): expected {o['expected']}, missed {o['missed']}, duplicates "
        f"{o['duplicates']}, false positives {o['false_positives']}; dropped_out "
        f"{ov['dropped_out']}, peers declared failed {ov['dht_peers_failed']}"
    )
    print(f"    loop lag s {ov['loop_lag_s']}; link backlog frames {ov['link_backlog_frames']}")
    tot = r["totals"]
    print(
        f"  totals: {tot['frames_out']} frames, {tot['bytes_out']} bytes; rejections "
        f"{tot['rejections_total']} {tot['rejections_by_reason'] or ''}; dropped_out "
        f"{tot['dropped_out']}"
    )
    print(f"  wall time: {wall_s:.1f} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peers", type=int, default=32)
    ap.add_argument("--subs", type=int, default=320)
    ap.add_argument("--events", type=int, default=2000, help="events of the throughput phase")
    ap.add_argument("--latency-events", type=int, default=1000)
    # Below the ~50 events/s one process sustains, so the latency phase measures latency, not
    # queueing (the throughput phase finds the ceiling).
    ap.add_argument("--rate", type=float, default=20.0, help="offered events/s, latency phase")
    ap.add_argument("--publishers", type=int, default=16, help="concurrent publisher tasks")
    ap.add_argument("--pub-clients", type=int, default=8, help="peers publishers attach to")
    ap.add_argument("--sub-clients", type=int, default=0, help="0: one per peer")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dht", choices=("pastry", "kademlia"), default="pastry")
    ap.add_argument("--lookup", choices=("iterative", "recursive"), default="iterative")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--setup-timeout", type=float, default=180.0)
    ap.add_argument("--op-timeout", type=float, default=60.0, help="per subscribe / publish")
    ap.add_argument("--wait-timeout", type=float, default=180.0, help="for a phase's deliveries")
    ap.add_argument("--idle-s", type=float, default=3.0, help="idle baseline window")
    ap.add_argument("--quiet-s", type=float, default=1.0, help="quiet spell after each phase")
    ap.add_argument(
        "--overload-events", type=int, default=3000, help="events of the overload phase"
    )
    ap.add_argument(
        "--overload-factor", type=float, default=2.0, help="offered rate / sustained rate"
    )
    ap.add_argument(
        "--overload-rate", type=float, default=0.0, help="offered events/s (0: use the factor)"
    )
    # The peers' own defaults (their adaptive admission rate) unless told otherwise.
    ap.add_argument(
        "--saturation-lag-s",
        type=float,
        default=None,
        help="event-loop lag refusing publishes outright (default: the peers' own)",
    )
    ap.add_argument(
        "--signed-acks",
        action="store_true",
        help="peers sign their end-to-end acks (PeerConfig.signed_acks), for its cost",
    )
    ap.add_argument(
        "--no-admission",
        action="store_true",
        help="lift the client quotas and saturation bounds (the peers before them)",
    )
    args = ap.parse_args()
    if args.peers < 1 or args.subs < 1 or args.events < 1 or args.latency_events < 1:
        ap.error("--peers, --subs, --events and --latency-events must be positive")
    if args.rate <= 0 or args.publishers < 1 or args.pub_clients < 1:
        ap.error("--rate, --publishers and --pub-clients must be positive")

    # Workload and oracle before the swarm starts: matching is CPU work that would otherwise
    # stall every peer in the shared trio loop.
    workload = thesis_workload(random.Random(args.seed))
    rng = random.Random(args.seed + 1)
    subs = [workload.subscription(rng) for _ in range(args.subs)]

    def make_phase(name: str, n: int) -> Phase:
        events = [workload.event(rng) for _ in range(n)]
        want = [[k for k, s in enumerate(subs) if s.matches(v, "strict")] for v in events]
        return Phase(name, events, want)

    lat_phase = make_phase("latency", args.latency_events)
    thr_phase = make_phase("throughput", args.events)
    ovl_phase = make_phase("overload", max(args.overload_events, 1))
    progress(
        f"workload ready: {args.subs} subs, oracle expects "
        f"{sum(map(len, lat_phase.want))} + {sum(map(len, thr_phase.want))} deliveries"
    )

    t = time.monotonic()
    result = trio.run(bench, args, subs, lat_phase, thr_phase, ovl_phase)
    wall = time.monotonic() - t
    result["wall_s"] = round(wall, 3)
    if args.json:
        print(json.dumps(result))
    else:
        print_human(result, wall)
    progress("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
