"""The flows and publications of the topic mode move only along their transition tables
(``multicast.flows``): a churned transfer with a small window is watched state by state."""

from __future__ import annotations

from enum import Enum
from typing import Any

import pytest

from rangecast.multicast.flows import (
    FLOW_TRANSITIONS,
    PUB_INITIAL,
    PUB_TRANSITIONS,
    Flow,
    FlowState,
    Publication,
    PubState,
)
from rangecast.sim.lbdd_experiment import LbddParams, run_lbdd

Seen = set[tuple[Enum | None, Enum]]


def _watch(monkeypatch: pytest.MonkeyPatch, cls: type, seen: Seen) -> None:
    """Replace ``cls.state`` (a slot) by a property that records every (old, new) pair."""
    slot: Any = cls.__dict__["state"]

    def get(obj: object) -> Enum:
        return slot.__get__(obj, cls)  # type: ignore[no-any-return]

    def put(obj: object, new: Enum) -> None:
        try:
            old = slot.__get__(obj, cls)
        except AttributeError:  # being created
            old = None
        seen.add((old, new))
        slot.__set__(obj, new)

    monkeypatch.setattr(cls, "state", property(get, put))


def test_flows_and_publications_follow_their_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    flows: Seen = set()
    pubs: Seen = set()
    _watch(monkeypatch, Flow, flows)
    _watch(monkeypatch, Publication, pubs)
    # Churn re-parents receivers (pulls, stops, closed flows); at 1 Gbit/s the bandwidth-delay
    # product is more than a flow's window, so flows block.
    params = LbddParams(subscribers=24, seed=3, data_bytes=4_000_000, churn=0.25, uplink_mbps=1000)
    result = run_lbdd(params)
    assert result["all_bytes_exactly_once"]

    for old, new in flows:
        if old is None:
            assert new is FlowState.IDLE
        else:
            assert isinstance(old, FlowState) and new in FLOW_TRANSITIONS[old], (old, new)
    for old, new in pubs:
        if old is None:
            assert new in PUB_INITIAL
        else:
            assert isinstance(old, PubState) and new in PUB_TRANSITIONS[old], (old, new)
    # The run went through every flow state, and a publication's whole life.
    assert {new for _, new in flows} == set(FlowState)
    assert {PubState.SOURCE, PubState.RECEIVING, PubState.COMPLETE} <= {new for _, new in pubs}
