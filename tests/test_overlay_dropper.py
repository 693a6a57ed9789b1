"""The content-based overlay over Pastry with end-to-end acknowledgements (``dht.e2e``), one peer
acknowledging every hop and dropping every routed and direct message: subscriptions installed
and events published by the honest peers, while the dropper is being caught and after, reach
exactly the subscribers the brute-force oracle names (a replica, or the next closest peer, serves
the tree nodes whose root is the dropper)."""

from __future__ import annotations

import math
import random
from typing import Any

from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from overlay_harness import Key, Net, Published

from rangecast.dht.messages import Direct, HopAck, Route
from rangecast.dht.node import PastryConfig
from rangecast.dht.wire import Message
from rangecast.pubsub.schema import THESIS_SCHEMA
from rangecast.pubsub.subscription import Subscription
from rangecast.sim.streams import stream
from rangecast.sim.thesis_experiment import MatchOracle
from rangecast.sim.workload import THESIS_WORKLOAD, Workload

E2E = PastryConfig(keepalive_s=math.inf, e2e_acks=True)


class DroppingCore:
    """Wraps a peer's core: hop acks for every ``Route``, then nothing; ``Direct`` dropped."""

    def __init__(self, core: Any) -> None:
        self.core = core
        self.acks: list[tuple[bytes, Message]] = []
        self.dropped = 0
        #: Of those, routed messages (only these are acknowledged end to end).
        self.dropped_routed = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.core, name)

    def receive(self, msg: Message, src: bytes, now: float) -> None:
        if isinstance(msg, (Route, Direct)):
            if isinstance(msg, Route):
                self.acks.append((src, HopAck(msg.uid)))
                self.dropped_routed += 1
            self.dropped += 1
            return
        self.core.receive(msg, src, now)

    def take_messages(self) -> list[tuple[bytes, Message]]:
        out = self.core.take_messages() + self.acks
        self.acks = []
        return out


def one_round(
    net: Net,
    honest: list[int],
    workload: Workload,
    rng: random.Random,
    active: dict[Key, Subscription],
    n_subs: int,
    n_ev: int,
) -> list[Published]:
    """``n_subs`` more subscriptions (into ``active``), then ``n_ev`` events, each settled."""
    new = []
    for _ in range(n_subs):
        sub = workload.subscription(rng)
        key = net.subscribe(rng.choice(honest), sub)
        active[key] = sub
        new.append(key)
    net.settle()
    assert all(net.installed[k] == 1 for k in new)
    keys = list(active)
    oracle = MatchOracle(net.schema, [active[k] for k in keys])
    out = []
    for _ in range(n_ev):
        values = tuple(workload.event(rng))
        eid = net.publish(rng.choice(honest), values)
        out.append(Published(eid, values, -1, {keys[j] for j in oracle.matches(values)}))
    net.settle()
    return out


@settings(max_examples=12, deadline=None, phases=[Phase.explicit, Phase.generate])
@given(
    n=st.integers(min_value=6, max_value=40),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
    data=st.data(),
)
def test_installs_and_events_equal_the_oracle_with_a_dropper(
    n: int, seed: int, data: st.DataObject
) -> None:
    bad = data.draw(st.integers(0, n - 1), label="dropper")
    dropping: list[DroppingCore] = []

    def wrap(core: Any) -> DroppingCore:
        dropping.append(DroppingCore(core))
        return dropping[-1]

    net = Net(n, seed, THESIS_SCHEMA, capacity=(3, 6), dht=E2E, wrap={bad: wrap})
    honest = [i for i in range(n) if i != bad]
    workload = Workload(THESIS_SCHEMA, THESIS_WORKLOAD, stream(seed, "layout"))
    rng = random.Random(seed)
    active: dict[Key, Subscription] = {}
    for _ in range(2):  # while it is caught, then after
        net.check_deliveries(one_round(net, honest, workload, rng, active, 30, 30))
    stats = [net.net.nodes[i].stats for i in honest]
    # A dropped ``Direct`` (a notification, a replica copy) is no one's loss to charge: it may
    # be all the dropper got (n=19, seed=11884, dropper 13), and every delivery still exact.
    if dropping[0].dropped_routed:
        assert sum(s.e2e_losses for s in stats) > 0
    for i in honest:
        e2e = net.net.nodes[i].end_to_end
        assert e2e is not None and set(e2e.quarantine) <= {net.net.nodes[bad].id}
