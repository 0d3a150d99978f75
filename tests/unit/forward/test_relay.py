"""``RelayResponse`` notices a disconnect even on ASGI 2.4 servers, where a write to a
gone client does not fail and Starlette's ``StreamingResponse`` would not listen."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

from gateway.forward.streaming_response import RelayResponse
from gateway.forward.upstream import SseRelay

SCOPE = {"type": "http", "asgi": {"spec_version": "2.4"}}


async def test_disconnect_while_upstream_is_silent_closes_the_generator() -> None:
    closed = asyncio.Event()
    gone = asyncio.Event()

    async def silent_after_one() -> AsyncGenerator[bytes, None]:
        try:
            yield b"data: 1\n\n"
            await asyncio.Event().wait()  # the upstream says nothing more
        finally:
            closed.set()

    async def receive() -> dict[str, Any]:
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message.get("body") == b"data: 1\n\n":
            gone.set()  # the client leaves right after the first event

    response = RelayResponse(silent_after_one())
    await asyncio.wait_for(response(SCOPE, receive, send), 2.0)
    assert closed.is_set()


def test_sse_relay_splits_events_across_chunk_boundaries_and_strips_usage() -> None:
    relay = SseRelay(strip_usage=True)
    usage = b'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}}\n\n'
    stream = b'data: {"choices":[{"delta":{"content":"a"}}]}\n\ndata: {"choices":[{"del' + (
        b'ta":{}}]}\n\n' + usage + b"data: [DONE]\n\n"
    )
    out = []
    for i in range(0, len(stream), 7):  # awkward chunking on purpose
        out += relay.feed(stream[i : i + 7])
    assert len(out) == 3 and out[-1] == b"data: [DONE]\n\n"
    assert relay.usage is not None and relay.usage.total == 7
    assert relay.content_events == 2 and relay.rest() == b""
