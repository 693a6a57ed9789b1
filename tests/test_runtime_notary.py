"""A real peer's notary (``runtime/notary.py``): a root's signed ``RouteDone`` verifies for
that root, that message and that key only; nothing else a peer could send passes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rangecast.runtime.identity import Identity
from rangecast.runtime.notary import Ed25519Notary

ROOT = Identity.generate()
OTHER = Identity.generate()
SIGNER = Ed25519Notary(ROOT)
JUDGE = Ed25519Notary(OTHER)
KEYS = st.integers(min_value=0, max_value=2**160 - 1)
UIDS = st.integers(min_value=0, max_value=2**63 - 1)


@settings(max_examples=50)
@given(uid=UIDS, key=KEYS, other_uid=UIDS, other_key=KEYS)
def test_a_proof_holds_for_its_message_key_and_root_only(
    uid: int, key: int, other_uid: int, other_key: int
) -> None:
    proof = SIGNER.sign(uid, key)
    assert JUDGE.verify(uid, key, ROOT.node_id, proof)
    assert not JUDGE.verify(uid, key, OTHER.node_id, proof)  # another root named
    if other_uid != uid:
        assert not JUDGE.verify(other_uid, key, ROOT.node_id, proof)
    if other_key != key:
        assert not JUDGE.verify(uid, other_key, ROOT.node_id, proof)


@settings(max_examples=50)
@given(data=st.binary(max_size=128), flip=st.integers(min_value=0, max_value=95))
def test_forged_or_damaged_proofs_are_refused_without_raising(data: bytes, flip: int) -> None:
    assert not JUDGE.verify(1, 2, ROOT.node_id, data)
    proof = bytearray(SIGNER.sign(1, 2))
    proof[flip] ^= 0x01
    assert not JUDGE.verify(1, 2, ROOT.node_id, bytes(proof))


def test_a_peer_signing_with_its_own_key_cannot_name_another_root() -> None:
    # Its own valid signature, the honest root's id named: the key does not hash to that id.
    forged = Ed25519Notary(OTHER).sign(7, 9)
    assert not JUDGE.verify(7, 9, ROOT.node_id, forged)
    assert JUDGE.verify(7, 9, OTHER.node_id, forged)
