"""Client quotas and admission: what one client, one client address and the peer as a whole may
cost, and the accounting that enforces it.

A peer serves anyone who reaches its port, so every resource a client can make it hold is
bounded here: connections per address, subscriptions per connection and per address (and how
many identical ones an address may hold, since identical subscriptions cannot be told apart by
splitting a tree node; *identical* by cost, not by equality: subscriptions whose every bound
falls in the same 1/``SIMILAR_CELLS`` of its attribute's domain land in the same leaves and
count as one kind, ``similar``), publishes per second per connection and per address, how long a
connection may stay without a complete well-formed frame or sit in the middle of one, and how
much a client that does not read may have queued. A publish is also refused while the peer is
saturated (its outgoing links hold too many frames, or its event loop lags), so that what it
accepts is delivered promptly instead of queueing without bound.

Read-only requests (``Hello``, ``StatusRequest``, ``TreeRequest``) change nothing but cost the
peer work and reply bytes: a status flood starved a victim's event path (one event through it in
20 s) and a client that never read its tree pages grew one from 114 to 935 MB (issue 29). They
are weighed in *read-only units*: a status costs one (and one per further 64 KiB of its JSON), a
tree picture two per page's worth of items (it is built, then encoded; its pages are served
from it in order, once each, at no further charge), a ``Hello`` one. They are bounded by
token buckets per connection, per address and per peer (``CostBucket``): one request passes
whenever its bucket holds a unit, and is charged in full afterwards, since a picture's size is
only known once it is built. Over the peer's budget a status is answered from the last one
built (so a flood builds at most the peer's rate of them); over a connection's or address's, or a
tree picture over the peer's, the request is refused with the wait that helps, and a connection
refused ``readonly_close_after`` times is closed. The replies' bytes that wait unsent are bounded
per connection (``readonly_queue_bytes``: beyond it the client is closed) and per peer
(``peer_readonly_queue_bytes``: beyond it the connections that have waited longest with unread
replies are closed), and so are the tree pictures held for clients paging through them
(``tree_pictures_held``: beyond it the least recently used is dropped).

Every refusal is counted by reason (``ClientLedger.refused``, also added to the peer's
``Rejections``) and shown in ``peer status`` (its ``clients`` block). The peer's driver
(``runtime/peer.py``) and the client sessions (``runtime/service.py``) call in; nothing here
touches a socket, and time is passed in (trio's clock) except in the lag probe.
"""

from __future__ import annotations

import math
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

import trio

from rangecast.pubsub.schema import Schema
from rangecast.pubsub.subscription import Subscription
from rangecast.runtime.admission import AdmissionConfig, AdmissionRate
from rangecast.runtime.guard import Rejections, TokenBucket

#: Cells per attribute domain within which subscriptions' bounds count as the same
#: (``similar``): 2^12, so pieces farther apart than a cell are separated by a dozen splits,
#: while near-identical ones (a bound nudged by less) would share leaves that cannot split.
SIMILAR_CELLS = 4096


def similar(sub: Subscription, schema: Schema) -> Hashable:
    """What the identical-subscription quota counts: ``sub``'s box snapped outwards to a grid of
    ``SIMILAR_CELLS`` cells per attribute (the red team's 4,000-5,000 near-identical ranges,
    each nudged by 0.001, passed an equality check; issue 29)."""
    key: list[Hashable] = [sub.schema]
    for i, r in sub.ranges:
        a = schema.attributes[i]
        width = (a.max - a.min) or 1.0
        lo = (r.lo - a.min) / width * SIMILAR_CELLS
        hi = (r.hi - a.min) / width * SIMILAR_CELLS
        key.append(
            (
                i,
                math.floor(lo) if math.isfinite(lo) else -1,
                math.ceil(hi) if math.isfinite(hi) else SIMILAR_CELLS + 1,
            )
        )
    return tuple(key)


@dataclass(frozen=True, slots=True)
class Quotas:
    """Every client limit and its default (docs/runtime.md, "Client limits", lists them)."""

    #: Open connections from one IP address that are not (yet) authenticated peer links:
    #: clients, and connections that have not said what they are.
    connections_per_address: int = 64
    #: A connection that has not sent one well-formed frame within this is closed.
    idle_timeout_s: float = 30.0
    #: A frame started and not finished within this closes its connection (slowloris).
    half_frame_timeout_s: float = 10.0
    subscriptions_per_connection: int = 1_000
    subscriptions_per_address: int = 4_000
    #: Identical subscriptions (same schema and ranges) one address may hold at once.
    identical_subscriptions_per_address: int = 16
    #: Publishes per second and burst, per connection and per address (token buckets).
    publish_rate_per_s: float = 200.0
    publish_burst: float = 400.0
    address_publish_rate_per_s: float = 1_000.0
    address_publish_burst: float = 2_000.0
    #: Replies and notifications queued for one client (frames, bytes): beyond either, or
    #: with a write stalled for ``slow_reader_s``, the client is closed and its subscriptions
    #: removed.
    client_queue_frames: int = 65_536
    client_queue_bytes: int = 16 << 20
    slow_reader_s: float = 30.0
    #: The peer is saturated, and refuses publishes, while its outgoing links hold more than
    #: this many frames in all, or its event loop lags more than ``saturation_lag_s``
    #: (measured every ``lag_probe_s``).
    saturation_backlog: int = 4_096
    saturation_lag_s: float = 0.1
    lag_probe_s: float = 0.1
    #: What a refused publish is told to wait before trying again when the peer is saturated.
    busy_retry_s: float = 0.2
    #: Read-only requests (module docstring), in read-only units per second and burst: per
    #: connection, per address and per peer. An honest ``peer status`` asks once, ``swarm
    #: check`` pictures each peer's tree once (two units per 1,000 items, charged once); the
    #: peer's rate bounds the work (a unit is 0.1-0.7 ms) whatever the number of addresses.
    readonly_rate_per_s: float = 10.0
    readonly_burst: float = 20.0
    address_readonly_rate_per_s: float = 40.0
    address_readonly_burst: float = 80.0
    peer_readonly_rate_per_s: float = 100.0
    peer_readonly_burst: float = 200.0
    #: Read-only requests refused on one connection before it is closed (a flood).
    readonly_close_after: int = 200
    #: Bytes of read-only replies waiting unsent: per connection (beyond it, the client is
    #: closed; one reply always fits an empty queue) and per peer (beyond it, the connections
    #: whose unread replies are oldest are closed).
    readonly_queue_bytes: int = 1 << 20
    peer_readonly_queue_bytes: int = 16 << 20
    #: Tree pictures held for clients paging through them; beyond it the least recently
    #: used is dropped (its client is told to ask for page 0 again).
    tree_pictures_held: int = 8
    #: Below those bounds, the adaptive publish rate (``runtime/admission.py``).
    admission: AdmissionConfig = field(default_factory=AdmissionConfig)

    def __post_init__(self) -> None:
        for name in self.__slots__:
            value = getattr(self, name)
            if isinstance(value, AdmissionConfig):
                continue  # checked by its own __post_init__
            if not (isinstance(value, int | float) and value > 0 and not math.isnan(value)):
                raise ValueError(f"quotas.{name} must be a positive number, got {value!r}")


#: The defaults (``PeerConfig.quotas``).
DEFAULT_QUOTAS = Quotas()

#: Refusal reasons, each defined once (``peer status`` shows them as they are).
CONNECTIONS = "connections per address"
IDLE = "idle connection closed"
HALF_FRAME = "half frame timeout"
SUBS_CONNECTION = "subscriptions per connection"
SUBS_ADDRESS = "subscriptions per address"
SUBS_IDENTICAL = "identical subscriptions per address"
PUBLISH_RATE = "publish rate per connection"
PUBLISH_ADDRESS = "publish rate per address"
BUSY = "publish refused: peer saturated"
SLOW_READER = "slow reader closed"
NOT_OWNED = "unsubscribe of a subscription not on this connection"
READONLY_RATE = "read-only rate per connection"
READONLY_ADDRESS = "read-only rate per address"
READONLY_BUSY = "read-only request refused: peer busy"
READONLY_FLOOD = "read-only flood closed"
READONLY_UNREAD = "read-only replies unread: closed"

#: The bytes of reply one read-only unit pays for (about a tree page of ``TREE_PAGE_ITEMS``).
READONLY_UNIT_BYTES = 64 << 10


def readonly_units(reply_bytes: int) -> int:
    """What a status reply of ``reply_bytes`` costs: one unit per started 64 KiB."""
    return max(1, -(-reply_bytes // READONLY_UNIT_BYTES))


class CostBucket(TokenBucket):
    """A token bucket for requests of different costs: one passes whenever the bucket holds a
    unit (``ready``), and its cost is then charged in full (``charge``), into debt if need be,
    which later requests wait out. So one request of any size is always possible from a full
    bucket (a picture's size is known only once it is built), and the average stays at
    ``rate``."""

    __slots__ = ()

    def ready(self, now: float) -> bool:
        self.tokens = min(self.tokens + max(now - self.last, 0.0) * self.rate, self.burst)
        self.last = now
        return self.tokens >= 1.0

    def charge(self, cost: float) -> None:
        self.tokens -= cost

    @property
    def wait_s(self) -> float:
        """How long until it holds a unit again."""
        return max(1.0 - self.tokens, 0.0) / self.rate


class Refusal(Exception):
    """A request over a quota: ``reason`` (one of the constants above) is what is counted,
    ``str()`` what the client is told, ``retry_after_s`` > 0 when waiting helps."""

    def __init__(self, reason: str, message: str, retry_after_s: float = 0.0) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry_after_s = retry_after_s


class _Address:
    """What the connections from one IP address hold together."""

    __slots__ = ("bucket", "connections", "identical", "readonly", "subscriptions")

    def __init__(self, q: Quotas, now: float) -> None:
        self.connections = 0
        self.subscriptions = 0
        self.identical: Counter[Hashable] = Counter()
        self.bucket = TokenBucket(q.address_publish_rate_per_s, q.address_publish_burst, now)
        self.readonly = CostBucket(q.address_readonly_rate_per_s, q.address_readonly_burst, now)


class ClientLedger:
    """The peer's accounting of its client connections (one per peer)."""

    def __init__(self, quotas: Quotas, rejections: Rejections) -> None:
        self.quotas = quotas
        self._rejections = rejections
        # An address is kept while it has a connection, so the table is bounded by the open
        # connections; an address that reconnects starts a fresh publish bucket (it paid a
        # connect, and the connection's own bucket starts full anyway).
        self._addresses: dict[str, _Address] = {}
        self.refused: dict[str, int] = {}
        self.publishes_accepted = 0
        #: Notifications for accepted events that a slow client's closing threw away.
        self.notifications_dropped = 0
        #: The event loop's lag at the last probe (s).
        self.lag_s = 0.0
        self.admission = AdmissionRate(quotas.admission)
        # Read-only requests (module docstring). The peer's bucket starts full whatever the
        # clock's origin (it caps what it accrues).
        self.readonly = CostBucket(quotas.peer_readonly_rate_per_s, quotas.peer_readonly_burst, 0.0)
        #: The last status built (JSON), served instead of a new one over the peer's budget.
        self._status_text: str | None = None
        #: Tree pictures held for clients paging through them, least recently used first.
        self._pictures: OrderedDict[ClientConnection, object] = OrderedDict()
        #: Connections with read-only reply bytes unsent, the longest waiting first.
        self._unread: dict[ClientConnection, None] = {}
        self.readonly_queued = 0
        self.readonly_served = 0
        self.statuses_built = 0
        self.statuses_cached = 0
        self.pictures_built = 0
        self.pictures_dropped = 0

    # ------------------------------------------------------------------------- connections

    def admit(self, host: str, now: float) -> ClientConnection | None:
        """A new incoming connection from ``host``; None (counted) if over the quota."""
        entry = self._addresses.get(host)
        if entry is None:
            entry = self._addresses[host] = _Address(self.quotas, now)
        if entry.connections >= self.quotas.connections_per_address:
            self.refuse(CONNECTIONS)
            self._drop_if_empty(host, entry)
            return None
        entry.connections += 1
        return ClientConnection(self, host, entry, now)

    def refuse(self, reason: str) -> None:
        self.refused[reason] = self.refused.get(reason, 0) + 1
        self._rejections.add(reason)

    def _release(self, host: str, entry: _Address) -> None:
        entry.connections -= 1
        self._drop_if_empty(host, entry)

    def _drop_if_empty(self, host: str, entry: _Address) -> None:
        if entry.connections <= 0 and entry.subscriptions <= 0:
            self._addresses.pop(host, None)

    # ---------------------------------------------------------------------------- admission

    def saturation(self, backlog: int, now: float) -> str | None:
        """Why the peer cannot take more publishes now (None: it can). ``backlog``: frames
        queued on its outgoing links."""
        q = self.quotas
        if backlog > q.saturation_backlog:
            return f"{backlog} frames queued on its links (limit {q.saturation_backlog})"
        if self.lag_s > q.saturation_lag_s:
            return f"its event loop lags {self.lag_s:.2f} s (limit {q.saturation_lag_s:g} s)"
        if not self.admission.allow(now):
            rate = self.admission.rate
            return f"over its admission rate, {rate:.0f} publishes/s while its event loop lags"
        return None

    async def probe_lag(self) -> None:
        """Measure how late a sleep of ``lag_probe_s`` wakes up: the time any input waits
        before the peer gets to it. Runs for the peer's lifetime."""
        period = self.quotas.lag_probe_s
        while True:
            start = trio.current_time()
            await trio.sleep(period)
            now = trio.current_time()
            self.lag_s = max(now - start - period, 0.0)
            self.admission.observe(self.lag_s, now)

    # ---------------------------------------------------------------------- read-only work

    def status_text(self, now: float, build: Callable[[], str]) -> str:
        """The status JSON for a client: built afresh while the peer's read-only budget lasts,
        else the last one built (a flood of status requests builds at most the peer's rate of
        them, and an honest one, well within it, always sees the present)."""
        text = self._status_text
        if self.readonly.ready(now) or text is None:
            text = self._status_text = build()
            self.readonly.charge(readonly_units(len(text)))
            self.statuses_built += 1
        else:
            self.statuses_cached += 1
        return text

    def check_picture(self, now: float) -> None:
        """Raise ``Refusal`` (counted) if the peer's read-only budget cannot take a tree
        picture now; the caller charges it once built (``picture_built``)."""
        if not self.readonly.ready(now):
            self.refuse(READONLY_BUSY)
            wait = self.readonly.wait_s
            raise Refusal(
                READONLY_BUSY,
                f"read-only requests: the peer is busy with others, try again in {_ms(wait)} ms",
                wait,
            )

    def picture_built(self, cost: float) -> None:
        self.readonly.charge(cost)
        self.pictures_built += 1

    def hold_picture(self, conn: ClientConnection, pic: object) -> None:
        """Keep ``conn``'s picture for its next pages; beyond ``tree_pictures_held`` the least
        recently used one is dropped (its client is told to start again)."""
        pictures = self._pictures
        pictures[conn] = pic
        pictures.move_to_end(conn)
        while len(pictures) > self.quotas.tree_pictures_held:
            pictures.popitem(last=False)
            self.pictures_dropped += 1

    def picture(self, conn: ClientConnection) -> object | None:
        pic = self._pictures.get(conn)
        if pic is not None:
            self._pictures.move_to_end(conn)
        return pic

    def drop_picture(self, conn: ClientConnection) -> None:
        self._pictures.pop(conn, None)

    def _make_room(self, conn: ClientConnection, n: int) -> bool:
        """Close the connections whose unread read-only replies wait longest until ``n`` more
        bytes fit the peer's bound; False if ``conn`` itself is one to close."""
        bound = self.quotas.peer_readonly_queue_bytes
        while self.readonly_queued + n > bound and self._unread:
            oldest = next(iter(self._unread))
            if oldest is conn:
                return False
            oldest.unread()
        return True

    # ------------------------------------------------------------------------------ status

    def status(self, backlog: int) -> dict[str, object]:
        entries = self._addresses.values()
        return {
            "connections": sum(a.connections for a in entries),
            "addresses": len(self._addresses),
            "subscriptions": sum(a.subscriptions for a in entries),
            "publishes_accepted": self.publishes_accepted,
            "refused": dict(sorted(self.refused.items())),
            "notifications_dropped": self.notifications_dropped,
            "backlog_frames": backlog,
            "lag_s": round(self.lag_s, 3),
            "admission": self.admission.status(),
            "read_only": {
                "served": self.readonly_served,
                "statuses_built": self.statuses_built,
                "statuses_cached": self.statuses_cached,
                "pictures_built": self.pictures_built,
                "pictures_held": len(self._pictures),
                "pictures_dropped": self.pictures_dropped,
                "queued_bytes": self.readonly_queued,
                "unread_connections": len(self._unread),
            },
        }


class ClientConnection:
    """One incoming connection's quotas: its address slot, its deadlines while it has not
    said what it is or sits in the middle of a frame, its subscriptions and publish rate."""

    __slots__ = (
        "_closed",
        "_entry",
        "_ledger",
        "_partial_since",
        "_subs",
        "bucket",
        "greeted",
        "host",
        "on_unread",
        "opened",
        "readonly",
        "readonly_queued",
        "readonly_refused",
    )

    def __init__(self, ledger: ClientLedger, host: str, entry: _Address, now: float) -> None:
        self._ledger = ledger
        self.host = host
        self._entry = entry
        self.opened = now
        #: A well-formed frame has arrived (the idle timeout no longer applies).
        self.greeted = False
        self._partial_since: float | None = None
        self._subs: Counter[Hashable] = Counter()
        self._closed = False
        q = ledger.quotas
        self.bucket = TokenBucket(q.publish_rate_per_s, q.publish_burst, now)
        self.readonly = CostBucket(q.readonly_rate_per_s, q.readonly_burst, now)
        #: Read-only reply bytes queued and not yet written, and read-only requests refused.
        self.readonly_queued = 0
        self.readonly_refused = 0
        #: Set by the client session: closes it for not reading its read-only replies.
        self.on_unread: Callable[[], None] | None = None

    @property
    def quotas(self) -> Quotas:
        return self._ledger.quotas

    @property
    def ledger(self) -> ClientLedger:
        return self._ledger

    # ------------------------------------------------------------------------- deadlines

    def fed(self, now: float, frames: int, buffered: int) -> None:
        """Bytes arrived: ``frames`` complete frames came out, ``buffered`` bytes of a next
        frame wait for the rest."""
        if buffered == 0:
            self._partial_since = None
        elif frames or self._partial_since is None:
            self._partial_since = now  # a new frame started in this chunk

    @property
    def deadline(self) -> float:
        """When the connection is closed unless something changes (inf: never)."""
        idle = math.inf if self.greeted else self.opened + self._ledger.quotas.idle_timeout_s
        half = (
            math.inf
            if self._partial_since is None
            else self._partial_since + self._ledger.quotas.half_frame_timeout_s
        )
        return min(idle, half)

    def expired(self) -> None:
        """The deadline passed: count why (the caller closes the connection)."""
        q = self._ledger.quotas
        idle = math.inf if self.greeted else self.opened + q.idle_timeout_s
        half = self._partial_since is not None and self.deadline < idle
        self._ledger.refuse(HALF_FRAME if half else IDLE)

    def became_link(self) -> None:
        """The connection is an authenticated peer link: it no longer takes a client slot
        of its address (links are bounded per peer, not per address)."""
        if not self._closed:
            self._closed = True
            self._ledger._release(self.host, self._entry)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        entry = self._entry
        entry.subscriptions -= sum(self._subs.values())
        entry.identical.subtract(self._subs)
        entry.identical += Counter()  # drop the keys that reached zero
        self._subs.clear()
        self._release_readonly()
        self._ledger.drop_picture(self)
        self._ledger._release(self.host, entry)

    # ------------------------------------------------------------------------ client API

    def check_subscribe(self, key: Hashable) -> None:
        """Raise ``Refusal`` (counted) if one more subscription ``key`` is over a quota."""
        q = self._ledger.quotas
        held = sum(self._subs.values())
        if held >= q.subscriptions_per_connection:
            self._refuse(SUBS_CONNECTION, q.subscriptions_per_connection, "per connection")
        if self._entry.subscriptions >= q.subscriptions_per_address:
            self._refuse(SUBS_ADDRESS, q.subscriptions_per_address, "per address")
        if self._entry.identical[key] >= q.identical_subscriptions_per_address:
            self._refuse(
                SUBS_IDENTICAL,
                q.identical_subscriptions_per_address,
                f"identical or nearly (to 1/{SIMILAR_CELLS} of each domain) per address",
            )

    def _refuse(self, reason: str, limit: int, scope: str) -> None:
        self._ledger.refuse(reason)
        raise Refusal(reason, f"subscription quota: at most {limit} subscriptions {scope}")

    def subscribed(self, key: Hashable) -> None:
        self._subs[key] += 1
        self._entry.subscriptions += 1
        self._entry.identical[key] += 1

    def unsubscribed(self, key: Hashable) -> None:
        if self._subs[key] <= 0:
            return
        self._subs[key] -= 1
        if not self._subs[key]:
            del self._subs[key]
        self._entry.subscriptions -= 1
        self._entry.identical[key] -= 1
        if self._entry.identical[key] <= 0:
            del self._entry.identical[key]

    def check_publish(self, now: float, backlog: int) -> None:
        """Raise ``Refusal`` (counted) if a publish now is over a rate or the peer is
        saturated; otherwise count it accepted."""
        ledger = self._ledger
        q = ledger.quotas
        if not self.bucket.allow(now):
            ledger.refuse(PUBLISH_RATE)
            wait = (1.0 - self.bucket.tokens) / q.publish_rate_per_s
            raise Refusal(
                PUBLISH_RATE,
                f"publish rate: at most {q.publish_rate_per_s:g}/s per connection",
                wait,
            )
        if not self._entry.bucket.allow(now):
            ledger.refuse(PUBLISH_ADDRESS)
            wait = (1.0 - self._entry.bucket.tokens) / q.address_publish_rate_per_s
            raise Refusal(
                PUBLISH_ADDRESS,
                f"publish rate: at most {q.address_publish_rate_per_s:g}/s per address",
                wait,
            )
        why = ledger.saturation(backlog, now)
        if why is not None:
            ledger.refuse(BUSY)
            raise Refusal(BUSY, f"the peer is saturated ({why}): try again", q.busy_retry_s)
        ledger.publishes_accepted += 1

    def check_readonly(self, now: float, address: bool = True) -> None:
        """Raise ``Refusal`` (counted) if a read-only request now is over this connection's
        read-only rate, or (``address``) its address's; the caller charges what it cost
        (``charge_readonly``). ``flooding`` says when the refusals should close it."""
        ledger = self._ledger
        q = ledger.quotas
        if not self.readonly.ready(now):
            self._refuse_readonly(READONLY_RATE, self.readonly, q.readonly_rate_per_s, "connection")
        if address and not self._entry.readonly.ready(now):
            self._refuse_readonly(
                READONLY_ADDRESS, self._entry.readonly, q.address_readonly_rate_per_s, "address"
            )

    def _refuse_readonly(self, reason: str, bucket: CostBucket, rate: float, scope: str) -> None:
        self.readonly_refused += 1
        self._ledger.refuse(reason)
        wait = bucket.wait_s
        raise Refusal(
            reason,
            f"read-only requests: at most {rate:g} units a second per {scope}, "
            f"try again in {_ms(wait)} ms",
            wait,
        )

    def check_picture(self, now: float) -> None:
        """``check_readonly``, then the peer's budget for a tree picture (``ClientLedger.
        check_picture``)."""
        self.check_readonly(now)
        try:
            self._ledger.check_picture(now)
        except Refusal:
            self.readonly_refused += 1
            raise

    @property
    def flooding(self) -> bool:
        """Refused read-only requests enough times to be closed."""
        return self.readonly_refused >= self._ledger.quotas.readonly_close_after

    def charge_readonly(self, cost: float, address: bool = True) -> None:
        """What a read-only request cost, in units: charged to this connection's bucket and
        (``address``) its address's, at most a burst each (the peer's own bucket takes it in
        full)."""
        q = self._ledger.quotas
        self._ledger.readonly_served += 1
        self.readonly.charge(min(cost, q.readonly_burst))
        if address:
            self._entry.readonly.charge(min(cost, q.address_readonly_burst))

    def queue_readonly(self, n: int) -> bool:
        """``n`` more bytes of read-only reply are about to be queued for this client. False
        (the caller closes it, counted) if this connection already holds unread replies and
        they would pass ``readonly_queue_bytes``, or its unread replies are the oldest of the
        peer's when they pass ``peer_readonly_queue_bytes``; others closed to make room are
        counted as they go."""
        ledger = self._ledger
        if self.readonly_queued and self.readonly_queued + n > ledger.quotas.readonly_queue_bytes:
            return False
        if not ledger._make_room(self, n):
            return False
        if not self.readonly_queued:
            ledger._unread[self] = None
        self.readonly_queued += n
        ledger.readonly_queued += n
        return True

    def sent_readonly(self, n: int) -> None:
        """``n`` bytes of read-only reply were written to the client."""
        n = min(n, self.readonly_queued)
        self.readonly_queued -= n
        self._ledger.readonly_queued -= n
        if not self.readonly_queued:
            self._ledger._unread.pop(self, None)

    def _release_readonly(self) -> None:
        self.sent_readonly(self.readonly_queued)

    def unread(self) -> None:
        """Closed to make room for others' read-only replies: its queued ones no longer count
        (they go with the connection), and the session closes it (``on_unread``)."""
        self._release_readonly()
        self._ledger.drop_picture(self)
        if self.on_unread is not None:
            self.on_unread()

    def not_owned(self) -> None:
        self._ledger.refuse(NOT_OWNED)

    def refuse(self, reason: str) -> None:
        """A request refused for ``reason`` defined elsewhere (a client token): counted."""
        self._ledger.refuse(reason)

    def slow_reader(self, queued: int, reason: str = SLOW_READER) -> None:
        """The client is closed for not reading (``reason``: its writes stalled or its queue
        full, or its read-only replies unread); the ``queued`` frames go with it."""
        self._ledger.refuse(reason)
        self.dropped(queued)

    def dropped(self, n: int) -> None:
        """``n`` frames for a client that is gone (or going) were thrown away."""
        self._ledger.notifications_dropped += n


def _ms(seconds: float) -> int:
    return max(round(seconds * 1000), 1)


def remote_host(stream: trio.SocketStream) -> str:
    """The IP address a connection comes from ("" if the socket cannot say: it is gone)."""
    try:
        name = stream.socket.getpeername()
    except OSError:
        return ""
    return str(name[0]) if isinstance(name, tuple) else str(name)
