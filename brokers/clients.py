"""The client registry: which broker each client (publisher or subscriber) is attached to, and
publisher migration with pause, buffer and flush (POP and GRAPE, BASELINES 3 Phase 3).

Theory of operation
-------------------
A client is an int; it sits at a home node and talks to one broker at a time (the latency of
that hop is RTT(home, broker)/2, for the driver to charge). Brokers never call the registry:
a strategy that relocates a publisher emits a ``ClientCommand`` event, and the driver applies
it here, then hands the broker the client's next step (the migration ad, the flushed
publications). So the registry and the brokers stay sans-IO and only the driver joins them.

================  =====================================================  ====================
command           registry                                                driver then
================  =====================================================  ====================
``pause``         buffer the client's publications from now on            sends the migration
                  (nothing is lost, nothing is published twice)            ad to the target
``resume``        re-attach at ``broker``, stop buffering; returns the    publishes each, in
                  buffer, oldest first                                     order, at the target
================  =====================================================  ====================

A paused client that publishes gets ``None`` from ``publish`` (buffered); an attached one
gets the broker to publish at. Every publication is thus published exactly once, at the
source before the pause or at the target after the flush: the oracle of the migration tests.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import msgspec

from rangecast.dht.errors import LocalProtocolError

__all__ = ["PAUSE", "RESUME", "ClientCommand", "ClientRegistry"]

PAUSE, RESUME = "pause", "resume"

T = TypeVar("T")


class ClientCommand(msgspec.Struct, frozen=True, gc=False):
    """A broker's instruction to a client, through the driver: ``op`` is ``pause`` (target:
    ``broker``; the migration ad names advertisement ``ad`` and the broker path ``path``, the
    RAM's list, target first) or ``resume`` (at ``broker``)."""

    client: int
    op: str
    broker: int
    ad: int = 0
    path: tuple[int, ...] = ()


class _Client(Generic[T]):
    __slots__ = ("broker", "buffer", "home", "migrations", "paused")

    def __init__(self, broker: int, home: int) -> None:
        self.broker = broker
        self.home = home
        self.paused = False
        self.buffer: list[T] = []
        self.migrations = 0


class ClientRegistry(Generic[T]):
    """client -> (home node, broker); ``T`` is whatever a buffered publication is."""

    __slots__ = ("_clients",)

    def __init__(self) -> None:
        self._clients: dict[int, _Client[T]] = {}

    def attach(self, client: int, broker: int, home: int | None = None) -> None:
        if client in self._clients:
            raise LocalProtocolError(f"client {client} is already attached")
        self._clients[client] = _Client(broker, broker if home is None else home)

    def _get(self, client: int) -> _Client[T]:
        try:
            return self._clients[client]
        except KeyError:
            raise LocalProtocolError(f"no client {client}") from None

    def broker_of(self, client: int) -> int:
        return self._get(client).broker

    def home_of(self, client: int) -> int:
        return self._get(client).home

    def is_paused(self, client: int) -> bool:
        return self._get(client).paused

    def migrations(self, client: int) -> int:
        return self._get(client).migrations

    def publish(self, client: int, item: T) -> int | None:
        """The broker to publish ``item`` at now, or None: buffered while paused."""
        c = self._get(client)
        if c.paused:
            c.buffer.append(item)
            return None
        return c.broker

    def pause(self, client: int) -> None:
        c = self._get(client)
        if c.paused:
            raise LocalProtocolError(f"client {client} is already paused")
        c.paused = True

    def take_back(self, client: int, items: list[T]) -> None:
        """While ``client`` is paused: publications it handed its broker that the broker had not
        yet served when it paused the client; they go ahead of those buffered since, in order
        (published once, at the target, as if the pause had come before them)."""
        c = self._get(client)
        if not c.paused:
            raise LocalProtocolError(f"client {client} is not paused")
        c.buffer[:0] = items

    def resume(self, client: int, broker: int) -> list[T]:
        """Attach to ``broker`` (dropping the source) and flush: the buffered items, in order."""
        c = self._get(client)
        if not c.paused:
            raise LocalProtocolError(f"client {client} is not paused")
        c.paused = False
        if broker != c.broker:
            c.migrations += 1
        c.broker = broker
        out, c.buffer = c.buffer, []
        return out

    def apply(self, cmd: ClientCommand) -> list[Any]:
        """Apply a command; for ``resume`` the flushed items."""
        if cmd.op == PAUSE:
            self.pause(cmd.client)
            return []
        if cmd.op == RESUME:
            return self.resume(cmd.client, cmd.broker)
        raise LocalProtocolError(f"unknown client command {cmd.op!r}")
