"""Talking to one backend: open the upstream response, relay SSE event by event, learn usage.

The relay never buffers more than one partial SSE event. It asks vLLM for
``stream_options.include_usage`` so every stream reports its real token usage, and drops
that extra usage-only chunk again when the client did not ask for it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from gateway.forward.connection_pool import UpstreamPool
from gateway.request.json_encode import json_encoder
from policies.types import Usage

_UPSTREAM_HEADERS = {"content-type": "application/json", "accept-encoding": "identity"}
_BUSY_BODY_LIMIT = 64 * 1024
_encode = json_encoder(separators=(",", ":"), ensure_ascii=False)
_decode_at = json.JSONDecoder().raw_decode
_DONE_EVENT = b"data: [DONE]\n\n"


class BackendBusy(Exception):
    """vLLM said 503 "engine is currently busy": a saturation signal, not a failure."""


class Upstream(Protocol):
    """What the gateway reads of an upstream response: an ``httpx.Response`` or an
    ``UpstreamResponse`` of the hot-path pool."""

    status_code: int

    @property
    def headers(self) -> Mapping[str, str]: ...

    async def aread(self) -> bytes: ...

    def aiter_raw(self) -> AsyncIterator[bytes]: ...

    async def aclose(self) -> None: ...


async def open_upstream(
    client: httpx.AsyncClient,
    pool: UpstreamPool | None,
    path: str,
    body: bytes,
    request_id: str,
    trace_headers: Mapping[str, str] | None = None,
) -> Upstream:
    """Send the request through ``pool`` (or ``client`` without one) and wait for the
    response head; the body stays unread (owned). ``trace_headers``: the attempt's
    ``traceparent`` (and ``tracestate``), when tracing is on.

    Raises ``httpx.ConnectError``/``ConnectTimeout`` when nothing reached the backend (safe
    to retry elsewhere) and ``BackendBusy`` on the engine's own 503.
    """
    headers = {**_UPSTREAM_HEADERS, "x-request-id": request_id}
    if trace_headers:
        headers.update(trace_headers)
    response: Upstream
    if pool is not None:
        response = await pool.send("POST", path, body, headers)
    else:
        request = client.build_request("POST", path, content=body, headers=headers)
        response = await client.send(request, stream=True)
    if response.status_code == 503:
        await _drain_and_close(response)
        raise BackendBusy(response.status_code)
    return response


async def _drain_and_close(response: Upstream) -> None:
    """Read a small error body so the connection can be reused, then close."""
    try:
        read = 0
        async for chunk in response.aiter_raw():
            read += len(chunk)
            if read > _BUSY_BODY_LIMIT:
                break
    except httpx.StreamConsumed:
        pass
    finally:
        await response.aclose()


def upstream_body(
    body: dict[str, Any],
    *,
    model: str,
    max_tokens: int | None,
    stream: bool,
    raw: bytes | None = None,
    key: str | None = None,
) -> bytes:
    """The body sent upstream: the degraded model/max_tokens (in the field ``key`` the
    backend reads), and usage always requested. When that changes nothing (a non-streamed
    request, not degraded), the client's own bytes ``raw`` (``body`` is their decoding) go
    as sent, without encoding them again."""
    if key is None:
        key = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
    if (
        raw is not None
        and not stream
        and body.get("model") == model
        and (max_tokens is None or body.get(key) == max_tokens)
    ):
        return raw
    out = dict(body)
    out["model"] = model
    if max_tokens is not None:
        out[key] = max_tokens
    if stream:
        options = body.get("stream_options") or {}
        out["stream_options"] = {**options, "include_usage": True}
    return _encode(out).encode("utf-8")


def usage_from(payload: Any) -> Usage | None:
    """``usage`` from a completion or chunk object, if it carries one."""
    if not isinstance(payload, dict):
        return None
    usage = payload.get("usage")
    if not isinstance(usage, dict):
        return None
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if not isinstance(prompt, int) or not isinstance(completion, int):
        return None
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if not isinstance(cached, int) or isinstance(cached, bool) or cached < 0:
        return Usage(prompt, completion)
    return Usage(prompt, completion, cached)


def usage_from_body(data: bytes) -> Usage | None:
    """``usage`` of a non-streamed completion body. vLLM writes it after ``choices``, near
    the end, so the last ``"usage"`` key is decoded on its own; only when that fails is the
    whole body parsed (the answer is the same as ``usage_from(json.loads(data))``)."""
    at = data.rfind(b'"usage"')
    if at > 0 and data[:1] == b"{":
        text = data[at + 7 :].lstrip()
        if text[:1] == b":":
            try:
                value, _ = _decode_at(text[1:].lstrip().decode("utf-8", "replace"))
            except ValueError:
                value = None
            usage = usage_from({"usage": value})
            if usage is not None:
                return usage
    try:
        return usage_from(json.loads(data))
    except ValueError:
        return None


@dataclass
class SseRelay:
    """Splits upstream bytes into SSE events; notes usage; drops the usage-only chunk
    when ``strip_usage``. ``content_events`` counts events that carried choices."""

    strip_usage: bool
    usage: Usage | None = None
    content_events: int = 0
    done: bool = False
    """The stream's last event, ``data: [DONE]``, was among those returned by ``feed``."""
    _pending: bytes = b""

    def feed(self, data: bytes) -> list[bytes]:
        """Complete events (each ending in a blank line) ready to forward, in order; when
        none of them mentions ``"usage"``, all of them as one piece (nothing to drop)."""
        buf = self._pending + data if self._pending else data
        last = buf.rfind(b"\n\n")
        if last < 0:
            self._pending = buf
            return []
        complete, self._pending = buf[: last + 2], buf[last + 2 :]
        if complete.endswith(_DONE_EVENT):
            self.done = True
        at = complete.find(b'"usage"')
        if at < 0:
            cut = len(complete)
        else:  # the events before the first that mentions usage need no look inside
            cut = complete.rfind(b"\n\n", 0, at)
            cut = 0 if cut < 0 else cut + 2
        out: list[bytes] = []
        if cut:
            # ``"choices"`` with both quotes bare is a key (inside a JSON string the quotes
            # are escaped), and an event has at most one: the count is the events with one.
            self.content_events += complete.count(b'"choices"', 0, cut)
            out.append(complete[:cut] if cut < len(complete) else complete)
        start = cut
        while (end := complete.find(b"\n\n", start)) >= 0:
            event, start = complete[start : end + 2], end + 2
            if self._keep(event):
                out.append(event)
        return out

    def rest(self) -> bytes:
        """Whatever trailing bytes never formed a complete event."""
        rest, self._pending = self._pending, b""
        return rest

    def _keep(self, event: bytes) -> bool:
        if b'"usage"' not in event:
            self.content_events += b'"choices"' in event
            return True
        payload = _event_json(event)
        usage = usage_from(payload)
        if usage is not None:
            self.usage = usage
        if isinstance(payload, dict) and payload.get("choices") == [] and usage is not None:
            return not self.strip_usage
        self.content_events += 1
        return True


def _event_json(event: bytes) -> Any:
    data = b"".join(line[5:].lstrip() for line in event.split(b"\n") if line.startswith(b"data:"))
    try:
        return json.loads(data)
    except ValueError:
        return None


def sse_error_event(message: str, type_: str = "upstream_error") -> bytes:
    """The event that ends a stream that failed after bytes were sent (the SDK raises)."""
    body = {"error": {"message": message, "type": type_, "param": None, "code": None}}
    return b"data: " + json.dumps(body).encode() + b"\n\n"
