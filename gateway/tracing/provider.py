"""Tracing switched on: the OpenTelemetry SDK's ``TracerProvider`` with a
``ParentBased(TraceIdRatioBased(ratio))`` sampler, a ``BatchSpanProcessor`` and the OTLP/HTTP
exporter; W3C trace context in and out.

Imported only when the ``tracing:`` section enables it (``app.build_gateway``): a gateway
without the extra never loads the SDK, and one with tracing off never builds a span
(``GatewayContext.tracing`` is None, the one check a request makes).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence

from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import (
    ParentBased,
    Sampler,
    SamplingResult,
    TraceIdRatioBased,
)
from opentelemetry.trace import Link, SpanKind, TraceState
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import Attributes

from gateway.tracing.config import TracingConfig
from gateway.tracing.request_trace import RequestTrace

log = logging.getLogger("sluicegate.tracing")

DEFAULT_SERVICE = "sluicegate"
_RATIO_SAMPLERS = ("traceidratio", "parentbased_traceidratio")


class Tracing:
    """The process's tracer: one ``start`` per request, ``set_ratio`` on a reload,
    ``shutdown`` (which flushes) when the gateway stops."""

    def __init__(self, provider: TracerProvider, sampler: RatioSampler) -> None:
        self.provider = provider
        self.sampler = sampler
        self.tracer = provider.get_tracer("sluicegate")
        self.propagator = TraceContextTextMapPropagator()

    def start(self, headers: Mapping[str, str], path: str) -> RequestTrace:
        """The call's server span, joined to the caller's ``traceparent``/``tracestate``."""
        parent = self.propagator.extract(headers) if "traceparent" in headers else None
        return RequestTrace.begin(self.tracer, self.propagator, parent, path)

    def reloaded(self, config: TracingConfig) -> None:
        """A reload: the ratio follows the file (the rest waits for a restart)."""
        self.sampler.set(sample_ratio(config))

    def flush(self) -> bool:
        return self.provider.force_flush()

    def shutdown(self) -> None:
        """Export what is buffered and stop (blocks up to the exporter's timeout)."""
        self.provider.shutdown()


class RatioSampler(Sampler):
    """``ParentBased(TraceIdRatioBased(ratio))`` whose ratio a reload may change."""

    def __init__(self, ratio: float) -> None:
        self.ratio = ratio
        self._inner = ParentBased(TraceIdRatioBased(ratio))

    def set(self, ratio: float) -> None:
        if ratio != self.ratio:
            self.ratio = ratio
            self._inner = ParentBased(TraceIdRatioBased(ratio))

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        return self._inner.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )

    def get_description(self) -> str:
        return f"ParentBased{{root:TraceIdRatioBased{{{self.ratio}}}}}"


def start_tracing(config: TracingConfig, exporter: SpanExporter | None = None) -> Tracing:
    """The tracer ``config`` asks for; ``exporter`` replaces the OTLP/HTTP one (tests)."""
    sampler = RatioSampler(sample_ratio(config))
    name = config.service_name or os.environ.get("OTEL_SERVICE_NAME") or DEFAULT_SERVICE
    provider = TracerProvider(sampler=sampler, resource=Resource.create({SERVICE_NAME: name}))
    if exporter is None:
        exporter = OTLPSpanExporter(endpoint=config.endpoint)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    log.info("tracing on: service %s, ratio %s", name, sampler.ratio)
    return Tracing(provider, sampler)


def sample_ratio(config: TracingConfig) -> float:
    """The section's ratio, else ``OTEL_TRACES_SAMPLER_ARG`` when ``OTEL_TRACES_SAMPLER`` is
    a ratio sampler (or unset), else 1.0."""
    if config.sample_ratio is not None:
        return config.sample_ratio
    kind = os.environ.get("OTEL_TRACES_SAMPLER", "parentbased_traceidratio").strip().lower()
    arg = os.environ.get("OTEL_TRACES_SAMPLER_ARG")
    if kind in _RATIO_SAMPLERS and arg:
        try:
            ratio = float(arg)
        except ValueError:
            ratio = -1.0
        if 0.0 <= ratio <= 1.0:
            return ratio
        log.warning("OTEL_TRACES_SAMPLER_ARG=%r is not a ratio in [0, 1]: 1.0 used", arg)
    return 1.0
