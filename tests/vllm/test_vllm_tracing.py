"""vLLM's own engine span, with no gateway in between: a request carrying a W3C
``traceparent`` makes the server (started with ``--otlp-traces-endpoint`` at the session's
Phoenix) export an ``llm_request`` span into that trace, as a child of the caller's span."""

from __future__ import annotations

import secrets

import httpx
import pytest

from scripts.vllm.serve import VllmServer
from tests.phoenix_server import PhoenixServer
from tests.phoenix_spans import PhoenixSpans

pytestmark = pytest.mark.vllm


def test_a_traceparent_puts_the_engine_span_under_the_callers_span(
    tiny_vllm: VllmServer, phoenix: PhoenixServer
) -> None:
    trace_id, parent_id = secrets.token_hex(16), secrets.token_hex(8)
    reply = httpx.post(
        f"{tiny_vllm.url}/v1/chat/completions",
        headers={"traceparent": f"00-{trace_id}-{parent_id}-01"},
        json={
            "model": tiny_vllm.served_name,
            "messages": [{"role": "user", "content": "hello"}],
            "max_tokens": 5,
            "ignore_eos": True,
        },
        timeout=60.0,
    )
    assert reply.status_code == 200

    span = PhoenixSpans(phoenix.url).wait_for_spans(trace_id, {"llm_request"}).one("llm_request")
    assert span.parent_id == parent_id
    assert span.attributes["gen_ai.usage.completion_tokens"] == 5
    assert span.attributes["gen_ai.request.id"] == reply.json()["id"]
