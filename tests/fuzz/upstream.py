"""A healthy vLLM at the transport layer (``httpx.MockTransport``) that answers whatever
the gateway forwards, as vLLM shapes it: ``n`` choices per prompt, SSE when streamed, the
usage-only chunk when asked. It never fails, so any 5xx the fuzzer sees is the gateway's."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx

TOKENS = 3


class FuzzUpstream:
    def __init__(self) -> None:
        self.transport = httpx.MockTransport(self._handle)
        self.requests = 0

    def _handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/health":
            return httpx.Response(200)
        if path == "/metrics":
            return httpx.Response(200, text="")
        self.requests += 1
        body = json.loads(request.content)  # the gateway sends valid JSON, or this raises
        choices = _count(body.get("n")) * _prompts(body.get("prompt"))
        usage = {
            "prompt_tokens": 7,
            "completion_tokens": TOKENS * choices,
            "total_tokens": 7 + TOKENS * choices,
        }
        if body.get("stream") is True:
            return httpx.Response(
                200,
                headers={"content-type": "text/event-stream"},
                stream=_Chunks(_sse(choices, usage, body)),
            )
        answer = {
            "id": "c",
            "object": "chat.completion",
            "model": body.get("model"),
            "choices": [
                {
                    "index": i,
                    "message": {"role": "assistant", "content": "a b c"},
                    "finish_reason": "length",
                }
                for i in range(choices)
            ],
            "usage": usage,
        }
        return httpx.Response(200, json=answer)


class _Chunks(httpx.AsyncByteStream):
    """A body read as a stream, in small pieces, as a socket delivers it."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for at in range(0, len(self.data), 97):
            yield self.data[at : at + 97]


def _count(n: Any) -> int:
    return n if isinstance(n, int) and not isinstance(n, bool) and 0 < n <= 1000 else 1


def _prompts(prompt: Any) -> int:
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str | list):
        return len(prompt)
    return 1


def _sse(choices: int, usage: dict[str, int], body: dict[str, Any]) -> bytes:
    events = [
        {"id": "c", "choices": [{"index": i, "delta": {"content": f"t{k}"}}]}
        for k in range(TOKENS)
        for i in range(choices)
    ]
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") is True:
        events.append({"id": "c", "choices": [], "usage": usage})
    out = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    return out + b"data: [DONE]\n\n"
