"""What every part of the LBDD topic mode shares: configuration, statistics, timers, the outbox.

Theory of operation
-------------------
The topic mode is one sans-IO core (``multicast.topic.TopicNode``) made of parts that each own one
concern: the membership side (``multicast.rendezvous``), the publications and the flows that serve
them (``multicast.flows``, ``multicast.publications``). The parts do not talk to the network or the
clock; they write into one ``TopicContext``, which the core owns and drains:

* ``send`` queues a message for a transport address, or, when the address is our own (the
  rendezvous is also a member, say), keeps it in ``local`` for the core to handle after the input
  that produced it, so a part never re-enters another part in the middle of its own work;
* ``route`` hands a message to the DHT node, to the root of a key (joins, leaves, hand-offs);
* ``events`` collects the application events, ``stats`` the one set of counters of the node;
* ``timers`` is the core's one timer heap (``dht.timers.TimerHeap``, the one every core uses):
  entries carry a ``TimerKind`` and the core dispatches each kind through a table. The periodic
  tick (``ensure_tick``) is started by whichever part first has something to look after, and
  started again by the core while any part has.

Nothing here reads a clock or the global random generator: time comes with every input and the
random numbers from the ``random.Random`` the driver passed in.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass
from enum import Enum

from rangecast.dht.core import DhtCore, DropStats, State
from rangecast.dht.errors import LocalProtocolError
from rangecast.dht.timers import TimerHeap
from rangecast.dht.wire import Codec, Message
from rangecast.multicast.messages import MAX_SLICE_BYTES
from rangecast.multicast.topic_events import TopicEvent

#: A publication: (topic, publisher address, publication id).
PubKey = tuple[str, bytes, int]


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """Knobs of the topic mode. Members of a topic should agree on the timing ones."""

    #: Slice size ``publish`` cuts data into (the paper: 64 KB).
    slice_bytes: int = 64 * 1024
    #: Member-to-rendezvous heartbeat period (also the period of every other check).
    heartbeat_s: float = 1.0
    #: Silence after which the rendezvous drops a member, or a member gives up its rendezvous.
    fail_after_s: float = 4.0
    #: The rendezvous batches membership changes for this long before pushing the list.
    push_delay_s: float = 0.25
    #: A join that got no answer is routed again after this long.
    join_retry_s: float = 3.0
    #: Slices a node may have unacknowledged over all its flows (its send buffer).
    send_budget_slices: int = 64
    #: ... and to any one receiver (bounds what a receiver gets twice when it changes parent:
    #: the old parent's unacknowledged slices). 48 x 64 KiB covers 50 Mbit/s at 500 ms RTT.
    flow_window_slices: int = 48
    #: A receiver that got no new slice for this long pulls its parent again.
    stall_s: float = 2.0
    #: Slices are kept this long after a publication's last activity, to serve late pulls.
    retain_s: float = 60.0
    #: An incomplete publication with no progress for this long is given up.
    abandon_s: float = 300.0
    #: ``PublicationComplete`` carries the assembled payload up to this size (else None).
    assemble_limit_bytes: int = 16 * 1024 * 1024

    def __post_init__(self) -> None:
        if not 1 <= self.slice_bytes <= MAX_SLICE_BYTES:
            raise LocalProtocolError(f"slice_bytes must be in [1, {MAX_SLICE_BYTES}]")
        if not 0 < self.heartbeat_s < self.fail_after_s:
            raise LocalProtocolError("need 0 < heartbeat_s < fail_after_s")
        if self.push_delay_s < 0 or self.join_retry_s <= 0 or self.stall_s <= 0:
            raise LocalProtocolError("push_delay_s >= 0, join_retry_s > 0 and stall_s > 0")
        if self.send_budget_slices < 1 or self.flow_window_slices < 1:
            raise LocalProtocolError("send_budget_slices and flow_window_slices must be >= 1")
        if self.retain_s < 0 or self.abandon_s <= self.stall_s:
            raise LocalProtocolError("retain_s >= 0 and abandon_s > stall_s")


@dataclass(slots=True)
class TopicStats(DropStats):
    """The node's counters, one set for all its parts (``malformed``, ``dropped`` and
    ``drop(reason)`` are every core's, from ``DropStats``)."""

    slices_received: int = 0
    #: Slices that arrived again (in flight from an old parent when the tree changed).
    duplicates: int = 0
    slices_sent: int = 0
    pulls_sent: int = 0
    stops_sent: int = 0
    pushes: int = 0


def topic_key(node: DhtCore, topic: str) -> int:
    """The DHT key whose root is ``topic``'s rendezvous."""
    return node.space.hash_key("topic:" + topic)


def check_topic(topic: str) -> None:
    if not isinstance(topic, str) or not 1 <= len(topic) <= 128:
        raise LocalProtocolError(f"topic name must be a str of 1-128 characters, got {topic!r}")


class TimerKind(Enum):
    """What a timer entry is for; ``TopicNode`` maps each kind to its handler."""

    #: The periodic work of every part (heartbeats, failure detection, resends, retention).
    TICK = "tick"
    #: A rendezvous's batched push of a topic's member list (the entry's argument: the topic).
    PUSH = "push"


class TopicContext:
    """The outbox, timers, events and counters the parts of one ``TopicNode`` write into."""

    __slots__ = (
        "cfg",
        "codec",
        "dht",
        "events",
        "local",
        "me",
        "out",
        "rng",
        "stats",
        "tick_at",
        "timers",
    )

    def __init__(self, dht: DhtCore, rng: random.Random, cfg: TopicConfig, codec: Codec) -> None:
        self.dht = dht
        self.rng = rng
        self.cfg = cfg
        self.codec = codec
        self.me = dht.me.addr
        self.stats = TopicStats()
        self.out: list[tuple[bytes, Message]] = []
        #: Messages to ourselves, handled by the core after the input that produced them.
        self.local: deque[Message] = deque()
        self.events: list[TopicEvent] = []
        self.timers: TimerHeap[TimerKind] = TimerHeap()
        #: When the periodic tick is due, None while it is not scheduled.
        self.tick_at: float | None = None

    def send(self, addr: bytes, msg: Message) -> None:
        if addr == self.me:
            self.local.append(msg)  # to ourselves (e.g. the rendezvous is also a member)
        else:
            self.out.append((addr, msg))

    def route(self, key: int, msg: Message, now: float) -> bool:
        """Route ``msg`` to the root of ``key``; False while the DHT node cannot route yet
        (the tick or ``ready`` tries again)."""
        if self.dht.state is not State.READY:
            return False
        self.dht.route(key, self.codec.encode(msg), now)
        return True

    def ensure_tick(self, now: float) -> None:
        if self.tick_at is None:
            # Desynchronised: a swarm started together does not heartbeat in lock-step.
            self.tick_at = now + self.rng.uniform(0.0, self.cfg.heartbeat_s)
            self.timers.push(self.tick_at, TimerKind.TICK)
