"""Drive multi-turn agent conversations (``simulation.conversations``) at an OpenAI endpoint
and measure what the engine's prefix cache made of them.

Every turn streams (``stream_options.include_usage``); its time to first token is taken at the
first content chunk. The hit rate is the engine's own: the change of
``vllm:prefix_cache_hits_total`` over ``vllm:prefix_cache_queries_total`` across the run.
``turns_per_agent`` fixes the work (the same prompts whatever the engine's speed);
``duration_s`` instead stops the agents at a deadline.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from emulator.text import chat_prompt_text
from simulation.conversations import Conversation, ConversationShape, conversations


@dataclass(slots=True)
class TurnOutcome:
    tenant: str
    status: int
    ttft_s: float | None = None
    prompt_tokens: int = 0
    prompt_chars: int = 0
    cached_tokens: int | None = None
    queue_wait_s: float | None = None
    """The gateway's admission wait (``x-sluicegate-queue-wait-ms``, sent when it queued);
    None direct."""


@dataclass(slots=True)
class TrafficResult:
    turns: list[TurnOutcome] = field(default_factory=list)
    elapsed_s: float = 0.0
    queries: float = 0.0
    hits: float = 0.0

    @property
    def hit_rate(self) -> float:
        return self.hits / self.queries if self.queries else 0.0

    @property
    def ok(self) -> list[TurnOutcome]:
        return [t for t in self.turns if t.status == 200]

    @property
    def refused(self) -> int:
        return sum(1 for t in self.turns if t.status in (429, 503))

    def tail(self, share: float = 0.05) -> str:
        """Which turns make the slowest ``share`` of the first tokens: how many were cold
        (under half their prompt cached, by ``usage``: a spilled turn or a new conversation
        whose engine lost its system prompt) and how long they waited in the gateway,
        against the cold share of every turn."""
        seen = [t for t in self.ok if t.ttft_s is not None and t.cached_tokens is not None]
        if not seen:
            return "tail: no cached_tokens reported"
        seen.sort(key=lambda t: t.ttft_s or 0.0)
        slow = seen[-max(1, int(len(seen) * share)) :]
        cold = sum(1 for t in slow if _cold(t))
        every = sum(1 for t in seen if _cold(t)) / len(seen)
        floor = (slow[0].ttft_s or 0.0) * 1000
        waits = [t.queue_wait_s for t in slow if t.queue_wait_s is not None]
        waited = f", mean gateway wait {sum(waits) / len(waits) * 1000:.0f} ms" if waits else ""
        return (
            f"tail (slowest {share:.0%}, TTFT >= {floor:.0f} ms): {cold} of {len(slow)} cold"
            f"{waited}; of every turn {every:.0%} cold"
        )

    def ttft_quantile(self, q: float) -> float:
        values = sorted(t.ttft_s for t in self.ok if t.ttft_s is not None)
        if not values:
            return float("nan")
        return values[min(len(values) - 1, int(q * len(values)))]

    @property
    def chars_per_token(self) -> float:
        ok = self.ok
        return sum(t.prompt_chars for t in ok) / max(1, sum(t.prompt_tokens for t in ok))

    @property
    def usage_cached_share(self) -> float | None:
        """Cached over prompt tokens as ``usage.prompt_tokens_details`` reported them."""
        seen = [t for t in self.ok if t.cached_tokens is not None]
        if not seen:
            return None
        return sum(t.cached_tokens or 0 for t in seen) / max(1, sum(t.prompt_tokens for t in seen))


def _cold(turn: TurnOutcome) -> bool:
    return (turn.cached_tokens or 0) * 2 < turn.prompt_tokens


HEADER = f"{'turns/s':>7} {'TTFT p50':>8} {'TTFT p99':>8} {'hit rate':>8} {'refused':>7}"
"""The columns of ``columns``."""


def columns(r: TrafficResult) -> str:
    """A run's turns a second, TTFT p50 and p99 (ms), engine hit rate and refused turns."""
    return (
        f"{len(r.ok) / r.elapsed_s:7.2f} {r.ttft_quantile(0.5) * 1000:8.1f} "
        f"{r.ttft_quantile(0.99) * 1000:8.1f} {r.hit_rate:8.3f} {r.refused:7d}"
    )


def cache_counters(url: str, client: httpx.Client | None = None) -> tuple[float, float]:
    """(prefix_cache_queries_total, prefix_cache_hits_total) summed over engines."""
    text = (client or httpx).get(f"{url}/metrics", timeout=10.0).text
    out = {"vllm:prefix_cache_queries_total": 0.0, "vllm:prefix_cache_hits_total": 0.0}
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in out:
            out[name] += float(line.rsplit(" ", 1)[1])
    return out["vllm:prefix_cache_queries_total"], out["vllm:prefix_cache_hits_total"]


def _prompt_chars(messages: list[dict[str, str]]) -> int:
    return len(chat_prompt_text(messages))  # as the chat template renders it


async def one_turn(
    client: httpx.AsyncClient,
    url: str,
    model: str,
    conv: Conversation,
    headers: dict[str, str],
) -> tuple[TurnOutcome, str]:
    body: dict[str, Any] = {
        "model": model,
        "messages": conv.messages,
        "max_tokens": conv.shape.output_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    outcome = TurnOutcome(conv.tenant, 0, prompt_chars=_prompt_chars(conv.messages))
    reply: list[str] = []
    started = time.monotonic()
    async with client.stream(
        "POST", f"{url}/v1/chat/completions", json=body, headers=headers
    ) as response:
        outcome.status = response.status_code
        if "x-sluicegate-decision" in response.headers:  # through a gateway: 0 unless queued
            outcome.queue_wait_s = float(response.headers.get("x-sluicegate-queue-wait-ms", 0))
            outcome.queue_wait_s /= 1000
        if response.status_code != 200:
            await response.aread()
            return outcome, ""
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices", []):
                piece = choice.get("delta", {}).get("content")
                if piece:
                    if outcome.ttft_s is None:
                        outcome.ttft_s = time.monotonic() - started
                    reply.append(piece)
            usage = chunk.get("usage")
            if usage:
                outcome.prompt_tokens = usage["prompt_tokens"]
                details = usage.get("prompt_tokens_details") or {}
                outcome.cached_tokens = details.get("cached_tokens")
    return outcome, "".join(reply)


Headers = Callable[[str], dict[str, str]]
"""The headers of one tenant's requests (e.g. its API key)."""


async def _agent(
    client: httpx.AsyncClient,
    url: str,
    model: str,
    conv: Conversation,
    result: TrafficResult,
    turns: int | None,
    deadline: float,
    retry_s: float,
    headers_of: Headers | None,
    sessions: bool = True,
) -> None:
    done = 0
    while (turns is None or done < turns) and time.monotonic() < deadline:
        headers = {"x-session-id": f"agent-{conv.agent}"} if sessions else {}
        if headers_of is not None:
            headers.update(headers_of(conv.tenant))
        outcome, reply = await one_turn(client, url, model, conv, headers)
        result.turns.append(outcome)
        if outcome.status != 200:
            await asyncio.sleep(retry_s)  # a refused turn is resent unchanged
            continue
        done += 1
        conv.answered(reply)
        await asyncio.sleep(conv.think_s())


async def drive(
    url: str,
    model: str,
    shape: ConversationShape,
    *,
    turns_per_agent: int | None = None,
    duration_s: float = 60.0,
    metrics_url: str | None = None,
    retry_s: float = 1.0,
    headers_of: Headers | None = None,
    sessions: bool = True,
    spread: Sequence[str] = (),
    engines: Sequence[str] = (),
) -> TrafficResult:
    """Run the agents; ``metrics_url`` is the engine's when ``url`` is a gateway's
    (``engines``: several engines', their counters summed). ``sessions`` False: no
    ``x-session-id`` (nothing tells a gateway which turns belong together). ``spread``:
    agent ``i`` calls ``spread[i % len(spread)]`` instead of ``url`` (clients each pinned to
    one engine, no gateway)."""
    engines = tuple(engines) or (metrics_url or url,)
    result = TrafficResult()
    q0, h0 = _summed_counters(engines)
    started = time.monotonic()
    limits = httpx.Limits(max_connections=shape.agents + 4)
    async with httpx.AsyncClient(timeout=120.0, limits=limits) as client:
        await asyncio.gather(
            *(
                _agent(
                    client,
                    spread[conv.agent % len(spread)] if spread else url,
                    model,
                    conv,
                    result,
                    turns_per_agent,
                    started + duration_s,
                    retry_s,
                    headers_of,
                    sessions,
                )
                for conv in conversations(shape)
            )
        )
    result.elapsed_s = time.monotonic() - started
    q1, h1 = _summed_counters(engines)
    result.queries, result.hits = q1 - q0, h1 - h0
    return result


def _summed_counters(urls: Sequence[str]) -> tuple[float, float]:
    counts = [cache_counters(u) for u in urls]
    return sum(q for q, _ in counts), sum(h for _, h in counts)
