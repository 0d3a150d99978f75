"""The async handoff over real HTTP in front of the emulator: a refused call that prefers
``respond-async`` gets 202 and a Location, and later the completion there; the same call
without the header still gets its 429; a pending job is cancelled by DELETE, bounded per
tenant, and expires when it cannot start; a result is let go after its TTL."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from emulator.embedded import EmbeddedEmulator
from tests.integration.harness import chat_body, gateway_config, serve_gateway, wait_for

pytestmark = pytest.mark.emulator

ASYNC = {"prefer": "wait=5, respond-async"}
OUTPUT = 60
BURST = 100
"""Alice's bucket holds one call (prompt + ``OUTPUT``), not two: her second call is refused
until the bucket refills (about half a second at 6000 tokens a minute)."""


def _config(emulator: EmbeddedEmulator) -> dict[str, Any]:
    slow = {"tokens_per_minute": 1, "burst_tokens": BURST}  # one call, then none for hours
    quota = {
        "type": "tenant_quota",
        "parameters": {
            "default": {"tokens_per_minute": 6000, "burst_tokens": BURST},
            "tenants": {"bob": slow, "carol": slow},
        },
    }
    handoff = {
        "enabled": True,
        "max_pending_per_tenant": 1,
        "max_pending_s": 4.0,
        "result_ttl_s": 3.0,
        "retry_interval_s": 0.05,
        "poll_interval_s": 0.1,
    }
    return gateway_config(
        [emulator.url],
        {"gates": [quota], "ladder": {"steps": []}},
        tenants=("alice", "bob", "carol"),
        async_jobs=handoff,
    )


async def _settled_job(client: httpx.AsyncClient, location: str) -> httpx.Response:
    """Poll ``location`` until the job has ended (no longer 202)."""
    last: list[httpx.Response] = []

    async def ended() -> bool:
        last[:] = [await client.get(location)]
        return last[0].status_code != 202

    await wait_for(ended, what="the async job ended")
    return last[0]


async def _handed_off(client: httpx.AsyncClient, body: dict[str, Any]) -> str:
    r = await client.post("/v1/chat/completions", json=body, headers=ASYNC)
    assert r.status_code == 202, r.text
    assert r.headers["preference-applied"] == "respond-async"
    assert int(r.headers["retry-after"]) >= 1
    location = r.headers["location"]
    assert location.startswith("/v1/async/job_")
    assert r.json()["status"] in {"pending", "running"}
    return location


async def test_async_call_returns_202_then_its_completion(emulator: EmbeddedEmulator) -> None:
    body = chat_body(OUTPUT, content="hi")
    async with serve_gateway(_config(emulator)) as gw:
        alice = gw.client("alice")
        assert (await alice.post("/v1/chat/completions", json=body)).status_code == 200
        plain = await alice.post("/v1/chat/completions", json=body)
        assert plain.status_code == 429, "without the header nothing changes"
        assert plain.headers["x-sluicegate-reason"] == "tenant_quota_exceeded"
        assert "preference-applied" not in plain.headers

        location = await _handed_off(alice, body)
        assert (await gw.client("bob").get(location)).status_code == 404, "another tenant's"
        done = await _settled_job(alice, location)
        assert done.status_code == 200, done.text
        completion = done.json()
        assert completion["object"] == "chat.completion"
        assert completion["usage"]["completion_tokens"] == OUTPUT
        assert done.headers["x-sluicegate-async-status"] == "done"

        streamed = await _handed_off(alice, {**body, "stream": True})
        answer = await _settled_job(alice, streamed)
        assert answer.headers["content-type"].startswith("application/json")
        assert answer.json()["usage"]["completion_tokens"] == OUTPUT, "run whole, not streamed"

        await wait_for(lambda: _gone(alice, location), what="the result dropped after its TTL")
        m = await gw.metrics()
        assert m["sluicegate_async_jobs_queued_total"] == 2
        assert m["sluicegate_async_jobs_ended_total{state=done,tenant=alice}"] == 2
        assert m["sluicegate_async_results_dropped_total{fetched=true}"] >= 1


async def test_pending_jobs_are_cancelled_bounded_and_expire(emulator: EmbeddedEmulator) -> None:
    body = chat_body(OUTPUT, content="hi")
    async with serve_gateway(_config(emulator)) as gw:
        bob, carol = gw.client("bob"), gw.client("carol")
        for client in (bob, carol):  # each spends the one call its bucket holds
            assert (await client.post("/v1/chat/completions", json=body)).status_code == 200

        pending = await _handed_off(bob, body)
        full = await bob.post("/v1/chat/completions", json=body, headers=ASYNC)
        assert full.status_code == 429, "bob's async queue holds one job"
        assert full.headers["x-sluicegate-async"] == "tenant_queue_full"
        assert (await bob.delete(pending)).status_code == 204
        assert (await bob.get(pending)).status_code == 404

        sdk = gw.openai("carol")  # as the README shows it
        raw = await sdk.chat.completions.with_raw_response.create(
            model=body["model"],
            messages=body["messages"],
            max_tokens=OUTPUT,
            extra_headers={"Prefer": "respond-async"},
        )
        assert raw.http_response.status_code == 202
        never = raw.headers["location"]
        expired = await _settled_job(carol, never)
        assert expired.status_code == 503
        assert expired.json()["error"]["code"] == "async_job_expired"

        m = await gw.metrics()
        assert m["sluicegate_async_jobs_ended_total{state=cancelled,tenant=bob}"] == 1
        assert m["sluicegate_async_jobs_ended_total{state=expired,tenant=carol}"] == 1
        assert m["sluicegate_async_jobs_refused_total"] == 1
        assert m["sluicegate_async_jobs_pending"] == 0


async def _gone(client: httpx.AsyncClient, location: str) -> bool:
    return (await client.get(location)).status_code == 404
