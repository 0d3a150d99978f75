"""The fault tier: each fault, then the same check (``faults.after_fault``): every client
got exactly one terminal answer, the gateway's in-flight and queued gauges are back to 0,
every engine's running count is back to 0, nothing was logged as an error; and at the
end (``serve_gateway``) one counted outcome per completion request sent.

Faults, and where each is tested:
- backend killed (SIGKILL) mid-stream: ``test_nothing_lost.py::test_backend_killed_mid_stream``
- backend frozen (SIGSTOP) mid-stream, ended by silence, by health, or by its /metrics
  showing no progress: ``test_backend_frozen_mid_stream``
- backend frozen before the first byte, found stalled by its /metrics, failed over:
  ``test_backend_frozen_before_first_byte_fails_over``
- slow /metrics, garbage /metrics: ``test_bad_metrics``
- all backends down: ``test_all_backends_down``
- vLLM's 503 engine busy: ``test_engine_busy.py``
- client-disconnect storm: ``test_client_disconnect_storm``
- slowloris on the headers and on the body, a 1 MiB header block, an oversized body,
  malformed JSON, a body cut short: ``test_client_fault``
- an invalid reload under load: ``test_invalid_reload_under_load``

The frozen backends are real emulator processes stopped with SIGSTOP; each test asserts
the request ended as it must while the process is still stopped, then resumes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from emulator.embedded import EmbeddedEmulator
from tests.integration.conftest import StartEmulator
from tests.integration.faults import (
    LONG,
    Answer,
    after_fault,
    error_log,
    post_answer,
    raw_answer,
    read_events,
    stream_answer,
)
from tests.integration.harness import (
    NO_LADDER,
    api_key,
    chat_body,
    chat_head,
    emulator_process,
    gateway_config,
    healthy,
    metric_sums,
    serve_gateway,
    wait_for,
)

pytestmark = pytest.mark.emulator

HEALTH_NEVER_AGAIN = {"interval_s": 3600.0, "timeout_s": 2.0}
"""One probe at start, none during the test: only the silence bound can end a stall."""


def stream(tokens: int) -> dict[str, Any]:
    return chat_body(tokens, stream=True)


@contextlib.asynccontextmanager
async def stopped(proc: Any) -> AsyncIterator[None]:
    """The process is frozen (SIGSTOP) for the block, resumed (SIGCONT) after it."""
    proc.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        proc.send_signal(signal.SIGCONT)


# -- a backend frozen ----------------------------------------------------------------------


SILENCE_OUT_OF_REACH = {"inter_token_s": 600.0, "first_token_s": 600.0}
NO_SCRAPES = {"interval_s": 60.0}
"""Scraped at start, then a minute later: the progress rule's floor is out of reach."""


@pytest.mark.parametrize("ended_by", ["silence", "health", "progress"])
async def test_backend_frozen_mid_stream(ended_by: str) -> None:
    with emulator_process(speed=10.0) as (proc, url), error_log() as errors:
        await wait_for(lambda: healthy(url), timeout_s=30.0, what="emulator process up")
        raw = gateway_config([url], NO_LADDER)
        if ended_by == "silence":
            raw["health"], raw["scrape"] = HEALTH_NEVER_AGAIN, NO_SCRAPES
            # a floor well above this loaded machine's hiccups, far below read_timeout_s; the
            # factor at 1, so a loaded machine's slow warm-up gaps cannot lift the bound past
            # the client's patience
            raw["stall"] = {"min_inter_token_s": 2.0, "inter_token_factor": 1.0}
        elif ended_by == "health":  # silence bounds out of reach, scrapes rare: only health
            raw["health"] = {"interval_s": 0.2, "timeout_s": 0.5, "failures_to_down": 2}
            raw["scrape"], raw["stall"] = NO_SCRAPES, SILENCE_OUT_OF_REACH
        else:  # silence bounds out of reach, health probes never again: only /metrics
            raw["health"], raw["stall"] = HEALTH_NEVER_AGAIN, SILENCE_OUT_OF_REACH
        async with serve_gateway(raw) as gw:
            client = gw.client()
            warm = await stream_answer(client, stream(16))  # the backend's gaps, measured
            async with client.stream("POST", "/v1/chat/completions", json=stream(LONG)) as r:
                assert r.status_code == 200
                lines, events = r.aiter_lines(), []
                while len(events) < 3:
                    line = await anext(lines)
                    if line.startswith("data: "):
                        events.append(line[len("data: ") :])
                async with stopped(proc):
                    answer = await read_events(lines, events)
                    assert answer.error_event, answer  # ended while the backend is stopped
                    if ended_by == "health":
                        assert gw.ctx.pool.health("emu-0").value == "down"
            failed = (await gw.metrics())[
                "sluicegate_upstream_errors_total{backend=emu-0,kind=stall}"
            ]
            assert failed == 1
            await after_fault(gw, [warm, answer], [url], errors)


async def test_backend_frozen_before_first_byte_fails_over() -> None:
    with (
        emulator_process(speed=10.0) as (proc0, url0),
        emulator_process(speed=10.0) as (_, url1),
        error_log() as errors,
    ):
        for url in (url0, url1):
            await wait_for(lambda u=url: healthy(u), timeout_s=30.0, what="emulator up")
        raw = gateway_config([url0, url1], NO_LADDER)
        raw["health"] = HEALTH_NEVER_AGAIN
        # the frozen backend keeps its last signals: it is still chosen (idle, first by name);
        # its failing scrapes show no progress, and only they can end the wait
        raw["scrape"] = {"interval_s": 0.1, "max_age_s": 3600.0}
        async with serve_gateway(raw) as gw:
            client = gw.client()
            warm = await asyncio.gather(
                stream_answer(client, stream(8)), stream_answer(client, stream(8))
            )
            async with stopped(proc0):
                answer = await stream_answer(client, stream(8))
                assert answer.last == "[DONE]", answer  # served by the other backend
                m = await gw.metrics()
                assert m["sluicegate_upstream_errors_total{backend=emu-0,kind=stall}"] == 1
            await after_fault(gw, [*warm, answer], [url0, url1], errors)


# -- /metrics misbehaving ------------------------------------------------------------------


def _break_metrics(emu: EmbeddedEmulator, mode: dict[str, str]) -> None:
    """``/metrics`` of ``emu`` answers slowly (until ``mode`` changes) or with garbage."""
    real = emu.runner.render_metrics

    async def metrics(_request: Request) -> Response:
        while mode["kind"] == "slow":
            await asyncio.sleep(0.05)
        if mode["kind"] == "garbage":
            return Response(b"\x00garbage{{{ not prometheus\n" * 50)
        return Response(real(), media_type="text/plain; version=0.0.4")

    emu.server.config.app.router.routes.insert(0, Route("/metrics", metrics, methods=["GET"]))


@pytest.mark.parametrize("kind", ["slow", "garbage"])
async def test_bad_metrics(kind: str, start_emulator: StartEmulator) -> None:
    emus = [start_emulator(speed=20.0, seed=i) for i in range(2)]
    raw = gateway_config([e.url for e in emus], NO_LADDER)
    raw["scrape"] = {"interval_s": 0.1, "max_age_s": 0.5}
    mode = {"kind": "ok"}
    with error_log() as errors:
        async with serve_gateway(raw) as gw:
            _break_metrics(emus[0], mode)
            mode["kind"] = kind
            await wait_for(lambda: _stale(gw.ctx, "emu-0"), what="emu-0's signals stale")
            client = gw.client()
            answers = await asyncio.gather(
                *(post_answer(client, chat_body(8)) for _ in range(4)),
                *(stream_answer(client, stream(8)) for _ in range(4)),
            )
            assert all(a.status == 200 for a in answers), answers
            mode["kind"] = "ok"
            await after_fault(gw, answers, [e.url for e in emus], errors)


def _stale(ctx: Any, backend: str) -> bool:
    return any(v.name == backend and v.stale for v in ctx.pool.snapshot().backends)


# -- every backend gone --------------------------------------------------------------------


async def test_all_backends_down(start_emulator: StartEmulator) -> None:
    emus = [start_emulator(speed=20.0, seed=i) for i in range(2)]
    with error_log() as errors:
        async with serve_gateway(gateway_config([e.url for e in emus], NO_LADDER)) as gw:
            for emu in emus:
                emu.stop()
            client = gw.client()
            answers = [
                await post_answer(client, chat_body(8)),
                await stream_answer(client, stream(8)),
            ]
            assert [a.status for a in answers] == [503, 503], answers
            await after_fault(gw, answers, [], errors)
            assert not any(e.runner.engine.has_work for e in emus)


# -- clients misbehaving -------------------------------------------------------------------


async def test_client_disconnect_storm(start_emulator: StartEmulator) -> None:
    emu = start_emulator(speed=20.0)
    policy = {"limit": {"type": "fixed", "parameters": {"max_in_flight": 4}}, **NO_LADDER}
    storm = 24
    with error_log() as errors:
        async with serve_gateway(gateway_config([emu.url], policy)) as gw:
            client = gw.client()

            async def hold() -> None:
                async with client.stream("POST", "/v1/chat/completions", json=stream(LONG)) as r:
                    async for _ in r.aiter_lines():
                        pass

            clients = [asyncio.ensure_future(hold()) for _ in range(storm)]
            await wait_for(
                lambda: gw.ctx.scheduler.stats().queued == storm - 4,
                what="4 streaming, the rest queued",
            )
            await wait_for(lambda: emu.runner.engine.num_running == 4, what="4 on the engine")
            for task in clients:
                task.cancel()
            await asyncio.gather(*clients, return_exceptions=True)
            await wait_for(gw.settled, what="every stormer's outcome counted")
            cancelled = (await gw.metrics())["sluicegate_outcomes_total"]
            assert cancelled == storm
            after = await stream_answer(client, stream(8))
            assert after.last == "[DONE]"
            await after_fault(gw, [after], [emu.url], errors)


Scenario = Callable[[httpx.AsyncClient, int], Any]


async def _slowloris_headers(_client: httpx.AsyncClient, port: int) -> Answer:
    return await raw_answer(port, [chat_head(port, 10)[:60]])  # the head never ends


async def _slowloris_body(_client: httpx.AsyncClient, port: int) -> Answer:
    return await raw_answer(port, [chat_head(port, 1000), b'{"model": "emu'])  # nor the body


async def _header_block_1mib(_client: httpx.AsyncClient, port: int) -> Answer:
    return await raw_answer(port, [chat_head(port, 2, x_big="a" * (1 << 20)) + b"{}"])


async def _oversized_body(client: httpx.AsyncClient, _port: int) -> Answer:
    return await post_answer(client, chat_body(8, content="x" * 8192))


async def _malformed_json(client: httpx.AsyncClient, _port: int) -> Answer:
    return await post_answer(client, json.dumps(chat_body(8)).encode()[:-3])


def _refused_client(gw: Any) -> httpx.AsyncClient:
    """A client whose requests are refused before scheduling: counted by the gateway as
    invalid, not as outcomes, so not by the harness's count of requests sent."""
    headers = {"authorization": f"Bearer {api_key('alice')}"}
    return httpx.AsyncClient(base_url=gw.base_url, headers=headers, timeout=30.0)


async def _body_cut_short(_client: httpx.AsyncClient, port: int) -> None:
    """The client sends part of its body and goes: nobody to answer; a 400 is counted."""
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(chat_head(port, 1000) + b'{"model": ')
    await writer.drain()
    writer.close()
    await writer.wait_closed()


CLIENT_FAULTS: dict[str, tuple[Scenario, int]] = {
    "slowloris_headers": (_slowloris_headers, 408),
    "slowloris_body": (_slowloris_body, 408),
    "header_block_1MiB": (_header_block_1mib, 431),
    "oversized_body": (_oversized_body, 413),
    "malformed_json": (_malformed_json, 400),
    "body_cut_short": (_body_cut_short, 400),
}


@pytest.mark.parametrize("fault", list(CLIENT_FAULTS))
async def test_client_fault(fault: str, start_emulator: StartEmulator) -> None:
    """The refusal has the right status, nothing is logged as an error, and the gateway
    served a well-behaved client alongside."""
    emu = start_emulator(speed=20.0)
    raw = gateway_config([emu.url], NO_LADDER)
    raw["server"].update(max_body_bytes=4096, header_timeout_s=0.5, body_timeout_s=0.5)
    scenario, status = CLIENT_FAULTS[fault]
    with error_log() as errors:
        async with serve_gateway(raw) as gw:
            client = gw.client()
            port = int(gw.base_url.rsplit(":", 1)[1])
            async with _refused_client(gw) as refused:
                answer, fine = await asyncio.gather(
                    scenario(refused, port), stream_answer(client, stream(8))
                )
            assert fine.last == "[DONE]"
            answers = [fine]
            if answer is not None:  # else the client left: the gateway's count is its answer
                assert answer.status == status, answer
                answers.append(answer)
            # every refusal is counted once, also those the HTTP protocol answers (408, 431)
            await wait_for(lambda: _invalid(gw, status), what=f"a {status} counted")
            await after_fault(gw, answers, [emu.url], errors)


async def _invalid(gw: Any, status: int) -> bool:
    return (await gw.metrics()).get(f"sluicegate_invalid_requests_total{{status={status}}}") == 1


# -- an operator's typo --------------------------------------------------------------------


async def test_invalid_reload_under_load(start_emulator: StartEmulator, tmp_path: Path) -> None:
    emu = start_emulator(speed=10.0)
    raw = gateway_config([emu.url], NO_LADDER)
    raw["reload"] = {"watch": True, "interval_s": 0.1}
    path = tmp_path / "sluicegate.yaml"
    with error_log() as errors:
        async with serve_gateway(raw, config_path=path) as gw:
            version = gw.ctx.runtime.version
            client = gw.client()
            load = [asyncio.ensure_future(stream_answer(client, stream(400))) for _ in range(6)]
            await wait_for(lambda: gw.ctx.scheduler.stats().in_flight >= 1, what="under load")
            broken = copy.deepcopy(raw)
            broken["policy"] = {"limit": {"type": "no-such-limit"}}
            path.write_text(json.dumps(broken))
            await wait_for(lambda: _reload_errors(gw), what="the invalid reload counted")
            answers = [*await asyncio.gather(*load), await stream_answer(client, stream(8))]
            assert all(a.last == "[DONE]" for a in answers), answers
            assert gw.ctx.runtime.version == version
            await after_fault(gw, answers, [emu.url], errors, ["config reload rejected"])


async def _reload_errors(gw: Any) -> bool:
    async with httpx.AsyncClient(base_url=gw.base_url) as c:
        m = metric_sums((await c.get("/metrics")).text)
    return m.get("sluicegate_config_reloads_total{result=error}", 0.0) >= 1
