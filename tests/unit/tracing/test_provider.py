"""The tracer tracing on builds: its ratio from the section or the standard ``OTEL_*``
variables, a caller's sampling choice followed, the ratio changed in place by a reload."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.tracing.config import TracingConfig
from gateway.tracing.provider import sample_ratio, start_tracing

SAMPLED = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
NOT_SAMPLED = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"


@pytest.mark.parametrize(
    ("section", "sampler", "arg", "ratio"),
    [
        (0.5, "parentbased_traceidratio", "0.1", 0.5),  # the section wins
        (None, "parentbased_traceidratio", "0.1", 0.1),
        (None, "traceidratio", "0.2", 0.2),
        (None, None, "0.3", 0.3),  # OTEL_TRACES_SAMPLER unset: the ratio sampler
        (None, "always_on", "0.1", 1.0),  # not a ratio sampler: its argument is not a ratio
        (None, "parentbased_traceidratio", "2", 1.0),
        (None, "parentbased_traceidratio", "lots", 1.0),
        (None, None, None, 1.0),
    ],
)
def test_the_ratio_comes_from_the_section_else_the_otel_variables(
    monkeypatch: pytest.MonkeyPatch,
    section: float | None,
    sampler: str | None,
    arg: str | None,
    ratio: float,
) -> None:
    for name, value in (("OTEL_TRACES_SAMPLER", sampler), ("OTEL_TRACES_SAMPLER_ARG", arg)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    assert sample_ratio(TracingConfig(enabled=True, sample_ratio=section)) == ratio


def _traced(ratio: float, headers: dict[str, str]) -> int:
    """How many spans one call (its server span, ended at once) leaves behind."""
    exporter = InMemorySpanExporter()
    tracing = start_tracing(TracingConfig(enabled=True, sample_ratio=ratio), exporter)
    tracing.start(headers, "/v1/chat/completions").refused_early(401, "unauthorized")
    tracing.shutdown()
    return len(exporter.get_finished_spans())


def test_a_callers_sampling_choice_is_followed_whatever_the_ratio() -> None:
    assert _traced(0.0, {}) == 0
    assert _traced(1.0, {}) == 2  # the call and its authentication
    assert _traced(0.0, {"traceparent": SAMPLED}) == 2
    assert _traced(1.0, {"traceparent": NOT_SAMPLED}) == 0


def test_a_reload_changes_the_ratio_in_place() -> None:
    exporter = InMemorySpanExporter()
    tracing = start_tracing(TracingConfig(enabled=True, sample_ratio=1.0), exporter)
    tracing.reloaded(TracingConfig(enabled=True, sample_ratio=0.0))
    tracing.start({}, "/v1/completions").refused_early(400, "invalid_request")
    tracing.reloaded(TracingConfig(enabled=True, sample_ratio=1.0))
    tracing.start({}, "/v1/completions").refused_early(400, "invalid_request")
    tracing.shutdown()
    assert [s.name for s in exporter.get_finished_spans()] == [
        "authenticate",
        "POST /v1/completions",
    ]


def test_the_service_name_comes_from_the_section_else_otel_service_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
    for section, expected in (("gw-eu", "gw-eu"), (None, "from-env")):
        config = TracingConfig(enabled=True, service_name=section)
        tracing = start_tracing(config, InMemorySpanExporter())
        assert tracing.provider.resource.attributes["service.name"] == expected
        tracing.shutdown()
