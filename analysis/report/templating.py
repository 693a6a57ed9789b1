"""The HTML pages' templates: Jinja2, autoescaping on, markup in ``templates/*.html.j2`` files
next to the module that renders them (package data, pyproject.toml), data from Python.

Autoescaping means every value a template prints is escaped unless the code marked it as
markup (``Markup``), so a run directory or a quoted sentence with ``<`` or ``'`` in it cannot
break a page; and keeping the markup in templates leaves the Python to compute what is shown.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape


@cache
def environment(folder: Path) -> Environment:
    """One environment per templates folder: autoescaping for every ``.html.j2``, an undefined
    name is an error (a misspelt field shows as an exception, not a blank cell)."""
    return Environment(
        loader=FileSystemLoader(folder),
        autoescape=select_autoescape(enabled_extensions=("html", "html.j2"), default=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def render(folder: Path, name: str, **context: Any) -> str:
    """``folder/name`` rendered with ``context``."""
    return environment(folder).get_template(name).render(**context)
