"""Errors split by whose fault they are.

``LocalProtocolError``: our own caller misused an API (bad argument, wrong state). It is raised at
the call site so the bug is found where it is made.

``RemoteProtocolError``: a peer sent something we cannot accept (malformed frame, wrong id length,
unknown message). Cores never let it escape to the driver: the message is counted, logged and
dropped, and the peer keeps serving.
"""

from __future__ import annotations


class RangecastError(Exception):
    """Base of every error Rangecast raises on purpose."""


class LocalProtocolError(RangecastError):
    """Our own misuse of an API."""


class RemoteProtocolError(RangecastError):
    """Bad input from the network."""


class WireError(RemoteProtocolError):
    """A frame that the codec refuses: malformed, truncated, oversized or of an unknown version."""
