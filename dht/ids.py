"""Identifier arithmetic for a circular Pastry id space.

Ids are plain Python ints in ``[0, 2**bits)``; on the wire they travel as big-endian bytes of
``bits // 8`` length. Everything the routing rule needs (digits, shared prefix length, circular
distance) is integer arithmetic on those ints, which keeps the simulator's hot path free of
allocations.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field

from rangecast.dht.errors import LocalProtocolError, RemoteProtocolError


@dataclass(frozen=True, slots=True)
class IdSpace:
    """The shape of the id space: ``bits`` long ids read as digits of ``b`` bits."""

    bits: int = 160
    b: int = 4
    digits: int = field(init=False)
    size: int = field(init=False)
    nbytes: int = field(init=False)
    radix: int = field(init=False)

    def __post_init__(self) -> None:
        if not isinstance(self.bits, int) or not isinstance(self.b, int):
            raise LocalProtocolError(f"bits and b must be ints, got {self.bits!r}, {self.b!r}")
        if self.b < 1 or self.b > 8:
            raise LocalProtocolError(f"digit width b={self.b} must be between 1 and 8 bits")
        if self.bits < self.b or self.bits % self.b or self.bits % 8:
            raise LocalProtocolError(
                f"id length {self.bits} must be a multiple of both 8 and b={self.b}"
            )
        object.__setattr__(self, "digits", self.bits // self.b)
        object.__setattr__(self, "size", 1 << self.bits)
        object.__setattr__(self, "nbytes", self.bits // 8)
        object.__setattr__(self, "radix", 1 << self.b)

    # -- digits and prefixes ------------------------------------------------------------------

    def digit(self, ident: int, row: int) -> int:
        """The ``row``-th digit of ``ident``, most significant first."""
        return (ident >> (self.bits - self.b * (row + 1))) & (self.radix - 1)

    def shared_prefix(self, a: int, c: int) -> int:
        """Number of leading digits ``a`` and ``c`` have in common."""
        return (self.bits - (a ^ c).bit_length()) // self.b

    def prefix_range(self, ident: int, length: int, next_digit: int) -> tuple[int, int]:
        """Half-open id interval of all ids sharing ``length`` digits with ``ident`` and having
        ``next_digit`` as digit number ``length``. Ids with a common prefix are contiguous, which
        is what lets the oracle bootstrap find routing-table candidates by bisection."""
        shift = self.bits - self.b * (length + 1)
        top = ((ident >> (shift + self.b)) << self.b) | next_digit
        return top << shift, (top + 1) << shift

    # -- the ring -------------------------------------------------------------------------------

    def distance(self, a: int, c: int) -> int:
        """Circular (shorter-way-round) distance between two ids."""
        d = (a - c) % self.size
        return min(d, self.size - d)

    def cw(self, origin: int, target: int) -> int:
        """Clockwise distance: how far ``target`` lies above ``origin`` going round the ring."""
        return (target - origin) % self.size

    def ccw(self, origin: int, target: int) -> int:
        """Counter-clockwise distance from ``origin`` down to ``target``."""
        return (origin - target) % self.size

    # -- conversions ----------------------------------------------------------------------------

    def to_bytes(self, ident: int) -> bytes:
        return ident.to_bytes(self.nbytes, "big")

    def from_bytes(self, raw: bytes) -> int:
        """Decode a wire id; a wrong length is the sender's fault."""
        if len(raw) != self.nbytes:
            raise RemoteProtocolError(f"id of {len(raw)} bytes, expected {self.nbytes}")
        return int.from_bytes(raw, "big")

    def check(self, ident: int) -> int:
        """Validate an id handed to us by local code (our own misuse raises here)."""
        if not isinstance(ident, int) or not 0 <= ident < self.size:
            raise LocalProtocolError(f"id {ident!r} is not an int in [0, 2**{self.bits})")
        return ident

    def random_id(self, rng: random.Random) -> int:
        return rng.getrandbits(self.bits)

    def hash_key(self, text: str | bytes) -> int:
        """Key of a named object: SHA-1 of its name, cut or repeated to ``bits`` bits."""
        raw = text.encode() if isinstance(text, str) else text
        digest = hashlib.sha1(raw).digest()
        while len(digest) < self.nbytes:
            digest += hashlib.sha1(digest).digest()
        return int.from_bytes(digest[: self.nbytes], "big")

    def hexid(self, ident: int) -> str:
        return format(ident, f"0{self.bits // 4}x")


DEFAULT_SPACE = IdSpace()
