"""The spans of one request through the whole gateway (tracing on, read back from the SDK's
in-memory exporter): the tree and its names, the attributes that say what happened, one
trace id from the caller's ``traceparent`` to the backend's, and nothing of the prompt or
the reply. Tracing off: no spans and no ``traceparent`` upstream."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from gateway.config.schema import load_config
from tests.unit.gateway.conftest import (
    CHAT,
    Harness,
    auth,
    chat_body,
    hold_the_only_slot,
    in_process,
    over_loopback,
    queued_behind,
)
from tests.unit.gateway.fakes import FakeBackend, FakeFleet, make_config

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
TWO_BACKENDS = [
    {"name": "a", "url": "http://a.test", "models": ["tiny"], "max_num_seqs": 1},
    {"name": "b", "url": "http://b.test:8001", "models": ["tiny"], "max_num_seqs": 1},
]
TRACING = {"enabled": True, "sample_ratio": 1.0}


@contextlib.asynccontextmanager
async def traced(
    fleet: FakeFleet, *, loopback: bool = False, **overrides: Any
) -> AsyncIterator[tuple[Harness, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    config = make_config(tracing=TRACING, **overrides)
    run = over_loopback if loopback else in_process
    async with run(config, fleet, span_exporter=exporter) as h:
        yield h, exporter


def _spans(h: Harness, exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    assert h.ctx.tracing is not None
    h.ctx.tracing.flush()
    return list(exporter.get_finished_spans())


def _named(spans: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def _one(spans: Sequence[ReadableSpan], name: str) -> ReadableSpan:
    found = _named(spans, name)
    assert len(found) == 1, [s.name for s in spans]
    return found[0]


def _children(spans: Sequence[ReadableSpan], parent: ReadableSpan) -> list[str]:
    """The names of ``parent``'s children, in start order."""
    assert parent.context is not None
    kids = [s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id]
    return [s.name for s in sorted(kids, key=lambda s: s.start_time or 0)]


def _hex_trace(span: ReadableSpan) -> str:
    assert span.context is not None
    return f"{span.context.trace_id:032x}"


def _traceparent_of(span: ReadableSpan) -> str:
    assert span.context is not None
    context = span.context
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


async def test_a_streamed_request_joins_the_callers_trace_down_to_the_backend(fleet) -> None:
    async with traced(fleet) as (h, exporter):
        headers = {**auth(), "traceparent": TRACEPARENT, "tracestate": "vendor=1"}
        r = await h.client.post(CHAT, headers=headers, json=chat_body(stream=True, max_tokens=5))
        assert r.status_code == 200
        spans = _spans(h, exporter)
    server = _one(spans, "chat tiny")
    assert server.kind is SpanKind.SERVER
    assert server.parent is not None and f"{server.parent.span_id:016x}" == PARENT_ID
    assert {_hex_trace(s) for s in spans} == {TRACE_ID}
    assert _children(spans, server) == ["authenticate", "decide", "attempt a"]
    attrs = server.attributes or {}
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.request.model"] == "tiny"
    assert attrs["gen_ai.request.max_tokens"] == 5
    assert attrs["gen_ai.usage.input_tokens"] == 11
    assert attrs["gen_ai.usage.output_tokens"] == 3
    assert attrs["sluicegate.tenant"] == "acme"
    assert attrs["sluicegate.decision"] == "admit"
    assert attrs["http.response.status_code"] == 200
    assert server.status.status_code is StatusCode.UNSET
    decide = (_one(spans, "decide").attributes) or {}
    assert decide["sluicegate.decision"] == "admit"
    assert decide["sluicegate.reason"] == "capacity_available"
    assert decide["sluicegate.flow"] == "acme/interactive/tiny/none"  # the tenant's label
    assert decide["sluicegate.policy.version"] == h.ctx.runtime.version
    assert decide["sluicegate.estimate.input_tokens"] > 0
    attempt = _one(spans, "attempt a")
    assert attempt.kind is SpanKind.CLIENT
    assert (attempt.attributes or {})["server.address"] == "a.test"
    assert (attempt.attributes or {})["server.port"] == 80
    assert _children(spans, attempt) == ["stream"]
    stream = _one(spans, "stream")
    assert (stream.attributes or {})["gen_ai.usage.output_tokens"] == 3
    assert (server.attributes or {})["sluicegate.time_to_first_token_s"] >= 0
    upstream = h.backend("a").headers[-1]
    assert upstream["traceparent"] == _traceparent_of(attempt)
    assert upstream["tracestate"] == "vendor=1"


async def test_a_queued_request_shows_its_wait(fleet) -> None:
    async with traced(fleet, loopback=True) as (h, exporter):
        holder, gate = await hold_the_only_slot(h)
        waiting = await queued_behind(h)
        gate.set()
        await holder.__aexit__(None, None, None)
        assert (await asyncio.wait_for(waiting, 3.0)).status_code == 200
        spans = _spans(h, exporter)
    queue = _one(spans, "queue")
    server = next(s for s in _named(spans, "chat tiny") if queue.parent == s.context)
    assert _children(spans, server) == ["authenticate", "decide", "queue", "attempt a"]
    decide = next(s for s in _named(spans, "decide") if s.parent == server.context)
    assert (decide.attributes or {})["sluicegate.decision"] == "delay"
    attrs = queue.attributes or {}
    assert attrs["sluicegate.queue.position"] == 1
    assert attrs["sluicegate.queue.result"] == "dequeued"
    assert attrs["sluicegate.decision"] == "admit"
    assert attrs["sluicegate.queue.waited_s"] >= 0
    assert len({_hex_trace(s) for s in spans}) == 2  # one trace per call


async def test_a_request_that_expires_in_the_queue_says_so(fleet) -> None:
    async with traced(fleet, loopback=True) as (h, exporter):
        holder, gate = await hold_the_only_slot(h)
        # long enough that a loaded machine's work before the queue cannot spend it all
        # (the request is then refused at the door, with no queue span)
        late = {**auth(), "x-request-deadline-ms": "500"}
        r = await h.client.post(CHAT, headers=late, json=chat_body())
        assert r.status_code == 429
        gate.set()
        await holder.__aexit__(None, None, None)
        spans = _spans(h, exporter)
    queue = _one(spans, "queue")
    attrs = queue.attributes or {}
    assert attrs["sluicegate.queue.result"] == "expired"
    assert attrs["sluicegate.reason"] == "deadline_expired"
    server = next(s for s in _named(spans, "chat tiny") if queue.parent == s.context)
    assert _children(spans, server) == ["authenticate", "decide", "queue"]
    assert (server.attributes or {})["http.response.status_code"] == 429
    assert (server.attributes or {})["sluicegate.outcome"] == "expired"


async def test_a_rejected_request_is_a_client_error_not_a_span_error(fleet) -> None:
    quota = {"default": {"tokens_per_minute": 1, "burst_tokens": 1}}
    gates = [{"name": "q", "type": "tenant_quota", "parameters": quota}]
    async with traced(fleet, policy={"gates": gates}) as (h, exporter):
        first = await h.client.post(CHAT, headers=auth(), json=chat_body())
        r = await h.client.post(CHAT, headers=auth(), json=chat_body())
        assert (first.status_code, r.status_code) == (200, 429)
        spans = _spans(h, exporter)
    server = max(_named(spans, "chat tiny"), key=lambda s: s.start_time or 0)
    attrs = server.attributes or {}
    assert attrs["http.response.status_code"] == 429
    assert attrs["sluicegate.decision"] == "reject"
    assert attrs["sluicegate.reason"] == r.headers["x-sluicegate-reason"]
    assert server.status.status_code is StatusCode.UNSET
    assert _children(spans, server) == ["authenticate", "decide"]
    decide = _named(spans, "decide")[-1].attributes or {}
    assert decide["sluicegate.decision"] == "reject"
    assert decide["sluicegate.retry_after_s"] > 0


async def test_a_degraded_request_says_what_was_cut(fleet) -> None:
    ladder = {"steps": [{"name": "cap", "at": 0.0, "action": "cap_max_tokens", "max_tokens": 2}]}
    async with traced(fleet, policy={"ladder": ladder}) as (h, exporter):
        r = await h.client.post(CHAT, headers=auth(), json=chat_body(max_tokens=100))
        assert r.headers["x-sluicegate-decision"] == "degrade"
        spans = _spans(h, exporter)
    decide = _one(spans, "decide").attributes or {}
    assert decide["sluicegate.decision"] == "degrade"
    assert decide["sluicegate.degraded.steps"] == "cap"
    assert decide["sluicegate.degraded.max_tokens"] == 2
    attempt = _one(spans, "attempt a").attributes or {}
    assert attempt["gen_ai.request.max_tokens"] == 2
    assert (_one(spans, "chat tiny").attributes or {})["gen_ai.request.max_tokens"] == 100


async def test_a_failover_shows_each_attempt_and_why_the_first_failed(fleet) -> None:
    fleet.backends["a"].mode = "refuse"
    async with traced(fleet, backends=TWO_BACKENDS) as (h, exporter):
        r = await h.client.post(CHAT, headers=auth(), json=chat_body())
        assert r.status_code == 200
        spans = _spans(h, exporter)
    server = _one(spans, "chat tiny")
    names = ["authenticate", "decide", "attempt a", "decide", "attempt b"]
    assert _children(spans, server) == names
    first, second = _one(spans, "attempt a"), _one(spans, "attempt b")
    assert first.status.status_code is StatusCode.ERROR
    assert (first.attributes or {})["sluicegate.attempt.failure"] == "connect"
    assert (second.attributes or {})["sluicegate.attempt"] == 2
    assert (second.attributes or {})["server.port"] == 8001
    assert second.status.status_code is StatusCode.UNSET
    assert h.backend("b").headers[-1]["traceparent"] == _traceparent_of(second)
    assert len({_hex_trace(s) for s in spans}) == 1


async def test_a_refusal_before_the_decision_ends_the_call_span(fleet) -> None:
    async with traced(fleet) as (h, exporter):
        r = await h.client.post(CHAT, headers=auth("sk-unknown"), json=chat_body())
        assert r.status_code == 401
        spans = _spans(h, exporter)
    server = _one(spans, f"POST {CHAT}")
    assert _children(spans, server) == ["authenticate"]
    assert (server.attributes or {})["http.response.status_code"] == 401
    assert _one(spans, "authenticate").status.status_code is StatusCode.ERROR


async def test_tracing_off_builds_no_span_and_adds_no_traceparent(config, fleet) -> None:
    exporter = InMemorySpanExporter()
    async with in_process(config, fleet, span_exporter=exporter) as h:
        assert h.ctx.tracing is None
        headers = {**auth(), "traceparent": TRACEPARENT}
        r = await h.client.post(CHAT, headers=headers, json=chat_body(stream=True))
        assert r.status_code == 200
    assert exporter.get_finished_spans() == ()
    assert "traceparent" not in h.backend("a").headers[-1]


@pytest.mark.parametrize("stream", [False, True])
async def test_no_span_holds_the_prompt_or_the_reply(stream: bool) -> None:
    prompt, reply = "the-secret-prompt-4711", "the-secret-reply-0815"
    fleet = FakeFleet(FakeBackend("a", reply=reply))
    async with traced(fleet) as (h, exporter):
        body = {"model": "tiny", "messages": [{"role": "user", "content": prompt}]}
        r = await h.client.post(CHAT, headers=auth(), json={**body, "stream": stream})
        assert r.status_code == 200
        assert (reply if not stream else "t0") in r.text
        spans = _spans(h, exporter)
    assert spans
    needles = (prompt, reply) if not stream else (prompt, '"t0"', "t0t1")
    for span in spans:
        values = [span.name, *map(str, (span.attributes or {}).values())]
        values += [json.dumps(dict(e.attributes or {})) + e.name for e in span.events]
        for value in values:
            assert all(needle not in value for needle in needles), (span.name, value)


async def test_a_reload_changes_the_ratio_and_leaves_tracing_on_until_a_restart(
    tmp_path: Path, fleet: FakeFleet, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "gw.yaml"
    raw = make_config(tracing=TRACING).model_dump(mode="json")
    path.write_text(yaml.safe_dump(raw))
    exporter = InMemorySpanExporter()
    async with in_process(load_config(path), fleet, config_path=path, span_exporter=exporter) as h:
        raw["tracing"] = {"enabled": False, "sample_ratio": 0.0}
        path.write_text(yaml.safe_dump(raw))
        with caplog.at_level(logging.WARNING, "sluicegate.reload"):
            assert h.ctx.reloader is not None and h.ctx.reloader.reload() is True
        assert "tracing.enabled: true in force, false in the file" in caplog.text
        assert (await h.client.post(CHAT, headers=auth(), json=chat_body())).status_code == 200
        assert _spans(h, exporter) == []  # ratio 0: a call without a caller's trace
        headers = {**auth(), "traceparent": TRACEPARENT}
        assert (await h.client.post(CHAT, headers=headers, json=chat_body())).status_code == 200
        assert {_hex_trace(s) for s in _spans(h, exporter)} == {TRACE_ID}


async def test_the_gateways_shutdown_exports_what_is_buffered(fleet) -> None:
    async with traced(fleet) as (h, exporter):
        # no flush here: the batch processor holds the spans for its delay (5 s)
        assert (await h.client.post(CHAT, headers=auth(), json=chat_body())).status_code == 200
    assert {s.name for s in exporter.get_finished_spans()} >= {"chat tiny", "attempt a"}


async def test_a_call_left_out_by_the_sampler_says_so_upstream_and_exports_nothing(fleet) -> None:
    exporter = InMemorySpanExporter()
    config = make_config(tracing={"enabled": True, "sample_ratio": 0.0})
    async with in_process(config, fleet, span_exporter=exporter) as h:
        unsampled = f"00-{TRACE_ID}-{PARENT_ID}-00"
        for headers in (auth(), {**auth(), "traceparent": unsampled}):
            r = await h.client.post(CHAT, headers=headers, json=chat_body(stream=True))
            assert r.status_code == 200
        assert _spans(h, exporter) == []
    first, second = (sent["traceparent"].split("-") for sent in h.backend("a").headers)
    assert int(first[3], 16) & 1 == int(second[3], 16) & 1 == 0  # the sampled flag is off
    assert second[1] == TRACE_ID  # the caller's trace goes on
