"""Who may end a routed message: signed end-to-end acknowledgements (``dht.e2e``).

Theory of operation
-------------------
An end-to-end acknowledgement (``RouteDone``) judges the hop it comes from: a hop whose
``RouteDone`` does not come is charged a loss. Unsigned, it judges nothing against a liar: a
hop that drops what it should forward and answers ``RouteDone`` itself is never charged. With
a ``Notary`` the node that ends a message (the key's root) signs the acknowledgement over the
message's uid, its key and its own id, and every hop on the way back checks two things before
it clears the hop it judges:

1. **The signature**: only the node named as root can have made it (``Notary.verify``). A hop
   in the middle cannot sign for the root; all it can do is name *itself* as the root. A next
   hop's word about itself needs no signature (the link that carried it is authenticated by
   the driver), so an acknowledgement without a named root is the next hop saying it ended
   the message, and the root signs only when the hop before it is not the message's origin
   (``Track.sign``): on a route of one hop, the common case in a small swarm, nothing is signed
   or verified and the acknowledgement stays as small as an unsigned one.
2. **The claim**: the named root must be one of the ``e2e_root_rank`` nodes closest to the key
   among those this node knows (itself included, the next hops this message lost excluded),
   and, when the leaf set does not cover the whole ring, no further from the key than
   ``e2e_root_spread`` mean leaf-set spacings. A hop far from the key that names itself as
   the root fails one test or the other; the node that served as root in place of a dropper
   (the next-closest, ``dht.e2e``) passes both.

A ``RouteDone`` that fails is counted (``NodeStats.e2e_forged``) and ignored, so the deadline
charges the hop as if it had said nothing, and the message is re-routed around it.

Limits (the figures are ours; the papers do not treat a lying root): a liar that *is* among the
``e2e_root_rank`` nodes closest to a key, as the judging hop knows them, can still end that key's
messages unnoticed (it holds the key's replicas anyway: ``replica_set``); far from the key, where
a hop knows few nodes near it, the spread test is what refutes it, with a false alarm when the
gap around the key exceeds ``e2e_root_spread`` spacings, which for uniformly random ids has
probability about ``exp(-2 * e2e_root_spread)``.

The simulator models signatures with a keyed hash per node (``KeyedNotary``): a simulated
liar holds its own key and nobody else's. Real peers sign with their Ed25519 identity
(``runtime/notary.py``).
"""

from __future__ import annotations

import hashlib
from typing import Protocol

#: Bytes of a proof the simulator's model carries (a real peer's: its key and signature, 96).
KEYED_PROOF_BYTES = 64


class Notary(Protocol):
    """Signs this node's ``RouteDone``-s and checks other nodes'."""

    def sign(self, uid: int, key: int) -> bytes:
        """This node's proof that it ended message ``uid`` for ``key``."""
        ...

    def verify(self, uid: int, key: int, root: bytes, proof: bytes) -> bool:
        """Whether ``proof`` was made by the node whose id is ``root`` for ``uid`` and ``key``."""
        ...


def signed_text(uid: int, key: int, root: bytes) -> bytes:
    """What a root signs: a domain tag, the uid, the key and its own id (so a proof cannot be
    moved to another message, another key or another signer)."""
    return b"rangecast/route-done/1\x00" + uid.to_bytes(8, "big") + key.to_bytes(32, "big") + root


class KeyedNotary:
    """The simulator's signatures: a keyed BLAKE2b of the signed text, under a secret derived
    from the swarm's secret and the signer's id. A wrapped core in a test holds only its own
    node's notary, as a real liar holds only its own private key."""

    __slots__ = ("_me", "_secret")

    def __init__(self, secret: bytes, me: bytes) -> None:
        self._secret = secret
        self._me = me

    def _mac(self, text: bytes, signer: bytes) -> bytes:
        key = hashlib.blake2b(signer, key=self._secret[:64], digest_size=32).digest()
        return hashlib.blake2b(text, key=key, digest_size=KEYED_PROOF_BYTES).digest()

    def sign(self, uid: int, key: int) -> bytes:
        return self._mac(signed_text(uid, key, self._me), self._me)

    def verify(self, uid: int, key: int, root: bytes, proof: bytes) -> bool:
        return proof == self._mac(signed_text(uid, key, root), root)


__all__ = ["KEYED_PROOF_BYTES", "KeyedNotary", "Notary", "signed_text"]
