"""The client API on the peer's side: one ``ClientSession`` per client connection.

A connection becomes a client session with its first client request. Requests are handled in
arrival order from a table keyed by message type; replies and notifications go out through the
session's own queue and writer task, so a slow client never blocks the peer: when its queue is
over its bounds (``Quotas.client_queue_frames`` and ``client_queue_bytes``), or a write to it has
been stalled for ``Quotas.slow_reader_s``, its connection is closed, its subscriptions removed
and the notifications thrown away counted. Each session's quotas (subscriptions, publish rate,
the peer's saturation) are checked through its ``ClientConnection`` (``runtime/quotas.py``).

Read-only requests (``Hello``, ``StatusRequest``, ``TreeRequest``) are weighed and bounded there
too (``runtime/quotas.py``'s docstring): a refused status or tree page is answered with the
reason and the wait that helps (``Done`` or ``TreeReply.error``; a refused ``Hello`` is dropped,
counted), a connection refused ``readonly_close_after`` times is closed, and the bytes of
read-only replies not yet written are tracked per connection (``_readonly_marks``), so that a
client that asks and never reads is closed at ``readonly_queue_bytes`` instead of at the 16 MiB
of a whole client queue. Tree pictures are held by the peer's ledger (a bounded number), and
pages are served in order, each once per picture: the picture paid for them all.
"""

from __future__ import annotations

import json
import logging
from collections import deque
from collections.abc import Callable, Hashable
from typing import Any, Protocol

import trio
from msgspec.structs import replace

from rangecast.dht.errors import LocalProtocolError
from rangecast.dht.wire import Codec, Message
from rangecast.pubsub.node import EventDelivered
from rangecast.pubsub.peer import OverlayPeer
from rangecast.pubsub.schema import SchemaError, SchemaRegistry
from rangecast.pubsub.subscription import Subscription, parse_subscription
from rangecast.runtime.guard import Rejections, frame
from rangecast.runtime.messages import (
    TREE_PAGE_ITEMS,
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
from rangecast.runtime.quotas import (
    READONLY_FLOOD,
    READONLY_UNREAD,
    SLOW_READER,
    ClientConnection,
    Refusal,
    readonly_units,
    similar,
)
from rangecast.runtime.tokens import BAD_TOKEN, NEED_TOKEN, TOKEN_REFUSED, ClientTokens
from rangecast.runtime.treestate import TreePicture, picture


class PeerApi(Protocol):
    """What a client session needs of its peer (``runtime.peer.PeerRuntime``): the service is
    written against this, so it does not import the peer that imports it."""

    rejections: Rejections
    schemas: SchemaRegistry
    #: The running core (None while starting): ``TreeRequest`` reads its tree nodes.
    core: OverlayPeer | None

    def hello_reply(self) -> HelloReply: ...
    def subscribe(self, sub: Subscription, owner: Owner) -> int: ...
    def unsubscribe(self, sid: int) -> None: ...
    def forget(self, sid: int) -> None: ...
    def publish(self, schema: str, values: dict[str, float | None]) -> int: ...
    def status(self) -> dict[str, Any]: ...
    def backlog(self) -> int: ...
    def subscription(self, sid: int) -> Subscription | None: ...


log = logging.getLogger("rangecast.service")


class Owner:
    """Who asked for a subscription: gets its install acknowledgement and its deliveries."""

    def installed(self, sid: int) -> None: ...

    def refused(self, sid: int, reason: str) -> None: ...

    def removed(self, sid: int) -> None: ...

    def deliver(self, sid: int, event: EventDelivered) -> None: ...


class ClientSession(Owner):
    def __init__(
        self,
        peer: PeerApi,
        stream: trio.SocketStream,
        wire: Codec,
        conn: ClientConnection,
        tokens: ClientTokens | None = None,
    ) -> None:
        """``wire``: the peer's ``wire_codec``, which the session's replies are encoded with;
        ``conn``: the connection's quotas (the peer closes it when the connection ends);
        ``tokens``: the client tokens the peer requires (None: none, ``runtime/tokens.py``)."""
        self.peer = peer
        self._tokens = tokens
        #: Requests are served (no tokens required, or the hello carried a valid one).
        self.authorized = tokens is None
        #: A wrong token was tried: one guess per connection (each costs a new connection).
        self._guessed = False
        self.stream = stream
        self.conn = conn
        quotas = conn.quotas
        self.tx, self.rx = trio.open_memory_channel[bytes](quotas.client_queue_frames)
        self._queued_bytes = 0
        self._max_bytes = quotas.client_queue_bytes
        self._stall_s = quotas.slow_reader_s
        #: The connection's scope: cancelled to close a client that does not read.
        self._scope: trio.CancelScope | None = None
        #: sid -> the subscription's kind (``quotas.similar``), for the quotas' accounting.
        self._keys: dict[int, Hashable] = {}
        #: sid -> the request id awaiting its install acknowledgement (None once acknowledged).
        self.sids: dict[int, int | None] = {}
        self._unsubscribing: dict[int, int] = {}
        #: Acknowledgements that came before subscribe() returned: sid -> None (installed) or
        #: the reason it was refused.
        self._early: dict[int, str | None] = {}
        self._attrs: dict[str, list[str]] = {}
        self._wire = wire
        self._dead = False
        #: The next page of this connection's tree picture (the picture itself is held by the
        #: peer's ledger, which may drop it: ``Quotas.tree_pictures_held``).
        self._next_page = 0
        #: Bytes ever queued and ever written, and where each read-only reply not yet written
        #: ends in that stream (end, size): what ``ClientConnection.readonly_queued`` counts.
        self._queued_total = 0
        self._written = 0
        self._readonly_marks: deque[tuple[int, int]] = deque()
        conn.on_unread = self._unread

    def start(self, nursery: trio.Nursery) -> None:
        """Run the writer in ``nursery``, the connection's: cancelling it closes the client."""
        self._scope = nursery.cancel_scope
        nursery.start_soon(self._writer)

    async def _writer(self) -> None:
        try:
            async for data in self.rx:
                # Write everything queued in one go: a busy peer queues notifications far
                # faster than one frame per scheduling round would drain them.
                batch = [data]
                while len(batch) < 1024:
                    try:
                        batch.append(self.rx.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel):  # ended: the client is closed
                        break
                data = b"".join(batch)
                del batch  # its frames are in ``data``: not held twice while the write waits
                # A client that stops reading blocks this write for good once the socket's
                # buffers are full; it is closed after slow_reader_s instead of holding its
                # queue and subscriptions forever.
                with trio.move_on_after(self._stall_s):
                    await self.stream.send_all(data)
                    self._queued_bytes -= len(data)
                    self._written += len(data)
                    marks = self._readonly_marks
                    while marks and marks[0][0] <= self._written:
                        self.conn.sent_readonly(marks.popleft()[1])
                    continue
                self._too_slow()
                return
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            self._dead = True

    def _out(self, msg: Message, readonly: bool = False) -> None:
        """Queue ``msg`` for the client; ``readonly``: a reply to a read-only request, whose
        bytes count against the read-only bounds until written."""
        if self._dead:
            if isinstance(msg, Notification):
                self.conn.dropped(1)  # an accepted event this client no longer gets
            return
        data = frame(self._wire.encode(msg))
        n = len(data)
        if self._queued_bytes + n > self._max_bytes:
            self._too_slow()
            return
        if readonly and not self.conn.queue_readonly(n):
            self._too_slow(READONLY_UNREAD)
            return
        try:
            self.tx.send_nowait(data)
        except trio.WouldBlock:
            self._too_slow()
            return
        self._queued_bytes += n
        self._queued_total += n
        if readonly:
            self._readonly_marks.append((self._queued_total, n))

    def _unread(self) -> None:
        """Closed by the peer's ledger to make room for others' read-only replies."""
        self._too_slow(READONLY_UNREAD)

    def _too_slow(self, reason: str = SLOW_READER) -> None:
        """Close the client, counted as ``reason``: its connection's scope is cancelled, and
        the peer's connection task then removes its subscriptions (``closed``), outside any
        core upcall."""
        if self._dead:
            return
        self._dead = True
        # What goes with it, less the replies to read-only requests (a flood's refusals are
        # not notifications thrown away).
        queued = self.tx.statistics().current_buffer_used - len(self._readonly_marks)
        self._readonly_marks.clear()
        self.conn.slow_reader(max(queued, 0), reason)
        self.tx.close()
        if self._scope is not None:
            self._scope.cancel()

    # ---------------------------------------------------------------------------- requests

    def request(self, msg: Message) -> None:
        handler = _HANDLERS.get(type(msg))
        if handler is None:
            self.peer.rejections.add("unexpected message")
            return
        if self._dead and type(msg) in _READ_ONLY:
            return  # closed (the rest of its last chunk of frames): nothing to answer
        if not self.authorized and type(msg) is not Hello:
            self._unauthorized(msg)
            return
        handler(self, msg)

    def _hello(self, msg: Hello) -> None:
        # A client greets once per connection; peers share addresses with clients (one host),
        # so only the connection's read-only rate applies. Refused: dropped, counted.
        try:
            self.conn.check_readonly(trio.current_time(), address=False)
        except Refusal:
            self._close_if_flooding()
            return
        self.conn.charge_readonly(1, address=False)
        reply = self.peer.hello_reply()
        tokens = self._tokens
        if tokens is not None and not self.authorized:
            if not msg.token:
                # Peers greet each other without a token to learn a contact's key: answered,
                # not counted; the requests that follow are.
                reply = replace(reply, error=NEED_TOKEN)
            elif not self._guessed and tokens.check(msg.token):
                self.authorized = True
            else:
                self._guessed = True
                self.conn.refuse(TOKEN_REFUSED)
                reply = replace(reply, error=BAD_TOKEN)
        self._out(reply, readonly=True)

    def _unauthorized(self, msg: Message) -> None:
        """A request before a valid token: refused with a reply its client understands."""
        self.conn.refuse(TOKEN_REFUSED)
        req = getattr(msg, "req", 0)
        if type(msg) is SubscribeRequest:
            self._out(SubscribeReply(req, 0, [], NEED_TOKEN))
        elif type(msg) is PublishRequest:
            self._out(PublishReply(req, 0, NEED_TOKEN))
        else:  # unsubscribe, status, tree: a bare failure
            self._out(Done(req, NEED_TOKEN), readonly=type(msg) in _READ_ONLY)

    def _subscribe(self, msg: SubscribeRequest) -> None:
        try:
            schema = self.peer.schemas.get(msg.schema)
            sub = parse_subscription(msg.expr, schema)
            kind = similar(sub, schema)
            self.conn.check_subscribe(kind)
            sid = self.peer.subscribe(sub, self)
        except (SchemaError, LocalProtocolError, Refusal) as exc:
            self._out(SubscribeReply(msg.req, 0, [], str(exc)))
            return
        self.conn.subscribed(kind)
        self._keys[sid] = kind
        self._attrs[schema.name] = [a.name for a in schema.attributes]
        self.sids[sid] = msg.req
        if sid in self._early:  # acknowledged before subscribe() returned
            why = self._early.pop(sid)
            if why is None:
                self.installed(sid)
            else:
                self.refused(sid, why)

    def _unsubscribe(self, msg: UnsubscribeRequest) -> None:
        if msg.sid not in self.sids:
            self.conn.not_owned()
            self._out(Done(msg.req, f"no subscription {msg.sid} on this connection"))
            return
        self._unsubscribing[msg.sid] = msg.req
        try:
            self.peer.unsubscribe(msg.sid)
        except LocalProtocolError as exc:
            del self._unsubscribing[msg.sid]
            self._out(Done(msg.req, str(exc)))

    def _publish(self, msg: PublishRequest) -> None:
        try:
            self.conn.check_publish(trio.current_time(), self.peer.backlog())
        except Refusal as exc:
            wait_ms = min(max(round(exc.retry_after_s * 1000), 1), 0xFFFFFFFF)
            self._out(PublishReply(msg.req, 0, str(exc), wait_ms))
            return
        try:
            eid = self.peer.publish(msg.schema, dict(msg.values))
        except (SchemaError, LocalProtocolError) as exc:
            self._out(PublishReply(msg.req, 0, str(exc)))
            return
        self._out(PublishReply(msg.req, eid))

    # ------------------------------------------------------------------- read-only requests

    def _close_if_flooding(self) -> bool:
        """After a refused read-only request: close the connection if it has been refused
        ``readonly_close_after`` times (True: closed, nothing to answer)."""
        if not self.conn.flooding:
            return False
        self._too_slow(READONLY_FLOOD)
        return True

    def _refused_readonly(self, reply: Message) -> None:
        if not self._close_if_flooding():
            self._out(reply, readonly=True)

    def _status_json(self) -> str:
        return json.dumps(self.peer.status())

    def _status(self, msg: StatusRequest) -> None:
        conn = self.conn
        now = trio.current_time()
        try:
            conn.check_readonly(now)
        except Refusal as exc:
            self._refused_readonly(Done(msg.req, str(exc)))
            return
        # Built afresh while the peer's read-only budget lasts, else the last one built.
        text = conn.ledger.status_text(now, self._status_json)
        conn.charge_readonly(readonly_units(len(text)))
        self._out(StatusReply(msg.req, text), readonly=True)

    def _tree_page(self, msg: TreeRequest) -> None:
        core = self.peer.core
        if core is None:
            reply = TreeReply(msg.req, msg.page, False, "starting", [], [], None, "no overlay")
            self._out(reply, readonly=True)
            return
        state = core.dht.state.value
        conn = self.conn
        ledger = conn.ledger
        pic: TreePicture | None = None
        if msg.page == 0:
            # The expensive request: the picture is taken in one go (``runtime/treestate.py``)
            # and costs two units a page's worth of items (taken, then encoded), however the
            # pages come.
            try:
                conn.check_picture(trio.current_time())
            except Refusal as exc:
                self._refused_readonly(TreeReply(msg.req, 0, False, state, [], [], None, str(exc)))
                return
            pic = picture(core, self.peer.schemas)
            cost = picture_units(pic)
            conn.charge_readonly(cost)
            ledger.picture_built(cost)
            ledger.drop_picture(conn)
            if len(pic.pages) > 1:
                ledger.hold_picture(conn, pic)
        elif msg.page == self._next_page:
            held = ledger.picture(conn)
            pic = held if isinstance(held, TreePicture) else None
        if pic is None or msg.page >= len(pic.pages):
            # Out of order, or the picture was dropped: a request like any other (charged).
            try:
                conn.check_readonly(trio.current_time())
            except Refusal as exc:
                error = str(exc)
            else:
                conn.charge_readonly(1)
                error = f"no page {msg.page}: ask for page 0 first"
            self._refused_readonly(TreeReply(msg.req, msg.page, False, state, [], [], None, error))
            return
        more = msg.page + 1 < len(pic.pages)
        first = msg.page == 0
        self._out(
            TreeReply(
                msg.req,
                msg.page,
                more,
                state,
                pic.pages[msg.page],
                pic.schemas if first else [],
                pic.config if first else None,
            ),
            readonly=True,
        )
        self._next_page = msg.page + 1
        if not more:
            ledger.drop_picture(conn)

    # ---------------------------------------------------------------------- Owner upcalls

    def installed(self, sid: int) -> None:
        if sid not in self.sids:
            self._early[sid] = None
            return
        req = self.sids[sid]
        if req is None:
            return  # a modify's re-install; the client already knows this sid
        self.sids[sid] = None
        sub = self.peer.subscription(sid)
        attrs = self._attrs.get(sub.schema, []) if sub is not None else []
        self._out(SubscribeReply(req, sid, attrs))

    def refused(self, sid: int, reason: str) -> None:
        """The swarm could not store the subscription (a full leaf): the client's subscribe
        fails with the reason; the ``removed`` that follows releases its quota."""
        if sid not in self.sids:
            self._early[sid] = reason
            return
        req = self.sids[sid]
        if req is None:
            return  # already answered (a refresh refused later: the removal tells the rest)
        self.sids[sid] = None
        self._out(SubscribeReply(req, sid, [], f"refused: {reason}"))

    def removed(self, sid: int) -> None:
        self.sids.pop(sid, None)
        sub = self._keys.pop(sid, None)
        if sub is not None:
            self.conn.unsubscribed(sub)
        req = self._unsubscribing.pop(sid, None)
        if req is not None:
            self._out(Done(req))

    def deliver(self, sid: int, ev: EventDelivered) -> None:
        e = ev.event
        self._out(Notification(sid, e.eid, e.schema, list(e.values)))

    def closed(self) -> None:
        """The client went away: its subscriptions go with it."""
        self._dead = True
        for sid in list(self.sids):
            self.peer.forget(sid)
        self.sids.clear()
        self._keys.clear()
        self.conn.close()


def picture_units(pic: TreePicture) -> int:
    """What a tree picture costs in read-only units: two per page's worth of items (a page of
    ``TREE_PAGE_ITEMS`` is about one unit's 64 KiB), at least two."""
    items = sum(1 + len(h.rows) + len(h.pieces) for page in pic.pages for h in page)
    return 2 * max(1, -(-items // TREE_PAGE_ITEMS))


#: Requests that change nothing at the peer: their replies are what the read-only bounds weigh.
_READ_ONLY = frozenset({Hello, StatusRequest, TreeRequest})

_HANDLERS: dict[type[Message], Callable[[ClientSession, Any], None]] = {
    Hello: ClientSession._hello,
    SubscribeRequest: ClientSession._subscribe,
    UnsubscribeRequest: ClientSession._unsubscribe,
    PublishRequest: ClientSession._publish,
    StatusRequest: ClientSession._status,
    TreeRequest: ClientSession._tree_page,
}
