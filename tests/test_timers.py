"""The timer heap every core shares (``dht.timers``), and the cores' kind -> handler tables."""

from __future__ import annotations

import random

import pytest

from rangecast.dht.core import T_ACK
from rangecast.dht.kademlia import KademliaConfig, KademliaNode
from rangecast.dht.messages import DHT_TABLE
from rangecast.dht.node import PastryConfig, PastryNode
from rangecast.dht.timers import TimerHeap
from rangecast.dht.wire import codec_for
from rangecast.multicast.topic import TopicPeer
from rangecast.multicast.topic_base import TimerKind, TopicConfig, TopicContext
from rangecast.pubsub.base import T_EXPIRE, T_PARK, T_RECONCILE, T_REFRESH
from rangecast.pubsub.node import _TIMERS as OVERLAY_TIMERS

DHT_CODEC = codec_for(DHT_TABLE)


class _Opaque:
    """An argument that cannot be compared: ties must never reach it."""

    def __lt__(self, other: object) -> bool:
        raise AssertionError("entries compared their arguments")


def test_entries_come_out_by_deadline_then_in_the_order_they_were_pushed() -> None:
    heap: TimerHeap[str] = TimerHeap()
    heap.push(2.0, "b", _Opaque())
    heap.push(1.0, "a1", _Opaque())
    heap.push(3.0, "c")
    heap.push(1.0, "a2", _Opaque())
    heap.push(1.0, "a3", _Opaque())
    assert len(heap) == 5 and heap.next_deadline() == 1.0
    kinds = []
    while (due := heap.pop_due(2.5)) is not None:
        kinds.append(due[0])
    assert kinds == ["a1", "a2", "a3", "b"]
    assert heap.next_deadline() == 3.0
    assert heap.pop_due(2.9) is None  # not due yet: stays
    assert heap.pop_due_at(3.0) == (3.0, "c", None)
    assert heap.next_deadline() is None and heap.pop_due(1e9) is None


def test_shift_moves_every_deadline_and_keeps_the_list_and_the_order() -> None:
    heap: TimerHeap[int] = TimerHeap()
    rng = random.Random(5)
    for i in range(50):
        heap.push(rng.choice([1.0, 2.0, 3.5]), i)
    same = heap.heap
    order_before = sorted(heap.heap)
    heap.shift(10.0)
    assert heap.heap is same  # cores keep a reference to the list
    assert [(d - 10.0, s, k) for d, s, k, _ in sorted(heap.heap)] == [
        (d, s, k) for d, s, k, _ in order_before
    ]
    popped = []
    while (due := heap.pop_due_at(100.0)) is not None:
        popped.append((due[0] - 10.0, due[1]))
    assert popped == [(d, k) for d, _, k, _ in order_before]
    heap.push(1.0, 0)
    heap.clear()
    assert heap.heap is same and not heap.heap


@pytest.mark.parametrize("node_type", [PastryNode, KademliaNode])
def test_every_dht_timer_kind_has_a_handler(node_type: type) -> None:
    cfg = PastryConfig(keepalive_s=1.0) if node_type is PastryNode else KademliaConfig()
    node = node_type(1 << 100, b"\x01" * 6, random.Random(1), config=cfg, codec=DHT_CODEC)
    assert T_ACK in node._timer_handlers
    node.start_alone(0.0)  # pushes the first keep-alive round
    kinds = {kind for _, _, kind, _ in node._timers.heap}
    assert kinds and kinds <= set(node._timer_handlers)
    t = node.get_timer()
    assert t is not None
    node.handle_timer(t)  # fired through the table; the next round is pushed
    assert node.get_timer() is not None and node.get_timer() > t


def test_the_overlay_and_the_topic_core_use_the_same_heap() -> None:
    assert set(OVERLAY_TIMERS) == {T_PARK, T_RECONCILE, T_REFRESH, T_EXPIRE}
    codec = codec_for(*TopicPeer.TABLES)
    dht = PastryNode(1 << 100, b"\x01" * 6, random.Random(1), config=PastryConfig(), codec=codec)
    ctx = TopicContext(dht, random.Random(2), TopicConfig(), codec)
    assert isinstance(ctx.timers, TimerHeap)
    ctx.ensure_tick(0.0)
    assert ctx.timers.pop_due(10.0) == (TimerKind.TICK, None)
