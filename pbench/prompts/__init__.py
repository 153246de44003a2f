"""Prompts are data: ``pbench/prompts/<stage>/<name>.j2``, rendered with StrictUndefined.

A reviewer can read every prompt without reading code; a missing variable fails loudly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2

_ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).parent),
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=False,
    trim_blocks=True,
    lstrip_blocks=True,
    autoescape=False,
)


def render(stage: str, name: str, **variables: Any) -> str:
    """Render ``prompts/<stage>/<name>.j2``.

    Raises:
        jinja2.UndefinedError: a variable the template uses was not given.
    """
    return _ENV.get_template(f"{stage}/{name}.j2").render(**variables).strip()
