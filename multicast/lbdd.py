"""LBDD: the load-balancing dissemination tree over MD5 digests and XOR buckets (pure functions).

Theory of operation
-------------------
Every member of a dissemination (the source and its receivers) is known by its transport
address. Its *digest* is the top 32 bits of the MD5 of that address; the distance between two
members is the XOR of their digests. Relative to the source, a receiver at distance ``d`` lies
in bucket ``d.bit_length()`` (distance in ``[2^(m-1), 2^m)``); the source is bucket 0.

Because digests are uniform, bucket ``m + 1`` holds about twice as many receivers as bucket
``m``. The tree follows from that: the source sends to every receiver of the first non-empty
bucket; the receivers of each non-empty bucket, ranked by digest, split the next non-empty
bucket (also ranked by digest) into consecutive, disjoint, near-equal shares and send to their
share. Every receiver therefore has exactly one parent, in a strictly lower bucket, so the paths
form a tree rooted at the source with no cycle, and the mean out-degree of a forwarding member
is about 2. Each member computes the tree locally from the member list: no tree messages.

The paper's rule is the default. ``near_bucket`` (off by default) is our variant, a named
departure from the paper's rule. Below bucket
``m0 = 33 - floor(log2 n)`` a bucket expects fewer than one of the ``n`` receivers, so each
non-empty one adds a level of depth with out-degree 1: a store-and-forward hop that spreads no
load. Those sparse buckets are merged into one (bucket ``m0 - 1``), which bounds the depth by
``floor(log2 n) + 1`` (9 for n = 500, as the paper's Table 1) and leaves the source about two
copies to send.

Widening (also part of ``near_bucket``): digests are uniform only on average, and with the
paper's rule one member of a small bucket may have to send a whole large next bucket (out-degrees
up to 24 in our sweeps), which sets the transfer's time. A bucket more than twice the size of
its senders also draws senders from earlier buckets, then from the source, then from its own
first members in rounds, within the depth bound (``_widened_pool``, ``_widened_shares``). This
keeps the busiest member at 3 copies or fewer in nearly every draw. ``near_bucket=False`` (the
default) gives the paper's rule exactly.

Ties (two receivers with the same digest) are broken by address so that every member computes
the same tree; a receiver whose digest equals the source's counts as bucket 1.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rangecast.dht.errors import LocalProtocolError

DIGEST_BITS = 32
#: Index of the source in ``LbddTree.parent``.
SOURCE = -1


def digest(addr: bytes | str) -> int:
    """Top 32 bits of MD5 of the member's address."""
    raw = addr.encode() if isinstance(addr, str) else addr
    return int.from_bytes(hashlib.md5(raw, usedforsecurity=False).digest()[:4], "big")


def bucket_of(source_digest: int, member_digest: int) -> int:
    """The paper's bucket number: the bit length of the XOR distance (>= 1 for a receiver)."""
    return max(1, (source_digest ^ member_digest).bit_length())


def near_floor(n: int) -> int:
    """First bucket kept on its own when sparse buckets are merged (``m0``)."""
    return DIGEST_BITS + 1 - max(0, n.bit_length() - 1)


def shares(parents: int, targets: int) -> list[range]:
    """Algorithm 2: parent of rank k (0-based) gets targets[k*T//P : (k+1)*T//P]: consecutive,
    disjoint, covering, sizes differing by at most one."""
    return [range(k * targets // parents, (k + 1) * targets // parents) for k in range(parents)]


@dataclass(frozen=True, slots=True)
class LbddTree:
    """The dissemination tree over ``members`` (indices into the address list given)."""

    #: ``parent[i]``: index of member i's parent, ``SOURCE`` for the source.
    parent: tuple[int, ...]
    #: ``children[i]``: member i's targets, in send order; ``source_children``: the source's.
    children: tuple[tuple[int, ...], ...]
    source_children: tuple[int, ...]
    #: Bucket of each member (after the near-bucket merge, if on).
    bucket: tuple[int, ...]
    #: Edges on the longest source-to-member path (0 for no members).
    depth: int

    def __len__(self) -> int:
        return len(self.parent)

    def targets(self, member: int) -> tuple[int, ...]:
        return self.source_children if member == SOURCE else self.children[member]

    def subtree(self, member: int) -> list[int]:
        """Every member below ``member`` (excluded), parents before children."""
        out: list[int] = []
        stack = list(reversed(self.targets(member)))
        while stack:
            m = stack.pop()
            out.append(m)
            stack.extend(reversed(self.children[m]))
        return out

    def out_degrees(self) -> list[int]:
        """Copies each sender sends: the source first, then every member."""
        return [len(self.source_children), *(len(c) for c in self.children)]


def build_tree(
    source: bytes | str, members: Sequence[bytes | str], *, near_bucket: bool = False
) -> LbddTree:
    """The LBDD tree rooted at ``source`` over the receivers ``members`` (distinct addresses,
    the source not among them)."""
    if len(set(members)) != len(members):
        raise LocalProtocolError("LBDD members must have distinct addresses")
    if source in members:
        raise LocalProtocolError("the source cannot also be a receiver")
    n = len(members)
    s = digest(source)
    digests = [digest(a) for a in members]
    buckets = [bucket_of(s, d) for d in digests]
    if near_bucket and n > 1:
        floor = near_floor(n)
        buckets = [b if b >= floor else floor - 1 for b in buckets]
    by_bucket: dict[int, list[int]] = {}
    for i, b in enumerate(buckets):
        by_bucket.setdefault(b, []).append(i)
    order = sorted(by_bucket)
    for b in order:
        by_bucket[b].sort(key=lambda i: (digests[i], _key(members[i])))
    parent = [SOURCE] * n
    # One list per member plus the source's last, so that children[SOURCE] is the source's; the
    # same for level (edges from the source).
    children: list[list[int]] = [[] for _ in range(n + 1)]
    level = [0] * (n + 1)
    if order:
        children[SOURCE].extend(by_bucket[order[0]])
        for m in by_bucket[order[0]]:
            level[m] = 1
        # Depth bound: one level per non-empty bucket, which the near-bucket merge keeps at
        # floor(log2 n) + 1; widening never goes beyond it.
        bound = max(len(order), n.bit_length())
        for k, (lower, upper) in enumerate(itertools.pairwise(order)):
            senders, targets = by_bucket[lower], by_bucket[upper]
            if near_bucket and len(targets) > 2 * len(senders):
                budget = bound - (len(order) - k - 2)
                pool = _widened_pool(senders, len(targets), order[:k], by_bucket)
                _widened_shares(pool, targets, budget, parent, children, level)
                continue
            for sender, share in zip(senders, shares(len(senders), len(targets)), strict=True):
                for t in share:
                    parent[targets[t]] = sender
                    children[sender].append(targets[t])
                    level[targets[t]] = level[sender] + 1
    source_children = tuple(children.pop())
    level.pop()
    return LbddTree(
        parent=tuple(parent),
        children=tuple(tuple(c) for c in children),
        source_children=source_children,
        bucket=tuple(buckets),
        depth=max(level, default=0),
    )


def _widened_pool(
    senders: list[int], targets: int, earlier: Sequence[int], by_bucket: Mapping[int, list[int]]
) -> list[int]:
    """Senders for a bucket that outnumbers its own senders more than two to one.

    Digests are uniform only on average: with few receivers a bucket can hold two members and
    the next nine, and the paper's rule makes each of those two send four or five copies, which
    sets the whole transfer's time. Members of earlier buckets have the data no later than
    ``senders``, so they join the pool (nearest bucket first) until it holds half as many
    members as there are targets. If even all of them are too few (typically one member in the
    first bucket and three in the next), the source joins too, with the copies it already
    sends."""
    pool = list(senders)
    for b in reversed(earlier):
        if 2 * len(pool) >= targets:
            break
        pool.extend(by_bucket[b])
    if 2 * len(pool) < targets:
        pool.append(SOURCE)
    return pool


def _widened_shares(
    pool: list[int],
    targets: list[int],
    budget: int,
    parent: list[int],
    children: list[list[int]],
    level: list[int],
) -> None:
    """Spread ``targets`` (in rank order) over ``pool``: each goes to the pool member with the
    fewest children so far (ties by pool order). While the pool is smaller than half the
    targets, the bucket is served in rounds: the pool serves the next ``2 * len(pool)``
    targets, which then join the pool for the rest, as long as their own children stay within
    ``budget`` levels. A parent always precedes its child in (bucket, round, rank) order, so the
    result is still a tree, no deeper than the bound."""
    heap = [(len(children[m]), rank, m) for rank, m in enumerate(pool)]
    heapq.heapify(heap)
    start = 0
    while start < len(targets):
        batch = targets[start : start + 2 * len(heap)]
        start += len(batch)
        for t in batch:
            load, rank, m = heapq.heappop(heap)
            parent[t] = m
            children[m].append(t)
            level[t] = level[m] + 1
            heapq.heappush(heap, (load + 1, rank, m))
        for t in batch:
            if level[t] < budget:
                heapq.heappush(heap, (0, len(heap), t))


def _key(addr: bytes | str) -> bytes:
    return addr.encode() if isinstance(addr, str) else addr


def check_views(
    source: bytes | str,
    parent: Mapping[Any, Any],
    children: Mapping[Any, Sequence[Any]],
) -> tuple[list[str], int]:
    """Check a tree given as the nodes' own views, from outside: ``parent[r]`` is what receiver
    ``r`` takes as its parent (None: none), ``children[x]`` whom node ``x`` (the source and the
    receivers) sends to. Valid when every receiver has exactly one parent, the source or another
    receiver, that lists it as a child (and no node lists a child that does not take it as
    parent), and every receiver is reached from the source exactly once, hence no cycle.
    Returns (problems, depth in edges); no problems means valid."""
    problems: list[str] = []
    for r, p in parent.items():
        if p is None:
            problems.append(f"receiver {r!r} has no parent")
        elif p == r or (p != source and p not in parent):
            problems.append(f"receiver {r!r} has parent {p!r}, not the source or a receiver")
    for x, kids in children.items():
        for c in kids:
            if parent.get(c) != x:
                problems.append(f"{x!r} sends to {c!r}, which does not take it as its parent")
    seen = {source}
    frontier = [source]
    depth = 0
    while frontier:
        nxt = []
        for x in frontier:
            for c in children.get(x, ()):
                if c in seen:
                    problems.append(f"{c!r} is reached twice")
                    continue
                seen.add(c)
                nxt.append(c)
        depth += 1 if nxt else 0
        frontier = nxt
    missed = [r for r in parent if r not in seen]
    if missed:
        problems.append(f"{len(missed)} receivers are not reached from the source")
    return problems, depth
