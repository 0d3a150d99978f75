"""The emulator's prefix cache over HTTP: a resent conversation is served from the cache, and
usage and /metrics say so as vLLM 0.32 does."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.integration.conftest import StartEmulator
from tests.unit.emulator.test_http import metric, sse_payloads

pytestmark = pytest.mark.emulator

SYSTEM = " ".join(f"rule{i} says keep the gate steady" for i in range(90))


def _turn(url: str, messages: list[dict[str, str]], **extra: Any) -> dict[str, Any]:
    body = {"model": "tiny", "messages": messages, "max_tokens": 4, "ignore_eos": True, **extra}
    response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=10.0)
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_a_resent_conversation_hits_the_cache_and_usage_and_metrics_count_it(
    start_emulator: StartEmulator,
) -> None:
    emu = start_emulator(
        profile="cpu-tiny", model_name="tiny", speed=10.0, enable_prompt_tokens_details=True
    )
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "go"}]
    first = _turn(emu.url, messages)["usage"]
    reply = {"role": "assistant", "content": "done"}
    grown = [*messages, reply, {"role": "user", "content": "and now the next step, please"}]
    second = _turn(emu.url, grown)["usage"]
    block = emu.runner.profile.engine.block_size
    assert metric(emu.url, "vllm:cache_config_info", block_size=str(block)) == 1.0
    assert metric(emu.url, "vllm:cache_config_info", enable_prefix_caching="True") == 1.0
    assert first["prompt_tokens_details"]["cached_tokens"] == 0
    assert (
        second["prompt_tokens_details"]["cached_tokens"] == first["prompt_tokens"] // block * block
    )
    queries = metric(emu.url, "vllm:prefix_cache_queries_total")
    hits = metric(emu.url, "vllm:prefix_cache_hits_total")
    assert queries == first["prompt_tokens"] + second["prompt_tokens"]
    assert hits == second["prompt_tokens_details"]["cached_tokens"]
    with httpx.stream(
        "POST",
        f"{emu.url}/v1/chat/completions",
        json={
            "model": "tiny",
            "messages": grown,
            "max_tokens": 3,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
        timeout=10.0,
    ) as response:
        usage = sse_payloads(response)[-1]["usage"]
    # All of it is cached now; vLLM computes at least the last token, so its block too.
    assert (
        usage["prompt_tokens_details"]["cached_tokens"]
        == (second["prompt_tokens"] - 1) // block * block
    )


def test_without_the_details_flag_usage_has_no_prompt_details(
    start_emulator: StartEmulator,
) -> None:
    emu = start_emulator(profile="cpu-tiny", model_name="tiny", speed=10.0)
    usage = _turn(emu.url, [{"role": "user", "content": SYSTEM}])["usage"]
    assert usage["prompt_tokens_details"] is None
