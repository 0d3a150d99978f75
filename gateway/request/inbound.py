"""Parse and validate an OpenAI-style request before anything is scheduled or forwarded.

Every problem raises ``ApiError`` with the OpenAI error shape; nothing has been taken yet.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.request.auth import Tenant
from gateway.request.errors import ApiError
from gateway.request.fan_out import fan_out_of
from gateway.request.json_encode import json_encoder
from policies.estimate import SINGLE, FanOut

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
_MAX_ID_LEN = 128
_encode_unicode = json_encoder(ensure_ascii=False)


@dataclass(frozen=True)
class RunHeaders:
    """The agent run a call belongs to (docs/runs.md). ``deadline_s``: relative seconds
    (the run's first call fixes the run's deadline); None: not sent."""

    run_id: str
    deadline_s: float | None = None
    calls: int | None = None
    tokens: int | None = None
    branches: int | None = None


RUN_ID = "x-agent-run-id"
_RUN_HINTS = (
    ("x-agent-run-calls", "calls"),
    ("x-agent-run-tokens", "tokens"),
    ("x-agent-run-branches", "branches"),
)
_RUN_DEADLINE = "x-agent-run-deadline-ms"


@dataclass(frozen=True)
class Metadata:
    """What the request headers say. ``deadline_s`` is relative seconds, or None."""

    request_id: str
    workload_class: str
    deadline_s: float | None
    session_id: str | None
    is_retry: bool
    run: RunHeaders | None = None


@dataclass(frozen=True)
class ParsedBody:
    """The validated body. ``prompt`` is what the estimator sizes; it is never logged.
    ``prompt_chars`` counts text, ``prompt_token_ids`` the token ids sent as such."""

    body: dict[str, Any]
    model: str
    stream: bool
    client_wants_usage: bool
    max_tokens: int | None
    prompt: Any
    prompt_chars: int
    fan_out: FanOut = SINGLE
    prompt_token_ids: int = 0
    max_tokens_field: str = "max_tokens"
    """The field the backend reads the output bound from (what a degrade rewrites)."""
    model_limit: int | None = None
    """The smallest known context of the model's backends, as the body was checked
    against it (None: none known)."""


def header_map(raw: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """ASGI's raw header list as a dict read in O(1); the first of repeated headers wins,
    as with ``starlette.datastructures.Headers.get`` (names are lowercase in ASGI)."""
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in reversed(raw)}


def request_id_from(headers: Mapping[str, str]) -> str:
    """The client's ``X-Request-Id`` when it is sane, else a fresh one (never fails)."""
    given = headers.get("x-request-id")
    if given and len(given) <= _MAX_ID_LEN and given.isprintable() and given.isascii():
        return given
    return new_request_id()


def new_request_id() -> str:
    """A random (version 4) UUID as 32 hex digits; ``uuid.uuid4().hex`` without the
    ``UUID`` object (a sixth of the cost)."""
    b = bytearray(os.urandom(16))
    b[6] = (b[6] & 0x0F) | 0x40
    b[8] = (b[8] & 0x3F) | 0x80
    return b.hex()


def parse_metadata(headers: Mapping[str, str], tenant: Tenant, request_id: str) -> Metadata:
    given_id = headers.get("x-request-id")
    if given_id is not None and given_id != request_id:
        raise ApiError(
            400,
            "X-Request-Id must be printable ASCII, at most 128 characters",
            param="X-Request-Id",
        )
    cls = headers.get("x-workload-class", tenant.default_class)
    if cls not in tenant.workload_classes:
        raise ApiError(
            400, f"workload class {cls!r} is not allowed for this key", param="X-Workload-Class"
        )
    deadline_s = tenant.default_deadline_s
    raw_deadline = headers.get("x-request-deadline-ms")
    if raw_deadline is not None:
        deadline_s = _positive_number(raw_deadline, "X-Request-Deadline-Ms") / 1000.0
    session = headers.get("x-session-id")
    if session is not None and (len(session) > 256 or not session.isprintable()):
        raise ApiError(
            400, "X-Session-Id must be printable, at most 256 characters", param="X-Session-Id"
        )
    retry = False
    for name in ("x-stainless-retry-count", "x-retry-attempt"):
        if (value := headers.get(name)) is not None:
            retry = retry or _count(value, name) > 0
    return Metadata(request_id, cls, deadline_s, session or None, retry, run_headers(headers))


def run_headers(headers: Mapping[str, str]) -> RunHeaders | None:
    """``X-Agent-Run-Id`` and its hints; a hint without a run id is an error."""
    run_id = headers.get(RUN_ID)
    if run_id is None:
        for name in (_RUN_DEADLINE, *(n for n, _ in _RUN_HINTS)):
            if name in headers:
                raise ApiError(400, f"{_title(name)} needs X-Agent-Run-Id", param=_title(name))
        return None
    if not valid_run_id(run_id):
        raise ApiError(
            400, "X-Agent-Run-Id must be 1-128 printable ASCII characters", param="X-Agent-Run-Id"
        )
    raw_deadline = headers.get(_RUN_DEADLINE)
    deadline_s = None
    if raw_deadline is not None:
        deadline_s = _positive_number(raw_deadline, _title(_RUN_DEADLINE)) / 1000.0
    hints: dict[str, int] = {}
    for name, field in _RUN_HINTS:
        if (value := headers.get(name)) is not None:
            hints[field] = _positive_int(value, _title(name))
    return RunHeaders(run_id, deadline_s, **hints)


def valid_run_id(run_id: str) -> bool:
    return 0 < len(run_id) <= _MAX_ID_LEN and run_id.isprintable() and run_id.isascii()


def _title(name: str) -> str:
    """``x-agent-run-calls`` -> ``X-Agent-Run-Calls`` (as the client wrote it, usually)."""
    return "-".join(part.capitalize() for part in name.split("-"))


def _positive_int(value: str, name: str) -> int:
    text = value.strip()
    if not text.isdigit() or not text.isascii() or int(text) <= 0 or len(text) > 12:
        raise ApiError(400, f"{name} must be a positive integer", param=name)
    return int(text)


def _positive_number(value: str, name: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    if not (number > 0 and number != float("inf")):
        raise ApiError(400, f"{name} must be a positive number of milliseconds", param=name)
    return number


def _count(value: str, name: str) -> int:
    if not value.strip().isdigit():
        raise ApiError(400, f"{name} must be a non-negative integer", param=name)
    return int(value)


def decode_json_object(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object: ``json.loads``'s value, or its error; and valid Unicode.
    JSON may escape half a surrogate pair (``"\\ud800"``), which decodes to a string no
    UTF-8 can carry: hashing or forwarding it would fail, so it is refused here."""
    body = loads_as_json(raw)
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object")
    if b"\\u" in raw and _SURROGATE_ESCAPE.search(raw) and _has_lone_surrogate(body):
        raise ApiError(
            400,
            "request body is not valid Unicode: a string holds a lone surrogate (\\ud800-\\udfff)",
        )
    return body


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _has_lone_surrogate(value: Any) -> bool:
    """Whether any string (keys included) of a decoded JSON value holds a lone surrogate
    (a pair escaped as two halves decodes to one character and is fine)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not item.isascii() and not _encodable(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


_LONG_DIGITS = re.compile(rb"[0-9]{19}")
_NOT_DIGITS = bytes(b for b in range(256) if not 0x30 <= b <= 0x39)
_DEEP = 900
"""Brackets from which a body may nest deeper than json.loads can (RecursionError near
1000 levels, where orjson still reads it): such bodies take json."""


def loads_as_json(raw: bytes) -> Any:
    """``json.loads(raw.decode("utf-8"))``, read by orjson (a third of the time) where the
    two agree, with the same ``ApiError`` as before where json refuses. orjson reads a
    number of 19 digits or more as a float where json keeps an int, and reads nesting
    deeper than json can: bodies with a run of 19 digits (strings included) or with
    ``_DEEP`` brackets take json. Whatever orjson refuses (NaN, Infinity, lone
    surrogates, a BOM, invalid JSON) takes json too, which accepts it or raises as before.
    The guards are C scans, cheapest first. Property-tested against json.loads."""
    if _orjson_agrees(raw):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            return _loads_stdlib(raw)
    return _loads_stdlib(raw)


def _orjson_agrees(raw: bytes) -> bool:
    if len(raw) >= 2 * _DEEP and raw.count(b"[") + raw.count(b"{") >= _DEEP:
        return False
    digits = len(raw.translate(None, _NOT_DIGITS))
    return digits < 19 or _LONG_DIGITS.search(raw) is None


def _loads_stdlib(raw: bytes) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ApiError(400, "request body is not valid UTF-8") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc.msg}") from exc


def parse_body(
    path: str,
    body: dict[str, Any],
    known_models: Container[str],
    model_limit: Callable[[str], int | None],
    max_sequences: int | None = None,
) -> ParsedBody:
    """Validate the fields the gateway relies on or rewrites (``model``, ``max_tokens``,
    ``stream_options``); the backend validates the rest. ``max_sequences`` bounds the
    sequences one request generates (``fan_out_of``)."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(400, "'model' is required and must be a string", param="model")
    if model not in known_models:
        raise ApiError(
            404,
            f"the model {model!r} does not exist",
            param="model",
            code="model_not_found",
            reason="unknown_model",
        )
    prompt = _chat_prompt(body) if path == CHAT else _completion_prompt(body)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ApiError(400, "'stream' must be a boolean", param="stream")
    wants_usage = _wants_usage(body.get("stream_options"))
    fields = _MAX_TOKENS_FIELDS[path == CHAT]
    limit = model_limit(model)
    max_tokens = _max_tokens(body, limit, fields)
    field = "max_tokens"
    for name in fields:  # the first one set (a loop: no generator per request)
        if body.get(name) is not None:
            field = name
            break
    if path == CHAT:
        prompts, chars, token_ids = 1, len(_encode_unicode(prompt)), 0
    else:
        prompts, chars, token_ids = _completion_sizes(prompt)
    fan_out = fan_out_of(body, prompts, max_sequences)
    return ParsedBody(
        body,
        model,
        stream,
        wants_usage,
        max_tokens,
        prompt,
        chars,
        fan_out,
        token_ids,
        field,
        limit,
    )


def _wants_usage(options: Any) -> bool:
    """``stream_options.include_usage``; the gateway rewrites it, so it must be valid."""
    if options is None:
        return False
    if not isinstance(options, dict):
        raise ApiError(400, "'stream_options' must be an object", param="stream_options")
    include = options.get("include_usage")
    if include is not None and not isinstance(include, bool):
        raise ApiError(
            400,
            "'stream_options.include_usage' must be a boolean",
            param="stream_options.include_usage",
        )
    return include is True


def _chat_prompt(body: dict[str, Any]) -> Any:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(
            400, "'messages' is required and must be a non-empty array", param="messages"
        )
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ApiError(
                400, f"messages[{i}] must be an object with a string 'role'", param=f"messages[{i}]"
            )
        content = message.get("content")
        if content is not None and not isinstance(content, str | list):
            raise ApiError(
                400,
                f"messages[{i}].content must be a string or an array",
                param=f"messages[{i}].content",
            )
    return messages


def _completion_prompt(body: dict[str, Any]) -> Any:
    prompt = body.get("prompt")
    if isinstance(prompt, str) and prompt:
        return prompt
    if isinstance(prompt, list) and prompt and _is_prompt_list(prompt):
        return prompt
    raise ApiError(400, "'prompt' is required: a string, strings, or token ids", param="prompt")


def _is_prompt_list(items: list[Any]) -> bool:
    """Strings, token ids, or arrays of token ids (the forms OpenAI and vLLM accept)."""
    if all(isinstance(p, str) for p in items):
        return True
    return _is_token_ids(items) or all(isinstance(p, list) and _is_token_ids(p) for p in items)


def _is_token_ids(items: list[Any]) -> bool:
    return bool(items) and all(isinstance(t, int) and not isinstance(t, bool) for t in items)


def _completion_sizes(prompt: Any) -> tuple[int, int, int]:
    """(prompts, characters of text, token ids) of a validated completion prompt."""
    if isinstance(prompt, str):
        return 1, len(prompt), 0
    if isinstance(prompt[0], str):
        return len(prompt), sum(len(p) for p in prompt), 0
    if isinstance(prompt[0], int):
        return 1, 0, len(prompt)
    return len(prompt), 0, sum(len(p) for p in prompt)


_MAX_TOKENS_FIELDS = {True: ("max_completion_tokens", "max_tokens"), False: ("max_tokens",)}
"""Where the output bound is read, first found first, by ``path == CHAT``: chat reads
``max_completion_tokens`` before ``max_tokens``; completions only ``max_tokens``."""


def _max_tokens(
    body: dict[str, Any], model_limit: int | None, fields: tuple[str, ...]
) -> int | None:
    """The output bound, as the backend reads it. Every field of ``fields`` sent is
    checked: a degrade rewrites the first, the backend may read the others too."""
    found: int | None = None
    for name in fields:
        value = body.get(name)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ApiError(400, f"'{name}' must be a positive integer", param=name)
        if model_limit is not None and value > model_limit:
            raise ApiError(
                400,
                f"'{name}' {value} exceeds the model's context of {model_limit} tokens",
                param=name,
            )
        found = value if found is None else found
    return found
