"""The broker systems on a CSV event source (``--events-from``): the same schema, subscriptions
and events as ``sim run thesis`` on that file, every delivery as the oracle's, events with
missing cells included (Kyra routes them by its reading in ``brokers.kyra._placed``)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from rangecast.dht.errors import LocalProtocolError
from rangecast.sim.broker_experiment import BY_SYSTEM, SYSTEMS, BrokerParams
from rangecast.sim.compare import compare
from rangecast.sim.event_source import CsvSource


@pytest.fixture(scope="module")
def gappy_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four numeric columns, about one cell in five missing (-200, as the air-quality file)."""
    rng = random.Random(7)
    path = tmp_path_factory.mktemp("csv") / "gappy.csv"
    lines = ["when,temp,rh,co,no2"]
    for k in range(300):
        cells = [f"{rng.uniform(-10, 40):.2f}", f"{rng.uniform(5, 95):.1f}"]
        cells += [f"{rng.uniform(0, 12):.2f}", f"{rng.randint(2, 340)}"]
        cells = ["-200" if rng.random() < 0.2 else c for c in cells]
        lines.append(f"t{k}," + ",".join(cells))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("system", SYSTEMS)
def test_every_system_delivers_csv_events_as_the_oracle(system: str, gappy_csv: Path) -> None:
    scenario = BY_SYSTEM[system]
    params = scenario.params_type(
        nodes=40, subs_per_node=2.0, events=120, events_from=str(gappy_csv), missing=-200
    )
    assert isinstance(params, BrokerParams)
    v = scenario().run(params).verdict
    assert v.missed == v.duplicates == v.false_positives == 0
    assert v.expected_deliveries > 0


def test_compare_on_a_csv_source_is_one_workload(gappy_csv: Path) -> None:
    """The thesis overlay and the broker systems see the same subscriptions and events: the
    same number of expected deliveries, every one delivered once."""
    result = compare(
        ["thesis", "siena", "kyra"],
        nodes=40,
        subs_per_node=2.0,
        events=120,
        csv=CsvSource(str(gappy_csv), -200),
    )
    assert result.succeeded()
    assert len({r.expected_deliveries for r in result.rows}) == 1
    assert result.json()["events_from"] == str(gappy_csv)


def test_csv_needs_the_thesis_workload_and_csv_options_need_a_file(gappy_csv: Path) -> None:
    with pytest.raises(LocalProtocolError, match="--workload thesis"):
        BY_SYSTEM["octopia"].params_type(
            nodes=70, workload="burst", publishers=5, events_from=str(gappy_csv)
        ).check()  # type: ignore[attr-defined]
    with pytest.raises(LocalProtocolError, match="--missing needs --events-from"):
        BY_SYSTEM["siena"].params_type(missing=-200).check()  # type: ignore[attr-defined]
