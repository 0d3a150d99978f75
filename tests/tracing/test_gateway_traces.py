"""The gateway's spans as a real trace backend receives them: the gateway (tracing on) in
front of two emulators exports over OTLP/HTTP to the session's Phoenix, and each test reads
its call's trace back from Phoenix's API by the trace id its client sent in ``traceparent``:
one admitted stream, one queued, one rejected (429), one degraded, one failed over to the
second backend. The backend receives the attempt span's context, so one trace id runs from
the client to the engine."""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

import httpx
import pytest

from tests.integration.conftest import StartEmulator
from tests.integration.harness import MODEL, chat_body, gateway_config, serve_gateway, wait_for
from tests.phoenix_server import PhoenixServer
from tests.phoenix_spans import PhoenixSpans, Span, Trace
from tests.tracing.header_tap import tap_traceparents

pytestmark = pytest.mark.tracing

CALL = f"chat {MODEL}"
NO_LADDER: dict[str, Any] = {"ladder": {"steps": []}}
LONG = 4000  # output tokens of a stream held open: far longer than any test waits


class Caller:
    """A client span of our own: its ``traceparent`` header and the ids in it."""

    def __init__(self) -> None:
        self.trace_id = secrets.token_hex(16)
        self.span_id = secrets.token_hex(8)
        self.headers = {"traceparent": f"00-{self.trace_id}-{self.span_id}-01"}


def traceparent_of(span: Span) -> str:
    return f"00-{span.trace_id}-{span.span_id}-01"


def children(trace: Trace, span: Span) -> list[str]:
    return [child.name for child in trace.children(span)]


def read(phoenix: PhoenixServer, caller: Caller, *names: str) -> tuple[Trace, Span]:
    """The caller's trace once ``names`` (and the call's span) arrived; the call's span."""
    trace = PhoenixSpans(phoenix.url).wait_for_spans(caller.trace_id, {CALL, *names})
    call = trace.one(CALL)
    assert call.parent_id == caller.span_id, trace.tree()
    assert trace.roots() == [call], trace.tree()
    return trace, call


async def test_an_admitted_stream_from_the_client_to_the_backend(
    start_emulator: StartEmulator, tracing: dict[str, Any], phoenix: PhoenixServer
) -> None:
    emu = start_emulator(speed=20.0)
    reached = tap_traceparents(emu)
    caller = Caller()
    raw = gateway_config([emu.url, start_emulator(speed=20.0).url], NO_LADDER, tracing=tracing)
    async with serve_gateway(raw) as gw:
        body = chat_body(6, stream=True, stream_options={"include_usage": True})
        async with gw.client(headers=caller.headers).stream(
            "POST", "/v1/chat/completions", json=body
        ) as reply:
            assert reply.status_code == 200
            events = [line async for line in reply.aiter_lines() if line.startswith("data:")]
        assert events[-1] == "data: [DONE]"

    trace, call = read(phoenix, caller, "authenticate", "decide", "attempt emu-0", "stream")
    assert children(trace, call) == ["authenticate", "decide", "attempt emu-0"]
    assert call.attributes["gen_ai.operation.name"] == "chat"
    assert call.attributes["gen_ai.request.model"] == MODEL
    assert call.attributes["gen_ai.usage.output_tokens"] == 6
    assert call.attributes["sluicegate.tenant"] == "alice"
    assert call.attributes["sluicegate.decision"] == "admit"
    assert call.attributes["sluicegate.stream"] is True
    assert call.attributes["http.response.status_code"] == 200
    decide = trace.one("decide").attributes
    assert decide["sluicegate.reason"] == "capacity_available"
    assert decide["sluicegate.estimate.input_tokens"] > 0
    attempt = trace.one("attempt emu-0")
    assert attempt.attributes["sluicegate.backend"] == "emu-0"
    assert attempt.attributes["server.port"] == int(emu.url.rsplit(":", 1)[1])
    assert children(trace, attempt) == ["stream"]
    assert trace.one("stream").attributes["gen_ai.usage.output_tokens"] == 6
    assert reached == [traceparent_of(attempt)]  # the engine got the attempt's context


async def test_a_queued_call_shows_its_wait(
    start_emulator: StartEmulator, tracing: dict[str, Any], phoenix: PhoenixServer
) -> None:
    policy = {"limit": {"type": "fixed", "parameters": {"max_in_flight": 1}}, **NO_LADDER}
    urls = [start_emulator(speed=20.0).url, start_emulator(speed=20.0).url]
    caller = Caller()
    async with serve_gateway(gateway_config(urls, policy, tracing=tracing)) as gw:
        leave = asyncio.Event()
        holders = [asyncio.ensure_future(_hold_a_stream(gw.client(), leave)) for _ in urls]
        await wait_for(lambda: gw.ctx.scheduler.stats().in_flight == 2, what="both busy")
        queued = asyncio.ensure_future(
            gw.client(headers=caller.headers).post("/v1/chat/completions", json=chat_body(3))
        )
        await wait_for(lambda: gw.ctx.scheduler.stats().queued == 1, what="one queued")
        leave.set()  # the holders hang up: their slots free, the queued call dispatches
        await asyncio.gather(*holders)
        assert (await queued).status_code == 200

    trace, call = read(phoenix, caller, "queue")
    assert children(trace, call)[:3] == ["authenticate", "decide", "queue"]
    assert children(trace, call)[3].startswith("attempt emu-")
    assert trace.one("decide").attributes["sluicegate.decision"] == "delay"
    queue = trace.one("queue").attributes
    assert queue["sluicegate.queue.position"] == 1
    assert queue["sluicegate.queue.result"] == "dequeued"
    assert queue["sluicegate.decision"] == "admit"
    assert queue["sluicegate.queue.waited_s"] > 0
    assert call.attributes["sluicegate.decision"] == "admit"


async def _hold_a_stream(client: httpx.AsyncClient, leave: asyncio.Event) -> None:
    """A long stream read until ``leave`` is set, then dropped."""
    body = chat_body(LONG, stream=True)
    async with client.stream("POST", "/v1/chat/completions", json=body) as reply:
        assert reply.status_code == 200
        async for line in reply.aiter_lines():
            if line.startswith("data: ") and leave.is_set():
                break


async def test_a_rejected_call_is_a_429_with_its_reason(
    start_emulator: StartEmulator, tracing: dict[str, Any], phoenix: PhoenixServer
) -> None:
    quota = {"default": {"tokens_per_minute": 1, "burst_tokens": 1}}
    policy = {"gates": [{"name": "q", "type": "tenant_quota", "parameters": quota}], **NO_LADDER}
    urls = [start_emulator(speed=20.0).url, start_emulator(speed=20.0).url]
    caller = Caller()
    async with serve_gateway(gateway_config(urls, policy, tracing=tracing)) as gw:
        client = gw.client()
        assert (await client.post("/v1/chat/completions", json=chat_body(3))).status_code == 200
        refused = await gw.client(headers=caller.headers).post(
            "/v1/chat/completions", json=chat_body(3)
        )
        assert refused.status_code == 429

    trace, call = read(phoenix, caller, "authenticate", "decide")
    assert children(trace, call) == ["authenticate", "decide"]  # no attempt
    assert call.attributes["http.response.status_code"] == 429
    assert call.attributes["sluicegate.decision"] == "reject"
    assert call.attributes["sluicegate.reason"] == refused.headers["x-sluicegate-reason"]
    assert call.status_code != "ERROR"  # a refusal is the client's 4xx, not a failure
    decide = trace.one("decide").attributes
    assert decide["sluicegate.reason"] == "tenant_quota_exceeded"
    assert decide["sluicegate.retry_after_s"] > 0


async def test_a_degraded_call_says_what_was_cut(
    start_emulator: StartEmulator, tracing: dict[str, Any], phoenix: PhoenixServer
) -> None:
    step = {"name": "cap", "at": 0.0, "action": "cap_max_tokens", "max_tokens": 2}
    urls = [start_emulator(speed=20.0).url, start_emulator(speed=20.0).url]
    caller = Caller()
    raw = gateway_config(urls, {"ladder": {"steps": [step]}}, tracing=tracing)
    async with serve_gateway(raw) as gw:
        reply = await gw.client(headers=caller.headers).post(
            "/v1/chat/completions", json=chat_body(50)
        )
        assert reply.headers["x-sluicegate-decision"] == "degrade"
        assert reply.json()["usage"]["completion_tokens"] == 2

    trace, call = read(phoenix, caller, "decide", "attempt emu-0")
    decide = trace.one("decide").attributes
    assert decide["sluicegate.decision"] == "degrade"
    assert decide["sluicegate.degraded.steps"] == "cap"
    assert decide["sluicegate.degraded.max_tokens"] == 2
    assert call.attributes["gen_ai.request.max_tokens"] == 50  # what the client asked
    assert trace.one("attempt emu-0").attributes["gen_ai.request.max_tokens"] == 2  # sent
    assert call.attributes["gen_ai.usage.output_tokens"] == 2


async def test_a_failover_shows_both_attempts_in_one_trace(
    start_emulator: StartEmulator, tracing: dict[str, Any], phoenix: PhoenixServer
) -> None:
    busy = start_emulator(speed=20.0, max_num_queued_reqs=0)  # its engine refuses every request
    spare = start_emulator(speed=20.0)
    reached_busy, reached_spare = tap_traceparents(busy), tap_traceparents(spare)
    caller = Caller()
    async with serve_gateway(
        gateway_config([busy.url, spare.url], NO_LADDER, tracing=tracing)
    ) as gw:
        reply = await gw.client(headers=caller.headers).post(
            "/v1/chat/completions", json=chat_body(3)
        )
        assert reply.status_code == 200

    trace, call = read(phoenix, caller, "attempt emu-0", "attempt emu-1")
    assert children(trace, call) == [
        "authenticate",
        "decide",
        "attempt emu-0",
        "decide",
        "attempt emu-1",
    ]
    first, second = trace.one("attempt emu-0"), trace.one("attempt emu-1")
    assert first.status_code == "ERROR"
    assert first.attributes["sluicegate.attempt.failure"] == "busy"
    assert second.attributes["sluicegate.attempt"] == 2
    assert second.status_code != "ERROR"
    assert call.attributes["http.response.status_code"] == 200
    assert reached_busy == [traceparent_of(first)]
    assert reached_spare == [traceparent_of(second)]


def test_phoenix_answers_for_an_unknown_trace_with_no_spans(phoenix: PhoenixServer) -> None:
    assert PhoenixSpans(phoenix.url).trace(secrets.token_hex(16)).spans == ()
