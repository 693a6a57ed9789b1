"""``rangecast sim compare --out DIR``: a run log per system and the table, and the broker runs'
own tables (deliveries, events, the brokers' columns of nodes) agreeing with their summaries."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from rangecast.cli.main import main
from rangecast.dht.errors import LocalProtocolError
from rangecast.sim.broker_experiment import gini
from rangecast.sim.compare import COMPARE_FILE, compare

SYSTEMS = ("thesis", "siena", "octopia")
SIZE = {"nodes": 40, "events": 60, "seed": 1}


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cmp") / "c"
    result = compare(SYSTEMS, out_dir=out, **SIZE)
    assert result.succeeded()
    return out


def test_a_log_per_system_and_the_table(compared: Path) -> None:
    doc = json.loads((compared / COMPARE_FILE).read_text())
    assert doc["systems"] == list(SYSTEMS)
    assert [r["system"] for r in doc["rows"]] == list(SYSTEMS)
    for system in SYSTEMS:
        run = json.loads((compared / system / "run.json").read_text())
        assert run["kind"] == system and run["params"]["nodes"] == 40
        assert (compared / system / "deliveries.parquet").is_file()
    for system in SYSTEMS[1:]:
        assert (compared / system / "events.parquet").is_file()


def test_broker_tables_agree_with_the_summary(compared: Path) -> None:
    rows = {r["system"]: r for r in json.loads((compared / COMPARE_FILE).read_text())["rows"]}
    for system in SYSTEMS[1:]:
        d = compared / system
        s = json.loads((d / "run.json").read_text())["summary"]
        dl = pq.read_table(d / "deliveries.parquet")
        expected = dl.filter(dl["expected"])
        assert expected.num_rows == s["expected_deliveries"]
        hit = expected.filter(pc.greater(expected["copies"], 0))
        assert hit.num_rows == s["expected_deliveries"] - s["missed"]
        assert pc.max(hit["latency_ms"]).as_py() == s["delivery_latency_ms"]["max"]
        assert pc.sum(hit["hops"]).as_py() / hit.num_rows == pytest.approx(s["hops_per_delivery"])
        # Rows in (eid, subscriber, sid) order, like the thesis' log.
        keys = list(zip(*(dl[c].to_pylist() for c in ("eid", "subscriber", "sid")), strict=True))
        assert keys == sorted(keys)
        assert pq.read_table(d / "events.parquet").num_rows == s["events"]
        nodes = pq.read_table(d / "nodes.parquet")
        brokers = nodes.filter(nodes["broker"])
        assert brokers.num_rows == s["brokers"]
        load = brokers["event_load"].to_pylist()
        assert gini(load) == s["load_gini"] == rows[system]["load_gini"]
        entries = brokers["table_entries"].to_pylist()
        assert max(entries) == s["table_entries"]["max"]
        assert sum(entries) / len(entries) == s["table_entries"]["mean"]


def test_out_is_refused_unless_forced(compared: Path) -> None:
    with pytest.raises(LocalProtocolError, match="not empty"):
        compare(("siena",), out_dir=compared, nodes=20, events=5)
    assert json.loads((compared / COMPARE_FILE).read_text())["systems"] == list(SYSTEMS)


def test_cli_out_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "c"
    args = ["sim", "compare", "--systems", "siena", "--nodes", "20", "--events", "5"]
    args += ["--quiet", "--json", "--out", str(out)]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(args) == 2
    assert "--force" in capsys.readouterr().err
    assert main([*args, "--force"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["rows"][0]["messages_per_event"] == first["rows"][0]["messages_per_event"]
    assert json.loads((out / COMPARE_FILE).read_text())["systems"] == ["siena"]
