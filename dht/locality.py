"""Replica sets spread across address groups, so one network prefix cannot hold every copy.

Why
---
A tree node's copies live on its key's replica set, the k peers closest to the key
(``DhtCore.replica_set``). Ids cost something to choose (the id puzzle, ``runtime.identity``),
but an attacker with many addresses in one network (a /24 of a hosting provider) can still
grind k ids around a key and then hold every copy of the tree node stored there: dropping its
probes or crashing all of them at once loses its subscriptions for good. Addresses are much
harder to multiply across networks than ids are to grind, so the replica set should not be
the k closest peers blindly but the closest peers of *different* address groups.

The rule (``spread``)
---------------------
Among the candidates ranked by closeness to the key (the DHT's neighbourhood of the key:
Pastry's leaf set, Kademlia's closest contacts), the set keeps

1. the root and its heir, the two closest, whatever their groups: the heir becomes the root
   when the root fails and must already hold a copy to be promoted (``pubsub.replication``);
2. then, closest first, one peer of each group not in the set yet;
3. then, when the groups run out, the closest of the others.

The set stays root-first and otherwise in the candidates' order. Without a locality function
(``DhtCore.locality`` is None, the simulator's default) the set is the k closest, as before.

A group is whatever the driver's ``Locality`` function returns for a peer (hashable, compared
with ``==``): the runtime groups addresses by their IPv4 /24 or IPv6 /48
(``runtime.identity.address_group``). The core only compares the keys.

Limits: candidates come from the key's neighbourhood, so an attacker who fills the whole
neighbourhood (Pastry: the leaf set, 16 peers by default) still holds every copy; spreading
raises the ids it needs per key from k (3 for leaves, 9 for internal nodes) to the whole leaf
set plus one, and all of them in the neighbourhood of that one key.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

from rangecast.dht.routing import Peer

Locality = Callable[[Peer], Hashable]
"""The address group of a peer (runtime: its /24 or /48); peers of one group may be one
operator's."""

#: The root and its heir are kept whatever their groups (the heir must hold a copy to take over).
KEPT_CLOSEST = 2


def spread(ranked: Sequence[Peer], k: int, locality: Locality) -> list[Peer]:
    """Up to ``k`` of ``ranked`` (closest to the key first): the two closest, then one peer per
    group not in the set yet, then the closest others; in ``ranked``'s order."""
    if k <= KEPT_CLOSEST or len(ranked) <= k:
        return list(ranked[:k])
    chosen = [True] * KEPT_CLOSEST + [False] * (len(ranked) - KEPT_CLOSEST)
    groups = {locality(p) for p in ranked[:KEPT_CLOSEST]}
    n = KEPT_CLOSEST
    for i in range(KEPT_CLOSEST, len(ranked)):
        if n == k:
            break
        g = locality(ranked[i])
        if g not in groups:
            groups.add(g)
            chosen[i] = True
            n += 1
    for i in range(KEPT_CLOSEST, len(ranked)):
        if n == k:
            break
        if not chosen[i]:
            chosen[i] = True
            n += 1
    return [p for p, c in zip(ranked, chosen, strict=True) if c]


__all__ = ["KEPT_CLOSEST", "Locality", "spread"]
