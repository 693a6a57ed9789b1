"""The Spark side of the report: run logs in, the runs' figures out, recomputed from the rows.

Every run given is read at once (one DataFrame per table, a ``run`` column telling the runs
apart), so a sweep of many logs costs a handful of Spark jobs, not a handful per log. Figures
follow docs/run-logs.md ("The figures, from the log") and match what the simulator prints, down
to the percentile rule: the project's one, nearest rank (``sim.percentiles.percentile``, numpy's
``inverted_cdf``), done exactly with a rank over an ordered window where the rows live, in Spark
(``percentile_approx`` would answer a different question).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rangecast.analysis.report.session import ReportError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

FORMAT = "rangecast-run-log"
#: Message types of each bandwidth family (docs/run-logs.md; sim/thesis_experiment.py).
INSTALL_TYPES = ("ProbeSub", "InstallAck", "LeafUpdate", "TransferSub")
PROBE_TYPES = ("ProbePub", "ProbePubMulticast")
DELIVERY_TYPES = ("EventDelivery", "LbddDelivery", "DeliveryMulticast")
#: Summary key of each family's per-node figure, and what its bytes are divided by.
FAMILIES: dict[str, tuple[tuple[str, ...], str]] = {
    "install_bytes_per_sub_per_node": (INSTALL_TYPES, "subscriptions"),
    "publish_bytes_per_event_per_node": (PROBE_TYPES + DELIVERY_TYPES, "events"),
    "probe_bytes_per_event_per_node": (PROBE_TYPES, "events"),
    "delivery_bytes_per_event_per_node": (DELIVERY_TYPES, "events"),
}


def received(name: str) -> str:
    """The received-bytes figure of a family: ``probe_bytes_per_event_per_node`` ->
    ``probe_bytes_received_per_event_per_node``."""
    return name.replace("_per_", "_received_per_", 1)


#: The same families counted at the receiving node (messages that arrived), beside the sending
#: node's count above, which the run's summary gives. The thesis does not say which of the two
#: its per-node bandwidth is (4.3.2: "We also study the bandwidth consumption of each node"),
#: so the reproduction measures both (analysis/reproduce/causes.py, the accounting cause).
RECEIVED_FAMILIES: dict[str, tuple[tuple[str, ...], str]] = {
    received(name): fam for name, fam in FAMILIES.items()
}
LATENCIES = ("install_latency_ms", "delivery_latency_ms")
QUANTILES = {"p50": 0.50, "p70": 0.70, "p90": 0.90, "p99": 0.99}
#: Which statistics the summary gives for each figure.
LATENCY_STATS = ("mean", "p50", "p70", "p90", "p99")
BANDWIDTH_STATS = ("mean", "p70", "p90", "max", "top20_mean")
TOP = 20
#: Width of the latency histogram bins sent back for the CDF plots.
LATENCY_BIN_MS = 5.0
#: Two figures agree when they differ by at most this, relative.
REL_TOL = 1e-9
THESIS_TABLES = ("messages", "nodes", "installs", "deliveries", "tree")
#: The oracle's verdict, as the summary names it.
VERDICT = ("expected_deliveries", "missed", "duplicates", "false_positives", "deliveries")


@dataclass
class RunLog:
    """One run-log directory: its ``run.json`` and where its tables are."""

    index: int
    dir: Path
    doc: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.doc.get("kind"))

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.doc.get("params") or {})

    @property
    def summary(self) -> dict[str, Any]:
        return dict(self.doc.get("summary") or {})

    @property
    def mean_rtt_ms(self) -> float:
        rtt = self.doc.get("mean_rtt_ms") or (self.doc.get("latency_model") or {}).get(
            "mean_rtt_ms"
        )
        return float(rtt) if rtt else math.nan

    @property
    def latency_name(self) -> str:
        """The latency model as the run was asked for it (``synthetic``, ``planetlab``), or the
        stem of a matrix file given by path."""
        spec = self.params.get("latency")
        if spec:
            return Path(str(spec)).stem
        model = self.doc.get("latency_model") or self.summary.get("latency_model") or {}
        return str(model.get("name") or "?")

    def table(self, name: str) -> Path:
        return self.dir / f"{name}.parquet"

    def has(self, name: str) -> bool:
        return self.table(name).exists()

    @property
    def label(self) -> str:
        """A short, file-name-safe name for the run's plots."""
        p = self.params
        if self.kind == "thesis":
            bits = [
                f"n{p.get('nodes')}",
                str(p.get("dht", "pastry")),
                str(p.get("probe", "unicast")),
                "lb" if p.get("lb") else "nolb",
                str(p.get("delivery", "unicast")),
                self.latency_name,
                f"s{p.get('seed')}",
            ]
        else:
            bits = [self.kind, f"s{p.get('seed')}"]
        return f"{self.index:02d}-" + "-".join(bits).replace("/", "_").replace(" ", "_")


@dataclass
class RunFigures:
    """What the report knows about one run once Spark is done."""

    run: RunLog
    recomputed: dict[str, Any] = field(default_factory=dict)
    mismatches: list[dict[str, Any]] = field(default_factory=list)
    #: Per-node values of each bandwidth figure, ascending (for distributions and ranks).
    node_values: dict[str, list[float]] = field(default_factory=dict)
    #: Latency histograms: figure -> [(bin start ms, count)], ascending.
    latency_hist: dict[str, list[tuple[float, int]]] = field(default_factory=dict)


#: ``sim compare --out DIR`` writes its table here (sim.compare.COMPARE_FILE).
COMPARE_FILE = "compare.json"


def expand(path: Path) -> list[Path] | None:
    """A ``sim compare --out`` directory's run logs, in table order; None for any other path."""
    table = path / COMPARE_FILE
    if (path / "run.json").exists() or not table.is_file():
        return None
    try:
        doc = json.loads(table.read_text())
    except (OSError, ValueError) as exc:
        raise ReportError(f"{table}: unreadable: {_one_line(exc)}") from exc
    systems = doc.get("systems") if isinstance(doc, dict) else None
    if not isinstance(systems, list):
        raise ReportError(f"{table}: not a 'sim compare' table (no list of systems)")
    return [path / str(s) for s in systems]


def _one_line(exc: BaseException) -> str:
    """An error's message on one line (pyarrow's and json's can span several)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def check_parquet(path: Path) -> None:
    """Refuse, in one line naming the file, a Parquet file Spark could not read (truncated,
    overwritten, not Parquet at all), before Spark starts: Spark would fail a minute later with
    a Java traceback. Cheap: the footer, and every column chunk lying inside the file."""
    import pyarrow.parquet as pq

    try:
        size = path.stat().st_size
        meta = pq.ParquetFile(path).metadata
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            for c in range(group.num_columns):
                chunk = group.column(c)
                offsets = (chunk.dictionary_page_offset, chunk.data_page_offset)
                start = min((o for o in offsets if o), default=0)
                if start + chunk.total_compressed_size > size:
                    raise ValueError(
                        f"row group {g}, column {chunk.path_in_schema} lies past the end of "
                        f"the file ({size} bytes)"
                    )
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise ReportError(f"{path}: damaged Parquet file: {_one_line(exc)}") from exc


def load_runs(dirs: Sequence[Path | str]) -> list[RunLog]:
    """Read each directory's ``run.json``; refuse anything that is not a complete run log. A
    ``sim compare --out`` directory stands for its systems' run logs."""
    paths = [p for d in dirs for p in (expand(Path(d)) or [Path(d)])]
    runs = []
    for i, path in enumerate(paths):
        meta = path / "run.json"
        if not meta.is_file():
            raise ReportError(f"{path}: no run.json (not a run log, or the run did not finish)")
        try:
            doc = json.loads(meta.read_text())
        except (OSError, ValueError) as exc:
            raise ReportError(f"{meta}: unreadable: {_one_line(exc)}") from exc
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ReportError(f"{meta}: not a {FORMAT} file")
        run = RunLog(i, path, doc)
        missing = [t for t in ("messages", "nodes") if not run.has(t)]
        if run.kind == "thesis":
            missing = [t for t in THESIS_TABLES if not run.has(t)]
        if missing:
            raise ReportError(f"{path}: missing {', '.join(t + '.parquet' for t in missing)}")
        # Every table of the log, not only those this kind's figures read (the systems'
        # comparison reads others): a damaged one is refused here, before Spark starts.
        for table in sorted(path.glob("*.parquet")):
            check_parquet(table)
        runs.append(run)
    return runs


# ------------------------------------------------------------------------------ Spark helpers


def _read(
    spark: SparkSession, runs: Sequence[RunLog], table: str, columns: Sequence[str]
) -> DataFrame:
    """One table of every run, as one DataFrame with a ``run`` column (the run's index)."""
    from pyspark.sql import functions as F

    frames = [
        spark.read.parquet(str(r.table(table).resolve()))
        .select(*columns)
        .withColumn("run", F.lit(r.index))
        for r in runs
    ]
    return reduce(lambda a, b: a.unionByName(b), frames)


def _long(df: DataFrame, metrics: Sequence[str]) -> DataFrame:
    """``run`` plus metric columns -> rows of (run, key, value): small results of different
    shapes united into one job (a job costs more than its few rows)."""
    from pyspark.sql import functions as F

    pairs = ", ".join(f"'{m}', cast({m} as double)" for m in metrics)
    return df.select("run", F.expr(f"stack({len(metrics)}, {pairs}) as (key, value)"))


def nearest_rank(q: float, n: Column) -> Column:
    """1-based rank of the nearest-rank ``q``-quantile among ``n`` values.

    ``sim.percentiles.percentile`` (numpy's ``inverted_cdf``) takes the ``ceil(q n)``-th
    smallest value, the first for q = 0: as a rank, ``min(n, max(1, ceil(q n)))``. ``q n`` is a
    double product on both sides (Spark casts ``n`` to double, as numpy does), so the ceilings
    agree bit for bit (tests/test_report.py checks it).
    """
    from pyspark.sql import functions as F

    return F.least(n, F.greatest(F.lit(1), F.ceil(F.lit(float(q)) * n)))


def figure_stats(values: DataFrame, keys: Sequence[str] = ("run", "figure")) -> DataFrame:
    """Per group of ``keys``: n, mean, max, nearest-rank percentiles and the top-20 mean of ``v``.

    One window over the group ordered by value gives each row its rank (``row_number``) and the
    group's size (a count over the whole frame): one shuffle and one sort, and the aggregation
    that follows reuses the window's partitioning. Ties get distinct ranks but equal values, so
    the value at a rank is exactly what indexing the sorted list gives.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ordered = Window.partitionBy(*keys).orderBy("v")
    whole = ordered.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    ranked = values.withColumn("rn", F.row_number().over(ordered)).withColumn(
        "n", F.count(F.lit(1)).over(whole)
    )
    n, rn, v = F.col("n"), F.col("rn"), F.col("v")
    return ranked.groupBy(*keys).agg(
        F.first("n").alias("n"),
        F.avg("v").alias("mean"),
        F.max("v").alias("max"),
        *(F.max(F.when(rn == nearest_rank(q, n), v)).alias(k) for k, q in QUANTILES.items()),
        F.avg(F.when(rn > n - TOP, v)).alias("top20_mean"),
        # Fig 4.2's thresholds: the thesis gives the share of nodes below 20 and 60 B/sub.
        F.avg(F.when(v < 20.0, 1.0).otherwise(0.0)).alias("share_below_20"),
        F.avg(F.when(v < 60.0, 1.0).otherwise(0.0)).alias("share_below_60"),
    )


def spark_percentiles(spark: SparkSession, values: Sequence[float]) -> dict[str, float]:
    """Nearest-rank percentiles (and mean, max, top-20 mean) of ``values`` via Spark; for tests
    and for anyone who wants the report's rule on their own numbers."""
    df = spark.createDataFrame(
        [(0, "x", float(v)) for v in values], "run int, figure string, v double"
    )
    rows = figure_stats(df).collect()
    if not rows:
        return _empty_stats()
    return {k: float(v) for k, v in rows[0].asDict().items() if k not in ("run", "figure", "n")}


def _empty_stats() -> dict[str, float]:
    # sim.percentiles and the summary report 0.0 for every statistic of an empty list.
    keys = ("mean", "max", *QUANTILES, "top20_mean", "share_below_20", "share_below_60")
    return dict.fromkeys(keys, 0.0)


# ------------------------------------------------------------------------------- recomputation


def recompute(spark: SparkSession, runs: Sequence[RunLog]) -> list[RunFigures]:
    """Every figure the logs allow, for every run; mismatches against each run's summary."""
    from pyspark.sql import functions as F

    out = {r.index: RunFigures(r) for r in runs}
    if not runs:
        return []

    # ---- every kind: bytes and messages per (run, sender, type), the one aggregate that the
    # message figures (by type, totals, per-node bandwidth) all derive from; small, so cached.
    messages = _read(
        spark, runs, "messages", ("t_s", "src", "dst", "type", "bytes", "eid", "dropped")
    )
    per_sender = (
        messages.groupBy("run", "src", "type")
        .agg(F.count(F.lit(1)).alias("messages"), F.sum("bytes").alias("bytes"))
        .cache()
    )
    try:
        by_type = (
            per_sender.groupBy("run", "type")
            .agg(F.sum("messages").alias("messages"), F.sum("bytes").alias("bytes"))
            .collect()
        )
        for row in by_type:
            rec = out[row["run"]].recomputed
            rec.setdefault("messages_by_type", {})[row["type"]] = {
                "bytes": int(row["bytes"]),
                "messages": int(row["messages"]),
            }
        for fig in out.values():
            types = fig.recomputed.setdefault("messages_by_type", {})
            fig.recomputed["messages_by_type"] = dict(sorted(types.items()))
            fig.recomputed["sim_messages"] = sum(t["messages"] for t in types.values())
            fig.recomputed["sim_bytes"] = sum(t["bytes"] for t in types.values())
        nodes = _read(spark, runs, "nodes", ("node",))
        for row in nodes.groupBy("run").count().collect():
            out[row["run"]].recomputed["nodes"] = int(row["count"])

        thesis = [r for r in runs if r.kind == "thesis"]
        if thesis:
            ids = [r.index for r in thesis]
            _thesis(
                spark,
                thesis,
                out,
                messages.where(F.col("run").isin(ids)),
                per_sender.where(F.col("run").isin(ids)),
                nodes.where(F.col("run").isin(ids)),
            )
    finally:
        per_sender.unpersist()

    for fig in out.values():
        fig.mismatches = compare(fig.recomputed, fig.run.summary)
    return [out[r.index] for r in runs]


def _thesis(
    spark: SparkSession,
    runs: Sequence[RunLog],
    out: dict[int, RunFigures],
    messages: DataFrame,
    per_sender: DataFrame,
    nodes: DataFrame,
) -> None:
    from pyspark.sql import functions as F

    ids = [r.index for r in runs]
    installs = _read(spark, runs, "installs", ("latency_ms",))
    deliveries = _read(
        spark, runs, "deliveries", ("eid", "expected", "copies", "latency_ms", "published_s")
    )
    tree = _read(spark, runs, "tree", ("snapshot", "depth", "leaf"))

    # ---- counts, all in one Spark job: the oracle's verdict, subscriptions, events, the 2d-tree
    # at the end of the run. An event shows in the log by the probes it sent or the deliveries
    # it caused; there is no events table, so one that did neither (a 1-node network) cannot be
    # counted. The install phase ends when the first event is published: its first probe
    # leaves then (``t0``).
    copies, expected = F.col("copies"), F.col("expected")
    verdict = deliveries.groupBy("run").agg(
        F.sum(expected.cast("long")).alias("expected_deliveries"),
        F.sum(F.when(expected & (copies == 0), 1).otherwise(0)).alias("missed"),
        F.sum(F.when(copies > 1, copies - 1).otherwise(0)).alias("duplicates"),
        F.sum(F.when(~expected & (copies > 0), 1).otherwise(0)).alias("false_positives"),
        F.sum(copies).alias("deliveries"),
    )
    probed = (
        messages.where(F.col("eid") >= 0)
        .groupBy("run", "eid")
        .agg(F.min("t_s").alias("t0"))
        # The publish call itself bounds the install phase: on a DHT whose routing starts with
        # a lookup (Kademlia), the first probe leaves only after the lookup's messages.
        .unionByName(deliveries.select("run", "eid", F.col("published_s").alias("t0")))
        .groupBy("run")
        .agg(F.countDistinct("eid").alias("events"), F.min("t0").alias("t0"))
    )
    end_tree = (
        tree.where(F.col("snapshot") == "end")
        .groupBy("run")
        .agg(
            F.sum(F.col("leaf").cast("long")).alias("leaves"),
            F.sum((~F.col("leaf")).cast("long")).alias("internal"),
            F.max("depth").alias("max_depth"),
        )
    )
    parts = [
        _long(verdict, VERDICT),
        _long(
            installs.groupBy("run").agg(F.count(F.lit(1)).alias("subscriptions")), ["subscriptions"]
        ),
        _long(probed, ["events", "t0"]),
        _long(end_tree, ["leaves", "internal", "max_depth"]),
    ]
    counts: dict[int, dict[str, float]] = defaultdict(dict)
    for row in reduce(lambda a, b: a.unionByName(b), parts).collect():
        if row["value"] is not None:
            counts[row["run"]][row["key"]] = row["value"]
    first_pub = {i: c["t0"] for i, c in counts.items() if "t0" in c}
    start = reduce(
        lambda acc, i: acc.when(F.col("run") == i, F.lit(first_pub[i])),
        first_pub,
        F,
    )
    before = F.col("t_s") < start.otherwise(F.lit(math.inf)) if first_pub else F.lit(True)
    install_phase = {
        row["run"]: int(row["m"])
        for row in messages.where(before).groupBy("run").agg(F.count(F.lit(1)).alias("m")).collect()
    }
    subs: dict[int, int] = {}
    events: dict[int, int] = {}
    for i in ids:
        rec = out[i].recomputed
        c = counts.get(i, {})
        for k in VERDICT:
            rec[k] = int(c.get(k, 0))
        subs[i] = rec["subscriptions"] = int(c.get("subscriptions", 0))
        events[i] = rec["events"] = int(c.get("events", 0))
        rec["install_phase_messages"] = install_phase.get(i, 0)
        rec["tree"] = {k: int(c.get(k, 0)) for k in ("internal", "leaves", "max_depth")}

    # ---- per-node bandwidth: every node counts, with 0 when it sent (received) none of a
    # family's types. Sent: from the per-sender aggregate; received: the messages that arrived
    # (a known destination, not dropped), by destination.
    def family(families: dict[str, tuple[tuple[str, ...], str]]) -> DataFrame:
        rows = [(t, fig) for fig, (types, _) in families.items() for t in types]
        return F.broadcast(spark.createDataFrame(rows, "type string, figure string"))

    sent = (
        per_sender.join(family(FAMILIES), "type")
        .groupBy("run", "src", "figure")
        .agg(F.sum("bytes").alias("total"))
        .withColumnRenamed("src", "node")
    )
    received = (
        messages.where((F.col("dst") >= 0) & ~F.col("dropped"))
        .join(family(RECEIVED_FAMILIES), "type")
        .groupBy("run", "dst", "figure")
        .agg(F.sum("bytes").alias("total"))
        .withColumnRenamed("dst", "node")
    )
    divisor_rows = [
        (i, fig, float(subs.get(i, 0) if per == "subscriptions" else events.get(i, 0)))
        for i in ids
        for fig, (_, per) in (FAMILIES | RECEIVED_FAMILIES).items()
    ]
    divisors = spark.createDataFrame(divisor_rows, "run int, figure string, divisor double")
    per_node = (
        nodes.join(F.broadcast(divisors), "run")
        .join(sent.unionByName(received), ["run", "node", "figure"], "left")
        .select(
            "run",
            "figure",
            "node",
            F.when(F.col("divisor") > 0, F.coalesce("total", F.lit(0)) / F.col("divisor"))
            .otherwise(F.lit(0.0))
            .alias("v"),
        )
        .cache()
    )
    try:
        _distributions(installs, deliveries, per_node, out, ids)
    finally:
        per_node.unpersist()


def _distributions(
    installs: DataFrame,
    deliveries: DataFrame,
    per_node: DataFrame,
    out: dict[int, RunFigures],
    ids: Sequence[int],
) -> None:
    """Latency and bandwidth statistics; what the plots draw."""
    from pyspark.sql import functions as F

    latencies = (
        installs.where(~F.isnan("latency_ms"))
        .select("run", F.lit("install_latency_ms").alias("figure"), F.col("latency_ms").alias("v"))
        .unionByName(
            deliveries.where(F.col("expected") & (F.col("copies") > 0)).select(
                "run", F.lit("delivery_latency_ms").alias("figure"), F.col("latency_ms").alias("v")
            )
        )
    )
    _latency_and_bandwidth(latencies, per_node, out, ids)


def _latency_and_bandwidth(
    latencies: DataFrame, per_node: DataFrame, out: dict[int, RunFigures], ids: Sequence[int]
) -> None:
    from pyspark.sql import functions as F

    values = latencies.unionByName(per_node.drop("node"))
    stats: dict[tuple[int, str], dict[str, float]] = {}
    for row in figure_stats(values).collect():
        d = row.asDict()
        key = (d.pop("run"), d.pop("figure"))
        stats[key] = {k: float(v) if v is not None else 0.0 for k, v in d.items()}
    for i in ids:
        rec = out[i].recomputed
        rtt = out[i].run.mean_rtt_ms
        for name in LATENCIES:
            s = stats.get((i, name), _empty_stats())
            keys = LATENCY_STATS + (("max",) if name == "delivery_latency_ms" else ())
            rec[name] = {k: s[k] for k in keys}
            if rtt > 0:
                rec[name.replace("_ms", "_rtt")] = {k: s[k] / rtt for k in keys}
        for name in FAMILIES | RECEIVED_FAMILIES:
            s = stats.get((i, name), _empty_stats())
            rec[name] = {k: s[k] for k in BANDWIDTH_STATS}
        rec["install_bytes_per_sub_per_node_mean"] = rec["install_bytes_per_sub_per_node"]["mean"]
        inst = stats.get((i, "install_bytes_per_sub_per_node"), _empty_stats())
        rec["install_bytes_share_below_20"] = inst["share_below_20"]
        rec["install_bytes_share_below_60"] = inst["share_below_60"]

    # What the plots draw: per-node values, and latency histograms in 5 ms bins.
    plotted = tuple(
        figure
        for name in (
            "install_bytes_per_sub_per_node",
            "publish_bytes_per_event_per_node",
            "probe_bytes_per_event_per_node",
        )
        for figure in (name, received(name))
    )
    node_values: dict[tuple[int, str], list[float]] = defaultdict(list)
    for row in (
        per_node.where(F.col("figure").isin(*plotted)).select("run", "figure", "v").collect()
    ):
        node_values[(row["run"], row["figure"])].append(float(row["v"]))
    for (i, name), vals in node_values.items():
        out[i].node_values[name] = sorted(vals)
    hists: dict[tuple[int, str], list[tuple[float, int]]] = defaultdict(list)
    for row in (
        latencies.groupBy("run", "figure", F.floor(F.col("v") / LATENCY_BIN_MS).alias("bin"))
        .count()
        .collect()
    ):
        hists[(row["run"], row["figure"])].append((row["bin"] * LATENCY_BIN_MS, int(row["count"])))
    for (i, name), h in hists.items():
        out[i].latency_hist[name] = sorted(h)


# ------------------------------------------------------------------------------- comparison


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Nested figures as ``{"a.b.c": leaf}`` (the names mismatches are reported under)."""
    if isinstance(tree, Mapping):
        flat: dict[str, Any] = {}
        for k, v in tree.items():
            flat.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return flat
    return {prefix: tree}


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def compare(recomputed: Mapping[str, Any], summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Figures both sides have that differ by more than ``REL_TOL`` relative.

    A top-level figure is shared when both sides have it; within a shared figure (a dict such
    as ``messages_by_type``) a leaf present on one side only is a mismatch too.
    """
    out = []
    for key in sorted(recomputed):
        if key not in summary:
            continue
        ours, theirs = flatten(recomputed[key], key), flatten(summary[key], key)
        for path in sorted(set(ours) | set(theirs)):
            a, b = ours.get(path), theirs.get(path)
            if a is None or b is None:
                out.append({"figure": path, "recomputed": a, "summary": b, "why": "missing"})
            elif _number(a) and _number(b):
                if not _close(float(a), float(b)):
                    rel = abs(a - b) / max(abs(a), abs(b))
                    out.append({"figure": path, "recomputed": a, "summary": b, "rel": rel})
            elif a != b:
                out.append({"figure": path, "recomputed": a, "summary": b, "why": "differs"})
    return out


def _close(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= REL_TOL * max(abs(a), abs(b))


def shared_summary(recomputed: Mapping[str, Any], summary: Mapping[str, Any]) -> dict[str, Any]:
    """The summary's figures that the report recomputed (the other side of the comparison)."""
    return {k: summary[k] for k in sorted(recomputed) if k in summary}
