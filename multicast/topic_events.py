"""What the LBDD topic mode tells its application (``take_events``) and shows on inspection.

Events are outputs of the core like messages: a driver takes them after each input. Each one
says what happened at this node, with the input's ``now``; none is produced twice for the same
fact (a slice index is delivered once, a publication completes once).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MembershipChanged:
    """Our member list of ``topic`` became version ``version`` (receivers' addresses)."""

    topic: str
    version: int
    members: tuple[bytes, ...]
    now: float


@dataclass(frozen=True, slots=True)
class SliceDelivered:
    """Slice ``index`` of ``total`` of a publication arrived (once per index)."""

    topic: str
    publisher: bytes
    pid: int
    index: int
    total: int
    data: bytes
    now: float


@dataclass(frozen=True, slots=True)
class PublicationComplete:
    """Every slice of a publication has arrived. ``payload``: the whole data when it is at
    most ``assemble_limit_bytes``, else None (the slices came in ``SliceDelivered``)."""

    topic: str
    publisher: bytes
    pid: int
    total: int
    size: int
    payload: bytes | None
    now: float


@dataclass(frozen=True, slots=True)
class PublicationAbandoned:
    """A publication made no progress for ``abandon_s`` (its publisher is gone) and was
    dropped with ``received`` of ``total`` slices."""

    topic: str
    publisher: bytes
    pid: int
    received: int
    total: int
    now: float


TopicEvent = MembershipChanged | SliceDelivered | PublicationComplete | PublicationAbandoned


@dataclass(frozen=True, slots=True)
class TreeView:
    """One node's own view of a publication's tree: from its member list of ``version``."""

    version: int
    parent: bytes | None
    children: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class PubInfo:
    """Inspection of a publication at one node."""

    received: int
    total: int | None
    complete: bool
    upstream: bytes | None
    #: How many new slices came from each sender (the tree actually used).
    senders: dict[bytes, int]
    #: Receivers this node is serving now.
    serving: tuple[bytes, ...]
