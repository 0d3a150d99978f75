"""Span names: the call's span is named ``{gen_ai.operation.name} {gen_ai.request.model}``
(the GenAI convention) once its body is read, ``POST {route}`` (the HTTP convention) while
it is not, and when it was refused before."""

from __future__ import annotations

from gateway.request.inbound import CHAT, COMPLETIONS

OPERATIONS = {CHAT: "chat", COMPLETIONS: "text_completion"}
"""``gen_ai.operation.name`` of each completion route."""


def operation_of(path: str) -> str:
    return OPERATIONS.get(path, "chat")


def route_name(path: str) -> str:
    return f"POST {path}"
