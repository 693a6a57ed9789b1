"""Number options of the ``rangecast`` commands: finite or refused at the command line.

``float("nan")`` and ``float("inf")`` parse, and every comparison with NaN is false, so a
``--duration-s nan`` slips past ``duration_s <= 0`` and loops forever, and a NaN count turns into
a traceback deep in the run. Every float option therefore goes through one of the argparse types
below (exit 2 with the option named, before anything runs), and the experiments' ``check``
methods call ``require_finite`` for callers that build parameters in Python.

They raise ``OptionValueError``, a ``ValueError`` whose text is the whole complaint: the command
line (cli.options) shows it after the option's name; nothing here knows about argparse.
"""

from __future__ import annotations

import math

from rangecast.dht.errors import LocalProtocolError

__all__ = [
    "OptionValueError",
    "finite_float",
    "missing_value",
    "non_negative_float",
    "positive_float",
    "require_finite",
]


class OptionValueError(ValueError):
    """A command-line value that cannot be the option's: the message says why."""


def _parse(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise OptionValueError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise OptionValueError(f"must be a finite number, got {text!r}")
    return value


def finite_float(text: str) -> float:
    """Any finite number."""
    return _parse(text)


def non_negative_float(text: str) -> float:
    """A finite number >= 0."""
    value = _parse(text)
    if value < 0:
        raise OptionValueError(f"must be >= 0, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0."""
    value = _parse(text)
    if value <= 0:
        raise OptionValueError(f"must be > 0, got {text!r}")
    return value


def missing_value(text: str) -> float | str:
    """``--missing``: a finite number (cells equal to it), or a word such as ``NA`` (cells that
    read exactly so). ``nan`` and ``inf`` are refused: they would never equal a cell."""
    try:
        value = float(text)
    except ValueError:
        if not text.strip():
            raise OptionValueError("must be a number or a word, got ''") from None
        return text.strip()
    if not math.isfinite(value):
        raise OptionValueError(f"must be a finite number or a word, got {text!r}")
    return value


def require_finite(values: dict[str, float | None]) -> None:
    """Refuse NaN and infinities among ``{option: value}`` (None passes): one error naming the
    option, as the command line would."""
    for option, value in values.items():
        if value is None or isinstance(value, str):
            continue
        if not math.isfinite(value):
            raise LocalProtocolError(f"{option} must be a finite number, got {value!r}")
