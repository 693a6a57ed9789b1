"""Per-broker service time in the simulator driver (sim/broker_network.py, ``BrokerNode``): one
FIFO input queue per broker, each input served for service + match_cost x PRT entries scanned +
send_cost x messages emitted; what a service emits leaves when it ends."""

from __future__ import annotations

from typing import Any, cast

from hypothesis import given, settings
from hypothesis import strategies as st

from rangecast.brokers.broker import Broker, BrokerStats
from rangecast.brokers.messages import Publish
from rangecast.dht.wire import Message
from rangecast.sim.broker_network import BrokerNode

ADDRS = [bytes([i]) * 6 for i in range(4)]
INDEX = {a: i for i, a in enumerate(ADDRS)}


class Echo:
    """A broker core stand-in: each publication received scans ``scan`` PRT entries, forwards
    one copy to broker 2 and delivers once; client calls run as given."""

    def __init__(self, scan: int = 0) -> None:
        self.id = 0
        self.stats = BrokerStats()
        self.scan = scan
        self.seen: list[tuple[int, int, float]] = []
        self._out: list[tuple[int, Message]] = []
        self._events: list[Any] = []

    def receive(self, msg: Message, src: int, now: float) -> None:
        assert isinstance(msg, Publish)
        self.seen.append((msg.eid, src, now))
        self.stats.matchings += self.scan
        self._out.append((2, msg))
        self._events.append(("delivered", msg.eid, now))

    def take_messages(self) -> list[tuple[int, Message]]:
        out, self._out = self._out, []
        return out

    def take_events(self) -> list[Any]:
        ev, self._events = self._events, []
        return ev

    def get_timer(self) -> float | None:
        return None

    def handle_timer(self, now: float) -> None:
        pass


def node(core: Echo, service: float, match_cost: float = 0.0, send_cost: float = 0.0) -> BrokerNode:
    return BrokerNode(
        cast(Broker, core), ADDRS, INDEX, {}, {}, service=service, match_cost=match_cost,
        send_cost=send_cost,
    )  # fmt: skip


def pub(eid: int) -> Publish:
    return Publish(0, eid, [float(eid)])


def drain(n: BrokerNode) -> list[tuple[float, int]]:
    """Fire the node's timer until it is idle: (time, event id) of each message leaving."""
    out: list[tuple[float, int]] = []
    while (t := n.get_timer()) is not None:
        n.handle_timer(t)
        out.extend((t, cast(Publish, m).eid) for _, m in n.take_messages())
    return out


def test_a_burst_queues_and_leaves_in_fifo_order_one_service_apart() -> None:
    core = Echo(scan=10)
    # 10 ms + 10 entries x 1 ms + 1 copy x 2 ms = 22 ms per input
    n = node(core, 0.010, 0.001, 0.002)
    for eid in (1, 2, 3):
        n.receive(pub(eid), ADDRS[1], 0.0)
    # The first is in service (its copy held), the other two wait.
    assert core.seen == [(1, 1, 0.0)]
    assert n.take_messages() == [] and n.take_events() == []
    assert n.get_timer() == 0.022
    # The input queue alone (dst = the broker) and added to a link's queue.
    assert n.sample(0, 0.0) == (2, 3, 1)
    assert n.sample(2, 0.0) == (2, 3, 1)
    assert n.sample(2, 0.0) == (2, 0, 0)
    n.handle_timer(0.022)
    assert [cast(Publish, m).eid for _, m in n.take_messages()] == [1]
    assert n.take_events() == [("delivered", 1, 0.0)]
    out = drain(n)
    assert [e for _, e in out] == [2, 3]
    assert [round(t, 9) for t, _ in out] == [0.044, 0.066]
    # The core saw each input at the start of its service, in arrival order.
    assert [(e, round(t, 9)) for e, _, t in core.seen] == [(1, 0.0), (2, 0.022), (3, 0.044)]
    assert n.sample(0, 1.0) == (0, 0, 2)
    # Two waited behind the first: 2 for 22 ms, then 1 for 22 ms (the queue-length measure).
    assert n.queue_max == 2 and round(n.queue_area_at(1.0), 9) == 0.066
    # Idle again: an input is served at once.
    n.receive(pub(4), ADDRS[3], 1.0)
    assert core.seen[-1] == (4, 3, 1.0)
    assert drain(n) == [(1.022, 4)]


def test_client_calls_share_the_queue() -> None:
    core = Echo()
    n = node(core, 0.5)
    calls: list[float] = []
    n.receive(pub(1), ADDRS[1], 0.0)
    n.enqueue(lambda b, now: calls.append(now), -1, 0.1)
    n.receive(pub(2), ADDRS[1], 0.2)
    assert calls == []
    out = drain(n)
    assert calls == [0.5]
    # The call emitted nothing but took its service time: publication 2 starts at 1.0.
    assert out == [(0.5, 1), (1.5, 2)]


def test_off_by_default() -> None:
    core = Echo()
    n = BrokerNode(cast(Broker, core), ADDRS, INDEX, {}, {})
    assert not n.serving
    n.receive(pub(1), ADDRS[1], 0.25)
    assert core.seen == [(1, 1, 0.25)]
    assert [cast(Publish, m).eid for _, m in n.take_messages()] == [1]
    assert n.get_timer() is None and n.sample(2, 0.25) == (0, 0, 0)


@settings(max_examples=60, deadline=None)
@given(
    gaps=st.lists(st.integers(0, 40), min_size=1, max_size=25),
    service=st.integers(1, 20),
)
def test_departures_follow_the_fifo_recursion(gaps: list[int], service: int) -> None:
    # Times in ms as binary fractions of a second (exact floats): departure k is
    # max(arrival k, departure k-1) + service.
    unit = 1.0 / 1024
    core = Echo()
    n = node(core, service * unit)
    arrivals, t = [], 0
    for g in gaps:
        t += g
        arrivals.append(t * unit)
    left: list[tuple[float, int]] = []
    for eid, a in enumerate(arrivals):
        while (nt := n.get_timer()) is not None and nt <= a:
            n.handle_timer(nt)
            left.extend((nt, cast(Publish, m).eid) for _, m in n.take_messages())
        n.receive(pub(eid), ADDRS[1], a)
        left.extend((a, cast(Publish, m).eid) for _, m in n.take_messages())
    left += drain(n)
    want, done = [], 0.0
    for a in arrivals:
        done = max(a, done) + service * unit
        want.append(done)
    assert [e for _, e in left] == list(range(len(arrivals)))
    assert [t for t, _ in left] == want
