"""Several messages per link frame (``runtime/batching.py``): packing and strict unpacking,
hop acks coalesced and expanded back, malformed batches counted and dropped whole by a live
peer, and a swarm delivering exactly the oracle's deliveries with batching on."""

from __future__ import annotations

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from runtime_harness import oracle_round

from rangecast.dht.errors import LocalProtocolError
from rangecast.dht.messages import HopAck, Ping, RouteDone
from rangecast.dht.wire import Handle, codec_for
from rangecast.pubsub.peer import OverlayPeer
from rangecast.pubsub.schema import builtin_schemas
from rangecast.runtime.batching import (
    BatchConfig,
    QueueItem,
    done_item,
    expand_acks,
    is_batch,
    only_acks,
    pack,
    unpack,
)
from rangecast.runtime.guard import (
    FrameReader,
    Gate,
    InSession,
    Rejections,
    SessionInitiator,
    frame,
    wire_codec,
)
from rangecast.runtime.identity import Identity, PeerAddress
from rangecast.runtime.inprocess import leaf_sets_converged, start_local_swarm
from rangecast.runtime.messages import MAX_BATCH_ACKS, MAX_BATCH_BODIES, Authed, Batch
from rangecast.runtime.peer import PeerConfig, PeerRuntime, read_frame
from rangecast.runtime.quotas import BUSY

CORE = codec_for(*OverlayPeer.TABLES)
WIRE = wire_codec(*OverlayPeer.TABLES)
U63 = st.integers(0, (1 << 63) - 1)
BODY = st.binary(min_size=2, max_size=3000)
#: Bodies, hop acks (uids) and end-to-end acks (``~uid``, as the link queues them).
ITEMS = st.lists(st.one_of(BODY, U63, U63.map(lambda u: ~u)), min_size=1, max_size=400)


def _carried(payloads: list[bytes]) -> tuple[list[bytes], list[int]]:
    """What a receiver gets out of the session frames' payloads: bodies in order, ack uids."""
    bodies: list[bytes] = []
    acks: list[int] = []
    for p in payloads:
        if is_batch(p):
            batch = unpack(p, WIRE)
            assert batch is not None
            bodies += batch.bodies
            acks += batch.acks
            acks += [~u for u in batch.dones]
        elif type(msg := _try_hop_ack(p)) is RouteDone:
            acks.append(~msg.uid)
        elif type(msg := _try_hop_ack(p)) is HopAck:
            acks.append(msg.uid)
        else:
            bodies.append(p)
    return bodies, acks


def _try_hop_ack(p: bytes) -> object:
    try:
        return CORE.decode(p)
    except Exception:
        return None


@settings(max_examples=150, deadline=None)
@given(ITEMS, st.integers(1024, 16384), st.integers(1, 40), st.integers(1, 50))
def test_pack_then_unpack_gives_back_every_message_in_order_within_the_bounds(
    items: list[QueueItem], max_bytes: int, max_bodies: int, max_acks: int
) -> None:
    cfg = BatchConfig(max_bytes=max_bytes, max_bodies=max_bodies, max_acks=max_acks)
    # Bodies must not look like a HopAck frame to ``_carried``: real bodies are core frames,
    # and a core frame that is a HopAck never reaches a queue as bytes (``_send``).
    items = [b"\x00" + x if type(x) is bytes else x for x in items]
    payloads = pack(items, cfg, WIRE)
    bodies, acks = _carried(payloads)
    assert bodies == [x for x in items if type(x) is bytes]
    # Hop acks in order, end-to-end acks in order (a batch lists each kind apart).
    assert [a for a in acks if a >= 0] == [x for x in items if type(x) is int and x >= 0]
    assert [a for a in acks if a < 0] == [x for x in items if type(x) is int and x < 0]
    for p in payloads:
        if is_batch(p):
            batch = unpack(p, WIRE)
            assert batch is not None
            n_acks = len(batch.acks) + len(batch.dones)
            assert len(batch.bodies) <= max_bodies and n_acks <= max_acks
            assert len(batch.bodies) + n_acks >= 2
            assert len(p) <= max_bytes
    assert len(payloads) <= len(items)


def test_a_lone_message_travels_as_before_and_many_share_one_frame() -> None:
    cfg = BatchConfig()
    body = CORE.encode(Ping(Handle(b"i" * 20, b"a" * 26)))
    assert pack([body], cfg, WIRE) == [body]
    assert pack([7], cfg, WIRE) == [CORE.encode(HopAck(7))]
    assert pack([done_item(7)], cfg, WIRE) == [CORE.encode(RouteDone(7))]
    many: list[QueueItem] = [body] * 100 + list(range(300))
    (one,) = pack(many, cfg, WIRE)
    # 100 Authed frames of the body and 300 of a HopAck would cost this much more:
    separate = 100 * (len(body) + 24) + 300 * (12 + 24)
    assert len(one) + 24 < separate / 2
    off = pack(many, BatchConfig(enabled=False), WIRE)
    assert len(off) == 400 and all(not is_batch(p) for p in off)


def test_a_body_too_big_to_share_goes_alone_in_its_place() -> None:
    cfg = BatchConfig(max_bytes=2048)
    small, big = b"\x01s", b"\x01" + bytes(5000)
    payloads = pack([small, small, big, small, 1, 2], cfg, WIRE)
    assert len(payloads) == 3 and payloads[1] == big
    assert _carried(payloads) == ([small, small, big, small], [1, 2])


def test_only_acks_and_bad_settings() -> None:
    assert only_acks([1, 2]) and not only_acks([1, b"\x01x"])
    for bad in (
        {"max_bodies": MAX_BATCH_BODIES + 1},
        {"max_acks": 0},
        {"max_bytes": 10},
        {"ack_delay_s": 0.5},
        {"drain": 0},
    ):
        with pytest.raises(LocalProtocolError):
            BatchConfig(**bad)  # type: ignore[arg-type]


# ------------------------------------------------------------------ strict decoding


def _raw_batch(bodies: list[bytes], acks: list[int]) -> bytes:
    """A ``Batch`` frame as an attacker could write it (encoding checks no bounds)."""
    return WIRE.encode(Batch(bodies, acks))


def test_malformed_and_oversized_batches_are_refused() -> None:
    good = _raw_batch([b"\x01a"], [1])
    assert unpack(good, WIRE) == Batch([b"\x01a"], [1])
    refused = [
        _raw_batch([], []),  # empty
        _raw_batch([b"x"] * (MAX_BATCH_BODIES + 1), []),
        _raw_batch([], list(range(MAX_BATCH_ACKS + 1))),
        good[:-1],  # truncated
        good + b"\x00",  # trailing bytes
        WIRE.encode(Authed(good, bytes(16))),  # not a batch at all
    ]
    for data in refused:
        assert unpack(data, WIRE) is None


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_unpack_never_raises_on_garbage_or_mutated_batches(data: st.DataObject) -> None:
    base = pack(
        data.draw(st.lists(st.one_of(BODY, U63), min_size=2, max_size=30)), BatchConfig(), WIRE
    )[0]
    mutated = bytearray(base)
    for _ in range(data.draw(st.integers(0, 8))):
        if not mutated:
            break
        i = data.draw(st.integers(0, len(mutated) - 1))
        mutated[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(mutated)))
    junk = data.draw(st.binary(max_size=200))
    for candidate in (bytes(mutated), bytes(mutated[:cut]), b"\x01\x93\xcc\x8f" + junk, junk):
        got = unpack(candidate, WIRE)
        if got is not None:
            assert type(got) is Batch and (got.bodies or got.acks)
            assert len(got.bodies) <= MAX_BATCH_BODIES and len(got.acks) <= MAX_BATCH_ACKS


# ------------------------------------------------------------------ acks


@given(st.lists(U63, min_size=1, max_size=MAX_BATCH_ACKS))
@settings(max_examples=50, deadline=None)
def test_a_multi_ack_expands_to_exactly_the_individual_acks(uids: list[int]) -> None:
    me = PeerAddress(Identity.generate().node_id, "127.0.0.1", 1).to_bytes()
    them = Identity.generate()
    src = PeerAddress(them.node_id, "127.0.0.1", 2).to_bytes()
    gate = Gate(me, Rejections(), wire=WIRE)
    session = InSession(src, them.node_id, bytes(32))
    alone = [
        gate.admit_authed(session, Authed(CORE.encode(HopAck(u)), bytes(16)), 0.0) for u in uids
    ]
    dones = [
        gate.admit_authed(session, Authed(CORE.encode(RouteDone(u)), bytes(16)), 0.0)
        for u in uids[:3]
    ]
    items: list[QueueItem] = [*uids, *(done_item(u) for u in uids[:3]), b"\x01x"]
    batch = unpack(pack(items, BatchConfig(), WIRE)[0], WIRE)
    assert batch is not None and batch.acks == uids[: MAX_BATCH_ACKS - len(dones)]
    if len(uids) + len(dones) <= MAX_BATCH_ACKS:
        assert batch.dones == uids[:3]
        assert gate.admit_acks(session, expand_acks(batch), 0.0) == alone + dones


# ------------------------------------------------------------------ live peers


#: Keys not ground for the id puzzle: these swarms test batching.
FAST = PeerConfig(id_difficulty=0)


async def _send_batches(target: PeerRuntime) -> dict[str, int]:
    """Session frames carrying malformed and refused batches, then a good one; the refusals
    they caused once the peer has read them all."""
    assert target.address is not None
    before = dict(target.rejections.by_reason)
    mallory = Identity.generate()
    m_addr = PeerAddress(mallory.node_id, "127.0.0.1", 9).to_bytes()
    victim = PeerAddress(Identity.generate().node_id, "127.0.0.1", 10).to_bytes()
    ack = CORE.encode(HopAck(5))
    batches = [
        _raw_batch([], []),
        _raw_batch([ack] * (MAX_BATCH_BODIES + 1), []),
        _raw_batch([], list(range(MAX_BATCH_ACKS + 1))),
        _raw_batch([ack, ack], [1])[:-3],
        _raw_batch([ack, _raw_batch([ack], [1])], []),  # nested
        _raw_batch([ack, CORE.encode(Ping(Handle(victim[:20], victim)))], []),  # forged sender
        _raw_batch([ack, b"\x01\xff"], [2]),  # an undecodable body
        _raw_batch([ack, ack], [3, 4]),  # good
        _raw_batch([], []),  # the last: once it is counted, every batch above was read
    ]
    async with await trio.open_tcp_stream("127.0.0.1", target.address.port) as stream:
        init = SessionInitiator(mallory, m_addr, target.addr, WIRE)
        await stream.send_all(frame(init.open_frame))
        with trio.fail_after(10):  # a refused opening gets no answer: fail, do not hang
            reply = await read_frame(stream, FrameReader())
        session = init.finish(WIRE.decode(reply), m_addr)
        await stream.send_all(b"".join(frame(session.wrap(b)) for b in batches))
        with trio.move_on_after(10):  # a guard against a hang, not a timing assertion
            while target.rejections.by_reason.get("malformed batch", 0) < 5 + before.get(
                "malformed batch", 0
            ):
                await trio.sleep(0.02)
    after = target.rejections.by_reason
    return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


def test_a_live_swarm_batches_counts_bad_batches_and_delivers_exactly() -> None:
    async def main() -> tuple[dict[str, int], tuple[int, int, int], list[PeerRuntime], int]:
        async with trio.open_nursery() as nursery:
            # Mallory's key is not ground: the puzzle is another test's (tests/test_id_puzzle.py).
            peers = await start_local_swarm(nursery, 8, seed=18, config=FAST)
            refused = await _send_batches(peers[0])
            ports = [p.address.port for p in peers]  # type: ignore[union-attr]
            result = await oracle_round(
                (ports[0], ports[3]), (ports[5], ports[0]), 18, n_subs=60, n_events=80
            )
            # Every input the other peers refused, but publishes turned back for load (the
            # admission rate's backpressure on a busy machine, which the client waits out).
            others = sum(
                p.status()["rejected"]["total"] - p.rejections.by_reason.get(BUSY, 0)
                for p in peers[1:]
            )
            for p in peers:
                p.stop()
        return refused, result, peers, others

    refused, result, peers, others = trio.run(main)
    assert refused == {
        "malformed batch": 5,
        "batch dropped: a body refused": 3,
        "not a core message": 1,
        "sender field is not the signer": 1,
        "malformed body": 1,
    }
    assert result == (0, 0, 0)
    # Batching happened: fewer frames than messages, and every frame was accepted.
    frames = sum(p.transport.frames_out for p in peers)
    messages = sum(p.transport.messages_out for p in peers)
    assert frames < messages
    assert others == 0
    assert all(p.internal_errors == 0 for p in peers)


def test_a_peer_with_batching_off_and_the_others_understand_each_other() -> None:
    """Batching is the sender's choice: a peer with it off sends one frame per message, as
    before, and peers with it on take those as they always did (and it takes their batches)."""

    async def main() -> tuple[tuple[int, int, int], int, int, int]:
        async with trio.open_nursery() as nursery:
            peers = await start_local_swarm(nursery, 5, seed=19, config=FAST)
            plain = PeerRuntime(
                Identity.generate(),
                builtin_schemas(),
                PeerConfig(seed=190, batching=BatchConfig(enabled=False), id_difficulty=0),
            )
            await nursery.start(plain.run, [("127.0.0.1", peers[0].address.port)])  # type: ignore[union-attr]
            peers.append(plain)
            with trio.fail_after(60):
                while not leaf_sets_converged(peers):
                    await trio.sleep(0.05)
            ports = [p.address.port for p in peers]  # type: ignore[union-attr]
            result = await oracle_round(
                (ports[5], ports[2]), (ports[5], ports[1]), 19, n_subs=40, n_events=60
            )
            t = plain.transport
            for p in peers:
                p.stop()
        return result, t.frames_out, t.messages_out, t.messages_in

    result, frames, messages, received = trio.run(main)
    assert result == (0, 0, 0)
    assert frames == messages > 0 and received > 0
