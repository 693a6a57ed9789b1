"""A real peer's notary (``dht.notary``): its end-to-end acknowledgements signed with its
Ed25519 identity, and other peers' checked against the id their key hashes to.

A proof is the root's public key (32 bytes) and its signature (64) over ``dht.notary``'s
signed text; it is the root's because SHA-1 of that key is the root's node id
(``runtime/identity.py``), so no peer can sign for another. Verifying costs one Ed25519
check per hop a ``RouteDone`` passes; the keys seen last are kept parsed, as the guard keeps
its own (``identity.PublicKeys``).
"""

from __future__ import annotations

from rangecast.dht.notary import signed_text
from rangecast.runtime.identity import KEY_BYTES, SIG_BYTES, Identity, PublicKeys, node_id_of

#: Parsed public keys kept (the roots a peer hears from most: its neighbours' neighbours).
KEYS_KEPT = 1024


class Ed25519Notary:
    """Signs this peer's ``RouteDone``-s with its identity; checks other roots' proofs."""

    __slots__ = ("_identity", "_keys", "_prefix")

    def __init__(self, identity: Identity) -> None:
        self._identity = identity
        self._prefix = identity.public_key
        self._keys = PublicKeys(KEYS_KEPT)

    def sign(self, uid: int, key: int) -> bytes:
        ident = self._identity
        return self._prefix + ident.sign(signed_text(uid, key, ident.node_id))

    def verify(self, uid: int, key: int, root: bytes, proof: bytes) -> bool:
        if len(proof) != KEY_BYTES + SIG_BYTES:
            return False
        raw = proof[:KEY_BYTES]
        if node_id_of(raw) != root:
            return False  # a key that is not the named root's
        return self._keys.verify(raw, proof[KEY_BYTES:], signed_text(uid, key, root))


__all__ = ["Ed25519Notary"]
