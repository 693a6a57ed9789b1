"""Errors split by whose fault they are.

``LocalProtocolError``: our own caller misused an API (bad argument, wrong state). It is raised at
the call site so the bug is found where it is made.

``RemoteProtocolError``: a peer sent something we cannot accept (malformed frame, wrong id length,
unknown message). Cores never let it escape to the driver: the message is counted, logged and
dropped, and the peer keeps serving.
"""

from __future__ import annotations

from collections.abc import Callable


class RangecastError(Exception):
    """Base of every error Rangecast raises on purpose."""


class LocalProtocolError(RangecastError):
    """Our own misuse of an API."""


class RemoteProtocolError(RangecastError):
    """Bad input from the network."""


class WireError(RemoteProtocolError):
    """A frame that the codec refuses: malformed, truncated, oversized or of an unknown version."""


class FieldError(LocalProtocolError):
    """A configuration dataclass refused the value of one of its fields: ``field``, its
    ``value`` and ``why`` it cannot be, in which other fields are named in braces
    (``"must be in (4 x {widen}, 1]"``). ``str()`` names fields as they are spelt in Python;
    the command line names them as its options (``message``, cli.options.field_error)."""

    def __init__(self, field: str, value: object, why: str) -> None:
        self.field, self.value, self.why = field, value, why
        super().__init__(self.message(lambda name: name))

    def message(self, name_of: Callable[[str], str]) -> str:
        """The complaint with every field named by ``name_of``: ``p 1.5: must be in [0, 1]``."""
        return f"{name_of(self.field)} {self.value}: {self.why.format_map(_Names(name_of))}"

    def __reduce__(self) -> tuple[type[FieldError], tuple[str, object, str]]:
        # Rebuilt from its parts, not its message, across processes (a sweep's workers).
        return (FieldError, (self.field, self.value, self.why))


class _Names(dict[str, str]):
    def __init__(self, name_of: Callable[[str], str]) -> None:
        super().__init__()
        self._name_of = name_of

    def __missing__(self, key: str) -> str:
        return self._name_of(key)
