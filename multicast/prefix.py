"""Prefix-grouped application-layer multicast: the grouping decision (thesis 3.4.2, Program 3.4).

Theory of operation
-------------------
A message for a set of target keys travels as one message per next hop. At every hop (the
sender included) ``split`` divides the keys still to serve into those this node is the root of
(deliver here) and groups, each sent on as one message routed by the DHT towards the group's
representative key. No multicast tree is built or kept: every decision is the DHT's own routing
decision (``next_hop`` of Pastry or Kademlia), taken again at each hop.

The grouping rule:

1. Ask the DHT for every key's next hop. If the keys need at most ``2^b`` distinct next hops,
   one group per next hop: every key then follows exactly the path a unicast message for it
   would take, only batched, so hops and latency equal unicast's.
2. Otherwise (keys spread over several routing-table rows, or many leaf-set roots) regroup by
   prefix as the thesis does: take the longest prefix shared by all the keys (``r`` digits) and
   bucket the keys by their digit at position ``r``: at most ``2^b`` buckets. A bucket whose
   keys all share one next hop goes there; a mixed bucket goes to the next hop of its
   representative (the key its most common next hop serves). Buckets bound for the same next hop
   are merged. The fan-out is therefore at most ``2^b`` per hop.

Why it terminates: in case 1 each key makes Pastry progress; a mixed bucket of case 2 carries
keys that share ``r + 1`` digits, so when it is split again its shared prefix is longer; the
``max_hops`` budget carried by the message (checked by the user of ``split``) bounds anything
else. A key is never both delivered and sent on, and every key leaves ``split`` in exactly one
place, so a target is served exactly once if the DHT delivers every message once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from rangecast.dht.core import DhtCore
from rangecast.dht.routing import Peer

#: Hop budget of a multicast message (Pastry needs about log16 N hops per key; a mixed bucket
#: can add one per prefix digit).
MAX_HOPS = 64


@dataclass(frozen=True, slots=True)
class Group:
    """Keys (by index into the list given to ``split``) sent on as one message."""

    next_hop: Peer
    #: Route the group's message by this key: the DHT's next hop for it is ``next_hop``.
    route_key: int
    members: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Split:
    #: Keys this node is the root of.
    local: tuple[int, ...]
    groups: tuple[Group, ...]


def split(dht: DhtCore, keys: Sequence[int]) -> Split:
    """Divide ``keys`` into those ``dht`` is root of and at most ``2^b`` next-hop groups."""
    local: list[int] = []
    hop_of: dict[int, Peer] = {}
    by_hop: dict[int, list[int]] = {}
    next_hop = dht.next_hop
    for i, key in enumerate(keys):
        nh = next_hop(key)
        if nh is None:
            local.append(i)
            continue
        hop_of[i] = nh
        by_hop.setdefault(nh.id, []).append(i)
    if not by_hop:
        return Split(tuple(local), ())
    space = dht.space
    if len(by_hop) <= space.radix:
        groups = tuple(
            Group(hop_of[members[0]], keys[members[0]], tuple(members))
            for members in by_hop.values()
        )
        return Split(tuple(local), groups)
    # Too many next hops: bucket by the digit after the keys' longest common prefix.
    rest = list(hop_of)
    first = keys[rest[0]]
    diff = 0
    for i in rest:
        diff |= keys[i] ^ first
    shift = space.bits - space.b * ((space.bits - diff.bit_length()) // space.b + 1)
    mask = space.radix - 1
    buckets: dict[int, list[int]] = {}
    for i in rest:
        buckets.setdefault((keys[i] >> shift) & mask, []).append(i)
    merged: dict[int, list[int]] = {}
    rep_of: dict[int, int] = {}
    for members in buckets.values():
        counts = Counter(hop_of[i].id for i in members)
        hop_id = counts.most_common(1)[0][0]
        rep = next(i for i in members if hop_of[i].id == hop_id)
        merged.setdefault(hop_id, []).extend(members)
        rep_of.setdefault(hop_id, rep)
    groups = tuple(
        Group(hop_of[rep_of[h]], keys[rep_of[h]], tuple(sorted(members)))
        for h, members in merged.items()
    )
    return Split(tuple(local), groups)
