"""Untrusted second-hand information: the gate between peer lists in messages and the core,
and the caps on the outgoing links such lists could make a peer open.

Theory of operation
-------------------
A routing entry (a ``Handle``: id and address) that a message names, other than its signed
sender, is hearsay: anyone can write any id next to any address. The Pastry core puts such
entries straight into its routing table (and, while joining, its leaf set), which is right in
the simulator and wrong on a network with liars: one peer could fill every honest table with
made-up ids, and make every honest peer connect to an address of its choice for each of them.

So the runtime screens every message that carries peer lists (``SECOND_HAND``) before the core
sees it (``SecondHand.screen``): an entry whose peer has *proved* its id (we completed a link
handshake to that exact address, whose answer must be signed by the key the id is the hash of,
or we received a signed message from it) passes; any other becomes a *candidate* and is cut
from the message. Candidates are probed at a bounded rate (``take_probes``: the runtime opens a
connection and runs the link handshake, nothing else); one that answers is proven and handed to
the core then (``probed``: as a ``JoinRows`` naming it, which the core takes as the second-hand
news it was, pinging it first if it would enter the leaf set). Caps bound what one message
and one sender can put in (``per_message``, a token bucket per sender) and the candidates held.

The Kademlia core needs no gate: it only ever adds a peer to a bucket once that peer answered
it in person (a signed message), and the ``FoundNodes`` a lookup collects are only queried; the
gate still applies the per-message and per-sender caps to them.

``LinkCaps`` bounds what any address, learnt however, costs the peer: open outgoing links
(least recently used idle ones are closed to make room), connects in progress, and connects to
an endpoint (host and port, whatever id is written next to it) that failed, backed off
exponentially until a signed message from it says it is back.

Everything here is sans-IO: the caller passes ``now`` (trio's clock in the runtime).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import msgspec

from rangecast.dht.messages import FoundNodes, JoinReply, JoinRows, LeafSetReply, RowReply
from rangecast.dht.wire import Handle, Message
from rangecast.runtime.guard import KeyedBuckets, Rejections, TokenBucket
from rangecast.runtime.identity import ID_BYTES


@dataclass(frozen=True, slots=True)
class TrustConfig:
    """Limits on what untrusted peers (and the addresses they name) may cost a peer."""

    #: Second-hand entries considered per message; the rest are dropped (counted).
    per_message: int = 64
    #: New (unproven) entries taken per sender: a token bucket, per second and burst.
    per_sender_per_s: float = 8.0
    per_sender_burst: float = 128.0
    #: Candidates held awaiting their probe; new ones beyond it are dropped (counted).
    max_candidates: int = 1024
    #: Probes (a connect and a link handshake) per second, and burst.
    probes_per_s: float = 20.0
    probe_burst: float = 64.0
    #: Proven peers remembered (least recently proven forgotten first: re-probed if named).
    max_proven: int = 8192
    #: Outgoing links open at once; beyond it the least recently used idle link is closed.
    max_links: int = 1024
    #: Connects (TCP plus link handshake) in progress at once, probes included.
    max_pending_connects: int = 64
    #: An endpoint whose connect failed is left alone for ``PeerConfig.retry_after_s``, doubled
    #: after each further failure up to this; a signed message from it ends the wait.
    backoff_max_s: float = 30.0
    #: Endpoints whose failures are remembered.
    max_backoffs: int = 4096
    #: Incoming link-handshake openings per source address (IPv6: per /64): per second, burst.
    handshake_per_s: float = 64.0
    handshake_burst: float = 256.0

    @property
    def as_status(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in self.__slots__}


#: The messages whose peer lists are second-hand, and the field holding each list.
SECOND_HAND: dict[type[Message], str] = {
    JoinRows: "entries",
    JoinReply: "leaves",
    LeafSetReply: "leaves",
    RowReply: "entries",
    FoundNodes: "nodes",
}
#: Lists the core only queries (the Kademlia lookup's): capped, never held back.
_QUERIED_ONLY = frozenset({FoundNodes})


def endpoint_of(addr: bytes) -> bytes:
    """The part of a transport address a connect goes to (port and IP), without the id."""
    return addr[ID_BYTES:]


class SecondHand:
    """The gate for second-hand routing entries (see the module's docstring)."""

    __slots__ = (
        "_candidates",
        "_probe_bucket",
        "_probing",
        "_proven",
        "_senders",
        "cfg",
        "fed",
        "probes",
        "probes_failed",
        "rejections",
    )

    def __init__(self, cfg: TrustConfig, rejections: Rejections, now: float) -> None:
        self.cfg = cfg
        self.rejections = rejections
        self._proven: OrderedDict[bytes, None] = OrderedDict()
        #: Candidate address -> the handle it was named with (first come), oldest first.
        self._candidates: OrderedDict[bytes, Handle] = OrderedDict()
        #: Candidates whose probe is under way.
        self._probing: dict[bytes, Handle] = {}
        self._senders = KeyedBuckets[bytes](
            cfg.per_sender_per_s, cfg.per_sender_burst, cfg.max_proven
        )
        self._probe_bucket = TokenBucket(cfg.probes_per_s, cfg.probe_burst, now)
        self.probes = 0
        self.probes_failed = 0
        #: Candidates handed to the core after their proof.
        self.fed = 0

    # ------------------------------------------------------------------------------ proof

    def prove(self, addr: bytes) -> None:
        """``addr``'s owner proved its id (a signed message from it, or our handshake)."""
        proven = self._proven
        if addr in proven:
            proven.move_to_end(addr)
            return
        proven[addr] = None
        if len(proven) > self.cfg.max_proven:
            proven.popitem(last=False)

    def is_proven(self, addr: bytes) -> bool:
        return addr in self._proven

    # ------------------------------------------------------------------------------ screening

    def screen(
        self, src: bytes, msg: Message, now: float, backed_off: LinkCaps | None = None
    ) -> Message:
        """``msg`` as the core may see it: its peer list cut to ``per_message`` entries, and
        (except for lists the core only queries) to proven peers; unproven ones become
        candidates, within the sender's allowance and the table's size. ``backed_off``: the
        link caps, whose backed-off endpoints are not worth a probe."""
        name = SECOND_HAND.get(type(msg))
        if name is None:
            return msg
        entries: list[Handle] = getattr(msg, name)
        rej = self.rejections
        if len(entries) > self.cfg.per_message:
            rej.add(
                "second-hand entries over the per-message cap", len(entries) - self.cfg.per_message
            )
            entries = entries[: self.cfg.per_message]
        queried_only = type(msg) in _QUERIED_ONLY
        kept: list[Handle] = []
        bucket: TokenBucket | None = None
        for h in entries:
            if h.addr[:ID_BYTES] != h.id:
                rej.add("second-hand entry whose id is not its address's")
                continue
            if h.addr in self._proven:
                kept.append(h)
                continue
            if h.addr in self._candidates or h.addr in self._probing:
                continue  # already waiting for its probe
            if queried_only:
                # The core answers only its own queries, k entries each, and queries them
                # before trusting them: the per-message cap is all it needs.
                kept.append(h)
                continue
            if bucket is None:
                bucket = self._senders.bucket(src, now)
            if not bucket.allow(now):
                rej.add("second-hand entries over the sender's rate")
                continue
            if backed_off is not None and backed_off.backed_off(h.addr, now, probe=True):
                rej.add("second-hand entry at a backed-off address")
                continue
            if len(self._candidates) + len(self._probing) >= self.cfg.max_candidates:
                rej.add("candidates over the cap")
                continue
            self._candidates[h.addr] = h
        if len(kept) == len(getattr(msg, name)):
            return msg
        return msgspec.structs.replace(msg, **{name: kept})

    # ------------------------------------------------------------------------------ probing

    def take_probes(self, now: float, caps: LinkCaps) -> list[bytes]:
        """Candidates to probe now, oldest first, within the probe rate and the free connect
        slots, one at a time per endpoint (fakes all naming one endpoint cost one connect per
        backoff period); one at a backed-off endpoint is dropped (counted)."""
        out: list[bytes] = []
        free = self.cfg.max_pending_connects - caps.pending
        busy = {endpoint_of(a) for a in self._probing}
        cands = self._candidates
        for addr in list(cands):
            if len(out) >= free:
                break
            if caps.backed_off(addr, now, probe=True):
                del cands[addr]
                self.rejections.add("second-hand entry at a backed-off address")
                continue
            ep = endpoint_of(addr)
            if ep in busy:
                continue
            if not self._probe_bucket.allow(now):
                break
            busy.add(ep)
            out.append(addr)
            self._probing[addr] = cands.pop(addr)
        self.probes += len(out)
        return out

    def probed(self, addr: bytes, ok: bool) -> Message | None:
        """The probe of candidate ``addr`` ended; if it proved its id, the message that hands
        it to the core (fed as if from ``addr``), else None."""
        handle = self._probing.pop(addr, None)
        if not ok:
            self.probes_failed += 1
            return None
        self.prove(addr)
        if handle is None:
            return None
        self.fed += 1
        return JoinRows(handle, [handle])

    @property
    def waiting(self) -> bool:
        """Some candidate awaits its probe."""
        return bool(self._candidates)

    def status(self) -> dict[str, int]:
        return {
            "candidates": len(self._candidates) + len(self._probing),
            "proven": len(self._proven),
            "probes": self.probes,
            "probes_failed": self.probes_failed,
            "admitted_after_proof": self.fed,
        }


class LinkCaps:
    """Caps on outgoing links: how many are open, how many connect at once, and exponential
    backoff per endpoint after failed connects (see the module's docstring)."""

    __slots__ = (
        "_backoff",
        "_probe_backoff",
        "cfg",
        "evicted",
        "pending",
        "refused",
        "retry_after_s",
    )

    def __init__(self, cfg: TrustConfig, retry_after_s: float) -> None:
        self.cfg = cfg
        self.retry_after_s = retry_after_s
        #: Endpoint -> (failures in a row, not before), least recently failed first.
        self._backoff: OrderedDict[bytes, tuple[int, float]] = OrderedDict()
        #: The same for endpoints that accepted a probe's connect but did not prove the id
        #: named with them: further probes wait, links do not (a liar may name an honest
        #: peer's endpoint next to a made-up id, which must not cut us off from that peer).
        self._probe_backoff: OrderedDict[bytes, tuple[int, float]] = OrderedDict()
        self.pending = 0
        self.evicted = 0
        #: Connects not attempted, by reason.
        self.refused: dict[str, int] = {}

    def refuse(self, reason: str) -> None:
        self.refused[reason] = self.refused.get(reason, 0) + 1

    def backed_off(self, addr: bytes, now: float, *, probe: bool = False) -> bool:
        """Whether connects to ``addr``'s endpoint wait (``probe``: a probe's connect)."""
        ep = endpoint_of(addr)
        st = self._backoff.get(ep)
        if st is not None and now < st[1]:
            return True
        if probe:
            st = self._probe_backoff.get(ep)
            return st is not None and now < st[1]
        return False

    def may_connect(self, addr: bytes, now: float) -> bool:
        """Whether a connect to ``addr`` may start now (counted when not)."""
        if self.backed_off(addr, now):
            self.refuse("endpoint backed off")
            return False
        if self.pending >= self.cfg.max_pending_connects:
            self.refuse("pending connects full")
            return False
        return True

    @contextmanager
    def connecting(self) -> Iterator[None]:
        """Around one connect and handshake: counted among the pending ones."""
        self.pending += 1
        try:
            yield
        finally:
            self.pending -= 1

    def failed(self, addr: bytes, now: float, *, probe: bool = False) -> float:
        """A connect to ``addr`` failed (``probe``: a probe's handshake did not prove the id
        named with it): until when its endpoint is left alone (by probes only, if ``probe``)."""
        table = self._probe_backoff if probe else self._backoff
        ep = endpoint_of(addr)
        fails = table.pop(ep, (0, 0.0))[0] + 1
        wait = min(self.retry_after_s * 2.0 ** min(fails - 1, 30), self.cfg.backoff_max_s)
        until = now + max(wait, self.retry_after_s)
        table[ep] = (fails, until)
        if len(table) > self.cfg.max_backoffs:
            table.popitem(last=False)
        return until

    def succeeded(self, addr: bytes) -> None:
        """A connect to ``addr`` succeeded, or it sent us a signed message: no more backoff
        for its endpoint (the probes' too: that id is proven there; others are not)."""
        if self._backoff:
            self._backoff.pop(endpoint_of(addr), None)

    def victim(self, idle: Iterator[tuple[bytes, float]]) -> bytes | None:
        """The link to close to make room for a new one: the least recently used of the
        ``idle`` ones (address, last use), or None if none is idle (counted)."""
        best: tuple[float, bytes] | None = None
        for addr, used in idle:
            if best is None or used < best[0]:
                best = (used, addr)
        if best is None:
            self.refuse("link table full")
            return None
        self.evicted += 1
        return best[1]

    def status(self) -> dict[str, object]:
        return {
            "pending_connects": self.pending,
            "evicted_idle": self.evicted,
            "endpoints_backed_off": len(self._backoff),
            "endpoints_probe_backed_off": len(self._probe_backoff),
            "refused": dict(sorted(self.refused.items())),
        }


__all__ = ["SECOND_HAND", "LinkCaps", "SecondHand", "TrustConfig", "endpoint_of"]
