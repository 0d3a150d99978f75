"""The same fake OpenAI backend as a minimal raw ASGI app, for uvicorn + httptools + uvloop.

Kept only to compare against ``fake_backend.py`` (``compare_backends.py``): the benchmark
picks the faster one by measurement.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from bench.hotpath import payloads

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_JSON_HEADERS = [(b"content-type", b"application/json")]
_SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8")]


async def _read_body(receive: Receive) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += bytes(message.get("body", b""))
        if not message.get("more_body"):
            return body


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        return
    body = await _read_body(receive)
    if scope["path"] == "/metrics":
        await _send_whole(send, payloads.metrics_body(0), [(b"content-type", b"text/plain")])
        return
    if scope["method"] != "POST":
        await _send_whole(send, b"", _JSON_HEADERS)
        return
    req = json.loads(body) if body else {}
    model = str(req.get("model", "fake"))
    if not req.get("stream"):
        await _send_whole(send, payloads.completion_body(model), _JSON_HEADERS)
        return
    usage = bool((req.get("stream_options") or {}).get("include_usage"))
    await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
    for event in payloads.sse_events(model, usage):
        await send({"type": "http.response.body", "body": event, "more_body": True})
        await asyncio.sleep(0)  # one event per loop turn, like fake_backend.py
    await send({"type": "http.response.body", "body": b""})


async def _send_whole(send: Send, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
