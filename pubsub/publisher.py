"""The publisher side of a peer: RndRegionProbe's choice of the zones an event must reach.

Theory of operation
-------------------
RndRegionProbe (thesis 3.4.1). An event is a point per attribute; the subscriptions it can match
are stored in the attribute's tree at points (x, y) with x <= value <= y (under load
balancing, also below the cut-off line y = x + c): a region of the logic space. For each
attribute to probe, ``publish`` selects zones covering that region by breadth-first search from
the root: a zone at ``max_level`` is always selected, one at or below ``min_level`` with
probability ``p``, any other is split into its two children. Each selected zone is a probe
target; how the targets travel (one ``ProbePub`` each, or grouped per next hop) is the probe
strategy of ``pubsub.dissemination``. The tree hosts (``pubsub.host``) take it from there.

Under the strict partial-event policy an attribute the event lacks is not probed: a predicate
on it fails, so no subscription with one can match.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rangecast.dht.errors import LocalProtocolError
from rangecast.pubsub.base import NodeBase
from rangecast.pubsub.messages import Event, ProbeTarget
from rangecast.pubsub.space import AttributeSpace, TreeId, zone_overlaps


class Publisher(NodeBase):
    """The publisher part of ``PubSubNode``."""

    __slots__ = ("_probe_out",)

    # Given by the node (``pubsub.base``): how the probes of an event go out
    # (``OverlayConfig.probe``), the bound method of the strategy it chose.
    _probe_out: Callable[[Event, list[ProbeTarget], int, float], None]

    def publish(self, schema_name: str, values: Sequence[float | None], now: float) -> int:
        """Publish an event (one value per schema attribute, None where absent); returns its
        id. Use ``Schema.event`` to build ``values`` from a mapping with validation."""
        schema = self._schema(schema_name)
        if len(values) != len(schema.attributes):
            raise LocalProtocolError(
                f"event for schema {schema.name!r} needs {len(schema.attributes)} values"
            )
        eid = self.rng.getrandbits(63)
        event = Event(eid, schema.name, [None if v is None else float(v) for v in values])
        strict = schema.partial == "strict"
        targets: list[ProbeTarget] = []
        for attr, value in enumerate(event.values):
            if value is None and strict:
                continue  # strict: a predicate on an absent attribute fails; nothing to find
            space = self._space(schema.name, attr)
            cutoff = self._cutoff(space)
            for tid in self._select_zones(space, value, cutoff):
                targets.append(ProbeTarget(attr, tid.depth, tid.path))
        self._probe_out(event, targets, 0, now)
        return eid

    def _select_zones(
        self, space: AttributeSpace, value: float | None, cutoff: float | None
    ) -> list[TreeId]:
        """RndRegionProbe's local breadth-first selection of zones covering the region."""
        cfg = self.cfg
        rand = self.rng.random
        selected: list[TreeId] = []
        queue = [space.root]
        head = 0
        while head < len(queue):
            tid = queue[head]
            head += 1
            if not zone_overlaps(space.zone(tid), value, cutoff):
                continue
            if tid.depth >= cfg.max_level or (tid.depth >= cfg.min_level and rand() < cfg.p):
                selected.append(tid)
            else:
                queue.append(tid.child(0))
                queue.append(tid.child(1))
        return selected
