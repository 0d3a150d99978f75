"""How many sequences one request asks for, read from its body and bounded.

``n`` choices per prompt, ``best_of`` generated per prompt (the best ``n`` come back), and
for ``/v1/completions`` a list of prompts (strings, or token-id arrays): the engine works on
``prompts x max(n, best_of)`` sequences, and that is what the request is charged for. A
request beyond the configured ceiling is refused before anything is taken.
"""

from __future__ import annotations

from typing import Any

from gateway.request.errors import ApiError
from policies.estimate import FanOut


def fan_out_of(body: dict[str, Any], prompts: int, ceiling: int | None) -> FanOut:
    """The request's ``FanOut``; a 400 naming the field when it is invalid or too large."""
    n = _count(body, "n", 1)
    best_of = _count(body, "best_of", n)
    if best_of < n:
        raise ApiError(400, f"'best_of' ({best_of}) must be at least 'n' ({n})", param="best_of")
    fan_out = FanOut(prompts, n, best_of)
    if ceiling is not None and fan_out.sequences > ceiling:
        raise ApiError(
            400,
            f"this request generates {fan_out.sequences} sequences ({prompts} prompt(s) x "
            f"{best_of}); at most {ceiling} per request are allowed",
            param=_culprit(fan_out),
            code="too_many_sequences",
        )
    return fan_out


def _count(body: dict[str, Any], name: str, default: int) -> int:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ApiError(400, f"'{name}' must be a positive integer", param=name)
    return value


def _culprit(fan_out: FanOut) -> str:
    """The field that multiplies the most: the one a client would change."""
    if fan_out.generated > fan_out.choices and fan_out.generated >= fan_out.prompts:
        return "best_of"
    return "n" if fan_out.choices >= fan_out.prompts else "prompt"
