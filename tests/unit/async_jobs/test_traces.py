"""An async job keeps the trace of the call that created it: the call's span ends with
its 202, and the job's span, its child, holds the job's decisions and attempts."""

from __future__ import annotations

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.unit.gateway.conftest import auth, in_process, wait_until
from tests.unit.gateway.fakes import FakeBackend, FakeFleet, make_config
from tests.unit.policies.helpers import ManualClock

CHAT = "/v1/chat/completions"
TRACE_ID = "5bf92f3577b34da6a3ce929d0e0e4736"


async def test_the_jobs_spans_sit_under_the_call_that_handed_it_off() -> None:
    clock, backend, exporter = ManualClock(100.0), FakeBackend("a"), InMemorySpanExporter()
    quota = {"type": "tenant_quota", "parameters": {"default": {"tokens_per_minute": 60}}}
    config = make_config(
        policy={"gates": [quota], "ladder": {"steps": []}},
        async_jobs={"enabled": True, "retry_interval_s": 0.005, "max_pending_s": 86400},
        tracing={"enabled": True, "sample_ratio": 1.0},
    )
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 40}
    async with in_process(config, FakeFleet(backend), clock=clock, span_exporter=exporter) as h:
        assert (await h.client.post(CHAT, headers=auth(), json=body)).status_code == 200
        traceparent = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
        headers = {**auth(), "prefer": "respond-async", "traceparent": traceparent}
        r = await h.client.post(CHAT, headers=headers, json=body)
        assert r.status_code == 202
        clock.now += 3600.0  # the bucket refills: the job runs
        tracing = h.ctx.tracing
        assert tracing is not None

        def job_ended() -> bool:
            tracing.flush()
            return any(s.name == "async job" for s in exporter.get_finished_spans())

        await wait_until(job_ended)
    spans = [s for s in exporter.get_finished_spans() if s.context is not None]
    traced = [s for s in spans if f"{s.context.trace_id:032x}" == TRACE_ID]
    by_id = {s.context.span_id: s for s in traced}

    def parent_name(name: str) -> list[str]:
        return [by_id[s.parent.span_id].name for s in traced if s.name == name and s.parent]

    call = next(s for s in traced if s.name == "chat tiny")
    job = next(s for s in traced if s.name == "async job")
    assert (call.attributes or {})["http.response.status_code"] == 202
    assert job.parent == call.context
    assert sorted(parent_name("decide")) == ["async job", "chat tiny"]
    assert parent_name("attempt a") == ["async job"]
    attempt = next(s for s in traced if s.name == "attempt a")
    assert attempt.context is not None
    assert backend.headers[-1]["traceparent"].split("-")[2] == f"{attempt.context.span_id:016x}"
    assert (job.attributes or {})["sluicegate.outcome"] == "completed"
