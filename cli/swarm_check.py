"""``rangecast swarm check``: the tree invariants on a running swarm (``rangecast.testkit.live``).

Exit 0: every peer that answered agrees with every invariant; 1: violations (each printed with
its peers and tree nodes) or peers whose reports disagree with the rest; 2: bad input (no swarm
in the directory, a malformed address, an unknown checker) or no peer answered at all.

**Cross-checking the reports** (``cross_check``). A peer is authoritative only for its own
state: the tree nodes it holds. What it says beyond that is a claim about the swarm, which the
other peers' reports confirm or contradict:

* the tree's configuration and the schemas' domains are the same for the whole swarm: every
  peer reports them, and the check uses the value most peers report (a tie: no majority,
  reported as a split, and the first peer's value is used as before). A peer reporting another
  value is named (``peer P's report disagrees with N others``), and its value is not used (the
  first peer's claim of more copies per node than the swarm keeps used to make every node a
  violation);
* the nodes a peer reports are checked together with everybody else's. When violations remain,
  each peer they name is left out in turn: a violation that names other peers too, and whose
  nodes are all still held without its report and no longer have that problem, is implied by
  its report alone (a node gone with the report, or worse off without it, is not: absence is no
  agreement). The peer whose report alone
  implies violations among the most other peers (at least two, and strictly more than any
  other peer: one against one cannot be told apart) is named as disagreeing with them, and
  those violations are folded into that one finding instead of being listed among the peers
  its report contradicts. This repeats (a second liar) while less than half the peers are
  named. Violations that do not depend on a single peer's report (a crashed peer's lost copies)
  and those naming only the peer itself are listed as before;
* a report that cannot be checked at all (nodes of a schema or attribute no peer declares, a
  node id that does not fit its depth, a schema with an empty domain) names its peer, and the
  nodes in question are left out rather than stopping the check."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import trio

from rangecast.dht.errors import LocalProtocolError
from rangecast.runtime import swarm
from rangecast.runtime.identity import parse_endpoint
from rangecast.runtime.tokens import client_token
from rangecast.testkit.invariants import CHECKS, Kind, Violation
from rangecast.testkit.live import PEER_TIMEOUT_S, LiveTree, check_live, collect
from rangecast.testkit.snapshot import Domain, HostedNode, TreeConfig, TreeSnapshot

_ALLOWANCES = (
    "live allowances: stale extra copies, internal replica sets widened lazily, "
    "tables may lag the leaves"
)


#: Violations shown under a disagreement that folds them (--json lists them all).
_SHOWN = 3


def _names(text: str | None) -> list[str]:
    return [s.strip() for s in text.split(",") if s.strip()] if text else []


# ------------------------------------------------------------------------- cross-checking


@dataclass(frozen=True, slots=True)
class Disagreement:
    """A peer whose report the others contradict (``others``: how many), or (``others`` 0)
    whose report cannot be checked in part. ``implied``: the violations its report alone
    implied among other peers, folded into this finding."""

    peer: str
    others: int
    about: str
    implied: tuple[Violation, ...] = ()

    def __str__(self) -> str:
        if self.others:
            return f"peer {self.peer}'s report disagrees with {self.others} others: {self.about}"
        return f"peer {self.peer}'s report cannot be checked in part: {self.about}"

    def to_json(self) -> dict[str, object]:
        return {
            "peer": self.peer,
            "others": self.others,
            "about": self.about,
            "implied": [v.to_json() for v in self.implied],
        }


@dataclass(frozen=True)
class CrossCheck:
    """What ``cross_check`` found: the snapshot it checked (the majority's configuration and
    schemas, every usable node), the violations left once each disagreeing report is set
    apart, the disagreements, and the questions on which the peers split evenly."""

    snapshot: TreeSnapshot
    violations: list[Violation]
    disagreements: list[Disagreement]
    splits: list[str]

    @property
    def ok(self) -> bool:
        return not (self.violations or self.disagreements or self.splits)


H = TypeVar("H", bound=Hashable)


def _vote(claims: Mapping[str, H]) -> tuple[H, int, bool]:
    """The value most peers claim, how many claim it, and whether it is a majority over every
    other value (False: a tie at the top; the first peer's value among the tied is returned)."""
    counts = Counter(claims.values())
    top = max(counts.values())
    tied = [v for v in dict.fromkeys(claims.values()) if counts[v] == top]
    return tied[0], top, len(tied) == 1


def _config_text(c: TreeConfig, other: TreeConfig) -> str:
    """``c``'s fields that differ from ``other``'s."""
    fields = [f.name for f in dataclasses.fields(TreeConfig)]
    return ", ".join(
        f"{name.replace('_', ' ')} {getattr(c, name)}"
        for name in fields
        if getattr(c, name) != getattr(other, name)
    )


def _schema_text(attrs: tuple[Domain, ...], other: tuple[Domain, ...]) -> str:
    if len(attrs) != len(other):
        return f"{len(attrs)} attributes"
    return ", ".join(
        f"{a.name} [{a.lo:g}, {a.hi:g}]" for a, b in zip(attrs, other, strict=True) if a != b
    )


def _shared(
    what: str,
    claims: Mapping[str, H],
    text: Callable[[H, H], str],
    found: list[Disagreement],
    splits: list[str],
) -> H:
    """The value of a swarm-wide setting the check goes by: the majority's. Each peer claiming
    another value is a disagreement; a tie at the top is a split."""
    value, n, majority = _vote(claims)
    if majority:
        for peer, claim in claims.items():
            if claim != value:
                about = f"{what}: {text(claim, value)} (the others: {text(value, claim)})"
                found.append(Disagreement(peer, n, about))
        return value
    sides: dict[H, list[str]] = {}
    for peer, claim in claims.items():
        sides.setdefault(claim, []).append(peer)
    groups = list(sides.items())
    shown = "; ".join(
        f"{', '.join(peers)}: {text(claim, groups[0][0] if k else groups[1][0])}"
        for k, (claim, peers) in enumerate(groups)
    )
    splits.append(f"the peers split evenly on {what} ({shown}); checked with the first's")
    return value


def _usable(
    schemas: Mapping[str, tuple[Domain, ...]],
) -> tuple[dict[str, tuple[Domain, ...]], list[str]]:
    """The schemas that can be checked against (every domain non-empty) and the others."""
    good = {k: v for k, v in schemas.items() if all(d.lo < d.hi for d in v)}
    return good, sorted(schemas.keys() - good.keys())


def _unusable(node: HostedNode, schemas: Mapping[str, tuple[Domain, ...]]) -> str | None:
    """Why ``node`` cannot be checked against ``schemas``, or None."""
    attrs = schemas.get(node.schema)
    if attrs is None:
        return f"nodes of schema {node.schema!r}, which no peer declares usably"
    if node.tid.attr >= len(attrs):
        return f"nodes of attribute tree {node.tid.attr} of {node.schema}, which has {len(attrs)}"
    if node.tid.path >> node.tid.depth:
        return "node ids whose path does not fit their depth"
    if any(p.base >= len(attrs) for p in node.pieces):
        return f"pieces of an attribute {node.schema} does not have"
    return None


def cross_check(
    reports: Mapping[str, TreeSnapshot], *, strict: bool = False, skip: Iterable[str] = ()
) -> CrossCheck:
    """Check the tree from every peer's own report (``reports``: by peer, in the order given,
    each a snapshot of that peer alone: ``testkit.live.snapshot_from({peer: pages})``), cross-
    checking what the reports claim of the swarm and of each other (the module's header)."""
    skipped = list(skip)
    found: list[Disagreement] = []
    splits: list[str] = []
    peers = tuple(reports)
    if not peers:
        return CrossCheck(TreeSnapshot((), (), {}), [], [], [])
    config = _shared(
        "the tree configuration",
        {p: r.config for p, r in reports.items()},
        _config_text,
        found,
        splits,
    )
    schemas: dict[str, tuple[Domain, ...]] = {}
    for peer, r in reports.items():
        _, bad = _usable(r.schemas)
        for name in bad:
            found.append(Disagreement(peer, 0, f"schema {name} has an empty domain"))
    for name in dict.fromkeys(n for r in reports.values() for n in _usable(r.schemas)[0]):
        claims = {p: r.schemas[name] for p, r in reports.items() if name in _usable(r.schemas)[0]}
        schemas[name] = _shared(f"schema {name}", claims, _schema_text, found, splits)
    nodes: list[HostedNode] = []
    for peer, r in reports.items():
        left_out: Counter[str] = Counter()
        for n in r.nodes:
            why = _unusable(n, schemas)
            if why is None:
                nodes.append(dataclasses.replace(n, peer=peer) if n.peer != peer else n)
            else:
                left_out[why] += 1
        for why, k in left_out.items():
            found.append(Disagreement(peer, 0, f"{k} {why}, left out of the check"))
    snap = TreeSnapshot(peers, tuple(nodes), schemas, config)
    violations = check_live(snap, strict=strict, skip=skipped)
    remaining, blamed = _set_apart(snap, violations, strict=strict, skip=skipped)
    return CrossCheck(snap, remaining, found + blamed, splits)


def _family(kind: Kind) -> Kind:
    """Kinds that are one problem at different stages: a node short of copies loses its
    primary too when another holder is left out."""
    return Kind.REPLICAS_MISSING if kind is Kind.REPLICA_ORPHAN else kind


def _set_apart(
    snap: TreeSnapshot, violations: list[Violation], *, strict: bool, skip: list[str]
) -> tuple[list[Violation], list[Disagreement]]:
    """Name the reports that alone imply violations among other peers (``cross_check``'s
    header): returns the violations left and the disagreements found."""
    remaining = list(violations)
    blamed: list[Disagreement] = []
    apart: set[str] = set()
    while remaining and 2 * (len(apart) + 1) < len(snap.peers):
        scores: list[tuple[int, int, str, list[Violation], set[str]]] = []
        for peer in sorted({p for v in remaining for p in v.peers} - apart):
            out = apart | {peer}
            without = dataclasses.replace(
                snap, nodes=tuple(n for n in snap.nodes if n.peer not in out)
            )
            # Implied by this report alone: without it, every node the violation names is
            # still held by someone, and none has that problem any more. A node merely gone
            # with the report, or worse off without it (a crashed peer's lost copy, now with
            # no primary either), does not count: its absence is no agreement. Problems of
            # another kind that appear without it are the copies it did hold, not a sign
            # that the others disagree among themselves.
            held = {snap.name(n.schema, n.tid) for n in without.nodes}
            flagged = {
                (_family(v.kind), x)
                for v in check_live(without, strict=strict, skip=skip)
                for x in v.nodes
            }
            implied = [
                v
                for v in remaining
                if any(q != peer for q in v.peers)
                and all(x in held and (_family(v.kind), x) not in flagged for x in v.nodes)
            ]
            others = {q for v in implied for q in v.peers} - {peer}
            scores.append((len(others), len(implied), peer, implied, others))
        scores.sort(key=lambda s: (-s[0], -s[1], s[2]))
        if not scores or scores[0][0] < 2 or (len(scores) > 1 and scores[1][0] == scores[0][0]):
            break
        n_others, _, peer, implied, others = scores[0]
        kinds_text = ", ".join(
            f"{k} {c}" for k, c in sorted(Counter(str(v.kind) for v in implied).items())
        )
        about = (
            f"its tree nodes alone imply {len(implied)} violations naming {n_others} other "
            f"peers ({kinds_text}); without its report theirs agree"
        )
        blamed.append(Disagreement(peer, n_others, about, tuple(implied)))
        apart.add(peer)
        folded = {id(v) for v in implied}
        remaining = [v for v in remaining if id(v) not in folded]
    return remaining, blamed


async def gather(
    addresses: Iterable[str], *, timeout_s: float = PEER_TIMEOUT_S, token: str | None = None
) -> tuple[dict[str, TreeSnapshot], dict[str, str], dict[str, str]]:
    """Every peer's own report (``testkit.live.collect`` of that peer alone, all at once), in
    the order given: (report by peer, state by peer, why by unreachable peer). A malformed
    address raises ``LocalProtocolError`` before anything is asked."""
    wanted = list(dict.fromkeys(addresses))
    for a in wanted:
        parse_endpoint(a)
    got: dict[str, LiveTree] = {}

    async def one(address: str) -> None:
        got[address] = await collect([address], timeout_s=timeout_s, token=token)

    async with trio.open_nursery() as nursery:
        for a in wanted:
            nursery.start_soon(one, a)
    reports = {a: got[a].snapshot for a in wanted if a in got[a].states}
    states = {a: got[a].states[a] for a in wanted if a in got[a].states}
    lost = {a: got[a].unreachable[a] for a in wanted if a in got[a].unreachable}
    return reports, states, lost


def run(args: argparse.Namespace) -> int:
    if args.dir is not None:
        where = f"the swarm in {args.dir}"
        targets = swarm.addresses(Path(args.dir))
    else:
        where = "--via " + args.via
        targets = _names(args.via)
        if not targets:
            raise LocalProtocolError("--via: no address given (HOST:PORT,...)")
    skip = _names(args.skip)
    unknown = sorted(set(skip) - CHECKS.keys())
    if unknown:
        raise LocalProtocolError(
            f"--skip: no checker named {', '.join(unknown)} (they are {', '.join(CHECKS)})"
        )
    if not args.timeout > 0:
        raise LocalProtocolError(f"--timeout must be a positive number, got {args.timeout}")
    token = client_token(args.token, dict(os.environ))
    reports, states, unreachable = trio.run(
        lambda: gather(targets, timeout_s=args.timeout, token=token)
    )
    if not states:
        first = next(iter(unreachable.items()), ("", "no peers listed"))
        raise LocalProtocolError(f"no peer of {where} answered ({first[0]}: {first[1]})")
    result = cross_check(reports, strict=args.strict, skip=skip)
    found, disagree = result.violations, result.disagreements
    snap = result.snapshot
    checks = [c for c in CHECKS if c not in skip]
    if args.json:
        out: dict[str, Any] = {
            "peers": dict(states),
            "unreachable": dict(unreachable),
            "copies": len(snap.nodes),
            "nodes": len({(n.schema, n.tid) for n in snap.nodes}),
            "checks": checks,
            "strict": args.strict,
            "violations": [v.to_json() for v in found],
            "disagreements": [d.to_json() for d in disagree],
            "splits": list(result.splits),
            "ok": result.ok,
        }
        print(json.dumps(out, indent=2))
        return 0 if result.ok else 1
    nodes = len({(n.schema, n.tid) for n in snap.nodes})
    print(
        f"swarm check: {len(states)} of {len(targets)} peers answered; "
        f"{len(snap.nodes)} copies of {nodes} tree nodes"
    )
    for address, why in unreachable.items():
        print(f"  unreachable: {address} ({why})")
    not_ready = {a: s for a, s in states.items() if s != "ready"}
    for address, state in not_ready.items():
        print(f"  not ready: {address} ({state})")
    print(f"  checks: {', '.join(checks)}" + ("" if args.strict else f" ({_ALLOWANCES})"))
    for line in result.splits:
        print(f"[split] {line}")
    for d in disagree:
        print(f"[disagreement] {d}")
        for v in d.implied[:_SHOWN]:
            print(f"    {v}")
        if len(d.implied) > _SHOWN:
            print(f"    ... and {len(d.implied) - _SHOWN} more (--json lists them)")
    for v in found:
        print(v)
    if result.ok:
        print("no violation")
        return 0
    parts = []
    if found:
        kinds = Counter(str(v.kind) for v in found)
        detail = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
        parts.append(f"{len(found)} violations ({detail})")
    if disagree:
        named = ", ".join(dict.fromkeys(d.peer for d in disagree))
        parts.append(f"{len(disagree)} disagreements (reports of {named})")
    if result.splits:
        parts.append(f"{len(result.splits)} even splits")
    print("; ".join(parts))
    return 1


def add_check_parser(acts: Any) -> None:
    """``swarm check`` under ``swarm``'s action subparsers ``acts``."""
    check = acts.add_parser(
        "check",
        help="collect every peer's tree state and check the tree's invariants (exit 1 on any "
        "violation; docs/testing.md)",
    )
    target = check.add_mutually_exclusive_group(required=True)
    target.add_argument("--dir", help="the peers of this `swarm up` directory")
    target.add_argument("--via", metavar="ADDR,...", help="these peers (HOST:PORT,...)")
    check.add_argument("--json", action="store_true", help="the result as JSON")
    check.add_argument(
        "--skip",
        default="",
        metavar="CHECK,...",
        help=f"checkers to leave out ({', '.join(CHECKS)})",
    )
    check.add_argument(
        "--strict",
        action="store_true",
        help="no live allowances: exact replica counts, tables exactly the leaves below",
    )
    check.add_argument(
        "--timeout", type=float, default=PEER_TIMEOUT_S, help="seconds to wait for each peer"
    )
    check.add_argument(
        "--token",
        help="client token, for peers started with --client-tokens (default: $RANGECAST_TOKEN)",
    )
    check.set_defaults(func=run)


__all__ = ["CrossCheck", "Disagreement", "add_check_parser", "cross_check", "gather", "run"]
