"""The route's text templates: `{{ labels.pod }}` and little else, rendered in a sandbox.

The apiserver already refuses templates outside the grammar (`TEMPLATE_EXPRESSION`, a CEL rule
on the CRD); the same check runs here because a route may predate the rule, and Jinja's own
parser runs on top. Rendering uses Jinja's `SandboxedEnvironment` with a fresh, flat context
(strings and dicts of strings only), so even a template that slipped through could not reach
Python objects. The alert's values are data, never template text: a label holding `{{ ... }}`
is printed as it is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from lestrade.resources.alertroute import TEMPLATE_EXPRESSION, TEMPLATE_TEXT

__all__ = ["TemplateError", "check_template", "render_template"]

_EXPRESSION = re.compile(TEMPLATE_EXPRESSION)
_TEXT = re.compile(TEMPLATE_TEXT)
_ANY_EXPRESSION = re.compile(r"\{\{[^{}]*\}\}")


class TemplateError(ValueError):
    """A template outside the allowed grammar, or one Jinja cannot parse."""


@lru_cache(maxsize=1)
def _env() -> Any:
    """Jinja's sandbox, made at the first template: importing jinja2 costs the operator's start
    ~0.15 s, and most operators never render a template."""
    from jinja2.sandbox import SandboxedEnvironment

    return SandboxedEnvironment(autoescape=False, keep_trailing_newline=True)


@lru_cache(maxsize=512)
def _compiled(text: str) -> Any:
    if "{%" in text or "{#" in text or "%}" in text or "#}" in text:
        raise TemplateError("only {{ ... }} expressions are allowed (no statements or comments)")
    expressions = _ANY_EXPRESSION.findall(text)
    if text.count("{{") != len(expressions) or text.count("}}") != len(expressions):
        raise TemplateError("every '{{' must be closed by '}}' with no braces in between")
    for expression in expressions:
        if not _EXPRESSION.match(expression):
            raise TemplateError(f"{expression} may only read the alert's fields with the allowed filters")
    if not _TEXT.match(text):
        raise TemplateError("a '{{' may only open an allowed expression")
    from jinja2 import TemplateSyntaxError

    try:
        return _env().from_string(text)
    except TemplateSyntaxError as exc:
        raise TemplateError(f"not a valid template: {exc.message}") from None


def check_template(text: str) -> None:
    """Raises TemplateError when `text` is not a usable template."""
    _compiled(text)


def render_template(text: str, values: Mapping[str, Any], limit: int) -> str:
    """`text` rendered with `values`, cut to `limit` characters."""
    rendered = _compiled(text).render(**values)
    return rendered if len(rendered) <= limit else rendered[: max(0, limit - 1)] + "…"
