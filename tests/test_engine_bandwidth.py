"""The simulator's per-host uplinks: messages leave one after another (FIFO), each taking its
encoded size over the capacity on the wire before the propagation delay; hosts without a finite
uplink send instantly; a busy uplink delays only its own host's messages."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rangecast.dht.errors import LocalProtocolError
from rangecast.dht.messages import DHT_TABLE, Direct
from rangecast.dht.wire import Handle, Message, codec_for
from rangecast.sim.engine import Simulator
from rangecast.sim.latency import LatencyModel

ONE_WAY_MS = 10.0

CODEC = codec_for(DHT_TABLE)


class FixedLatency(LatencyModel):
    """Every pair of hosts is ONE_WAY_MS apart."""

    def __init__(self) -> None:
        self.name = "fixed"
        self.placed = 0

    def place(self, count: int, rng: random.Random) -> None:
        self.placed += count

    def __len__(self) -> int:
        return self.placed

    def one_way_ms(self, a: int, b: int) -> float:
        return ONE_WAY_MS

    def rtt_ms(self, a: int, b: int) -> float:
        return 2 * ONE_WAY_MS

    def mean_rtt_ms(self) -> float:
        return 2 * ONE_WAY_MS

    def describe(self) -> dict[str, object]:
        return {"name": self.name}


class Host:
    """A core that sends what the test queues and records what arrives."""

    def __init__(self) -> None:
        self.out: list[tuple[bytes, Message]] = []
        self.arrivals: list[tuple[float, int]] = []

    def receive(self, msg: Message, src: bytes, now: float) -> None:
        assert isinstance(msg, Direct)
        self.arrivals.append((now, len(msg.payload)))

    def handle_timer(self, now: float) -> None:
        pass

    def get_timer(self) -> float | None:
        return None

    def take_messages(self) -> list[tuple[bytes, Message]]:
        out, self.out = self.out, []
        return out


def network(n: int) -> tuple[Simulator, list[Host]]:
    sim = Simulator(FixedLatency(), random.Random(0), codec=CODEC)
    sim.add_nodes(n, random.Random(0))
    hosts = [Host() for _ in range(n)]
    for i, h in enumerate(hosts):
        sim.attach(i, h)
    return sim, hosts


def direct(size: int) -> Direct:
    return Direct(Handle(b"\x00" * 20, b"\x00" * 6), b"x" * size)


def send(sim: Simulator, hosts: list[Host], src: int, dst: int, sizes: list[int]) -> None:
    for s in sizes:
        hosts[src].out.append((sim.addrs[dst], direct(s)))
    sim.poke(src)


@settings(max_examples=50)
@given(
    sizes=st.lists(st.integers(0, 100_000), min_size=1, max_size=12),
    mbps=st.sampled_from([1.0, 10.0, 100.0, 1000.0]),
)
def test_messages_leave_one_after_another_at_the_uplink_rate(sizes: list[int], mbps: float):
    sim, hosts = network(2)
    sim.set_uplink(0, mbps * 1e6)
    send(sim, hosts, 0, 1, sizes)
    sim.run()
    size = CODEC.size
    wire = [size(direct(s)) for s in sizes]
    expect = []
    t = 0.0
    for w in wire:
        t += w * 8 / (mbps * 1e6)
        expect.append(t + ONE_WAY_MS / 1000)
    got = [at for at, _ in hosts[1].arrivals]
    assert [n for _, n in hosts[1].arrivals] == sizes  # FIFO: in sending order
    assert got == pytest.approx(expect, rel=1e-9, abs=1e-12)


def test_a_later_message_queues_behind_the_earlier_ones_and_an_idle_link_does_not():
    sim, hosts = network(3)
    sim.set_uplink(0, 8e6)  # 1 MB/s
    size = CODEC.size(direct(999_000))
    send(sim, hosts, 0, 1, [999_000])  # busy for size/1e6 seconds
    sim.call_at(0.1, lambda: send(sim, hosts, 0, 2, [0]))
    sim.call_at(0.1, lambda: send(sim, hosts, 1, 2, [0]))  # host 1: unlimited uplink
    sim.run()
    small = CODEC.size(direct(0))
    first, second = sorted(hosts[2].arrivals)
    assert first[0] == pytest.approx(0.1 + ONE_WAY_MS / 1000)  # host 1 is not held up
    assert second[0] == pytest.approx((size + small) / 1e6 + ONE_WAY_MS / 1000)


def test_uplinks_are_off_by_default_and_must_be_positive():
    sim, hosts = network(2)
    send(sim, hosts, 0, 1, [100_000, 100_000])
    sim.run()
    assert [at for at, _ in hosts[1].arrivals] == [ONE_WAY_MS / 1000] * 2
    with pytest.raises(LocalProtocolError):
        sim.set_uplink(0, 0.0)


def test_latency_weighted_traffic_sums_each_message_one_way_delay_not_its_queueing():
    """NetStats.delay_ms: every message sent adds its propagation delay, however long it waited
    on a busy uplink (queueing is the load's effect, not the route's)."""
    sim, hosts = network(3)
    sim.set_uplink(0, 1e6)
    send(sim, hosts, 0, 1, [50_000, 50_000])
    send(sim, hosts, 2, 1, [10])
    sim.run()
    assert len(hosts[1].arrivals) == 3
    assert sim.stats.delay_ms == 3 * ONE_WAY_MS
