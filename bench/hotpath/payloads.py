"""Pre-built OpenAI responses of the fake backend, shared by both server implementations.

Every generated token is the marker ``" qz"`` followed by its index, so a client can count
relayed tokens with one substring count whatever the proxy does to the JSON around them
(LiteLLM, for instance, re-serialises every chunk).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

TOKEN_MARKER = "qz"
NON_STREAM_TOKENS = 16
STREAM_TOKENS = 64
PROMPT_TOKENS = 12
_CREATED = 1_764_460_800
_METRICS_FIXTURE = (
    Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "vllm-0.32-metrics-under-load.txt"
)
_IDLE_GAUGES = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:num_requests_waiting_by_reason",
    "vllm:kv_cache_usage_perc",
)


def _token(i: int) -> str:
    return f" {TOKEN_MARKER}{i}"


def _dumps(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


@lru_cache(maxsize=64)
def completion_body(model: str, tokens: int = NON_STREAM_TOKENS) -> bytes:
    """A complete non-streaming ``chat.completion`` with ``tokens`` generated tokens."""
    return _dumps(
        {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": _CREATED,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": "".join(_token(i) for i in range(tokens)),
                    },
                    "finish_reason": "length",
                }
            ],
            "usage": {
                "prompt_tokens": PROMPT_TOKENS,
                "completion_tokens": tokens,
                "total_tokens": PROMPT_TOKENS + tokens,
            },
        }
    )


def _chunk(model: str, delta: dict[str, str], finish: str | None) -> dict[str, object]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": _CREATED,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


@lru_cache(maxsize=64)
def sse_events(model: str, include_usage: bool, tokens: int = STREAM_TOKENS) -> tuple[bytes, ...]:
    """The SSE events of one stream, each ``data: ...\\n\\n``, ending with ``[DONE]``.

    One event per token (the first also carries the role, as vLLM does), then the usage
    event when ``stream_options.include_usage`` was asked for.
    """
    events: list[dict[str, object]] = []
    for i in range(tokens):
        delta = {"role": "assistant", "content": _token(i)} if i == 0 else {"content": _token(i)}
        finish = "length" if i == tokens - 1 else None
        events.append(_chunk(model, delta, finish))
    if include_usage:
        usage = {
            "prompt_tokens": PROMPT_TOKENS,
            "completion_tokens": tokens,
            "total_tokens": PROMPT_TOKENS + tokens,
        }
        events.append({**_chunk(model, {}, None), "choices": [], "usage": usage})
    encoded = [b"data: " + _dumps(e) + b"\n\n" for e in events]
    return (*encoded, b"data: [DONE]\n\n")


@lru_cache(maxsize=1)
def _metrics_template() -> tuple[bytes, bytes]:
    """The real vLLM 0.32 dump split around its ``num_requests_running`` sample value;
    the other load gauges (waiting, KV usage) are set to an idle engine.

    The fixture's size is kept on purpose, so the gateway's scraper pays a realistic parse.
    """
    lines = []
    for line in _METRICS_FIXTURE.read_text().splitlines():
        if line.startswith(_IDLE_GAUGES):
            value = "{RUNNING}" if line.startswith(_IDLE_GAUGES[0] + "{") else "0.0"
            line = line.rsplit(" ", 1)[0] + " " + value
        lines.append(line)
    before, _, after = ("\n".join(lines) + "\n").partition("{RUNNING}")
    return before.encode(), after.encode()


def metrics_body(running: int) -> bytes:
    """The /metrics text of an idle engine that reports ``running`` requests in its batch."""
    before, after = _metrics_template()
    return before + f"{float(running)}".encode() + after


MODELS_BODY = _dumps(
    {
        "object": "list",
        "data": [{"id": "fake", "object": "model", "owned_by": "bench", "max_model_len": 4096}],
    }
)
