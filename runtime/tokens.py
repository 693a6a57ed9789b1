"""Optional client tokens: a swarm that wants to choose its clients gives its peers a file of
tokens, and a client must then present one of them to use the client API.

Off by default (``PeerConfig.client_tokens`` None): a peer serves anyone who reaches its port,
within the client quotas (``runtime/quotas.py``). With tokens, a client's ``Hello`` carries its
token (``Hello.token``); a valid one authorises the connection for its lifetime. A ``Hello``
without one (what peers send each other to learn a contact's key) is still answered, with
``HelloReply.error`` saying that a token is needed, so joining is unaffected; every request a
connection makes before it is authorised (subscribe, unsubscribe, publish, status) is refused
with a reply that starts with ``UNAUTHORIZED_PREFIX`` (the client library raises
``Unauthorized``) and counted under ``TOKEN_REFUSED`` in ``peer status`` (``clients.refused``),
as is every ``Hello`` with a wrong token. A connection gets one guess: after a wrong token even
the right one is refused on it, so each guess costs a connection (bounded per address by
``Quotas.connections_per_address``).

Tokens are compared as SHA-256 digests with ``hmac.compare_digest``, against every token of the
file each time: how long a check takes says nothing about how much of a token was right, nor
which token matched. A token is a secret of 16 to 256 printable ASCII characters without spaces
(``python -c 'import secrets; print(secrets.token_urlsafe(24))'`` makes one).

The token file has one token per line; blank lines and lines starting with ``#`` are skipped.
A file that cannot be read, holds a malformed token or no token at all is one line of error
naming the file (``load_tokens``). Clients read their token from ``--token`` or the environment
(``TOKEN_ENV``).
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from pathlib import Path

from rangecast.dht.errors import LocalProtocolError

#: The environment variable client commands read a token from when ``--token`` is not given.
TOKEN_ENV = "RANGECAST_TOKEN"
MIN_TOKEN_CHARS = 16
MAX_TOKEN_CHARS = 256
#: Most tokens one file may hold (each is compared on every check).
MAX_TOKENS = 10_000
#: What a refused request's reply starts with; the client library raises ``Unauthorized``.
UNAUTHORIZED_PREFIX = "unauthorized:"
#: The refusal reason counted in ``peer status`` (``clients.refused``).
TOKEN_REFUSED = "client token refused"
#: What an unauthorised connection is told.
NEED_TOKEN = f"{UNAUTHORIZED_PREFIX} this peer requires a client token (--token or {TOKEN_ENV})"
BAD_TOKEN = f"{UNAUTHORIZED_PREFIX} client token refused"


def token_problem(token: str) -> str | None:
    """Why ``token`` cannot be a token (None: it can)."""
    if not MIN_TOKEN_CHARS <= len(token) <= MAX_TOKEN_CHARS:
        return f"a token has {MIN_TOKEN_CHARS} to {MAX_TOKEN_CHARS} characters, not {len(token)}"
    if not all("!" <= c <= "~" for c in token):
        return "a token is printable ASCII without spaces"
    return None


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()


@dataclass(frozen=True, slots=True)
class ClientTokens:
    """The tokens a peer accepts, kept as digests."""

    digests: tuple[bytes, ...]

    @classmethod
    def of(cls, tokens: list[str]) -> ClientTokens:
        if not tokens:
            raise LocalProtocolError("client tokens: none given")
        if len(tokens) > MAX_TOKENS:
            raise LocalProtocolError(f"client tokens: at most {MAX_TOKENS}, got {len(tokens)}")
        for t in tokens:
            why = token_problem(t)
            if why is not None:
                raise LocalProtocolError(f"client tokens: {why}")
        return cls(tuple(_digest(t) for t in tokens))

    def __len__(self) -> int:
        return len(self.digests)

    def check(self, token: str) -> bool:
        """Whether ``token`` is one of ours, in time independent of which part of it or which
        token matched (every digest is compared)."""
        given = _digest(token)
        ok = False
        for d in self.digests:
            ok |= hmac.compare_digest(given, d)
        return ok


def read_token_lines(path: Path) -> list[str]:
    """The tokens of the file at ``path``, in order; ``LocalProtocolError`` (one line naming
    the file, and the line at fault) for a file that cannot be read or a malformed token."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise LocalProtocolError(f"{path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise LocalProtocolError(f"{path}: not UTF-8 text") from None
    tokens = []
    for n, line in enumerate(text.splitlines(), 1):
        t = line.strip()
        if not t or t.startswith("#"):
            continue
        why = token_problem(t)
        if why is not None:
            raise LocalProtocolError(f"{path}:{n}: {why}")
        tokens.append(t)
    if not tokens:
        raise LocalProtocolError(f"{path}: no client token in the file")
    if len(tokens) > MAX_TOKENS:
        raise LocalProtocolError(f"{path}: at most {MAX_TOKENS} tokens, got {len(tokens)}")
    return tokens


def load_tokens(path: Path) -> ClientTokens:
    """The ``ClientTokens`` of a token file (see ``read_token_lines``)."""
    return ClientTokens.of(read_token_lines(path))


def client_token(given: str | None, env: dict[str, str]) -> str | None:
    """The token a client command uses: ``--token``, else ``TOKEN_ENV`` (None: no token). A
    malformed one is one line of error."""
    token = given if given is not None else env.get(TOKEN_ENV) or None
    if token is None:
        return None
    why = token_problem(token)
    if why is not None:
        source = "--token" if given is not None else TOKEN_ENV
        raise LocalProtocolError(f"{source}: {why}")
    return token
