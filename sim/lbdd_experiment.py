"""``rangecast sim lbdd``: the LBDD topic mode in the simulator (placeholder until built)."""

from __future__ import annotations

import argparse


def add_lbdd_parser(sims: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``sim lbdd`` (filled in with the experiment)."""
