"""The picker emits the spans the HTTP front does, through the same pipeline: it joins the
trace context Envoy sends, and its attempt span (the request at the backend Envoy
forwards it to, until the response ends) travels in the routing headers."""

from __future__ import annotations

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from tests.unit.epp.envoy_double import CHAT, backend_answer, chat, picker
from tests.unit.gateway.fakes import FakeBackend, FakeFleet, make_config

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
ENVOY_SPAN = "b7ad6b7169203331"


async def test_the_picker_joins_envoys_trace_and_hands_the_attempt_on() -> None:
    fleet = FakeFleet(FakeBackend("a"))
    exporter = InMemorySpanExporter()
    config = make_config(tracing={"enabled": True, "sample_ratio": 1.0})
    async with picker(config, fleet, span_exporter=exporter) as p:
        call = p.call()
        envoy = {"traceparent": f"00-{TRACE_ID}-{ENVOY_SPAN}-01"}
        routed = await call.route(chat(max_tokens=3, stream=True), extra=envoy)
        status, kind, chunks = await backend_answer(fleet, "a.test:80", CHAT, routed.body)
        await call.respond(status, kind, chunks)
        await call.end()
        assert p.ctx.tracing is not None
        p.ctx.tracing.flush()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {"chat tiny", "authenticate", "decide", "attempt a", "stream"}
    server, attempt = spans["chat tiny"], spans["attempt a"]
    assert server.parent is not None and f"{server.parent.span_id:016x}" == ENVOY_SPAN
    assert {f"{s.context.trace_id:032x}" for s in spans.values() if s.context} == {TRACE_ID}
    assert attempt.kind is SpanKind.CLIENT and attempt.parent == server.context
    assert attempt.context is not None
    sent = routed.headers["traceparent"].split("-")
    assert sent[1:3] == [TRACE_ID, f"{attempt.context.span_id:016x}"]
    assert (attempt.attributes or {})["gen_ai.usage.output_tokens"] == 3
    assert (server.attributes or {})["http.response.status_code"] == 200
