"""The OpenAI SDK through the real gateway to real emulators: chat and completions,
streamed and not, usage present, decision headers disclosed, the usage chunk the gateway
adds upstream stripped unless the client asked for it."""

from __future__ import annotations

from typing import Any

import pytest

from emulator.embedded import EmbeddedEmulator
from tests.integration.harness import MODEL, gateway_config, serve_gateway

pytestmark = pytest.mark.emulator

MAX_TOKENS = 12
PIN = {"ignore_eos": True}
DECISION_HEADERS = (
    "x-request-id",
    "x-sluicegate-decision",
    "x-sluicegate-reason",
    "x-sluicegate-policy-version",
)


def assert_disclosed(headers: Any) -> None:
    for name in DECISION_HEADERS:
        assert headers.get(name), f"missing {name}"
    assert headers.get("x-sluicegate-decision") == "admit"


async def test_chat_and_completions_plain(emulator: EmbeddedEmulator) -> None:
    async with serve_gateway(gateway_config([emulator.url], {})) as gw:
        sdk = gw.openai()
        raw = await sdk.chat.completions.with_raw_response.create(
            model=MODEL,
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=MAX_TOKENS,
            extra_body=PIN,
        )
        assert_disclosed(raw.headers)
        chat = raw.parse()
        assert chat.usage is not None and chat.usage.completion_tokens == MAX_TOKENS
        assert chat.usage.prompt_tokens > 0 and chat.choices[0].message.content

        raw_c = await sdk.completions.with_raw_response.create(
            model=MODEL, prompt="def add(a, b):", max_tokens=MAX_TOKENS, extra_body=PIN
        )
        assert_disclosed(raw_c.headers)
        completion = raw_c.parse()
        assert completion.usage is not None and completion.usage.completion_tokens == MAX_TOKENS
        assert completion.choices[0].text


async def _chat_stream(sdk: Any, include_usage: bool | None) -> tuple[Any, list[Any]]:
    kw: dict[str, object] = {}
    if include_usage is not None:
        kw["stream_options"] = {"include_usage": include_usage}
    raw = await sdk.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=MAX_TOKENS,
        stream=True,
        extra_body=PIN,
        **kw,
    )
    stream = raw.parse()
    return raw.headers, [chunk async for chunk in stream]


@pytest.mark.parametrize("include_usage", [None, False])
async def test_chat_stream_strips_usage_chunk_not_asked_for(
    emulator: EmbeddedEmulator, include_usage: bool | None
) -> None:
    async with serve_gateway(gateway_config([emulator.url], {})) as gw:
        headers, chunks = await _chat_stream(gw.openai(), include_usage)
        assert_disclosed(headers)
        assert chunks, "no chunks"
        assert all(c.usage is None for c in chunks), "usage chunk leaked to the client"
        assert all(c.choices for c in chunks), "a choice-less (usage-only) chunk leaked"
        text = "".join(c.choices[0].delta.content or "" for c in chunks)
        assert text
        # The gateway still learned the real usage from the chunk it stripped.
        m = await gw.metrics()
        assert m["sluicegate_actual_tokens_total{kind=output}"] == MAX_TOKENS


async def test_chat_stream_keeps_usage_chunk_asked_for(emulator: EmbeddedEmulator) -> None:
    async with serve_gateway(gateway_config([emulator.url], {})) as gw:
        headers, chunks = await _chat_stream(gw.openai(), True)
        assert_disclosed(headers)
        usage_chunks = [c for c in chunks if c.usage is not None]
        assert len(usage_chunks) == 1 and usage_chunks[0] is chunks[-1]
        assert usage_chunks[0].usage.completion_tokens == MAX_TOKENS
        assert usage_chunks[0].choices == []


@pytest.mark.parametrize("include_usage", [False, True])
async def test_completions_stream(emulator: EmbeddedEmulator, include_usage: bool) -> None:
    async with serve_gateway(gateway_config([emulator.url], {})) as gw:
        raw = await gw.openai().completions.with_raw_response.create(
            model=MODEL,
            prompt="def add(a, b):",
            max_tokens=MAX_TOKENS,
            stream=True,
            stream_options={"include_usage": include_usage},
            extra_body=PIN,
        )
        assert_disclosed(raw.headers)
        chunks = [c async for c in raw.parse()]
        with_usage = [c for c in chunks if c.usage is not None]
        if include_usage:
            usage = with_usage[0].usage if len(with_usage) == 1 else None
            assert usage is not None and usage.completion_tokens == MAX_TOKENS
        else:
            assert with_usage == []
        assert "".join(c.choices[0].text for c in chunks if c.choices)
