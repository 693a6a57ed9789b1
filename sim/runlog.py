"""Run logs: what a simulator run did, as Parquet files in a directory (``--out DIR``).

The schema is documented in docs/run-logs.md; ``rangecast report`` reads it with Spark. A log
holds enough to recompute every figure of the run's ``--json`` summary, which is how the report
proves it recomputes rather than copies.

Messages are the bulk (4.4 million rows for the thesis run), so they are buffered in typed
arrays and written in row groups as the run goes: memory stays flat and a run that dies leaves
the row groups written so far. The simulator calls ``MessageLog.record`` once per charged
message, only when a log is attached; without ``--out`` the event loop pays one ``is None``
check per message.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import subprocess
from array import array
from collections.abc import Iterable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rangecast.dht.errors import LocalProtocolError
from rangecast.dht.messages import CARRIERS, Route
from rangecast.dht.wire import Codec, Message
from rangecast.sim.outputs import ensure_writable_dir

FORMAT = "rangecast-run-log"
VERSION = 1
#: Rows per Parquet row group of ``messages.parquet``.
ROW_GROUP = 1 << 20

MESSAGES_SCHEMA = pa.schema(
    [
        ("t_s", pa.float64()),
        ("src", pa.int32()),
        ("dst", pa.int32()),
        ("type", pa.dictionary(pa.int16(), pa.string())),
        ("bytes", pa.int32()),
        ("hop", pa.int16()),
        ("eid", pa.int64()),
        ("sid", pa.int64()),
        ("dropped", pa.bool_()),
        # The one-way propagation delay the message took (ms; 0 when dropped): the sum over
        # a phase is its latency-weighted traffic (NetStats.delay_ms).
        ("delay_ms", pa.float64()),
    ]
)


def prepare_dir(out: Path | str, *, force: bool = False) -> Path:
    """Create ``out`` for a new log; refuse one that already holds a run unless ``force``, and
    one the run could not write into, before any work starts (naming the path). A directory
    holding only an interrupted run's log (its tables, no ``run.json``: written last) is
    replaced without ``force``: it cannot be read, so nothing is lost."""
    path = Path(out)
    ours = {"run.json", *(f"{t}.parquet" for t in TABLES)}
    try:
        if path.exists() and not path.is_dir():
            raise LocalProtocolError(f"--out {path}: exists and is not a directory")
        names = {p.name for p in path.iterdir()} if path.is_dir() else set()
        if names:
            interrupted = names <= ours and "run.json" not in names
            if not force and not interrupted:
                raise LocalProtocolError(
                    f"--out {path}: directory is not empty (an earlier run?); use --force to "
                    "replace"
                )
            for name in ("run.json", *(f"{t}.parquet" for t in TABLES)):
                (path / name).unlink(missing_ok=True)
        ensure_writable_dir(path)
    except OSError as exc:
        raise LocalProtocolError(
            f"--out {path}: cannot write the run log there ({exc.strerror or exc})"
        ) from None
    return path


TABLES = ("messages", "nodes", "installs", "deliveries", "tree", "events")


def _ids(msg: Message) -> tuple[int, int]:
    """(event id, subscription id) an application message is about, -1 where none."""
    event = getattr(msg, "event", None)
    if event is not None:
        return event.eid, -1
    sid = getattr(msg, "sid", None)
    if sid is not None:
        return -1, sid
    sub = getattr(msg, "sub", None)
    if sub is not None and hasattr(sub, "sid"):
        return -1, sub.sid
    return -1, -1


class MessageLog:
    """``messages.parquet``, written in row groups while the run goes. ``codec``: the run's
    (``sim.codec``), which reads the event and subscription ids out of routed payloads."""

    def __init__(self, path: Path, codec: Codec) -> None:
        self._path = path
        self._writer = pq.ParquetWriter(path, MESSAGES_SCHEMA, compression="zstd")
        self._decode = codec.decode
        self._types: dict[str, int] = {}
        self._type_names: list[str] = []
        self._payload_ids: dict[bytes, tuple[int, int]] = {}
        self.rows = 0
        self._reset()

    def _reset(self) -> None:
        self._t = array("d")
        self._src = array("i")
        self._dst = array("i")
        self._type = array("h")
        self._bytes = array("i")
        self._hop = array("h")
        self._eid = array("q")
        self._sid = array("q")
        self._dropped = array("b")
        self._delay = array("d")

    def record(
        self,
        t: float,
        src: int,
        dst: int,
        type_name: str,
        size: int,
        msg: Any,
        dropped: bool,
        delay_ms: float,
    ) -> None:
        code = self._types.get(type_name)
        if code is None:
            code = self._types[type_name] = len(self._type_names)
            self._type_names.append(type_name)
        hop = 0
        cls = type(msg)
        if cls in CARRIERS:
            if cls is Route:
                hop = msg.hops
            # A routed payload is the same bytes object at every hop: decode it once (bytes
            # cache their hash, so the lookup is cheap).
            payload = msg.payload
            ids = self._payload_ids.get(payload)
            if ids is None:
                try:
                    ids = _ids(self._decode(payload))
                except Exception:  # a payload we cannot read still gets its row
                    ids = (-1, -1)
                if len(self._payload_ids) >= 1 << 16:
                    self._payload_ids.clear()
                self._payload_ids[payload] = ids
            eid, sid = ids
        else:
            eid, sid = _ids(msg)
        self._t.append(t)
        self._src.append(src)
        self._dst.append(dst)
        self._type.append(code)
        self._bytes.append(size)
        self._hop.append(hop)
        self._eid.append(eid)
        self._sid.append(sid)
        self._dropped.append(dropped)
        self._delay.append(delay_ms)
        if len(self._t) >= ROW_GROUP:
            self._flush()

    def _flush(self) -> None:
        n = len(self._t)
        if not n:
            return
        names = pa.array(self._type_names, pa.string())
        table = pa.Table.from_arrays(
            [
                pa.array(self._t, pa.float64()),
                pa.array(self._src, pa.int32()),
                pa.array(self._dst, pa.int32()),
                pa.DictionaryArray.from_arrays(pa.array(self._type, pa.int16()), names),
                pa.array(self._bytes, pa.int32()),
                pa.array(self._hop, pa.int16()),
                pa.array(self._eid, pa.int64()),
                pa.array(self._sid, pa.int64()),
                pa.array(self._dropped, pa.int8()).cast(pa.bool_()),
                pa.array(self._delay, pa.float64()),
            ],
            schema=MESSAGES_SCHEMA,
        )
        self._writer.write_table(table, row_group_size=ROW_GROUP)
        self.rows += n
        self._reset()

    def close(self) -> None:
        self._flush()
        self._writer.close()


def write_table(path: Path, columns: Mapping[str, tuple[pa.DataType, Iterable[Any]]]) -> None:
    """One small Parquet file from named, typed columns."""
    arrays = [pa.array(list(values), typ) for typ, values in columns.values()]
    pq.write_table(pa.Table.from_arrays(arrays, names=list(columns)), path, compression="zstd")


def write_nodes(
    out: Path,
    sim: Any,
    capacity: list[int] | None = None,
    extra: Mapping[str, tuple[pa.DataType, Iterable[Any]]] | None = None,
) -> None:
    """``nodes.parquet``; ``extra``: a scenario's own per-node columns after the common ones
    (the broker runs' load and tables)."""
    n = len(sim.cores)
    st = sim.stats
    write_table(
        out / "nodes.parquet",
        {
            "node": (pa.int32(), range(n)),
            "addr": (pa.string(), (a.hex() for a in sim.addrs)),
            "alive": (pa.bool_(), sim.alive),
            "capacity": (pa.int32(), capacity if capacity is not None else [-1] * n),
            "sent_messages": (pa.int64(), st.sent_messages),
            "sent_bytes": (pa.int64(), st.sent_bytes),
            "received_messages": (pa.int64(), st.received_messages),
            **(extra or {}),
        },
    )


def _nan(x: float | None) -> float:
    return math.nan if x is None else x


def write_installs(
    out: Path, called: Mapping[tuple[int, int], float], stored: Mapping[tuple[int, int], float]
) -> None:
    keys = list(called)
    write_table(
        out / "installs.parquet",
        {
            "subscriber": (pa.int32(), (k[0] for k in keys)),
            "sid": (pa.int64(), (k[1] for k in keys)),
            "called_s": (pa.float64(), (called[k] for k in keys)),
            "stored_s": (pa.float64(), (_nan(stored.get(k)) for k in keys)),
            "latency_ms": (
                pa.float64(),
                ((stored[k] - called[k]) * 1000.0 if k in stored else math.nan for k in keys),
            ),
        },
    )


DELIVERIES_SCHEMA = pa.schema(
    [
        ("eid", pa.int64()),
        ("publisher", pa.int32()),
        ("published_s", pa.float64()),
        ("subscriber", pa.int32()),
        ("sid", pa.int64()),
        ("expected", pa.bool_()),
        ("received_s", pa.float64()),
        ("copies", pa.int32()),
        ("latency_ms", pa.float64()),
    ]
)


#: The broker runs' extra delivery columns: the delivering broker and its overlay hops from the
#: publishing broker (-1 for a missed delivery).
BROKER_DELIVERY_COLUMNS = (pa.field("broker", pa.int32()), pa.field("hops", pa.int32()))


class DeliveryLog:
    """``deliveries.parquet``: one row per (event, subscriber, sid) that the oracle expects or
    that was received, handed over one event at a time and written in row groups of about
    ``ROW_GROUP`` rows (40 M rows at 100,000 nodes: never all in memory). ``extra``: columns
    after the common ones (``BROKER_DELIVERY_COLUMNS``), given to ``add`` in that order."""

    def __init__(self, path: Path, extra: Sequence[pa.Field] = ()) -> None:
        self._schema = pa.schema([*DELIVERIES_SCHEMA, *extra])
        self._extra = tuple(extra)
        self._writer = pq.ParquetWriter(path, self._schema, compression="zstd")
        self._batches: list[pa.RecordBatch] = []
        self._pending = 0
        self.rows = 0

    def add(
        self,
        eid: int,
        publisher: int,
        published_s: float,
        subscriber: Any,
        sid: Any,
        expected: Any,
        received_s: Any,
        copies: Any,
        latency_ms: Any,
        *extra: Any,
    ) -> None:
        """One event's rows; the per-row columns are equally long arrays (numpy or lists)."""
        n = len(subscriber)
        if not n:
            return
        self._batches.append(
            pa.record_batch(
                [
                    pa.array(np.full(n, eid, dtype=np.int64)),
                    pa.array(np.full(n, publisher, dtype=np.int32)),
                    pa.array(np.full(n, published_s, dtype=np.float64)),
                    pa.array(np.asarray(subscriber, dtype=np.int32)),
                    pa.array(np.asarray(sid, dtype=np.int64)),
                    pa.array(np.asarray(expected, dtype=bool)),
                    pa.array(np.asarray(received_s, dtype=np.float64)),
                    pa.array(np.asarray(copies, dtype=np.int32)),
                    pa.array(np.asarray(latency_ms, dtype=np.float64)),
                    *(
                        pa.array(np.asarray(v), type=f.type)
                        for f, v in zip(self._extra, extra, strict=True)
                    ),
                ],
                schema=self._schema,
            )
        )
        self._pending += n
        if self._pending >= ROW_GROUP:
            self._flush()

    def _flush(self) -> None:
        if not self._batches:
            return
        table = pa.Table.from_batches(self._batches, schema=self._schema)
        self._writer.write_table(table, row_group_size=ROW_GROUP)
        self.rows += self._pending
        self._batches = []
        self._pending = 0

    def close(self) -> None:
        self._flush()
        self._writer.close()


class TreeSnapshots:
    """``tree.parquet``: the 2d-tree nodes each host holds, at named moments of the run."""

    def __init__(self) -> None:
        self._cols: dict[str, list[Any]] = {
            k: [] for k in ("snapshot", "host", "attr", "depth", "path", "leaf", "subscriptions")
        }

    def take(self, name: str, overlays: Iterable[Any]) -> None:
        c = self._cols
        for host, overlay in enumerate(overlays):
            for _, node in overlay.tree_nodes():
                c["snapshot"].append(name)
                c["host"].append(host)
                c["attr"].append(node.tid.attr)
                c["depth"].append(node.tid.depth)
                c["path"].append(node.tid.path)
                c["leaf"].append(node.is_leaf)
                c["subscriptions"].append(len(node.index) if node.is_leaf else 0)

    def write(self, out: Path) -> None:
        c = self._cols
        write_table(
            out / "tree.parquet",
            {
                "snapshot": (pa.string(), c["snapshot"]),
                "host": (pa.int32(), c["host"]),
                "attr": (pa.int16(), c["attr"]),
                "depth": (pa.int16(), c["depth"]),
                "path": (pa.int64(), c["path"]),
                "leaf": (pa.bool_(), c["leaf"]),
                "subscriptions": (pa.int32(), c["subscriptions"]),
            },
        )


def source_commit() -> str | None:
    """The git commit of the source tree this code runs from (``+dirty`` with uncommitted
    changes), or None outside a git checkout (an installed wheel): which code made a log."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        if head.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    commit = head.stdout.strip()
    return commit + ("+dirty" if dirty.stdout.strip() else "") if commit else None


#: The packages whose files decide a simulation's results (the simulator's data files included).
SIM_PACKAGES = ("dht", "multicast", "pubsub", "brokers", "sim")


@functools.cache
def code_fingerprint() -> str:
    """A hash of every source and data file of ``SIM_PACKAGES``: two runs with the same
    fingerprint, parameters and seed give the same results, whatever else changed (docs, tests,
    the analysis layer, the commit). ``sim sweep --resume`` reuses a run log only under the same
    fingerprint. Compiled modules are left out: compiled and interpreted runs agree bit for bit."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for package in SIM_PACKAGES:
        for path in sorted((root / package).rglob("*")):
            if (
                path.is_file()
                and "__pycache__" not in path.parts
                and path.suffix not in (".so", ".pyc", ".pyd")
            ):
                digest.update(path.relative_to(root).as_posix().encode() + b"\0")
                digest.update(path.read_bytes())
    return digest.hexdigest()[:20]


def write_run(out: Path, kind: str, params: Mapping[str, Any], summary: Mapping[str, Any]) -> None:
    """``run.json``: written last, so its presence means the log is complete."""
    try:
        rangecast = metadata.version("rangecast")
    except metadata.PackageNotFoundError:
        rangecast = "unknown"
    doc = {
        "format": FORMAT,
        "version": VERSION,
        "kind": kind,
        "rangecast": rangecast,
        "commit": source_commit(),
        "code": code_fingerprint(),
        "params": params,
        "summary": summary,
        "latency_model": summary.get("latency_model"),
        "mean_rtt_ms": summary.get("mean_rtt_ms"),
    }
    (out / "run.json").write_text(json.dumps(doc, sort_keys=True, indent=1, default=str))
