"""Client quotas and admission: what one client, one client address and the peer as a whole may
cost, and the accounting that enforces it.

A peer serves anyone who reaches its port, so every resource a client can make it hold is
bounded here: connections per address, subscriptions per connection and per address (and how
many identical ones an address may hold, since identical subscriptions cannot be told apart by
splitting a tree node), publishes per second per connection and per address, how long a
connection may stay without a complete well-formed frame or sit in the middle of one, and how
much a client that does not read may have queued. A publish is also refused while the peer is
saturated (its outgoing links hold too many frames, or its event loop lags), so that what it
accepts is delivered promptly instead of queueing without bound.

Every refusal is counted by reason (``ClientLedger.refused``, also added to the peer's
``Rejections``) and shown in ``peer status`` (its ``clients`` block). The peer's driver
(``runtime/peer.py``) and the client sessions (``runtime/service.py``) call in; nothing here
touches a socket, and time is passed in (trio's clock) except in the lag probe.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass, field

import trio

from rangecast.runtime.admission import AdmissionConfig, AdmissionRate
from rangecast.runtime.guard import Rejections, TokenBucket


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


class Refusal(Exception):
    """A request over a quota: ``reason`` (one of the constants above) is what is counted,
    ``str()`` what the client is told, ``retry_after_s`` > 0 when waiting helps."""

    def __init__(self, reason: str, message: str, retry_after_s: float = 0.0) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry_after_s = retry_after_s


class _Address:
    """What the connections from one IP address hold together."""

    __slots__ = ("bucket", "connections", "identical", "subscriptions")

    def __init__(self, q: Quotas, now: float) -> None:
        self.connections = 0
        self.subscriptions = 0
        self.identical: Counter[Hashable] = Counter()
        self.bucket = TokenBucket(q.address_publish_rate_per_s, q.address_publish_burst, now)


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
        "opened",
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

    @property
    def quotas(self) -> Quotas:
        return self._ledger.quotas

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
                SUBS_IDENTICAL, q.identical_subscriptions_per_address, "identical ones per address"
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

    def not_owned(self) -> None:
        self._ledger.refuse(NOT_OWNED)

    def refuse(self, reason: str) -> None:
        """A request refused for ``reason`` defined elsewhere (a client token): counted."""
        self._ledger.refuse(reason)

    def slow_reader(self, queued: int) -> None:
        """The client is closed for not reading; the ``queued`` frames go with it."""
        self._ledger.refuse(SLOW_READER)
        self.dropped(queued)

    def dropped(self, n: int) -> None:
        """``n`` frames for a client that is gone (or going) were thrown away."""
        self._ledger.notifications_dropped += n


def remote_host(stream: trio.SocketStream) -> str:
    """The IP address a connection comes from ("" if the socket cannot say: it is gone)."""
    try:
        name = stream.socket.getpeername()
    except OSError:
        return ""
    return str(name[0]) if isinstance(name, tuple) else str(name)
