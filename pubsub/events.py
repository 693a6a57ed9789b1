"""What the overlay tells the application: the events ``PubSubNode.take_events`` hands over.

Frozen msgspec structs rather than frozen dataclasses: one is made for every delivery, and a
struct is built in C (a frozen dataclass sets each field through ``object.__setattr__``).
"""

from __future__ import annotations

import msgspec

from rangecast.pubsub.messages import Event
from rangecast.pubsub.space import TreeId


class SubscriptionInstalled(msgspec.Struct, frozen=True, gc=False):
    """Every piece of subscription ``sid`` is stored and acknowledged."""

    sid: int
    now: float


class SubscriptionRefused(msgspec.Struct, frozen=True, gc=False):
    """Subscription ``sid`` could not be installed (``reason``); its pieces are being removed
    and a ``SubscriptionRemoved`` follows."""

    sid: int
    reason: str
    now: float


class SubscriptionRemoved(msgspec.Struct, frozen=True, gc=False):
    sid: int
    now: float


class EventDelivered(msgspec.Struct, frozen=True, gc=False):
    """``event`` arrived for our subscriptions ``sids`` (one message from one leaf)."""

    event: Event
    sids: tuple[int, ...]
    now: float


class PieceStored(msgspec.Struct, frozen=True, gc=False):
    """Observability: this peer stored a subscription piece at leaf ``tid`` (emitted by the
    host, not the subscriber; the simulator measures install latency with it)."""

    subscriber: bytes
    sid: int
    gen: int
    piece: int
    tid: TreeId
    now: float


AppEvent = (
    SubscriptionInstalled | SubscriptionRefused | SubscriptionRemoved | EventDelivered | PieceStored
)

__all__ = [
    "AppEvent",
    "EventDelivered",
    "PieceStored",
    "SubscriptionInstalled",
    "SubscriptionRefused",
    "SubscriptionRemoved",
]
