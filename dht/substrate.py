"""The DHT substrates by name: one descriptor per substrate, and ``make_dht`` to build a node.

The drivers (simulator, real peers, the swarm tools) pick a substrate by the name a command line
or a configuration gives (``--dht pastry|kademlia``). Whatever differs between the substrates and
matters to a driver is a fact of its descriptor here, so that no driver compares the name:

- which node class and which configuration class it uses (``make_dht``, ``config``);
- whether lookups come in modes (``--lookup iterative|recursive``: Kademlia only);
- whether keys belong to the XOR-closest node (Kademlia) or the ring-closest (Pastry);
- what a node's neighbour set (Pastry: leaf set, Kademlia: sibling list) is once the overlay has
  converged, and how a node's actual set is compared with it;
- whether its node ids are Kademlia node ids (a real peer can then also serve the kademlia
  package's RPCs on the same port).

A node is built with the codec of the stack it is the bottom of (``codec``: built by the driver
from the tables the stack speaks, ``codec_for(DHT_TABLE, ...)``), never a process-wide one.

Adding a substrate means one descriptor subclass and one entry in ``SUBSTRATES``.
"""

from __future__ import annotations

import bisect
import random
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

from rangecast.dht.core import Application, Proximity
from rangecast.dht.errors import LocalProtocolError
from rangecast.dht.kademlia import ROOT_CACHE, KademliaConfig, KademliaNode, expected_siblings
from rangecast.dht.node import PastryConfig, PastryNode
from rangecast.dht.wire import Codec

#: A substrate's node, and its configuration.
DhtNode = PastryNode | KademliaNode
DhtConfig = PastryConfig | KademliaConfig


class SubstrateSpec(ABC):
    """What a driver needs to know about one substrate (subclasses are stateless)."""

    #: The name command lines and configurations use.
    name: ClassVar[str]
    #: Its name in prose (summaries, reports).
    title: ClassVar[str]
    config_type: ClassVar[type[PastryConfig] | type[KademliaConfig]]
    node_type: ClassVar[type[PastryNode] | type[KademliaNode]]
    #: Whether ``lookup`` (iterative | recursive) and the root cache mean anything.
    has_lookup: ClassVar[bool]
    #: Whether a key's root is the XOR-closest node (else the numerically closest on the ring).
    xor_metric: ClassVar[bool]
    #: Whether node ids are Kademlia node ids, so that a real peer can also answer the kademlia
    #: package's RPCs with the same identity.
    kademlia_ids: ClassVar[bool]

    @abstractmethod
    def config(
        self, *, lookup: str = "iterative", root_cache: int = ROOT_CACHE, **overrides: Any
    ) -> DhtConfig:
        """Its configuration, with ``overrides`` of fields every substrate has."""

    def node(
        self,
        ident: int,
        addr: bytes,
        rng: random.Random,
        *,
        codec: Codec,
        config: Any,
        proximity: Proximity | None,
        app: Application | None,
    ) -> DhtNode:
        """A node speaking ``codec`` (``config``: an instance of ``config_type``, or None for
        the defaults)."""
        if config is not None and not isinstance(config, self.config_type):
            raise LocalProtocolError(
                f"a {self.title} node needs a {self.config_type.__name__}, got {config!r}"
            )
        # node_type and config_type are a pair in each subclass, which mypy cannot relate.
        return self.node_type(
            ident,
            addr,
            rng,
            codec=codec,
            config=config,  # type: ignore[arg-type]
            proximity=proximity,
            app=app,
        )

    @abstractmethod
    def expected_neighbours(self, ids: Sequence[int], own: int, config: Any) -> list[int]:
        """The neighbour ids of member ``own`` in a converged overlay of the members ``ids``
        (sorted ascending)."""

    @abstractmethod
    def neighbours_match(
        self, have: Sequence[int], ids: Sequence[int], own: int, config: Any
    ) -> bool:
        """Whether ``have`` (``node.neighbours()``'s ids, in its order) is the converged set."""

    def table_settled(self, members: int, entries: int, config: Any) -> bool:
        """Whether a routing table of ``entries`` entries is what ``members`` members imply, as
        far as a check of convergence can tell (only small overlays are fully determined)."""
        return True


class PastrySpec(SubstrateSpec):
    name = "pastry"
    title = "Pastry"
    config_type = PastryConfig
    node_type = PastryNode
    has_lookup = False
    xor_metric = False
    kademlia_ids = False

    def config(
        self, *, lookup: str = "iterative", root_cache: int = ROOT_CACHE, **overrides: Any
    ) -> PastryConfig:
        if lookup != "iterative":
            raise LocalProtocolError("--lookup applies to --dht kademlia only")
        return PastryConfig(**overrides)

    def expected_neighbours(self, ids: Sequence[int], own: int, config: Any) -> list[int]:
        """The ``leaf_set_size / 2`` ring neighbours on each side: right ones, then left ones."""
        n = len(ids)
        reach = min(config.leaf_set_size // 2, n - 1)
        k = bisect.bisect_left(ids, own)
        right = [ids[(k + j) % n] for j in range(1, reach + 1)]
        return right + [ids[(k - j) % n] for j in range(1, reach + 1)]

    def neighbours_match(
        self, have: Sequence[int], ids: Sequence[int], own: int, config: Any
    ) -> bool:
        # A leaf set lists its members left then right; with few members a peer is on both.
        return set(have) == set(self.expected_neighbours(ids, own, config))


class KademliaSpec(SubstrateSpec):
    name = "kademlia"
    title = "Kademlia"
    config_type = KademliaConfig
    node_type = KademliaNode
    has_lookup = True
    xor_metric = True
    kademlia_ids = True

    def config(
        self, *, lookup: str = "iterative", root_cache: int = ROOT_CACHE, **overrides: Any
    ) -> KademliaConfig:
        return KademliaConfig(lookup=lookup, root_cache=root_cache, **overrides)

    def expected_neighbours(self, ids: Sequence[int], own: int, config: Any) -> list[int]:
        """The ``siblings`` XOR-closest members, closest first."""
        return expected_siblings(ids, own, config.siblings)

    def neighbours_match(
        self, have: Sequence[int], ids: Sequence[int], own: int, config: Any
    ) -> bool:
        # The sibling list is kept sorted by distance: the order is part of the state.
        return list(have) == self.expected_neighbours(ids, own, config)

    def table_settled(self, members: int, entries: int, config: Any) -> bool:
        # Up to k other members, every one of them fits in the k-buckets.
        return members - 1 > config.k or entries == members - 1


#: The substrates by name, the default first.
SUBSTRATES: dict[str, SubstrateSpec] = {s.name: s for s in (PastrySpec(), KademliaSpec())}
#: Their names, as command lines offer them.
DHTS: tuple[str, ...] = tuple(SUBSTRATES)


def substrate(name: str) -> SubstrateSpec:
    """The descriptor of the substrate called ``name``."""
    spec = SUBSTRATES.get(name)
    if spec is None:
        raise LocalProtocolError(f"dht must be one of {', '.join(SUBSTRATES)}, got {name!r}")
    return spec


def substrate_of(config: DhtConfig) -> SubstrateSpec:
    """The descriptor of the substrate ``config`` configures."""
    for spec in SUBSTRATES.values():
        if isinstance(config, spec.config_type):
            return spec
    raise LocalProtocolError(f"not a substrate's configuration: {config!r}")


def make_dht(
    name: str,
    ident: int,
    addr: bytes,
    rng: random.Random,
    *,
    codec: Codec,
    config: DhtConfig | None = None,
    proximity: Proximity | None = None,
    app: Application | None = None,
) -> DhtNode:
    """A node of the substrate called ``name``, speaking ``codec`` (``config``: its
    configuration, None: defaults)."""
    return substrate(name).node(
        ident, addr, rng, codec=codec, config=config, proximity=proximity, app=app
    )


__all__ = [
    "DHTS",
    "SUBSTRATES",
    "DhtConfig",
    "DhtNode",
    "KademliaSpec",
    "PastrySpec",
    "SubstrateSpec",
    "make_dht",
    "substrate",
    "substrate_of",
]
