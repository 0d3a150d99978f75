"""Shared values and probes of the real-vLLM tier: tenants and their keys, the gateway
config written in front of launched servers, an SDK client, and /metrics readers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import openai
from openai.types import Completion
from openai.types.chat import ChatCompletionChunk, ChatCompletionMessageParam
from prometheus_client.parser import text_string_to_metric_families

from gateway.request.auth import key_digest
from scripts.vllm.serve import MAX_NUM_SEQS, VllmServer

PROMPT: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "Write a haiku about queues."}
]
EXACT = {"ignore_eos": True}
"""vLLM extra: generate exactly ``max_tokens`` (random weights rarely stop anyway)."""

AGENTS_KEY = "sk-test-agents"
"""API key of tenant ``agents``: no quota, used by most tests."""
METERED_KEY = "sk-test-metered"
"""API key of tenant ``metered``: a small token bucket, for the 429 path."""
METERED_TOKENS_PER_MINUTE = 6000
METERED_BURST_TOKENS = 64
"""A bucket smaller than one request of the 429 test: the first is admitted on a full bucket,
its whole cost is charged, and the next must wait for (cost - what is left) / rate seconds."""


def chat_stream_with_usage(
    client: openai.OpenAI, model: str, max_tokens: int, headers: dict[str, str] | None = None
) -> openai.Stream[ChatCompletionChunk]:
    """A streamed chat completion of ``PROMPT``, exactly ``max_tokens`` long, whose last
    chunk carries the usage (``headers`` added to the request)."""
    return client.chat.completions.create(
        model=model,
        messages=PROMPT,
        max_tokens=max_tokens,
        stream=True,
        stream_options={"include_usage": True},
        extra_body=EXACT,
        extra_headers=headers,
    )


def text_stream_with_logprobs(
    client: openai.OpenAI, model: str, prompt: str, max_tokens: int
) -> openai.Stream[Completion]:
    """A streamed text completion of ``prompt``, exactly ``max_tokens`` long, one logprob a
    token, whose last chunk carries the usage."""
    return client.completions.create(
        model=model,
        prompt=prompt,
        max_tokens=max_tokens,
        stream=True,
        stream_options={"include_usage": True},
        logprobs=1,
        extra_body=EXACT,
    )


def gateway_config(backends: list[VllmServer]) -> dict[str, Any]:
    """A gateway config in front of ``backends``, each serving its ``served_name``."""
    return {
        "tenants": [
            {"name": "agents", "api_key_sha256": [key_digest(AGENTS_KEY)]},
            {"name": "metered", "api_key_sha256": [key_digest(METERED_KEY)]},
        ],
        "backends": [
            {
                "name": server.served_name,
                "url": server.url,
                "models": [server.served_name],
                "max_num_seqs": MAX_NUM_SEQS,  # the flag the launcher started it with
            }
            for server in backends
        ],
        "health": {"interval_s": 0.5, "timeout_s": 1.0},
        "policy": {
            # No degradation ladder: these tests need full-length streams, and on a loaded
            # 2-core machine the ladder would cap them (it is tested in tests/integration).
            "ladder": {"steps": []},
            "gates": [
                {
                    "type": "tenant_quota",
                    "parameters": {
                        "tenants": {
                            "metered": {
                                "tokens_per_minute": METERED_TOKENS_PER_MINUTE,
                                "burst_tokens": METERED_BURST_TOKENS,
                            }
                        }
                    },
                }
            ],
        },
    }


def sdk(base_url: str, api_key: str = AGENTS_KEY, retries: int = 0, **kw: Any) -> openai.OpenAI:
    """The official SDK pointed at ``base_url`` (a gateway or a server), no retries by default.
    Prefer the ``open_sdk`` fixture in tests: it closes what it opened."""
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key=api_key, max_retries=retries, **kw)


OpenSdk = Callable[..., openai.OpenAI]


def metric_value(base_url: str, family: str, **labels: str) -> float:
    """Sum of a family's samples at ``base_url/metrics`` whose labels include ``labels``."""
    text = httpx.get(f"{base_url}/metrics", timeout=30.0).text
    total = 0.0
    for fam in text_string_to_metric_families(text):
        for sample in fam.samples:
            if sample.name == family and labels.items() <= sample.labels.items():
                total += sample.value
    return total


def tokens_per_text_chunk(chunks: list[Any]) -> list[int]:
    """Tokens in each streamed legacy-completions chunk that has a choice (the request must
    ask for ``logprobs``). vLLM merges token deltas into one chunk when its API server falls
    behind the engine (``RequestOutputCollector``), so how many chunks carry the tokens is
    vLLM's choice; that every token arrives once is not. A chunk without logprobs counts 0."""
    counts = []
    for chunk in chunks:
        if chunk.choices:
            logprobs = chunk.choices[0].logprobs
            counts.append(len(logprobs.tokens or []) if logprobs is not None else 0)
    return counts
