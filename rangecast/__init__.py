"""Rangecast: content-based publish/subscribe over a structured peer-to-peer network.

The repository keeps one folder per layer at its top (``dht/``, ``multicast/``, ``pubsub/``,
``sim/``, ``runtime/``, ``analysis/``, ``cli/``); this package links them under the one import
name ``rangecast`` so an installed Rangecast adds nothing else to ``sys.path``
(docs/architecture.md, "Packaging").
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("rangecast")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

# Before any layer is imported: which of the hot modules load compiled (rangecast._speed).
from rangecast import _speed

_speed.install()
