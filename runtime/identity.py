"""A peer's identity and its transport address.

A peer's node id is the SHA-1 of its Ed25519 public key (160 bits, the DHT's id length), so a
peer cannot pick where it sits on the ring. The key pair lives in the peer's state directory;
restarting with the same directory gives the same id.

Keys are cheap, though (about 28,000 a second on one core), so an attacker who wants a chosen
place grinds keys until one lands there. The id puzzle (S/Kademlia's static puzzle) multiplies
that cost: a key is admissible only if SHA-256 of a domain tag and its node id starts with
``difficulty`` zero bits, so every key an attacker tries is also a lottery ticket with odds
2^-difficulty, independent of where its id falls. An honest peer pays 2^difficulty keys once
(``Identity.generate``); checking costs one SHA-256 (``meets_puzzle``).

A transport address, as the cores carry it (opaque bytes in every ``Handle``), is the node id
followed by the port and the IP address: ``id (20) | port (2) | IPv4 (4) or IPv6 (16)``. Putting
the id into the address is what lets a receiver check a frame statelessly: the sender's address
must embed the id of the key that signed it, and a frame must name the recipient's own address,
so a frame meant for whoever used to listen on a port is refused by whoever listens there now.

A swarm that chooses its peers gives each of them a swarm key (``SwarmKey``, ``--swarm-key
FILE``): a 32-byte secret every link handshake proves possession of (``runtime/guard.py``).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import ipaddress
import json
import logging
import os
import re
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from rangecast.dht.errors import LocalProtocolError, RemoteProtocolError

ID_BYTES = 20
KEY_BYTES = 32
SIG_BYTES = 64
KEY_FILE = "identity.pem"
STATE_FILE = "peer.json"

#: The id puzzle's difficulty a swarm asks for unless told otherwise (``PeerConfig.id_difficulty``,
#: ``--id-difficulty``): 2^14 keys on average, about 0.6 s on one core of the machine it was
#: measured on (bench/id_grinding.py), and 16,384 times the cost of any chosen place.
DEFAULT_ID_DIFFICULTY = 14
#: Beyond this an honest peer would grind for days; a larger setting is a mistake.
MAX_ID_DIFFICULTY = 40
_PUZZLE_DOMAIN = b"rangecast/id-puzzle/1\x00"
_PUZZLE_BITS = 256

log = logging.getLogger("rangecast.identity")


class PublicKeys:
    """Ed25519 signature checks against raw public keys, the keys seen last kept parsed
    (parsing costs about as much as the check itself): the guard's frames and the notary's
    end-to-end acks check through one of these each."""

    __slots__ = ("_kept", "_keys")

    def __init__(self, kept: int = 4096) -> None:
        self._kept = kept
        self._keys: OrderedDict[bytes, Ed25519PublicKey] = OrderedDict()

    def verify(self, key_bytes: bytes, sig: bytes, data: bytes) -> bool:
        """Whether ``sig`` over ``data`` is by ``key_bytes``; False for a malformed key."""
        keys = self._keys
        key = keys.get(key_bytes)
        if key is None:
            try:
                key = Ed25519PublicKey.from_public_bytes(key_bytes)
            except ValueError:
                return False
            keys[key_bytes] = key
            if len(keys) > self._kept:
                keys.popitem(last=False)
        try:
            key.verify(sig, data)
        except InvalidSignature:
            return False
        return True


def node_id_of(public_key: bytes) -> bytes:
    """The 160-bit node id that belongs to an Ed25519 public key."""
    return hashlib.sha1(public_key, usedforsecurity=False).digest()


def puzzle_bits(node_id: bytes) -> int:
    """How many leading zero bits the id puzzle's hash of ``node_id`` has (0 to 256)."""
    value = int.from_bytes(hashlib.sha256(_PUZZLE_DOMAIN + node_id).digest(), "big")
    return _PUZZLE_BITS - value.bit_length()


def meets_puzzle(node_id: bytes, difficulty: int) -> bool:
    """Whether ``node_id`` (the id of the key a peer proved it holds) solves the id puzzle at
    ``difficulty`` bits; 0 or less admits every id. The hash covers the id, not the key: the id
    is bound to the key at every handshake, and one hash of 20 bytes is all a receiver spends."""
    if difficulty <= 0:
        return True
    value = int.from_bytes(hashlib.sha256(_PUZZLE_DOMAIN + node_id).digest(), "big")
    return value >> (_PUZZLE_BITS - difficulty) == 0


def check_difficulty(difficulty: int) -> int:
    """``difficulty`` if it is a usable setting, else a one-line ``LocalProtocolError``."""
    if not 0 <= difficulty <= MAX_ID_DIFFICULTY:
        raise LocalProtocolError(
            f"id difficulty must be between 0 and {MAX_ID_DIFFICULTY} bits, got {difficulty}"
        )
    return difficulty


@dataclass(frozen=True, slots=True)
class PeerAddress:
    """Where a peer listens, with the id it must prove it holds."""

    node_id: bytes
    host: str
    port: int

    def __post_init__(self) -> None:
        if len(self.node_id) != ID_BYTES:
            raise LocalProtocolError(f"node id must be {ID_BYTES} bytes")
        if not 0 < self.port < 65536:
            raise LocalProtocolError(f"port {self.port} out of range")
        try:
            ipaddress.ip_address(self.host)
        except ValueError:
            raise LocalProtocolError(f"host must be an IP address, got {self.host!r}") from None

    def to_bytes(self) -> bytes:
        return self.node_id + self.port.to_bytes(2, "big") + ipaddress.ip_address(self.host).packed

    @classmethod
    def from_bytes(cls, raw: bytes) -> PeerAddress:
        """Parse an address from the network; anything else raises ``RemoteProtocolError``."""
        n = len(raw)
        if n not in (ID_BYTES + 2 + 4, ID_BYTES + 2 + 16):
            raise RemoteProtocolError(f"transport address of {n} bytes")
        port = int.from_bytes(raw[ID_BYTES : ID_BYTES + 2], "big")
        if port == 0:
            raise RemoteProtocolError("transport address with port 0")
        host = str(ipaddress.ip_address(raw[ID_BYTES + 2 :]))
        return cls(bytes(raw[:ID_BYTES]), host, port)

    @property
    def endpoint(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def __str__(self) -> str:
        return f"{self.node_id.hex()[:12]}@{self.endpoint}"


#: Replica sets spread across address groups (``dht.locality``): peers whose IPv4 addresses
#: share their first 24 bits, or IPv6 addresses their first 48 (one site's allocation), count
#: as one group, which may be one operator's.
IPV4_GROUP_BITS = 24
IPV6_GROUP_BITS = 48


def address_group(addr: bytes) -> bytes:
    """The address group of a core's peer address (``PeerAddress.to_bytes``): the version and
    network prefix of its IP. An address of another shape is a group of its own (it is never
    an error: the core calls this on whatever its tables hold)."""
    ip = addr[ID_BYTES + 2 :]
    if len(ip) == 4:
        return b"4" + ip[: IPV4_GROUP_BITS // 8]
    if len(ip) == 16:
        return b"6" + ip[: IPV6_GROUP_BITS // 8]
    return addr


def parse_endpoint(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6) from a user; a clear error otherwise."""
    host, sep, port_s = text.rpartition(":")
    if not sep or not host:
        raise LocalProtocolError(f"expected HOST:PORT, got {text!r}")
    host = host.strip("[]")
    if host == "localhost":
        host = "127.0.0.1"
    try:
        port = int(port_s)
    except ValueError:
        raise LocalProtocolError(f"port in {text!r} is not a number") from None
    if not 0 <= port < 65536:
        raise LocalProtocolError(f"port {port} out of range in {text!r}")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise LocalProtocolError(
            f"host in {text!r} must be an IP address (or localhost), got {host!r}"
        ) from None
    return host, port


class Identity:
    """An Ed25519 key pair and the node id derived from it."""

    __slots__ = ("_key", "node_id", "public_key")

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self._key = key
        self.public_key = key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        self.node_id = node_id_of(self.public_key)

    @classmethod
    def generate(cls, difficulty: int = 0) -> Identity:
        """A fresh key pair whose id solves the id puzzle at ``difficulty`` bits: 2^difficulty
        keys on average (0: the first key)."""
        check_difficulty(difficulty)
        while True:
            ident = cls(Ed25519PrivateKey.generate())
            if meets_puzzle(ident.node_id, difficulty):
                return ident

    @property
    def int_id(self) -> int:
        return int.from_bytes(self.node_id, "big")

    def sign(self, data: bytes) -> bytes:
        return self._key.sign(data)

    def private_pem(self) -> bytes:
        return self._key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    @classmethod
    def from_pem(cls, pem: bytes, where: str = "key") -> Identity:
        try:
            key = serialization.load_pem_private_key(pem, password=None)
        except (ValueError, TypeError) as exc:
            raise LocalProtocolError(f"{where}: not a usable private key ({exc})") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise LocalProtocolError(f"{where}: not an Ed25519 private key")
        return cls(key)


@contextlib.contextmanager
def _naming(path: Path) -> Iterator[None]:
    """An ``OSError`` on the state directory becomes one line that names the file."""
    try:
        yield
    except OSError as exc:
        raise LocalProtocolError(f"cannot write {path}: {exc.strerror or exc}") from None


#: A swarm key's length: 32 random bytes, written in its file as 64 hex digits.
SWARM_KEY_BYTES = 32
#: The file ``rangecast swarm up --swarm-key`` (without FILE) creates in the swarm directory.
SWARM_KEY_FILE = "swarm.key"
_SWARM_KEY_ID = b"rangecast/swarm-key/fingerprint/1\x00"
_HEX_KEY = re.compile(rf"[0-9a-fA-F]{{{2 * SWARM_KEY_BYTES}}}")


@dataclass(frozen=True, slots=True)
class SwarmKey:
    """Peer admission (``PeerConfig.swarm_key``, ``--swarm-key FILE``): a secret shared by the
    peers of a swarm. Every link handshake proves possession of it both ways (an HMAC-SHA256
    under the key over the handshake's transcript, ``runtime/guard.py``), so a peer without it
    cannot link to, let alone join, a keyed swarm. A shared secret, not a per-peer credential:
    any holder can admit others, and it is changed only by restarting every peer with a new one.

    The file holds one line of 64 hex digits (blank lines and ``#`` comments skipped):
    ``python -c 'import secrets; print(secrets.token_hex(32))' > swarm.key``, or ``create``.
    ``repr`` never shows the secret; ``fingerprint`` names it (``peer status``)."""

    secret: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if len(self.secret) != SWARM_KEY_BYTES:
            raise LocalProtocolError(
                f"a swarm key is {SWARM_KEY_BYTES} bytes, not {len(self.secret)}"
            )

    @classmethod
    def generate(cls) -> SwarmKey:
        return cls(os.urandom(SWARM_KEY_BYTES))

    def mac(self, data: bytes) -> bytes:
        """HMAC-SHA256 of ``data`` under the key (32 bytes)."""
        return hmac.digest(self.secret, data, "sha256")

    @property
    def fingerprint(self) -> str:
        """16 hex digits that tell keys apart (a hash: it says nothing of the secret)."""
        return hashlib.sha256(_SWARM_KEY_ID + self.secret).hexdigest()[:16]

    @classmethod
    def load(cls, path: Path) -> SwarmKey:
        """The key in the file at ``path``; ``LocalProtocolError``, one line naming the file,
        if it cannot be read or does not hold exactly one well-formed key."""
        try:
            text = path.read_text(encoding="ascii")
        except OSError as exc:
            raise LocalProtocolError(f"{path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise LocalProtocolError(f"{path}: not a swarm key file (not ASCII text)") from None
        lines = [t for t in (ln.strip() for ln in text.splitlines()) if t and t[0] != "#"]
        if len(lines) != 1 or not _HEX_KEY.fullmatch(lines[0]):
            got = f"{len(lines)} lines" if len(lines) != 1 else f"{len(lines[0])} characters"
            raise LocalProtocolError(
                f"{path}: a swarm key file holds one line of {2 * SWARM_KEY_BYTES} hex digits "
                f"({SWARM_KEY_BYTES} random bytes), not {got}"
            )
        return cls(bytes.fromhex(lines[0]))

    @classmethod
    def create(cls, path: Path) -> SwarmKey:
        """A new random key written to ``path`` (owner-only, mode 0600; an existing file is
        never overwritten); ``LocalProtocolError`` naming the file if it cannot be."""
        key = cls.generate()
        with _naming(path):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="ascii") as f:
                f.write("# rangecast swarm key: every peer of the swarm needs this file\n")
                f.write(key.secret.hex() + "\n")
        return key


def verify(public_key: bytes, signature: bytes, data: bytes) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, data)
    except (InvalidSignature, ValueError):
        return False
    return True


class StateDir:
    """A peer's state directory: its key pair (``identity.pem``, owner-only) and what it wants
    to remember across restarts (``peer.json``: last boot epoch, last address, known peers)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def load_identity(self, difficulty: int = 0) -> tuple[Identity, bool]:
        """The stored identity, or a new one (solving the id puzzle at ``difficulty``) written
        to disk. Returns (identity, created). A stored key below ``difficulty`` (made before the
        swarm asked for it) would be refused by every peer: it is kept as ``identity.pem.old``
        and replaced, and the peer comes back under a new id."""
        key_path = self.path / KEY_FILE
        with _naming(key_path):
            self.path.mkdir(parents=True, exist_ok=True)
            if key_path.exists():
                old = Identity.from_pem(key_path.read_bytes(), str(key_path))
                if meets_puzzle(old.node_id, difficulty):
                    return old, False
                log.warning(
                    "the key in %s solves the id puzzle at %d bits, the swarm asks for %d: "
                    "keeping it as %s.old and making a new one (a new id)",
                    key_path,
                    puzzle_bits(old.node_id),
                    difficulty,
                    KEY_FILE,
                )
                os.replace(key_path, key_path.with_name(KEY_FILE + ".old"))
            ident = Identity.generate(difficulty)
            tmp = key_path.with_suffix(".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(ident.private_pem())
            os.replace(tmp, key_path)
        return ident, True

    def read(self) -> dict[str, object]:
        """``peer.json`` ({} when absent or unreadable as JSON); ``LocalProtocolError`` naming
        the file when it cannot be read at all (permissions, no descriptor left)."""
        path = self.path / STATE_FILE
        try:
            data = json.loads(path.read_text())
        except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
            return {}
        except NotADirectoryError:
            raise LocalProtocolError(f"--state {self.path}: not a directory") from None
        except OSError as exc:
            raise LocalProtocolError(f"cannot read {path}: {exc.strerror or exc}") from None
        return data if isinstance(data, dict) else {}

    def write(self, data: dict[str, object]) -> None:
        """Replace ``peer.json`` atomically; ``LocalProtocolError`` naming the file if the
        directory cannot take it (read-only, full, no descriptor left)."""
        path = self.path / STATE_FILE
        with _naming(path):
            self.path.mkdir(parents=True, exist_ok=True)
            tmp = self.path / (STATE_FILE + ".tmp")
            tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
            os.replace(tmp, path)

    def next_epoch(self) -> int:
        """A boot epoch larger than every earlier one of this identity (microseconds of wall
        time, bumped past the stored one if the clock went back), so receivers can tell this
        boot's frames from a replay of an earlier boot's."""
        last = self.read().get("epoch", 0)
        epoch = max(time.time_ns() // 1000, (last if isinstance(last, int) else 0) + 1)
        data = self.read()
        data["epoch"] = epoch
        self.write(data)
        return epoch
