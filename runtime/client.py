"""The async (trio) client: subscribe, unsubscribe and publish through any peer.

::

    async with rangecast_client("127.0.0.1", 7000) as client:
        sub = await client.subscribe("Attr1 between 10 and 20")
        eid = await client.publish({"Attr1": 15, "Attr2": 0, "Attr3": 1, "Attr4": 2})
        async for delivery in sub:          # Delivery(sid, eid, schema, values)
            print(delivery.values)
            break
        await sub.unsubscribe()

A subscription's deliveries are an async iterator; it ends when the subscription is removed or
the connection closes. Errors the peer reports (a bad expression, an unknown schema, a value out
of its domain, a quota) raise ``RequestError`` with the peer's message; a publish refused for
load (a publish rate, or the peer saturated) raises its subclass ``Overloaded``, which says how
long to wait before trying again. Either way the event was not accepted: nothing of it is sent.
A peer that requires client tokens (``runtime/tokens.py``) refuses a connection without a valid
``token``: ``connect`` raises ``Unauthorized`` (a ``RequestError``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import trio

from rangecast.dht.errors import RangecastError, RemoteProtocolError
from rangecast.dht.wire import Message
from rangecast.pubsub.peer import OverlayPeer
from rangecast.runtime.guard import FrameReader, FrameTooLarge, frame, wire_codec
from rangecast.runtime.messages import (
    Done,
    Hello,
    HelloReply,
    Notification,
    PublishReply,
    PublishRequest,
    StatusReply,
    StatusRequest,
    SubscribeReply,
    SubscribeRequest,
    TreeReply,
    TreeRequest,
    UnsubscribeRequest,
)
from rangecast.runtime.tokens import UNAUTHORIZED_PREFIX

#: Deliveries buffered per subscription before the reader waits for the application.
SUBSCRIPTION_BUFFER = 100_000
#: How long ``publish`` keeps trying a publish the peer refuses for load, by default.
BUSY_WAIT_S = 30.0


#: The reply type a request expects.
_R = TypeVar("_R", bound=Message)


class RequestError(RangecastError):
    """The peer refused a request (its reason is the message)."""


class Overloaded(RequestError):
    """A publish refused for load: the peer's publish rate for this connection or address,
    or the peer is saturated. Nothing was published; trying after ``retry_after_s`` may work."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Unauthorized(RequestError):
    """The peer requires a client token and this connection has none, or a wrong one."""


def _refused(error: str) -> RequestError:
    """The exception for a request the peer refused with ``error``."""
    return Unauthorized(error) if error.startswith(UNAUTHORIZED_PREFIX) else RequestError(error)


class ConnectionLost(RangecastError):
    """The connection to the peer closed before the reply came."""


@dataclass(frozen=True, slots=True)
class Delivery:
    sid: int
    eid: int
    schema: str
    values: dict[str, float | None]


class ClientSubscription:
    """One subscription: iterate it for deliveries."""

    def __init__(self, client: Client, sid: int, schema: str, attributes: list[str]) -> None:
        self.client = client
        self.sid = sid
        self.schema = schema
        self.attributes = attributes
        self._tx, self._rx = trio.open_memory_channel[Delivery](SUBSCRIPTION_BUFFER)

    def __aiter__(self) -> AsyncIterator[Delivery]:
        return self._iter()

    async def _iter(self) -> AsyncIterator[Delivery]:
        async for d in self._rx:
            yield d

    def _push(self, n: Notification) -> None:
        names = self.attributes
        values = {names[i] if i < len(names) else f"#{i}": v for i, v in enumerate(n.values)}
        try:
            self._tx.send_nowait(Delivery(n.sid, n.eid, n.schema, values))
        except (trio.WouldBlock, trio.ClosedResourceError):
            self.client.overflowed += 1

    def _close(self) -> None:
        self._tx.close()

    async def unsubscribe(self) -> None:
        await self.client.unsubscribe(self.sid)


class _Waiter:
    __slots__ = ("done", "reply")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.reply: Message | None = None


class Client:
    def __init__(
        self, stream: trio.SocketStream, where: str = "the peer", token: str | None = None
    ) -> None:
        self.stream = stream
        #: The client token the hello carries (a peer that requires tokens asks for one).
        self.token = token
        #: Who we talk to, for error messages ("the peer at HOST:PORT").
        self.where = where
        # Built once per client: the runtime's messages and the cores' (a peer's whole frames).
        self._wire = wire_codec(*OverlayPeer.TABLES)
        self._req = 0
        self._waiting: dict[int, _Waiter] = {}
        self._subs: dict[int, ClientSubscription] = {}
        #: Notifications for a sid whose SubscribeReply has not arrived yet.
        self._early: dict[int, list[Notification]] = {}
        self._hello: _Waiter | None = None
        self._send_lock = trio.Lock()
        self._closed = False
        #: Deliveries dropped because the application did not drain a subscription.
        self.overflowed = 0

    # ------------------------------------------------------------------------------ requests

    async def hello(self) -> HelloReply:
        """The peer's address, key, state and schemas; ``Unauthorized`` if the peer requires a
        client token and ours is missing or wrong."""
        waiter = _Waiter()
        self._hello = waiter
        await self._send(Hello(self.token or ""))
        reply = await self._wait(waiter)
        reply = self._expect(reply, HelloReply)
        if reply.error:
            raise _refused(reply.error)
        return reply

    async def subscribe(self, expr: str, schema: str = "thesis") -> ClientSubscription:
        """Install a subscription; returns once every piece is stored and acknowledged."""
        reply = await self._call(lambda req: SubscribeRequest(req, schema, expr))
        reply = self._expect(reply, SubscribeReply)
        if reply.error:
            raise _refused(reply.error)
        sub = ClientSubscription(self, reply.sid, schema, list(reply.attributes))
        self._subs[reply.sid] = sub
        for n in self._early.pop(reply.sid, []):
            sub._push(n)
        return sub

    async def unsubscribe(self, sid: int) -> None:
        reply = await self._call(lambda req: UnsubscribeRequest(req, sid))
        reply = self._expect(reply, Done)
        if reply.error:
            raise _refused(reply.error)
        sub = self._subs.pop(sid, None)
        if sub is not None:
            sub._close()

    async def publish(
        self,
        values: Mapping[str, float | int | None],
        schema: str = "thesis",
        *,
        busy_wait_s: float = BUSY_WAIT_S,
    ) -> int:
        """Publish an event given by attribute name; returns its event id.

        A publish the peer refuses for load is tried again after the wait it names, for up to
        ``busy_wait_s`` in all (backpressure: a publisher faster than the swarm is slowed to
        its pace); then, or at once with ``busy_wait_s=0``, it raises ``Overloaded``."""
        clean: dict[str, float | None] = {}
        for k, v in values.items():
            if v is not None and not (isinstance(v, int | float) and math.isfinite(v)):
                raise RequestError(f"{k}: value must be a finite number, got {v!r}")
            clean[str(k)] = None if v is None else float(v)
        give_up = trio.current_time() + busy_wait_s
        while True:
            reply = await self._call(lambda req: PublishRequest(req, schema, clean))
            reply = self._expect(reply, PublishReply)
            if not (reply.error and reply.retry_after_ms):
                break
            wait = reply.retry_after_ms / 1000.0
            if trio.current_time() + wait > give_up:
                raise Overloaded(reply.error, wait)
            await trio.sleep(wait)
        if reply.error:
            raise _refused(reply.error)
        return reply.eid

    async def status(self) -> dict[str, Any]:
        reply = await self._call(lambda req: StatusRequest(req))
        if isinstance(reply, Done):  # refused (a client token)
            raise _refused(reply.error)
        reply = self._expect(reply, StatusReply)
        data: dict[str, Any] = json.loads(reply.json)
        return data

    async def tree(self) -> list[TreeReply]:
        """The peer's tree state: every page of one picture of it (``runtime/treestate.py``;
        ``rangecast.testkit.live`` makes a ``TreeSnapshot`` of them). ``RequestError`` if the
        peer has none (not started yet)."""
        pages: list[TreeReply] = []
        while True:
            reply = await self._call(partial(TreeRequest, page=len(pages)))
            if isinstance(reply, Done):  # refused (a client token)
                raise _refused(reply.error)
            reply = self._expect(reply, TreeReply)
            if reply.error:
                raise RequestError(reply.error)
            pages.append(reply)
            if not reply.more:
                return pages

    # ------------------------------------------------------------------------------ plumbing

    def _expect(self, reply: Message | None, kind: type[_R]) -> _R:
        """``reply`` as the answer we asked for: a peer answering with another message is
        a one-line ``RequestError`` naming it, never an assertion."""
        if not isinstance(reply, kind):
            raise RequestError(
                f"{self.where} answered with a {type(reply).__name__}, not a {kind.__name__}"
            )
        return reply

    async def _call(self, make: Any) -> Message:
        self._req = (self._req + 1) & 0xFFFFFFFF
        req = self._req
        waiter = _Waiter()
        self._waiting[req] = waiter
        try:
            await self._send(make(req))
            return await self._wait(waiter)
        finally:
            self._waiting.pop(req, None)

    async def _send(self, msg: Message) -> None:
        if self._closed:
            raise ConnectionLost(f"the connection to {self.where} is closed")
        async with self._send_lock:
            try:
                await self.stream.send_all(frame(self._wire.encode(msg)))
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                raise ConnectionLost(f"cannot send to {self.where}: {exc}") from None

    async def _wait(self, waiter: _Waiter) -> Message:
        await waiter.done.wait()
        if waiter.reply is None:
            raise ConnectionLost(f"the connection to {self.where} closed before it replied")
        return waiter.reply

    async def _reader(self) -> None:
        reader = FrameReader()
        try:
            async for data in self.stream:
                for f in reader.feed(data):
                    self._on_frame(self._wire.decode(f))
        except (
            trio.BrokenResourceError,
            trio.ClosedResourceError,
            OSError,
            RemoteProtocolError,
            FrameTooLarge,
        ):
            pass
        finally:
            self._shutdown()

    def _on_frame(self, msg: Message) -> None:
        if isinstance(msg, Notification):
            sub = self._subs.get(msg.sid)
            if sub is not None:
                sub._push(msg)
            else:
                self._early.setdefault(msg.sid, []).append(msg)
            return
        if isinstance(msg, HelloReply):
            if self._hello is not None:
                self._hello.reply = msg
                self._hello.done.set()
            return
        req = getattr(msg, "req", None)
        waiter = self._waiting.get(req) if isinstance(req, int) else None
        if waiter is None:
            raise RemoteProtocolError(f"unexpected {type(msg).__name__} from the peer")
        waiter.reply = msg
        waiter.done.set()

    def _shutdown(self) -> None:
        self._closed = True
        for waiter in self._waiting.values():
            waiter.done.set()
        if self._hello is not None:
            self._hello.done.set()
        for sub in self._subs.values():
            sub._close()


@asynccontextmanager
async def connect(
    host: str, port: int, timeout_s: float = 5.0, token: str | None = None
) -> AsyncIterator[Client]:
    """A client connected to the peer at ``host:port``, greeting it with ``token`` if given
    (``Unauthorized`` if the peer requires a token and this one is missing or wrong)."""
    try:
        with trio.fail_after(timeout_s):
            stream = await trio.open_tcp_stream(host, port)
    except trio.TooSlowError:
        raise ConnectionLost(
            f"cannot connect to {host}:{port}: no answer within {timeout_s:g} s"
        ) from None
    except OSError as exc:
        raise ConnectionLost(f"cannot connect to {host}:{port}: {_reason(exc)}") from None
    refused: RangecastError | None = None
    async with trio.open_nursery() as nursery:
        client = Client(stream, f"the peer at {host}:{port}", token)
        nursery.start_soon(client._reader)
        try:
            # Greet at once: the peer closes a connection that has said nothing within its idle
            # timeout (runtime.quotas), and a reply shows a Rangecast peer is listening.
            try:
                with trio.fail_after(timeout_s):
                    await client.hello()
            except trio.TooSlowError:
                refused = ConnectionLost(
                    f"{host}:{port} did not answer a hello within {timeout_s:g} s"
                )
            except RequestError as exc:  # a client token missing or refused
                refused = exc
            if refused is None:
                yield client
        finally:
            nursery.cancel_scope.cancel()
            with trio.CancelScope(shield=True), suppress(trio.BrokenResourceError, OSError):
                await stream.aclose()
    if refused is not None:
        # Raised out here, not inside the nursery: the caller gets the exception itself,
        # not an exception group around it.
        raise refused


def _reason(exc: OSError) -> str:
    """Why a connect failed, in words: trio reports "all attempts ... failed" and keeps the
    errors of the attempts (e.g. "Connection refused") in an exception group as the cause."""
    cause = exc.__cause__
    if exc.strerror is None and isinstance(cause, BaseExceptionGroup):
        reasons = {
            os.strerror(e.errno) if e.errno else str(e.strerror or e)
            for e in cause.exceptions
            if isinstance(e, OSError)
        }
        if reasons:
            text = ", ".join(sorted(reasons))
            if "Connection refused" in reasons:
                text += " (no peer listening there?)"
            return text
    return exc.strerror or str(exc)


__all__ = [
    "Client",
    "ClientSubscription",
    "ConnectionLost",
    "Delivery",
    "Overloaded",
    "RequestError",
    "Unauthorized",
    "connect",
]
