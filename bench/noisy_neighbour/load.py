"""The two tenants' clients: closed-loop workers that record one ``Sample`` per request.

The victim streams short chat turns; the noisy tenant sends long prompts, streamed or not.
Prompts are random words (a fresh text per request, so vLLM's prefix cache never hits), sized
by ``chars_per_token`` measured against the engine itself. A 429 is honoured as a client
would: the worker sleeps its Retry-After before the next request.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
import uuid
from dataclasses import dataclass, field

import httpx

WORDS_SEED = 11


@dataclass
class Sample:
    tenant: str
    started: float
    request_id: str = ""
    ttft_s: float | None = None
    e2e_s: float | None = None
    completion_tokens: int = 0
    status: int = 0
    retry_after_s: float | None = None
    ended: float = 0.0


@dataclass
class Tenant:
    name: str
    api_key: str
    workers: int
    prompt_tokens: int
    max_tokens: int
    stream: bool


@dataclass
class Texts:
    """Random prompt text of about ``tokens`` tokens at ``chars_per_token``."""

    chars_per_token: float = 4.0
    rng: random.Random = field(default_factory=lambda: random.Random(WORDS_SEED))

    def make(self, tokens: int) -> str:
        want = int(tokens * self.chars_per_token)
        parts: list[str] = []
        size = 0
        letters = "abcdefghijklmnopqrstuvwxyz"
        while size < want:
            word = "".join(self.rng.choice(letters) for _ in range(self.rng.randint(2, 7)))
            parts.append(word)
            size += len(word) + 1
        return " ".join(parts)[:want]


def chat_body(model: str, text: str, max_tokens: int, stream: bool) -> dict[str, object]:
    body: dict[str, object] = {
        "model": model,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


async def one_request(
    client: httpx.AsyncClient, tenant: Tenant, body: dict[str, object], sample: Sample
) -> Sample:
    """Fills ``sample`` (already listed: a request cut off at the end stays in the list,
    with status 0 and no TTFT, so the caller can count it as censored)."""
    headers = {"authorization": f"Bearer {tenant.api_key}", "x-request-id": sample.request_id}
    async with client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as resp:
        sample.status = resp.status_code
        if resp.status_code != 200:
            await resp.aread()
            after = resp.headers.get("retry-after-ms") or resp.headers.get("retry-after")
            if after is not None:
                ms = "retry-after-ms" in resp.headers
                sample.retry_after_s = float(after) / (1000.0 if ms else 1.0)
        elif tenant.stream:
            await _read_stream(resp, sample)
        else:
            data = json.loads(await resp.aread())
            sample.ttft_s = time.monotonic() - sample.started  # first byte = whole answer
            sample.completion_tokens = int(data["usage"]["completion_tokens"])
    sample.ended = time.monotonic()
    sample.e2e_s = sample.ended - sample.started
    return sample


async def _read_stream(resp: httpx.Response, sample: Sample) -> None:
    async for line in resp.aiter_lines():
        if not line.startswith("data:") or line.endswith("[DONE]"):
            continue
        chunk = json.loads(line[5:])
        if chunk.get("choices") and sample.ttft_s is None:
            sample.ttft_s = time.monotonic() - sample.started
        usage = chunk.get("usage")
        if usage:
            sample.completion_tokens = int(usage["completion_tokens"])


async def closed_loop(
    client: httpx.AsyncClient,
    tenant: Tenant,
    model: str,
    texts: Texts,
    stop: asyncio.Event,
    out: list[Sample],
) -> None:
    """One worker: request after request until ``stop``; a 429 waits its Retry-After."""
    while not stop.is_set():
        body = chat_body(model, texts.make(tenant.prompt_tokens), tenant.max_tokens, tenant.stream)
        sample = Sample(tenant.name, time.monotonic(), uuid.uuid4().hex)
        out.append(sample)
        try:
            await one_request(client, tenant, body, sample)
        except httpx.HTTPError:
            sample.status, sample.ended = -1, time.monotonic()
        if sample.retry_after_s is not None:
            await _sleep_unless(stop, sample.retry_after_s)
        elif sample.status != 200:
            await _sleep_unless(stop, 0.1)


async def _sleep_unless(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


async def calibrate(url: str, model: str, api_key: str) -> float:
    """Characters per prompt token on this engine: one request of known text, max_tokens 1."""
    texts = Texts(chars_per_token=1.0, rng=random.Random(WORDS_SEED + 1))
    text = texts.make(1200)
    body = chat_body(model, text, 1, False)
    async with httpx.AsyncClient(base_url=url, timeout=60.0) as client:
        short = await client.post(
            "/v1/chat/completions",
            json=chat_body(model, "x", 1, False),
            headers={"authorization": f"Bearer {api_key}"},
        )
        resp = await client.post(
            "/v1/chat/completions", json=body, headers={"authorization": f"Bearer {api_key}"}
        )
    overhead = short.json()["usage"]["prompt_tokens"] - 1
    tokens = resp.json()["usage"]["prompt_tokens"] - overhead
    return len(text) / max(1, tokens)
