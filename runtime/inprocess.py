"""Several real peers in one process (one trio run), over loopback sockets: what the end-to-end
tests and the benchmarks use. Every peer still has its own key, sockets and signed frames; only
the process is shared."""

from __future__ import annotations

import trio

from rangecast.dht.substrate import substrate
from rangecast.pubsub.schema import SchemaRegistry, builtin_schemas
from rangecast.runtime.identity import Identity
from rangecast.runtime.peer import PeerConfig, PeerRuntime


def leaf_sets_converged(peers: list[PeerRuntime]) -> bool:
    """Whether every running peer's leaf set (Kademlia: sibling list) is exactly what the whole
    membership implies."""
    live = [
        p
        for p in peers
        if p.core is not None and p.core.dht.state.value == "ready" and not p.stopped.is_set()
    ]
    if not live:
        return False
    ids = sorted(p.identity.int_id for p in live)
    cfg = live[0].cfg
    spec = substrate(cfg.dht)
    return all(
        spec.neighbours_match(
            [q.id for q in p.dht.neighbours()], ids, p.identity.int_id, cfg.dht_config
        )
        for p in live
    )


async def start_local_swarm(
    nursery: trio.Nursery,
    n: int,
    *,
    schemas: SchemaRegistry | None = None,
    config: PeerConfig | None = None,
    seed: int = 0,
    converge_timeout_s: float = 60.0,
) -> list[PeerRuntime]:
    """Start ``n`` peers on 127.0.0.1 (the first alone, the others joining through it) and
    return once every leaf set matches the membership."""
    if n < 1:
        raise ValueError("a swarm needs at least one peer")
    cfg = config or PeerConfig()
    # Every key ground before the first peer runs: grinding holds the thread (about 0.6 s a
    # key at the default difficulty), which running peers would take for a pause.
    identities = [Identity.generate(cfg.id_difficulty) for _ in range(n)]
    peers: list[PeerRuntime] = []
    for i in range(n):
        peer = PeerRuntime(
            identities[i],
            schemas or builtin_schemas(),
            _seeded(cfg, seed * 1_000_003 + i),
        )
        contacts = [("127.0.0.1", peers[0].address.port)] if peers else []  # type: ignore[union-attr]
        await nursery.start(peer.run, contacts)
        peers.append(peer)
    with trio.fail_after(converge_timeout_s):
        while not leaf_sets_converged(peers):
            await trio.sleep(0.05)
    return peers


def _seeded(cfg: PeerConfig, seed: int) -> PeerConfig:
    from dataclasses import replace

    return replace(cfg, seed=seed)
