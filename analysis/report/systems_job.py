"""The Spark side of the systems comparison: broker run logs' figures, and the comparison table's
columns for every run (thesis or broker system) compared with another on the same workload.

A broker run (``rangecast sim run siena|padres|...`` or ``sim compare --out``) logs its messages,
its deliveries (with the delivering broker and its hops), its events and per-node columns
(docs/run-logs.md). From those rows this module recomputes the run's summary figures (the oracle's
verdict, messages and bytes per event, latency, load spread, set-up cost, advertisements, tables)
and, for the runs of a comparison, the columns of ``rangecast sim compare``'s table, which are
checked against ``compare.json`` when the runs come from ``sim compare --out``.

The event phase starts at the first event's publish call (``t0``): set-up messages are those sent
before it, the rest are the event phase's (the set-up settles before the first event).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Sequence
from functools import reduce
from typing import TYPE_CHECKING, Any

import rangecast.analysis.report.spark_job as spark_job
from rangecast.analysis.report.spark_job import (
    COMPARE_FILE,
    LATENCY_BIN_MS,
    RunFigures,
    RunLog,
    _close,
    _read,
    figure_stats,
)
from rangecast.sim.broker_experiment import SYSTEMS, gini, mean_max
from rangecast.sim.compare import inactive

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

THESIS = "thesis"
#: Run kinds the comparison lines up: the thesis system and the broker systems.
SYSTEM_KINDS = (THESIS, *SYSTEMS)
#: The tables a broker run log needs for its figures (older logs have messages and nodes only).
BROKER_TABLES = ("messages", "nodes", "deliveries", "events")
#: The columns of the comparison table (sim.compare.Row), in its order; None where a system has
#: no such figure (the thesis: hops, false-positive receptions).
COLUMNS = (
    "messages_per_event",
    "bytes_per_event",
    "traffic_ms_per_event",
    "matchings_per_event",
    "hops_per_delivery",
    "latency_mean_ms",
    "latency_p90_ms",
    "latency_max_ms",
    "false_positive_receptions",
    "table_entries_mean",
    "table_entries_max",
    "load_max_over_mean",
    "load_gini",
    "setup_messages",
    "expected_deliveries",
    "missed",
    "duplicates",
    "false_deliveries",
)
#: What the load of a node is, in the plots' words.
LOAD = "event_load"
#: Parameters that make two runs' work the same: the workload, its size, seed and latencies.
WORKLOAD_KEYS = (
    "nodes",
    "subs_per_node",
    "events",
    "seed",
    "latency",
    "workload",
    "events_from",
    "publishers",
    "hrp_subs",
    "hrp_rate",
)
#: Parameters of the paper workloads only (a thesis-workload run ignores them).
PAPER_KEYS = ("publishers", "hrp_subs", "hrp_rate")
#: Parameters of the burst workload only.
BURST_KEYS = ("hrp_subs", "hrp_rate")


def is_broker(run: RunLog) -> bool:
    """A broker run whose log has the deliveries and events (what its figures need)."""
    return run.kind in SYSTEMS and all(run.has(t) for t in BROKER_TABLES)


def workload_key(run: RunLog) -> tuple[tuple[str, str], ...]:
    """What two runs must share to be compared: the thesis workload of a size, seed and latency
    model, or a paper workload with its own settings."""
    p = run.params
    workload = str(p.get("workload", "thesis"))
    key = []
    for k in WORKLOAD_KEYS:
        if (k in PAPER_KEYS and workload == "thesis") or (k in BURST_KEYS and workload != "burst"):
            continue
        value = workload if k == "workload" else p.get(k)
        key.append((k, json.dumps(value, sort_keys=True)))
    return tuple(key)


def groups(runs: Sequence[RunLog]) -> list[list[RunLog]]:
    """Runs on the same workload, in the order given, where at least two runs and at least one
    broker run take part (thesis-only sets keep the thesis' own figures)."""
    by_key: dict[tuple[tuple[str, str], ...], list[RunLog]] = defaultdict(list)
    for r in runs:
        if r.kind in SYSTEM_KINDS and (r.kind == THESIS or is_broker(r)):
            by_key[workload_key(r)].append(r)
    return [g for g in by_key.values() if len(g) > 1 and any(r.kind != THESIS for r in g)]


def compare_rows(run: RunLog) -> dict[str, Any] | None:
    """The row of ``compare.json`` beside the run's directory for its system, if the run came
    from ``sim compare --out`` (same size and seed), else None."""
    path = run.dir.parent / COMPARE_FILE
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    p = run.params
    if any(doc.get(k) != p.get(k) for k in ("nodes", "events", "seed")):
        return None
    for row in doc.get("rows", []):
        if row.get("system") == run.kind:
            return dict(row)
    return None


# ------------------------------------------------------------------------------------- Spark


def recompute(spark: SparkSession, runs: Sequence[RunLog]) -> list[RunFigures]:
    """``spark_job.recompute`` (every kind's figures, the thesis') plus the broker runs' and the
    systems comparison's; each run's mismatches against its summary (and ``compare.json``)."""
    figs = spark_job.recompute(spark, runs)
    out = {f.run.index: f for f in figs}
    recompute_systems(spark, runs, out)
    for f in figs:
        table = [m for m in f.mismatches if m.get("why") == "table"]
        f.mismatches = [*spark_job.compare(f.recomputed, f.run.summary), *table]
    return figs


def recompute_systems(
    spark: SparkSession, runs: Sequence[RunLog], out: dict[int, RunFigures]
) -> None:
    """Broker runs: their summary's figures; runs of a comparison: the table's columns
    (``recomputed["comparison"]``), checked against ``compare.json`` where there is one."""
    brokers = [r for r in runs if is_broker(r)]
    compared = {r.index: r for g in groups(runs) for r in g}
    wanted = {r.index: r for r in brokers} | compared
    if not wanted:
        return
    chosen = [r for r in runs if r.index in wanted]
    thesis = [r for r in chosen if r.kind == THESIS]
    brokers = [r for r in chosen if r.kind != THESIS]
    t0 = _event_start(spark, thesis, brokers)
    traffic = _traffic(spark, chosen, t0)
    delays = _delays(spark, [r for r in chosen if r.index in compared], t0)
    load = _load(spark, chosen, brokers, t0)
    tables = _tables(spark, thesis, brokers)
    if brokers:
        _broker_figures(spark, brokers, out, traffic, load, tables)
    for i in compared:
        _comparison(out[i], traffic.get(i, {}), load.get(i, []), tables.get(i, {}), delays.get(i))


def _event_start(
    spark: SparkSession, thesis: Sequence[RunLog], brokers: Sequence[RunLog]
) -> dict[int, float]:
    """Each run's first publish call: brokers' from their events; the thesis' as its report
    takes it (the first probe or publish call)."""
    from pyspark.sql import functions as F

    parts: list[DataFrame] = []
    if brokers:
        parts.append(
            _read(spark, brokers, "events", ("published_s",)).select(
                "run", F.col("published_s").alias("t")
            )
        )
    if thesis:
        parts.append(
            _read(spark, thesis, "deliveries", ("published_s",)).select(
                "run", F.col("published_s").alias("t")
            )
        )
        parts.append(
            _read(spark, thesis, "messages", ("t_s", "eid"))
            .where(F.col("eid") >= 0)
            .select("run", F.col("t_s").alias("t"))
        )
    if not parts:
        return {}
    frame = reduce(lambda a, b: a.unionByName(b), parts)
    return {
        row["run"]: float(row["t0"])
        for row in frame.groupBy("run").agg(F.min("t").alias("t0")).collect()
        if row["t0"] is not None
    }


def _phase(t0: dict[int, float]) -> Any:
    """A column: true for a message of the event phase (sent at or after the run's ``t0``)."""
    from pyspark.sql import functions as F

    if not t0:
        return F.lit(False)
    start = reduce(lambda acc, i: acc.when(F.col("run") == i, F.lit(t0[i])), t0, F)
    return F.col("t_s") >= start.otherwise(F.lit(math.inf))


def _traffic(
    spark: SparkSession, runs: Sequence[RunLog], t0: dict[int, float]
) -> dict[int, dict[tuple[bool, str], tuple[int, int]]]:
    """(event phase?, type) -> (messages, bytes), per run."""
    from pyspark.sql import functions as F

    messages = _read(spark, runs, "messages", ("t_s", "type", "bytes"))
    rows = (
        messages.withColumn("event", _phase(t0))
        .groupBy("run", "event", "type")
        .agg(F.count(F.lit(1)).alias("m"), F.sum("bytes").alias("b"))
        .collect()
    )
    out: dict[int, dict[tuple[bool, str], tuple[int, int]]] = defaultdict(dict)
    for row in rows:
        out[row["run"]][(bool(row["event"]), str(row["type"]))] = (int(row["m"]), int(row["b"]))
    return out


def _delays(spark: SparkSession, runs: Sequence[RunLog], t0: dict[int, float]) -> dict[int, float]:
    """Latency-weighted traffic of the event phase: the one-way delays of its messages, summed
    (ms), per run whose log records them (``messages.delay_ms``; older logs do not: absent)."""
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    have = [r for r in runs if "delay_ms" in pq.read_schema(r.table("messages")).names]
    if not have:
        return {}
    rows = (
        _read(spark, have, "messages", ("t_s", "delay_ms"))
        .where(_phase(t0))
        .groupBy("run")
        .agg(F.sum("delay_ms").alias("d"))
        .collect()
    )
    out = dict.fromkeys((r.index for r in have), 0.0)
    out.update({row["run"]: float(row["d"] or 0.0) for row in rows})
    return out


def _load(
    spark: SparkSession, runs: Sequence[RunLog], brokers: Sequence[RunLog], t0: dict[int, float]
) -> dict[int, list[int]]:
    """Messages sent + received in the event phase, per node in node order: every node of a
    thesis run, the brokers of a broker run (as ``nodes.broker`` says)."""
    from pyspark.sql import functions as F

    messages = _read(spark, runs, "messages", ("t_s", "src", "dst", "dropped")).where(_phase(t0))
    ends = messages.select("run", F.col("src").alias("node")).unionByName(
        messages.where(~F.col("dropped") & (F.col("dst") >= 0)).select(
            "run", F.col("dst").alias("node")
        )
    )
    counted = ends.groupBy("run", "node").agg(F.count(F.lit(1)).alias("load"))
    ids = {r.index for r in brokers}
    nodes = _read(spark, runs, "nodes", ("node",))
    if ids:
        members = _read(spark, brokers, "nodes", ("node", "broker")).where("broker").drop("broker")
        nodes = nodes.where(~F.col("run").isin(*ids)).unionByName(members)
    rows = (
        nodes.join(counted, ["run", "node"], "left")
        .select("run", "node", F.coalesce("load", F.lit(0)).alias("load"))
        .collect()
    )
    out: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for row in rows:
        out[row["run"]].append((int(row["node"]), int(row["load"])))
    return {i: [v for _, v in sorted(pairs)] for i, pairs in out.items()}


def _tables(
    spark: SparkSession, thesis: Sequence[RunLog], brokers: Sequence[RunLog]
) -> dict[int, dict[str, list[int]]]:
    """Per-node table sizes in node order: a broker's SRT + PRT entries (``table_entries``) and
    SRT entries, a thesis peer's stored subscription pieces (its leaves at the end)."""
    from pyspark.sql import functions as F

    out: dict[int, dict[str, list[tuple[int, int]]]] = defaultdict(lambda: defaultdict(list))
    if brokers:
        cols = (
            "node",
            "broker",
            "table_entries",
            "srt_entries",
            "false_positive_receptions",
            "pure_forwards",
        )
        for row in _read(spark, brokers, "nodes", cols).where("broker").collect():
            for c in cols[2:]:
                out[row["run"]][c].append((int(row["node"]), int(row[c])))
    if thesis:
        pieces = (
            _read(spark, thesis, "tree", ("snapshot", "host", "subscriptions"))
            .where(F.col("snapshot") == "end")
            .groupBy("run", F.col("host").alias("node"))
            .agg(F.sum("subscriptions").alias("pieces"))
        )
        rows = (
            _read(spark, thesis, "nodes", ("node",))
            .join(pieces, ["run", "node"], "left")
            .select("run", "node", F.coalesce("pieces", F.lit(0)).alias("pieces"))
            .collect()
        )
        for row in rows:
            out[row["run"]]["table_entries"].append((int(row["node"]), int(row["pieces"])))
    return {
        i: {c: [v for _, v in sorted(pairs)] for c, pairs in cols_.items()}
        for i, cols_ in out.items()
    }


def _broker_figures(
    spark: SparkSession,
    runs: Sequence[RunLog],
    out: dict[int, RunFigures],
    traffic: dict[int, dict[tuple[bool, str], tuple[int, int]]],
    load: dict[int, list[int]],
    tables: dict[int, dict[str, list[int]]],
) -> None:
    """A broker run's summary figures (sim.broker_experiment.BrokerResult), from its rows."""
    from pyspark.sql import functions as F

    deliveries = _read(
        spark, runs, "deliveries", ("expected", "copies", "latency_ms", "hops")
    ).cache()
    try:
        copies, expected = F.col("copies"), F.col("expected")
        hit = expected & (copies > 0)
        verdict = {
            row["run"]: row.asDict()
            for row in deliveries.groupBy("run")
            .agg(
                F.sum(expected.cast("long")).alias("expected_deliveries"),
                F.sum(F.when(expected & (copies == 0), 1).otherwise(0)).alias("missed"),
                F.sum(F.when(copies > 1, copies - 1).otherwise(0)).alias("duplicates"),
                F.sum(F.when(~expected & (copies > 0), 1).otherwise(0)).alias("false_positives"),
                F.sum(copies).alias("deliveries"),
                F.sum(F.when(hit, F.col("hops").cast("long"))).alias("hops"),
                F.sum(F.when(hit, 1).otherwise(0)).alias("hits"),
            )
            .collect()
        }
        latencies = deliveries.where(hit).select(
            "run", F.lit("delivery_latency_ms").alias("figure"), F.col("latency_ms").alias("v")
        )
        stats = {row["run"]: row.asDict() for row in figure_stats(latencies).collect()}
        hists: dict[int, list[tuple[float, int]]] = defaultdict(list)
        for row in (
            latencies.groupBy("run", F.floor(F.col("v") / LATENCY_BIN_MS).alias("bin"))
            .count()
            .collect()
        ):
            hists[row["run"]].append((row["bin"] * LATENCY_BIN_MS, int(row["count"])))
    finally:
        deliveries.unpersist()
    events = {
        row["run"]: int(row["count"])
        for row in _read(spark, runs, "events", ("eid",)).groupBy("run").count().collect()
    }
    for r in runs:
        i, rec = r.index, out[r.index].recomputed
        v = verdict.get(i, {})
        for k in ("expected_deliveries", "missed", "duplicates", "false_positives", "deliveries"):
            rec[k] = int(v.get(k) or 0)
        n_events = rec["events"] = events.get(i, 0)
        t = traffic.get(i, {})

        def total(event: bool, types: Sequence[str] | None = None, t: Any = t) -> tuple[int, int]:
            pairs = [mb for (e, ty), mb in t.items() if e == event and (not types or ty in types)]
            return sum(m for m, _ in pairs), sum(b for _, b in pairs)

        setup_m, setup_b = total(False)
        event_m, event_b = total(True)
        rec["setup_messages"], rec["setup_bytes"] = setup_m, setup_b
        rec["messages_per_event"] = event_m / n_events if n_events else 0.0
        rec["bytes_per_event"] = event_b / n_events if n_events else 0.0
        pubs, _ = total(True, ("Publish",))
        rec["publications_per_event"] = pubs / n_events if n_events else 0.0
        ads = ("Advertise", *(("Control",) if r.kind == "octopia" else ()))
        rec["ad_messages"] = total(False, ads)[0]
        hits = int(v.get("hits") or 0)
        rec["hops_per_delivery"] = int(v.get("hops") or 0) / hits if hits else 0.0
        s = stats.get(i)
        rec["delivery_latency_ms"] = {
            k: float(s[k]) if s and s[k] is not None else 0.0 for k in ("mean", "p90", "max")
        }
        ls = load.get(i, [])
        rec["load_max_over_mean"], rec["load_gini"] = _spread(ls)
        tb = tables.get(i, {})
        rec["brokers"] = len(ls)
        rec["table_entries"] = mean_max(tb.get("table_entries", []))
        rec["srt_entries"] = mean_max(tb.get("srt_entries", []))
        rec["false_positive_receptions"] = sum(tb.get("false_positive_receptions", []))
        rec["pure_forwards"] = sum(tb.get("pure_forwards", []))
        out[i].latency_hist["delivery_latency_ms"] = sorted(hists.get(i, []))


def _spread(load: Sequence[int]) -> tuple[float, float]:
    """max/mean and Gini, computed as the run computes them (the same float operations)."""
    mean = sum(load) / len(load) if load else 0.0
    return (max(load) / mean if mean else 0.0), gini(load)


def _comparison(
    fig: RunFigures,
    traffic: dict[tuple[bool, str], tuple[int, int]],
    load: Sequence[int],
    tables: dict[str, list[int]],
    delay_ms: float | None = None,
) -> None:
    """The comparison table's columns for one run, and their check against ``compare.json``;
    ``delay_ms``: the event phase's latency-weighted traffic (None: the log predates it).
    Migrations and whether the system's mechanism acted come from the run's summary (they are
    not in the message log)."""
    rec = fig.recomputed
    thesis = fig.run.kind == THESIS
    events = int(rec.get("events") or 0)
    event_m = sum(m for (e, _), (m, _b) in traffic.items() if e)
    event_b = sum(b for (e, _), (_m, b) in traffic.items() if e)
    lat = rec.get("delivery_latency_ms") or {}
    entries = mean_max(tables.get("table_entries", []))
    spread = _spread(load)
    row: dict[str, Any] = {
        "messages_per_event": event_m / events if events else 0.0,
        "bytes_per_event": event_b / events if events else 0.0,
        "traffic_ms_per_event": (delay_ms / events if delay_ms is not None and events else None),
        # Not in the message log: the run's summary counted the entries its matches tested.
        "matchings_per_event": fig.run.summary.get("matchings_per_event"),
        "hops_per_delivery": None if thesis else rec.get("hops_per_delivery"),
        "latency_mean_ms": lat.get("mean"),
        "latency_p90_ms": lat.get("p90"),
        "latency_max_ms": lat.get("max"),
        "false_positive_receptions": None if thesis else rec.get("false_positive_receptions"),
        "table_entries_mean": entries["mean"],
        "table_entries_max": entries["max"],
        "load_max_over_mean": spread[0],
        "load_gini": spread[1],
        "setup_messages": sum(m for (e, _), (m, _b) in traffic.items() if not e),
        "expected_deliveries": rec.get("expected_deliveries"),
        "missed": rec.get("missed"),
        "duplicates": rec.get("duplicates"),
        "false_deliveries": rec.get("false_positives"),
    }
    summary = fig.run.summary
    migrations = None if thesis else summary.get("migrations")
    logged = summary.get("layout")
    layout: dict[str, Any] = logged if isinstance(logged, dict) else {}
    row["migrations"] = migrations if fig.run.kind in ("pop", "grape") else None
    row["inactive"] = inactive(
        fig.run.kind, str(fig.run.params.get("workload", "thesis")), migrations, layout
    )
    rec["comparison"] = row
    fig.node_values[LOAD] = sorted(float(x) for x in load)
    table = compare_rows(fig.run)
    if table is None:
        return
    for col in COLUMNS:
        a, b = row[col], table.get(col)
        if (a is None and b is None) or (
            col in ("traffic_ms_per_event", "matchings_per_event") and a is None
        ):
            continue
        if a is None or b is None or not _close(float(a), float(b)):
            fig.mismatches.append(
                {"figure": f"comparison.{col}", "recomputed": a, "summary": b, "why": "table"}
            )
