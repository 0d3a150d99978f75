"""The tier's own footing: a span tree exported by the OpenTelemetry SDK over OTLP/HTTP to the
session's Phoenix is read back whole, by trace id, with its parents and dotted attributes."""

from __future__ import annotations

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from tests.phoenix_server import PhoenixServer
from tests.phoenix_spans import PhoenixSpans

pytestmark = pytest.mark.tracing

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN_ID = "00f067aa0ba902b7"


def test_an_exported_span_tree_is_read_back_by_trace_id(phoenix: PhoenixServer) -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "harness"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(phoenix.otlp_traces_url)))
    tracer = provider.get_tracer("tests.tracing")
    joined = TraceContextTextMapPropagator().extract(
        {"traceparent": f"00-{TRACE_ID}-{CLIENT_SPAN_ID}-01"}
    )
    try:
        with tracer.start_as_current_span("outer", context=joined) as outer:
            outer.set_attribute("gen_ai.request.model", "tiny")
            with tracer.start_as_current_span("inner") as inner:
                inner.set_attribute("sluicegate.tenant", "alice")
    finally:
        provider.shutdown()  # flushes the batch

    trace = PhoenixSpans(phoenix.url).wait_for_spans(TRACE_ID, {"outer", "inner"})
    outer_span, inner_span = trace.one("outer"), trace.one("inner")
    assert outer_span.parent_id == CLIENT_SPAN_ID
    assert inner_span.parent_id == outer_span.span_id
    assert outer_span.attributes["gen_ai.request.model"] == "tiny"
    assert inner_span.attributes["sluicegate.tenant"] == "alice"
    assert trace.roots() == [outer_span]
    assert trace.children(outer_span) == [inner_span]
