"""vLLM's own engine span in the caller's trace. The session's server runs with
``--otlp-traces-endpoint`` at the session's Phoenix: a request carrying a W3C ``traceparent``
makes it export an ``llm_request`` span as a child of the caller's span, sent directly or
through the gateway (whose attempt span is then the parent)."""

from __future__ import annotations

import secrets
from pathlib import Path

import httpx
import pytest

from scripts.vllm.serve import VllmServer
from tests.phoenix_server import PhoenixServer
from tests.phoenix_spans import PhoenixSpans
from tests.vllm.gateway_process import GatewayProcess
from tests.vllm.support import OpenSdk, chat_stream_with_usage, gateway_config

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


def test_the_engine_span_sits_under_the_gateways_attempt(
    tiny_vllm: VllmServer,
    phoenix: PhoenixServer,
    open_sdk: OpenSdk,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Client, gateway and engine in one trace: the gateway (tracing on, exporting to the same
    Phoenix) hands the attempt span's context to vLLM, whose ``llm_request`` is its child."""
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")  # the gateway's batch, every 100 ms
    tracing = {"enabled": True, "sample_ratio": 1.0, "endpoint": phoenix.otlp_traces_url}
    config = {**gateway_config([tiny_vllm]), "tracing": tracing}
    trace_id, client_span = secrets.token_hex(16), secrets.token_hex(8)
    gateway = GatewayProcess.start(config, tmp_path)
    try:
        stream = chat_stream_with_usage(
            open_sdk(gateway),
            tiny_vllm.served_name,
            8,
            {"traceparent": f"00-{trace_id}-{client_span}-01"},
        )
        chunks = list(stream)
    finally:
        gateway.stop()  # flushes the gateway's spans
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 8

    call_name, attempt_name = f"chat {tiny_vllm.served_name}", f"attempt {tiny_vllm.served_name}"
    names = {call_name, attempt_name, "stream", "llm_request"}
    trace = PhoenixSpans(phoenix.url).wait_for_spans(trace_id, names)
    call, attempt = trace.one(call_name), trace.one(attempt_name)
    engine = trace.one("llm_request")
    assert call.parent_id == client_span
    assert attempt.parent_id == call.span_id
    assert engine.parent_id == attempt.span_id, trace.tree()
    assert engine.attributes["gen_ai.usage.completion_tokens"] == 8
    assert call.attributes["gen_ai.usage.output_tokens"] == 8
