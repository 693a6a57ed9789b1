"""Run logs (``--out DIR``): complete, deterministic, and enough to recompute the summary."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from rangecast.dht.errors import LocalProtocolError
from rangecast.sim.percentiles import percentile
from rangecast.sim.thesis_experiment import (
    DELIVERY_KINDS,
    INSTALL_KINDS,
    PROBE_KINDS,
    ThesisParams,
    run_thesis,
)

SMALL = ThesisParams(nodes=50, events=150, seed=3)


@pytest.fixture(scope="module")
def small_log(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("runlog") / "run"
    result = run_thesis(SMALL, out=out)
    return out, result


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def test_files_and_run_json(small_log: tuple[Path, dict]) -> None:
    out, result = small_log
    names = {p.name for p in out.iterdir()}
    assert names == {
        "run.json",
        "messages.parquet",
        "nodes.parquet",
        "installs.parquet",
        "deliveries.parquet",
        "tree.parquet",
    }
    doc = json.loads((out / "run.json").read_text())
    assert doc["format"] == "rangecast-run-log" and doc["kind"] == "thesis"
    assert doc["params"]["nodes"] == SMALL.nodes and doc["params"]["probe"] == "unicast"
    assert doc["summary"] == json.loads(json.dumps(result))


def test_messages_recompute_the_summary(small_log: tuple[Path, dict]) -> None:
    out, result = small_log
    msgs = pq.read_table(out / "messages.parquet").to_pydict()
    nodes = pq.read_table(out / "nodes.parquet").to_pydict()
    assert len(msgs["t_s"]) == result["sim_messages"]
    count: Counter[str] = Counter()
    size: Counter[str] = Counter()
    for kind, b in zip(msgs["type"], msgs["bytes"], strict=True):
        count[kind] += 1
        size[kind] += b
    assert result["messages_by_type"] == {
        k: {"messages": count[k], "bytes": size[k]} for k in sorted(count)
    }
    # Sent bytes per node agree with the per-node totals.
    per_src: Counter[int] = Counter()
    for src, b in zip(msgs["src"], msgs["bytes"], strict=True):
        per_src[src] += b
    assert [per_src[i] for i in nodes["node"]] == nodes["sent_bytes"]
    # Bandwidth per node, family by family, as the summary's.
    for family, kinds, divisor in (
        ("install_bytes_per_sub_per_node", INSTALL_KINDS, result["subscriptions"]),
        ("probe_bytes_per_event_per_node", PROBE_KINDS, result["events"]),
        ("delivery_bytes_per_event_per_node", DELIVERY_KINDS, result["events"]),
    ):
        totals = Counter()
        for src, kind, b in zip(msgs["src"], msgs["type"], msgs["bytes"], strict=True):
            if kind in kinds:
                totals[src] += b
        vals = sorted(totals[i] / divisor for i in nodes["node"])
        want = result[family]
        assert _close(sum(vals) / len(vals), want["mean"])
        assert _close(percentile(vals, 0.9), want["p90"])
        assert _close(vals[-1], want["max"])


def test_installs_and_deliveries_recompute_the_oracle(small_log: tuple[Path, dict]) -> None:
    out, result = small_log
    inst = pq.read_table(out / "installs.parquet").to_pydict()
    lat = sorted(x for x in inst["latency_ms"] if not math.isnan(x))
    assert len(inst["sid"]) == result["subscriptions"]
    assert _close(sum(lat) / len(lat), result["install_latency_ms"]["mean"])
    assert _close(percentile(lat, 0.99), result["install_latency_ms"]["p99"])
    d = pq.read_table(out / "deliveries.parquet").to_pydict()
    rows = list(zip(d["expected"], d["copies"], d["latency_ms"], strict=True))
    assert sum(e for e, _, _ in rows) == result["expected_deliveries"]
    assert sum(1 for e, c, _ in rows if e and c == 0) == result["missed"]
    assert sum(c - 1 for _, c, _ in rows if c > 1) == result["duplicates"]
    assert sum(1 for e, c, _ in rows if not e and c > 0) == result["false_positives"]
    dl = sorted(x for e, c, x in rows if e and c > 0)
    assert _close(sum(dl) / len(dl), result["delivery_latency_ms"]["mean"])
    assert _close(dl[-1], result["delivery_latency_ms"]["max"])


def test_tree_snapshots(small_log: tuple[Path, dict]) -> None:
    out, result = small_log
    t = pq.read_table(out / "tree.parquet").to_pydict()
    end = [i for i, s in enumerate(t["snapshot"]) if s == "end"]
    assert sum(1 for i in end if t["leaf"][i]) == result["tree"]["leaves"]
    assert max(t["depth"][i] for i in end) == result["tree"]["max_depth"]
    assert set(t["snapshot"]) == {"installed", "end"}


def test_same_seed_same_log(small_log: tuple[Path, dict], tmp_path: Path) -> None:
    out, _ = small_log
    again = tmp_path / "again"
    run_thesis(SMALL, out=again)
    for name in ("messages", "installs", "deliveries", "tree", "nodes"):
        assert pq.read_table(out / f"{name}.parquet").equals(
            pq.read_table(again / f"{name}.parquet")
        ), name


def test_refuses_an_earlier_run_without_force(small_log: tuple[Path, dict]) -> None:
    out, _ = small_log
    with pytest.raises(LocalProtocolError, match="not empty"):
        run_thesis(SMALL, out=out)
    f = out.parent / "a-file"
    f.write_text("x")
    with pytest.raises(LocalProtocolError, match="not a directory"):
        run_thesis(SMALL, out=f)


def test_route_and_lbdd_logs(tmp_path: Path) -> None:
    from rangecast.sim.lbdd_experiment import LbddParams, run_lbdd
    from rangecast.sim.route_experiment import RouteParams, run_route

    for kind, run in (
        ("route", lambda out: run_route(RouteParams(nodes=80, lookups=100), out=out)),
        ("lbdd", lambda out: run_lbdd(LbddParams(subscribers=12, data_bytes=1 << 18), out=out)),
    ):
        out = tmp_path / kind
        result = run(out)
        doc = json.loads((out / "run.json").read_text())
        assert doc["kind"] == kind
        msgs = pq.read_table(out / "messages.parquet")
        assert msgs.num_rows == result["sim_messages"]
        assert pq.read_table(out / "nodes.parquet").num_rows >= 1


def test_an_interrupted_log_is_replaced_without_force(tmp_path: Path) -> None:
    """Issue 30 item 6: a directory holding only tables and no run.json (a run interrupted
    before its last write) is replaced; one holding a complete log, or anything else, is not
    without --force."""
    from rangecast.dht.errors import LocalProtocolError
    from rangecast.sim.runlog import prepare_dir

    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / "messages.parquet").write_bytes(b"half a table")
    assert prepare_dir(cut) == cut and not any(cut.iterdir())
    done = tmp_path / "done"
    done.mkdir()
    (done / "messages.parquet").write_bytes(b"x")
    (done / "run.json").write_text("{}")
    with pytest.raises(LocalProtocolError, match="not empty"):
        prepare_dir(done)
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(LocalProtocolError, match="not empty"):
        prepare_dir(other)
    assert prepare_dir(done, force=True) == done
