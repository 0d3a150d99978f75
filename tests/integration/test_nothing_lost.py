"""Exactly one terminal outcome per request and every slot released, when the client
leaves mid-stream, leaves while queued, and when the backend process dies mid-stream.
(``serve_gateway`` checks queued = in flight = 0 and outcomes = requests sent at exit.)"""

from __future__ import annotations

import asyncio
import contextlib
import signal

import httpx
import pytest

from emulator.embedded import EmbeddedEmulator
from tests.integration.conftest import StartEmulator
from tests.integration.faults import LONG, Answer, after_fault, error_log, events_answer
from tests.integration.harness import (
    NO_LADDER,
    chat_body,
    emulator_process,
    engine_gauge,
    gateway_config,
    healthy,
    serve_gateway,
    wait_for,
)

pytestmark = pytest.mark.emulator


def outcome_key(outcome: str, tenant: str = "alice") -> str:
    return f"sluicegate_outcomes_total{{class=interactive,outcome={outcome},tenant={tenant}}}"


async def _stream_until(
    client: httpx.AsyncClient, body: dict[str, object], leave: asyncio.Event | None = None
) -> None:
    """Open a stream and read it until the first SSE event (``leave`` None) or, reading on,
    until ``leave`` is set; then drop the connection."""
    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if line.startswith("data: ") and (leave is None or leave.is_set()):
                break


async def test_client_gone_mid_stream(emulator: EmbeddedEmulator) -> None:
    async with serve_gateway(gateway_config([emulator.url], NO_LADDER)) as gw:
        client = gw.client()
        await _stream_until(client, chat_body(LONG, stream=True))
        await wait_for(lambda: not emulator.runner.engine.has_work, what="upstream idle")
        finished = await engine_gauge(emulator.url, "vllm:request_success_total")
        assert finished == 0, "the backend ran the abandoned request to the end"
        await wait_for(gw.settled, what="settled")
        assert (await gw.metrics())[outcome_key("cancelled")] == 1


async def test_client_gone_while_queued(start_emulator: StartEmulator) -> None:
    emu = start_emulator(speed=20.0)
    policy = {"limit": {"type": "fixed", "parameters": {"max_in_flight": 1}}, **NO_LADDER}
    async with serve_gateway(gateway_config([emu.url], policy)) as gw:
        client = gw.client()
        hold = asyncio.Event()
        running = asyncio.ensure_future(_stream_until(client, chat_body(LONG, stream=True), hold))
        await wait_for(lambda: gw.ctx.scheduler.stats().in_flight == 1, what="one in flight")
        queued = asyncio.ensure_future(client.post("/v1/chat/completions", json=chat_body(8)))
        await wait_for(lambda: gw.ctx.scheduler.stats().queued == 1, what="one queued")
        queued.cancel()
        await wait_for(lambda: gw.ctx.scheduler.stats().queued == 0, what="queue emptied")
        assert gw.ctx.scheduler.stats().in_flight == 1, "the queued one was not dispatched"
        hold.set()
        await running
        await wait_for(gw.settled, what="settled")
        assert (await gw.metrics())[outcome_key("cancelled")] == 2
        with contextlib.suppress(asyncio.CancelledError):
            await queued


async def test_backend_killed_mid_stream() -> None:
    """A fault of the fault tier (``test_faults.py``), with its check ``after_fault``."""
    with emulator_process(speed=10.0) as (proc, url), error_log() as errors:
        await wait_for(lambda: healthy(url), timeout_s=30.0, what="emulator process up")
        async with serve_gateway(gateway_config([url], NO_LADDER)) as gw:
            client = gw.client()
            events: list[str] = []
            async with client.stream(
                "POST", "/v1/chat/completions", json=chat_body(LONG, stream=True)
            ) as r:
                assert r.status_code == 200
                async for line in r.aiter_lines():
                    if line.startswith("data: "):
                        events.append(line)
                        if len(events) == 3:
                            proc.send_signal(signal.SIGKILL)
            assert len(events) > 3 and "[DONE]" not in events[-1]
            assert "error" in events[-1], "the cut stream did not end with an error event"
            await wait_for(gw.settled, what="settled")
            assert (await gw.metrics())[outcome_key("failed")] == 1
            after = await client.post("/v1/chat/completions", json=chat_body(8))
            assert after.status_code == 503
            assert after.headers["x-sluicegate-reason"] == "no_healthy_backend"
            assert "retry-after" in after.headers
            cut = events_answer([e[len("data: ") :] for e in events])
            await after_fault(gw, [cut, Answer(after.status_code, 1)], [], errors)
