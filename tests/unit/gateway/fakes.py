"""A fake vLLM behind ``httpx.MockTransport``: no sockets, every behaviour switchable."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from gateway.config.schema import GatewayConfig
from gateway.replicas.contract import Grant, Refusal
from gateway.request.auth import key_digest
from policies.gates.quota_params import TenantLimits
from policies.shared_mode import SharedMode
from policies.types import Reason, RequestInfo, Usage

API_KEY = "sk-test-acme"
OTHER_KEY = "sk-test-beta"


def make_config(**overrides: Any) -> GatewayConfig:
    raw: dict[str, Any] = {
        "tenants": [
            {
                "name": "acme",
                "api_key_sha256": [key_digest(API_KEY)],
                "workload_classes": ["interactive", "batch"],
            },
            {"name": "beta", "api_key_sha256": [key_digest(OTHER_KEY)]},
        ],
        "backends": [
            {
                "name": "a",
                "url": "http://a.test",
                "models": ["tiny"],
                "max_num_seqs": 1,
                "max_model_len": 2048,
            },
        ],
        "scrape": {"enabled": False},
        "server": {"max_body_bytes": 4096},
    }
    raw.update(overrides)
    return GatewayConfig.model_validate(raw)


class ClosingStream(httpx.AsyncByteStream):
    """Yields chunks; each chunk may wait on a gate; records that the reader closed it.
    A gate at index ``len(chunks)`` holds the end of the stream after the last chunk."""

    def __init__(self, backend: FakeBackend, chunks: list[bytes], fail_after: int | None) -> None:
        self.backend, self.chunks, self.fail_after = backend, chunks, fail_after

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for i, chunk in enumerate(self.chunks):
            if self.fail_after is not None and i == self.fail_after:
                raise httpx.ReadError("backend died")
            gate = self.backend.gates.get(i)
            if gate is not None:
                await gate.wait()
            self.backend.sent.append(i)
            yield chunk
        end = self.backend.gates.get(len(self.chunks))
        if end is not None:
            await end.wait()

    async def aclose(self) -> None:
        self.backend.closed.set()


@dataclass
class FakeBackend:
    """One vLLM. ``mode``: ok | busy | refuse | fail_mid_stream | hold (answer never comes)."""

    name: str
    mode: str = "ok"
    tokens: int = 3
    usage_prompt: int = 11
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    """The headers of each completion request, in order (as ``requests``)."""
    reply: str = "x y z"
    """The text of a whole answer; a stream's events say ``t0``, ``t1``, ..."""
    gates: dict[int, asyncio.Event] = field(default_factory=dict)
    sent: list[int] = field(default_factory=list)
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    healthy: bool = True
    metrics_text: str = ""

    async def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/health":
            return httpx.Response(200 if self.healthy else 503)
        if request.url.path == "/metrics":
            return httpx.Response(200, text=self.metrics_text)
        if self.mode == "refuse":
            raise httpx.ConnectError("connection refused", request=request)
        body = json.loads(request.content)
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        self.arrived.set()
        if self.mode == "busy":
            return httpx.Response(
                503,
                json={
                    "error": {
                        "message": "The engine is currently busy",
                        "type": "Service Unavailable",
                        "code": 503,
                    }
                },
            )
        if self.mode == "hold":
            await asyncio.Event().wait()
        if body.get("stream"):
            chunks = self._sse(body)
            fail = 2 if self.mode == "fail_mid_stream" else None
            return httpx.Response(
                200,
                headers={"content-type": "text/event-stream"},
                stream=ClosingStream(self, chunks, fail),
            )
        return httpx.Response(200, json=self._completion(body))

    def _usage(self, body: dict[str, Any]) -> dict[str, int]:
        """As vLLM counts: each prompt once, every returned choice (``n`` per prompt)."""
        prompt = body.get("prompt")
        prompts = (
            len(prompt) if isinstance(prompt, list) and isinstance(prompt[0], str | list) else 1
        )
        per_choice = min(self.tokens, body.get("max_tokens") or self.tokens)
        completion = per_choice * (body.get("n") or 1) * prompts
        return {
            "prompt_tokens": self.usage_prompt * prompts,
            "completion_tokens": completion,
            "total_tokens": self.usage_prompt * prompts + completion,
        }

    def _completion(self, body: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": "cmpl-1",
            "object": "chat.completion",
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": self.reply},
                    "finish_reason": "length",
                }
            ],
            "usage": self._usage(body),
        }

    def _sse(self, body: dict[str, Any]) -> list[bytes]:
        usage = self._usage(body)
        events = [
            {"id": "c", "choices": [{"index": 0, "delta": {"content": f"t{i}"}}]}
            for i in range(usage["completion_tokens"])
        ]
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append({"id": "c", "choices": [], "usage": usage})
        out = [b"data: " + json.dumps(e).encode() + b"\n\n" for e in events]
        return [*out, b"data: [DONE]\n\n"]


class FakeFleet:
    """Routes by host name to the fake backends."""

    def __init__(self, *backends: FakeBackend) -> None:
        self.backends = {b.name: b for b in backends}
        self.transport = httpx.MockTransport(self._handle)

    async def _handle(self, request: httpx.Request) -> httpx.Response:
        return await self.backends[request.url.host.split(".")[0]].handle(request)


class FakeSharedState:
    """Fleet mode's shared state: refuses the first ``refusals`` admissions, grants the
    others; keeps the limits each admission asked for and counts grants and releases."""

    replicas = 2
    failures = 0

    def __init__(self, refusals: int = 0, mode: SharedMode = SharedMode.SHARED) -> None:
        self.refusals = refusals
        self.mode = mode
        self.asked: list[TenantLimits | None] = []
        self.granted = 0
        self.released = 0

    async def admit(self, req: RequestInfo, limits: TenantLimits | None) -> Grant | Refusal | None:
        self.asked.append(limits)
        if self.refusals:
            self.refusals -= 1
            return Refusal(Reason.TENANT_QUOTA, 0.001)
        self.granted += 1
        return Grant(f"m{self.granted}", req.tenant, limits or TenantLimits(), 1)

    def release(self, grant: Grant, usage: Usage | None, served: bool) -> None:
        self.released += 1

    async def run(self) -> None:
        await asyncio.Event().wait()

    async def fleet(self) -> dict[str, Any]:
        return {}

    async def aclose(self) -> None:
        return None
