"""The HTML pages the evaluations write (the run report, the robot report), rendered from the Jinja2
templates in ``bench/templates/``.

Every value a template writes is HTML-escaped (autoescape) after being made printable: a model's output
can hold text UTF-8 cannot encode (a lone surrogate such as ``"\\ud800"`` is legal JSON), and one such
character must not cost the page.
"""

from __future__ import annotations

from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined

__all__ = ["printable", "render_page"]


def printable(text: str) -> str:
    """``text`` with what UTF-8 cannot hold (a lone surrogate a model wrote) replaced, so that it can be
    drawn and written."""
    return text.encode("utf-8", "replace").decode("utf-8")


def _printable_value(value: Any) -> Any:
    # Markup (``__html__``: a macro's output) is already made of printable, escaped parts.
    return printable(value) if isinstance(value, str) and not hasattr(value, "__html__") else value


_ENVIRONMENT = Environment(
    loader=PackageLoader("spacetools.bench", "templates"),
    autoescape=True,
    finalize=_printable_value,
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def render_page(template: str, **context: Any) -> str:
    """The named template of ``bench/templates/`` rendered with ``context``."""
    return _ENVIRONMENT.get_template(template).render(**context)
