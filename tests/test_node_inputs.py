"""A node's inputs: local misuse raises ``LocalProtocolError`` at the call site, remote garbage
never raises out of the node; whole experiments are deterministic and correct; the CLI."""

from __future__ import annotations

import json
import random
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rangecast.cli import main as cli
from rangecast.dht.errors import LocalProtocolError
from rangecast.dht.ids import DEFAULT_SPACE
from rangecast.dht.messages import (
    DHT_TABLE,
    Announce,
    Direct,
    JoinReply,
    JoinRequest,
    JoinRows,
    LeafSetReply,
    LeafSetRequest,
    Leave,
    Ping,
    Pong,
    Route,
    RowReply,
    RowRequest,
)
from rangecast.dht.node import PastryConfig, PastryNode, State
from rangecast.dht.routing import Peer
from rangecast.dht.wire import Handle, Message, WireError, codec_for
from rangecast.multicast.topic import TopicNode, TopicPeer
from rangecast.pubsub.messages import InstallAck
from rangecast.pubsub.node import PubSubNode
from rangecast.pubsub.peer import OverlayPeer
from rangecast.pubsub.schema import THESIS_SCHEMA, SchemaRegistry
from rangecast.sim.engine import Simulator
from rangecast.sim.latency import SyntheticLatency
from rangecast.sim.network import RootOracle, SimNetwork
from rangecast.sim.route_experiment import WALL_FIELDS, RouteParams, run_route
from rangecast.sim.streams import stream

#: The bare DHT's codec: its own table only.
CODEC = codec_for(DHT_TABLE)
encode = CODEC.encode
decode = CODEC.decode
_BASE_EXAMPLES = settings().max_examples
ADDR = b"\x0a\x00\x00\x01\x0f\xa0"
OTHER = b"\x0a\x00\x00\x02\x0f\xa0"


def fresh_node(ident: int = 12345, addr: bytes = ADDR) -> PastryNode:
    return PastryNode(ident, addr, random.Random(1), codec=CODEC)


def ready_overlay(n: int = 8, seed: int = 5) -> tuple[Simulator, SimNetwork]:
    sim = Simulator(SyntheticLatency(seed, sites=64), stream(seed, "network"), codec=CODEC)
    overlay = SimNetwork(sim, seed)
    overlay.oracle_bootstrap(overlay.create(n))
    return sim, overlay


def bad_handle() -> Handle:
    return Handle(b"abc", OTHER)  # a 3-byte id


# ---------------------------------------------------------------------------- local misuse


def test_route_before_ready_raises() -> None:
    node = fresh_node()
    with pytest.raises(LocalProtocolError, match="route"):
        node.route(1, b"x", 0.0)
    node.join(OTHER, 0.0)
    assert node.state is State.JOINING
    with pytest.raises(LocalProtocolError, match="route"):
        node.route(1, b"x", 0.0)


def test_join_twice_and_other_state_misuse_raise() -> None:
    node = fresh_node()
    node.join(OTHER, 0.0)
    with pytest.raises(LocalProtocolError, match="join"):
        node.join(OTHER, 1.0)
    with pytest.raises(LocalProtocolError, match="start_alone"):
        node.start_alone(1.0)
    alone = fresh_node()
    alone.start_alone(0.0)
    for call in (
        lambda: alone.start_alone(1.0),
        lambda: alone.join(OTHER, 1.0),
        lambda: alone.install_state([], [], [], 1.0),
    ):
        with pytest.raises(LocalProtocolError):
            call()
    assert alone.state is State.READY


def test_join_through_ourselves_raises() -> None:
    node = fresh_node()
    with pytest.raises(LocalProtocolError, match="ourselves"):
        node.join(ADDR, 0.0)
    assert node.state is State.IDLE  # nothing happened


def test_route_after_leave_raises() -> None:
    node = fresh_node()
    node.start_alone(0.0)
    node.leave(1.0)
    assert node.state is State.LEFT
    with pytest.raises(LocalProtocolError):
        node.route(1, b"x", 2.0)


@pytest.mark.parametrize("ident", [-1, DEFAULT_SPACE.size, 2**200, 1.0, "1", None, b"\x01" * 20])
def test_bad_id_raises(ident: Any) -> None:
    with pytest.raises(LocalProtocolError):
        PastryNode(ident, ADDR, random.Random(0), codec=CODEC)


@pytest.mark.parametrize("addr", [b"", b"x" * 65, "10.0.0.1:4000", bytearray(ADDR), None, 42])
def test_bad_address_raises(addr: Any) -> None:
    with pytest.raises(LocalProtocolError, match="address"):
        PastryNode(1, addr, random.Random(0), codec=CODEC)


@pytest.mark.parametrize("rng", [None, 42, random, "seed"])
def test_bad_rng_raises(rng: Any) -> None:
    with pytest.raises(LocalProtocolError, match="rng"):
        PastryNode(1, ADDR, rng, codec=CODEC)


@pytest.mark.parametrize("codec", [None, "dht", DHT_TABLE, codec_for(OverlayPeer.TABLES[1])])
def test_a_node_needs_a_codec_that_speaks_the_dht_table(codec: Any) -> None:
    with pytest.raises(LocalProtocolError, match="codec"):
        PastryNode(1, ADDR, random.Random(0), codec=codec)


# ------------------------------------------------------------------ the codec a stack is given


def _install_ack_frame() -> bytes:
    return codec_for(*OverlayPeer.TABLES).encode(InstallAck(0, 1, 2, 3, True))


def test_a_dht_only_core_counts_a_pubsub_frame_as_malformed_and_drops_it() -> None:
    node = fresh_node()
    node.start_alone(0.0)
    node.receive_frame(_install_ack_frame(), OTHER, 1.0)  # never raises
    assert node.stats.malformed == 1
    assert node.stats.dropped == 0
    assert node.take_messages() == []
    assert node.state is State.READY


def test_two_stacks_with_different_codecs_live_side_by_side() -> None:
    bare = fresh_node()
    stacked = PastryNode(12345, ADDR, random.Random(1), codec=codec_for(*OverlayPeer.TABLES))
    for node in (bare, stacked):
        node.start_alone(0.0)
        node.receive_frame(_install_ack_frame(), OTHER, 1.0)
    # The pub/sub stack's codec reads the frame: a message of another layer, not the DHT's.
    assert stacked.stats.malformed == 0 and stacked.stats.by_reason == {"not a dht message": 1}
    # The bare DHT's codec does not speak pub/sub: the same bytes are garbage to it.
    assert bare.stats.malformed == 1 and bare.stats.dropped == 0
    assert bare.codec is CODEC and stacked.codec is not CODEC


def test_an_upper_layer_refuses_a_node_whose_codec_lacks_its_table() -> None:
    registry = SchemaRegistry((THESIS_SCHEMA,))
    with pytest.raises(LocalProtocolError, match="pubsub"):
        PubSubNode(fresh_node(), registry, capacity=1, rng=random.Random(0))
    with pytest.raises(LocalProtocolError, match="multicast"):
        TopicNode(fresh_node(), random.Random(0))
    # Built with the stack's own tables, each accepts the node.
    PubSubNode(
        PastryNode(1, ADDR, random.Random(0), codec=codec_for(*OverlayPeer.TABLES)),
        registry,
        capacity=1,
        rng=random.Random(0),
    )
    TopicNode(
        PastryNode(1, ADDR, random.Random(0), codec=codec_for(*TopicPeer.TABLES)), random.Random(0)
    )


@pytest.mark.parametrize("key", [-1, DEFAULT_SPACE.size, "k", None, 0.5])
def test_route_with_a_bad_key_raises(key: Any) -> None:
    node = fresh_node()
    node.start_alone(0.0)
    with pytest.raises(LocalProtocolError):
        node.route(key, b"x", 0.0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"leaf_set_size": 0},
        {"leaf_set_size": 1},
        {"leaf_set_size": 3},
        {"leaf_set_size": -2},
        {"keepalive_s": 0.0},
        {"keepalive_s": -1.0},
        {"keepalive_s": 5.0, "fail_after_s": 5.0},
        {"keepalive_s": 5.0, "fail_after_s": 1.0},
    ],
)
def test_bad_config_raises(kwargs: dict[str, Any]) -> None:
    with pytest.raises(LocalProtocolError):
        PastryConfig(**kwargs)


def test_simulator_and_overlay_misuse_raises() -> None:
    with pytest.raises(LocalProtocolError, match="loss"):
        Simulator(SyntheticLatency(0, sites=8), random.Random(0), codec=CODEC, loss=1.0)
    sim, overlay = ready_overlay(4)
    sim.run(until=1.0)
    with pytest.raises(LocalProtocolError, match="past"):
        sim.call_at(0.5, lambda: None)
    with pytest.raises(LocalProtocolError):
        overlay.create(0)
    with pytest.raises(LocalProtocolError, match="fraction"):
        overlay.crash_fraction(1.0, random.Random(0))
    with pytest.raises(LocalProtocolError):
        RootOracle(DEFAULT_SPACE, [])


@pytest.mark.parametrize(
    "params",
    [
        RouteParams(nodes=0),
        RouteParams(lookups=-1),
        RouteParams(bootstrap="magic"),
        RouteParams(fail=1.0),
        RouteParams(fail=-0.1),
        RouteParams(repair_s=-1.0),
        RouteParams(lookup_rate_per_s=0.0),
    ],
)
def test_bad_route_params_raise(params: RouteParams) -> None:
    with pytest.raises(LocalProtocolError):
        run_route(params)


# --------------------------------------------------------------------------- remote garbage


def bad_messages(sim: Simulator, overlay: SimNetwork) -> list[tuple[str, Message]]:
    """Messages a buggy or hostile peer could send, each with exactly one wrong-length id."""
    good = overlay.nodes[1].me.handle
    node = overlay.nodes[0]
    key_here = DEFAULT_SPACE.to_bytes(node.id)  # node 0 is the root of its own id
    return [
        ("ping", Ping(bad_handle())),
        ("pong", Pong(bad_handle())),
        ("announce", Announce(bad_handle())),
        ("leafset-request", LeafSetRequest(bad_handle())),
        ("leafset-reply", LeafSetReply(good, [good, bad_handle()])),
        ("join-request", JoinRequest(bad_handle(), -1, 0, 1)),
        ("join-rows", JoinRows(good, [bad_handle()])),
        ("row-request", RowRequest(bad_handle(), 0)),
        ("row-reply", RowReply(good, 0, [bad_handle()])),
        ("direct", Direct(bad_handle(), b"hi")),
        ("leave", Leave(bad_handle())),
        ("leave-for-another-address", Leave(Handle(good.id, b"\x99" * 6))),
        ("route-key", Route(1, b"\x01\x02\x03", good, 1, b"p")),
        ("route-origin-delivered-here", Route(2, key_here, bad_handle(), 1, b"p")),
        ("route-key-too-long", Route(3, b"\x00" * 21, good, 1, b"p")),
    ]


def _case_names() -> list[str]:
    sim, overlay = ready_overlay()
    return [name for name, _ in bad_messages(sim, overlay)]


@pytest.mark.parametrize("name", _case_names())
@pytest.mark.parametrize("as_frame", [False, True], ids=["receive", "receive_frame"])
def test_wrong_length_ids_are_counted_and_dropped(name: str, as_frame: bool) -> None:
    sim, overlay = ready_overlay()
    node = overlay.nodes[0]
    msg = dict(bad_messages(sim, overlay))[name]
    src = overlay.nodes[1].me.addr
    before = node.stats.malformed
    if as_frame:
        node.receive_frame(encode(msg), src, 1.0)
    else:
        node.receive(msg, src, 1.0)
    assert node.stats.malformed == before + 1
    assert node.state is State.READY
    # The node keeps serving: it still routes, and its neighbours are all well-formed.
    assert all(len(p.handle.id) == 20 for p in node.known_peers())
    node.route(node.id, b"still here", 2.0)


def test_a_join_reply_with_a_bad_root_is_dropped_by_a_joining_node() -> None:
    node = fresh_node()
    node.join(OTHER, 0.0)
    node.receive(JoinReply(bad_handle(), []), OTHER, 0.1)
    assert node.stats.malformed == 1
    assert node.state is State.JOINING  # still waiting for a proper reply


def test_a_dropped_route_is_not_counted_as_delivered() -> None:
    _, overlay = ready_overlay()
    node = overlay.nodes[0]
    node.receive(Route(2, DEFAULT_SPACE.to_bytes(node.id), bad_handle(), 1, b"p"), OTHER, 1.0)
    assert node.stats.malformed == 1
    assert node.stats.delivered == 0


def test_a_malformed_route_origin_never_raises_out_of_handle_timer() -> None:
    space = DEFAULT_SPACE
    a = PastryNode(10, b"A" * 6, random.Random(1), codec=CODEC)
    b = Peer.make(space, 2**159, b"B" * 6)
    a.install_state([b], [b], [], 0.0)
    a.take_messages()
    # A Route for b's id with a 3-byte origin id is refused on arrival: no ack, no forward,
    # so no later ack timeout can meet the bad origin either.
    a.receive(Route(5, space.to_bytes(b.id), bad_handle(), 1, b"hi"), b"C" * 6, 0.0)
    assert a.take_messages() == []
    assert a.stats.malformed == 1
    a.handle_timer(100.0)  # nothing pending: must not raise
    assert a.stats.malformed == 1


# Decodable but hostile messages: ids and addresses of any length the codec allows, with real
# ids and addresses of the overlay mixed in so the handlers get past their first checks.
_FUZZ_SIM, _FUZZ_OVERLAY = ready_overlay(12, seed=9)
_KNOWN_IDS = [DEFAULT_SPACE.to_bytes(n.id) for n in _FUZZ_OVERLAY.nodes]
_KNOWN_ADDRS = list(_FUZZ_SIM.addrs)


@given(frame=st.binary(max_size=300))
def test_random_frames_never_raise_and_are_counted(frame: bytes) -> None:
    _, overlay = ready_overlay(12, seed=9)
    node = overlay.nodes[0]
    try:
        decode(frame)
        decodable = True
    except WireError:
        decodable = False
    before = node.stats.malformed
    node.receive_frame(frame, OTHER, 1.0)
    node.take_messages()
    if not decodable:
        assert node.stats.malformed == before + 1


def _bytes_field(name: str, max_length: int) -> st.SearchStrategy[bytes]:
    if name in ("id", "key"):
        return st.one_of(
            st.sampled_from(_KNOWN_IDS),
            st.binary(min_size=20, max_size=20),
            st.binary(max_size=min(max_length, 64)),
        )
    if name == "addr":
        return st.one_of(st.sampled_from(_KNOWN_ADDRS), st.binary(max_size=min(max_length, 64)))
    return st.binary(max_size=min(max_length, 32))


def _field_strategy(t: Any, name: str) -> st.SearchStrategy[Any]:
    info = msgspec.inspect
    if isinstance(t, info.IntType):
        lo = t.ge if t.ge is not None else -(2**63)
        hi = t.le if t.le is not None else 2**63 - 1
        return st.integers(min_value=lo, max_value=hi)
    if isinstance(t, info.BytesType):
        return _bytes_field(name, t.max_length if t.max_length is not None else 64)
    if isinstance(t, info.ListType):
        return st.lists(_field_strategy(t.item_type, name), max_size=5)
    if isinstance(t, info.StructType):
        return st.builds(t.cls, **{f.name: _field_strategy(f.type, f.name) for f in t.fields})
    raise NotImplementedError(f"no fuzz strategy for {t!r}: extend tests/test_node_inputs.py")


hostile_messages = st.one_of(
    [
        _field_strategy(msgspec.inspect.type_info(cls), "")
        for cls in DHT_TABLE.types  # the DHT's own types; the overlay's are fuzzed apart
    ]
)


@settings(max_examples=max(10, _BASE_EXAMPLES))
@given(
    msgs=st.lists(st.tuples(hostile_messages, st.sampled_from(_KNOWN_ADDRS)), max_size=12),
    state=st.sampled_from(["ready", "joining", "idle"]),
)
def test_decodable_hostile_messages_never_raise_out_of_receive(
    msgs: list[tuple[Message, bytes]], state: str
) -> None:
    if state == "ready":
        _, overlay = ready_overlay(12, seed=9)
        node = overlay.nodes[0]
    else:
        node = fresh_node(ident=DEFAULT_SPACE.from_bytes(_KNOWN_IDS[0]) ^ 1)
        if state == "joining":
            node.join(_KNOWN_ADDRS[1], 0.0)
    now = 1.0
    for msg, src in msgs:
        frame = encode(msg)
        assert decode(frame) == msg  # really something a peer can put on the wire
        node.receive(msg, src, now)
        node.receive_frame(frame, src, now)
        now += 0.01
        for _, out in node.take_messages():
            assert type(out) in DHT_TABLE.types
            CODEC.encode(out)  # everything the node emits is encodable
    # The node's own state stays well-formed whatever it was told.
    assert node.id not in node.leaves
    for p in node.known_peers():
        assert len(p.handle.id) == 20 and p.id == DEFAULT_SPACE.from_bytes(p.handle.id)
    if state == "ready":
        assert node.state is State.READY


# ------------------------------------------------------------------- whole experiments


def _without_wall_fields(result: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if k not in WALL_FIELDS}


def test_route_experiment_is_deterministic() -> None:
    params = RouteParams(nodes=200, lookups=500, seed=7)
    first, second = run_route(params), run_route(params)
    assert set(WALL_FIELDS) <= set(first)
    assert _without_wall_fields(first) == _without_wall_fields(second)
    assert first["correct_root_fraction"] == 1.0
    assert first["delivered"] == 500 and first["duplicate_deliveries"] == 0
    other = run_route(RouteParams(nodes=200, lookups=500, seed=8))
    assert _without_wall_fields(other) != _without_wall_fields(first)


def test_route_experiment_with_failures_is_correct() -> None:
    result = run_route(RouteParams(nodes=60, lookups=300, seed=3, fail=0.2))
    assert result["failed_nodes"] == 12
    assert result["live_nodes"] == 48
    assert result["leafset_mismatches_after_repair"] == 0
    assert result["correct_root_fraction"] == 1.0
    assert result["delivered"] == 300 and result["duplicate_deliveries"] == 0


def test_route_experiment_with_join_bootstrap_is_correct() -> None:
    result = run_route(RouteParams(nodes=60, lookups=300, seed=3, bootstrap="join"))
    join = result["join"]
    assert join["completed"] == join["joins"] == 60
    assert join["failed"] == join["unfinished"] == 0
    assert join["leafset_mismatches"] == 0
    assert result["correct_root_fraction"] == 1.0
    assert result["delivered"] == 300 and result["duplicate_deliveries"] == 0


@pytest.mark.slow
@pytest.mark.parametrize(
    "params",
    [
        RouteParams(nodes=2000, lookups=5000, seed=11, fail=0.3),
        RouteParams(nodes=400, lookups=2000, seed=11, bootstrap="join"),
        RouteParams(nodes=300, lookups=2000, seed=12, bootstrap="join", fail=0.2),
    ],
    ids=["2000-nodes-30%-failed", "400-joins", "300-joins-20%-failed"],
)
def test_larger_route_experiments_are_correct(params: RouteParams) -> None:
    result = run_route(params)
    assert result["correct_root_fraction"] == 1.0
    assert result["delivered"] == params.lookups
    assert result["duplicate_deliveries"] == 0
    assert result.get("leafset_mismatches_after_repair", 0) == 0
    if params.bootstrap == "join":
        assert result["join"]["completed"] == params.nodes
        assert result["join"]["leafset_mismatches"] == 0


# -------------------------------------------------------------------------------- the CLI

DOCUMENTED_KEYS = {
    "nodes",
    "lookups",
    "correct_root_fraction",
    "mean_hops",
    "p99_hops",
    "max_hops",
    "mean_latency_ms",
    "sim_messages",
    "wall_s",
    "sim_messages_per_s",
}
ROUTE = ["sim", "route", "--nodes", "50", "--lookups", "100"]


def test_cli_json_prints_one_object_with_the_documented_keys(capsys) -> None:
    assert cli.main([*ROUTE, "--json", "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    lines = out.strip().splitlines()
    assert len(lines) == 1
    result = json.loads(lines[0])
    assert isinstance(result, dict)
    assert set(result) >= DOCUMENTED_KEYS
    assert result["nodes"] == 50 and result["lookups"] == 100
    assert result["correct_root_fraction"] == 1.0
    assert 0 <= result["mean_hops"] <= result["p99_hops"] <= result["max_hops"]
    assert result["sim_messages"] > 0


def test_cli_progress_goes_to_stderr_and_keeps_json_clean(capsys) -> None:
    assert cli.main([*ROUTE, "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["nodes"] == 50
    assert "[route]" in err


def test_cli_text_summary(capsys) -> None:
    assert cli.main([*ROUTE, "--quiet"]) == 0
    out, _ = capsys.readouterr()
    assert "Pastry routing: 50 nodes" in out
    assert "correct root" in out


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (["--fail", "1.5"], "--fail"),
        (["--fail", "-0.5"], "--fail"),
        (["--nodes", "0"], "--nodes"),
        (["--lookups", "-3"], "--lookups"),
        (["--loss", "1.5"], "loss"),
        (["--latency", "no-such-model"], "no-such-model"),
        (["--lookup-rate", "0"], "rate"),
    ],
)
def test_cli_bad_values_exit_non_zero_with_a_clear_message(
    capsys, extra: list[str], fragment: str
) -> None:
    rc = cli.main([*ROUTE, "--json", "--quiet", *extra])
    out, err = capsys.readouterr()
    assert rc != 0
    assert out == ""
    assert err.startswith("rangecast: error:")
    assert fragment in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "extra", [["--nodes", "many"], ["--bootstrap", "magic"], ["--fail"], ["--bogus-flag"]]
)
def test_cli_malformed_arguments_exit_with_usage(capsys, extra: list[str]) -> None:
    with pytest.raises(SystemExit) as excinfo:
        cli.main([*ROUTE, *extra])
    assert excinfo.value.code == 2
    _, err = capsys.readouterr()
    assert "usage:" in err and "Traceback" not in err
