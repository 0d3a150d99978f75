"""Agent runs at the gateway: the run headers validated, and ``DELETE /v1/runs/{id}``
ending a run: its queued call refused at once, its stream in flight cut upstream, the
run invisible to other tenants, every call ending once."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from tests.unit.gateway.conftest import CHAT, Harness, auth, chat_body, over_loopback, wait_until
from tests.unit.gateway.fakes import OTHER_KEY, FakeBackend, FakeFleet, make_config

RUNS_ON = {"runs": {"enabled": True}}


def _run(run_id: str = "run-1", **hints: str) -> dict[str, str]:
    return {**auth(), "x-agent-run-id": run_id, **hints}


@pytest.mark.parametrize(
    ("headers", "param"),
    [
        ({"x-agent-run-calls": "3"}, "X-Agent-Run-Calls"),  # a hint without a run id
        ({"x-agent-run-id": "r", "x-agent-run-calls": "0"}, "X-Agent-Run-Calls"),
        ({"x-agent-run-id": "r", "x-agent-run-tokens": "many"}, "X-Agent-Run-Tokens"),
        ({"x-agent-run-id": "r", "x-agent-run-branches": "-2"}, "X-Agent-Run-Branches"),
        ({"x-agent-run-id": "r", "x-agent-run-deadline-ms": "0"}, "X-Agent-Run-Deadline-Ms"),
        ({"x-agent-run-id": "x" * 129}, "X-Agent-Run-Id"),
    ],
)
async def test_bad_run_headers_get_400_naming_the_header(
    headers: dict[str, str], param: str
) -> None:
    fleet = FakeFleet(FakeBackend("a"))
    async with over_loopback(make_config(policy=RUNS_ON), fleet) as h:
        r = await h.client.post(CHAT, headers={**auth(), **headers}, json=chat_body())
        assert r.status_code == 400
        assert r.json()["error"]["param"] == param
        assert fleet.backends["a"].requests == []


async def _read_all(stream: Any) -> bytes:
    return b"".join([chunk async for chunk in stream.aiter_raw()])


async def _stream_holding_the_slot(h: Harness, run_id: str) -> tuple[Any, Any]:
    """A stream of run ``run_id`` that holds backend a's only slot after its first event."""
    h.backend("a").gates[1] = asyncio.Event()
    ctx = h.client.stream("POST", CHAT, headers=_run(run_id), json=chat_body(True))
    response = await ctx.__aenter__()
    await wait_until(lambda: h.backend("a").sent == [0])
    return ctx, response


async def test_delete_ends_the_run_queued_call_refused_stream_cut(caplog: Any) -> None:
    caplog.set_level(logging.INFO, logger="sluicegate.records")
    fleet = FakeFleet(FakeBackend("a"))
    async with over_loopback(make_config(policy=RUNS_ON), fleet) as h:
        holder, stream = await _stream_holding_the_slot(h, "run-1")
        queued = asyncio.ensure_future(h.client.post(CHAT, headers=_run("run-1"), json=chat_body()))
        await wait_until(lambda: h.ctx.scheduler.stats().queued == 1)
        other = await h.client.delete("/v1/runs/run-1", headers=auth(OTHER_KEY))
        assert other.status_code == 404  # another tenant's run is not found
        state = await h.client.get("/v1/runs/run-1", headers=auth())
        assert state.json()["in_flight"] == 1 and state.json()["queued"] == 1
        r = await h.client.delete("/v1/runs/run-1", headers=auth())
        assert r.status_code == 200 and r.json()["reason"] == "run_cancelled"
        refused = await asyncio.wait_for(queued, 3.0)
        assert refused.status_code == 409
        assert refused.json()["error"]["code"] == "run_cancelled"
        assert refused.headers["x-should-retry"] == "false"
        rest = await asyncio.wait_for(_read_all(stream), 3.0)
        await holder.__aexit__(None, None, None)
        assert b'"type": "run_ended"' in rest
        await asyncio.wait_for(h.backend("a").closed.wait(), 3.0)  # the upstream was cut
        await wait_until(lambda: h.ctx.scheduler.stats().in_flight == 0)
        late = await h.client.post(CHAT, headers=_run("run-1"), json=chat_body())
        assert late.status_code == 409
        exposition = h.ctx.metrics.exposition().decode()
        assert 'sluicegate_runs_ended_total{end="cancelled",tenant="acme"} 1.0' in exposition
    records = [json.loads(line) for m in caplog.messages for line in m.splitlines()]
    run_records = [r for r in records if "run_sha256" in r]
    assert len(run_records) == 3  # the stream, the queued call, the late call: once each
    assert len({r["request_id"] for r in run_records}) == 3
    assert {r["outcome"] for r in run_records} == {"cancelled", "rejected"}
    assert all("run-1" not in json.dumps(r) for r in run_records)


async def test_a_run_deadline_cuts_its_stream_with_nothing_else_happening() -> None:
    """No scrapes, nothing queued: the run's deadline alone must wake the dispatcher."""
    fleet = FakeFleet(FakeBackend("a"))
    async with over_loopback(make_config(policy=RUNS_ON), fleet) as h:
        deadline = {"x-agent-run-deadline-ms": "200"}
        h.backend("a").gates[1] = asyncio.Event()
        ctx = h.client.stream("POST", CHAT, headers=_run("soon", **deadline), json=chat_body(True))
        stream = await ctx.__aenter__()
        rest = await asyncio.wait_for(_read_all(stream), 3.0)
        await ctx.__aexit__(None, None, None)
        assert b'"type": "run_ended"' in rest
        await asyncio.wait_for(h.backend("a").closed.wait(), 3.0)
        state = (await h.client.get("/v1/runs/soon", headers=auth())).json()
        assert state["reason"] == "run_deadline_expired"


async def test_an_idle_run_ends_completed_with_nothing_else_happening() -> None:
    """No scrapes, nothing queued: the release of the run's last call arms its idle timer."""
    fleet = FakeFleet(FakeBackend("a"))
    policy = {"runs": {"enabled": True, "idle_timeout_s": 0.2}}
    async with over_loopback(make_config(policy=policy), fleet) as h:
        r = await h.client.post(CHAT, headers=_run("brief"), json=chat_body())
        assert r.status_code == 200
        await wait_until(lambda: h.ctx.scheduler.runs.stats().open_runs == 0)
        state = (await h.client.get("/v1/runs/brief", headers=auth())).json()
        assert state["reason"] == "run_ended"
        ended = h.ctx.metrics.exposition().decode()
        assert 'sluicegate_runs_ended_total{end="completed",tenant="acme"} 1.0' in ended
        assert 'sluicegate_run_latency_seconds_count{tenant="acme"} 1.0' in ended
        # its agent was only slower than the timeout (a long tool call): it goes on
        late = await h.client.post(CHAT, headers=_run("brief"), json=chat_body())
        assert late.status_code == 200
        state = (await h.client.get("/v1/runs/brief", headers=auth())).json()
        assert state["status"] == "open"
