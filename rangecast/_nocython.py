"""The part of Cython's ``cython`` module the hot modules use, for where Cython is not installed
(they then run interpreted): ``compiled`` is false and the type declarations do nothing.

A hot module imports ``cython`` itself first, since Cython recognises the declarations only under
that name (docs/simulator.md, "Two speeds")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

compiled = False

#: The C types the declarations name (each stands for the Python type it converts to).
double = float
Py_ssize_t = int


def locals(**types: Any) -> Callable[[F], F]:
    """``@cython.locals(name=type, ...)``: static types of a function's locals, for Cython."""
    return lambda f: f
