"""A stream whose last event (``data: [DONE]``) reached the client is completed, even when
the client closes the connection before the backend's own end of stream arrives.

The gateway's ASGI app is driven by hand: ``send`` sets the client's disconnect the moment
it is handed ``[DONE]``, while the fake backend holds its end of stream until the gateway
has finished the request. The order is forced, so this needs no timing."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tests.unit.gateway.conftest import in_process, outcomes
from tests.unit.gateway.fakes import API_KEY, FakeBackend, FakeFleet, make_config

CHAT = "/v1/chat/completions"


def _scope(body: bytes) -> dict[str, Any]:
    headers = [
        (b"authorization", f"Bearer {API_KEY}".encode()),
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": CHAT,
        "raw_path": CHAT.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 1),
        "server": ("gw", 80),
    }


class ClosingClient:
    """Sends the body, then reports ``http.disconnect`` once it has been sent ``[DONE]``."""

    def __init__(self, body: bytes) -> None:
        self.body: bytes | None = body
        self.gone = asyncio.Event()
        self.chunks: list[bytes] = []

    async def receive(self) -> dict[str, Any]:
        if self.body is not None:
            body, self.body = self.body, None
            return {"type": "http.request", "body": body, "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        chunk = message.get("body", b"")
        self.chunks.append(chunk)
        if b"data: [DONE]" in chunk:
            self.gone.set()


async def test_client_closing_right_after_done_is_completed() -> None:
    fleet = FakeFleet(FakeBackend("a"))
    backend = fleet.backends["a"]
    end_of_stream = asyncio.Event()
    backend.gates[5] = end_of_stream  # 3 tokens, usage, [DONE]: then the end is held
    body = json.dumps(
        {
            "model": "tiny",
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
            "max_tokens": 3,
        }
    ).encode()
    async with in_process(make_config(), fleet) as h:
        client = ClosingClient(body)
        await h.app(_scope(body), client.receive, client.send)
        end_of_stream.set()
        assert client.gone.is_set(), "the client never saw [DONE]"
        assert b"".join(client.chunks).rstrip().endswith(b"data: [DONE]")
        assert outcomes(h.ctx.metrics) == {"completed": 1.0}
        stats = h.ctx.scheduler.stats()
        assert stats.in_flight == 0 and stats.charged_tokens == stats.released_tokens
