"""Decision records carry hashes, never text; metric labels stay bounded; degradations
are disclosed and applied to what is sent."""

from __future__ import annotations

import importlib.metadata
import json
import logging
from typing import Any

import pytest

import policies.engine.scheduler
from gateway.request.auth import key_digest
from tests.unit.gateway.conftest import auth, in_process
from tests.unit.gateway.fakes import API_KEY, OTHER_KEY, FakeFleet, make_config

CHAT = "/v1/chat/completions"
SECRET = "the launch code is 0000"


def _body(**extra: Any) -> dict[str, Any]:
    return {"model": "tiny", "messages": [{"role": "user", "content": SECRET}], **extra}


async def test_record_has_prompt_hash_not_prompt(config, fleet, caplog) -> None:
    caplog.set_level(logging.INFO, logger="sluicegate.records")
    async with in_process(config, fleet) as h:
        r = await h.client.post(CHAT, headers={**auth(), "x-request-id": "rec-1"}, json=_body())
        assert r.status_code == 200
    lines = [rec.getMessage() for rec in caplog.records if rec.name == "sluicegate.records"]
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert SECRET not in lines[0] and "x y z" not in lines[0]  # neither prompt nor completion
    assert len(record["prompt_sha256"]) == 64
    assert record["request_id"] == "rec-1" and record["outcome"] == "completed"
    assert record["decision"] == "admit" and record["tenant"] == "acme"
    assert record["prompt_tokens"] == 11 and record["completion_tokens"] == 3
    assert record["est_prompt_tokens"] >= 1


async def test_refusals_are_recorded_once_too(config, fleet, caplog) -> None:
    caplog.set_level(logging.INFO, logger="sluicegate.records")
    async with in_process(config, fleet) as h:
        await h.client.post(CHAT, headers=auth("sk-nope"), json=_body())
    records = [json.loads(r.getMessage()) for r in caplog.records if r.name == "sluicegate.records"]
    assert [(r["status"], r["outcome"]) for r in records] == [(401, "rejected")]


async def test_tenant_label_is_bounded(fleet: FakeFleet) -> None:
    config = make_config(server={"tenant_label_limit": 1})
    async with in_process(config, fleet) as h:
        await h.client.post(CHAT, headers=auth(API_KEY), json=_body())
        await h.client.post(CHAT, headers=auth(OTHER_KEY), json=_body())
        text = h.ctx.metrics.exposition().decode()
    decisions = [
        line for line in text.splitlines() if line.startswith("sluicegate_decisions_total{")
    ]
    assert any('tenant="acme"' in line for line in decisions)
    assert any('tenant="other"' in line for line in decisions)
    assert not any('tenant="beta"' in line for line in decisions)


async def test_gauges_from_scheduler_stats_are_exposed(config, fleet) -> None:
    async with in_process(config, fleet) as h:
        text = h.ctx.metrics.exposition().decode()
    for name in (
        "sluicegate_queue_depth",
        "sluicegate_backlog_tokens",
        "sluicegate_oldest_queued_age_seconds",
        "sluicegate_in_flight",
    ):
        assert f"\n{name} 0.0" in text


async def test_degradation_is_applied_and_disclosed(fleet: FakeFleet) -> None:
    ladder = {
        "steps": [{"name": "cap-all", "at": 0.0, "action": "cap_max_tokens", "max_tokens": 2}]
    }
    async with in_process(make_config(policy={"ladder": ladder}), fleet) as h:
        r = await h.client.post(CHAT, headers=auth(), json=_body(max_tokens=100))
        assert r.status_code == 200
        assert r.headers["x-sluicegate-decision"] == "degrade"
        assert r.headers["x-sluicegate-degraded"] == "cap-all"
        assert fleet.backends["a"].requests[-1]["max_tokens"] == 2


def test_key_digest_is_sha256_hex() -> None:
    assert key_digest("password") == (
        "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8"
    )


@pytest.mark.parametrize("retry_header", ["x-stainless-retry-count", "x-retry-attempt"])
async def test_retries_are_recognised_and_counted(config, fleet, retry_header: str) -> None:
    async with in_process(config, fleet) as h:
        await h.client.post(CHAT, headers={**auth(), retry_header: "1"}, json=_body())
        await h.client.post(CHAT, headers={**auth(), retry_header: "0"}, json=_body())
        text = h.ctx.metrics.exposition().decode()
    assert 'sluicegate_retries_total{class="interactive",tenant="acme"} 1.0' in text


async def test_every_request_ends_in_exactly_one_record(config, fleet, caplog) -> None:
    caplog.set_level(logging.INFO, logger="sluicegate.records")
    sent = {
        "ok-json": ({}, _body()),
        "ok-stream": ({}, _body(stream=True)),
        "bad-json": ({}, None),
        "unknown-model": ({}, {"model": "nope", "messages": [{"role": "user", "content": "x"}]}),
        "deadline-bad": ({"x-request-deadline-ms": "x"}, _body()),
    }
    async with in_process(config, fleet) as h:
        for request_id, (extra, body) in sent.items():
            headers = {**auth(), **extra, "x-request-id": request_id}
            if body is None:
                await h.client.post(CHAT, headers=headers, content=b"{")
            else:
                await h.client.post(CHAT, headers=headers, json=body)
        assert h.ctx.scheduler.stats().in_flight == 0
    ids = [
        json.loads(r.getMessage())["request_id"]
        for r in caplog.records
        if r.name == "sluicegate.records"
    ]
    assert sorted(ids) == sorted(sent)


async def test_build_info_says_which_core_the_scheduler_came_from(config, fleet) -> None:
    compiled = not policies.engine.scheduler.__file__.endswith(".py")  # an extension module: .so
    async with in_process(config, fleet) as h:
        text = h.ctx.metrics.exposition().decode()
    (line,) = [ln for ln in text.splitlines() if ln.startswith("sluicegate_build_info{")]
    assert f'core="{"compiled" if compiled else "interpreted"}"' in line
    assert f'version="{importlib.metadata.version("sluicegate")}"' in line
    assert line.endswith(" 1.0")
