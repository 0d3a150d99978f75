"""SSE relay over a real loopback server: event by event, usage learned and stripped,
mid-stream failure ends with an error event, a client disconnect closes the upstream."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tests.unit.gateway.conftest import auth, over_loopback, wait_until
from tests.unit.gateway.fakes import FakeFleet

CHAT = "/v1/chat/completions"


def _stream_body(**extra: Any) -> dict[str, Any]:
    return {
        "model": "tiny",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        **extra,
    }


def _events(text: str) -> list[Any]:
    out = []
    for block in text.split("\n\n"):
        if block.startswith("data: "):
            data = block[len("data: ") :]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


async def test_events_are_relayed_as_they_arrive(config, fleet: FakeFleet) -> None:
    backend = fleet.backends["a"]
    backend.gates[1] = asyncio.Event()  # the second event waits until the client saw the first
    async with over_loopback(config, fleet) as h:
        async with h.client.stream("POST", CHAT, headers=auth(), json=_stream_body()) as r:
            assert r.status_code == 200
            assert r.headers["x-sluicegate-decision"] == "admit"
            lines = r.aiter_lines()
            first = await asyncio.wait_for(anext(lines), 2.0)
            assert first.startswith("data: ") and "t0" in first
            assert backend.sent == [0]
            backend.gates[1].set()
            rest = [line async for line in lines]
        assert "data: [DONE]" in rest


async def test_usage_chunk_is_stripped_unless_asked_and_usage_is_learned(config, fleet) -> None:
    backend = fleet.backends["a"]
    async with over_loopback(config, fleet) as h:
        r = await h.client.post(CHAT, headers=auth(), json=_stream_body())
        events = _events(r.text)
        assert backend.requests[-1]["stream_options"] == {"include_usage": True}
        assert not any(isinstance(e, dict) and "usage" in e for e in events)
        assert events[-1] == "[DONE]"

        r = await h.client.post(
            CHAT, headers=auth(), json=_stream_body(stream_options={"include_usage": True})
        )
        usage = [e["usage"] for e in _events(r.text) if isinstance(e, dict) and e.get("usage")]
        assert usage == [{"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}]

        stats = h.ctx.scheduler.stats()
        assert stats.in_flight == 0 and stats.charged_tokens == stats.released_tokens
        exposition = h.ctx.metrics.exposition().decode()
        # Both streams reported usage: 2 x 11 prompt tokens learned from the backend.
        assert 'sluicegate_actual_tokens_total{kind="prompt"} 22.0' in exposition


async def test_backend_dying_mid_stream_ends_with_error_event_and_releases(config, fleet) -> None:
    fleet.backends["a"].mode = "fail_mid_stream"
    async with over_loopback(config, fleet) as h:
        r = await h.client.post(CHAT, headers=auth(), json=_stream_body())
        events = _events(r.text)
        assert [e for e in events if isinstance(e, dict) and "choices" in e]  # bytes went out
        assert "error" in events[-1]
        assert h.ctx.scheduler.stats().in_flight == 0
        assert (
            'sluicegate_outcomes_total{class="interactive",outcome="failed",tenant="acme"} 1.0'
            in h.ctx.metrics.exposition().decode()
        )


async def test_client_disconnect_mid_stream_closes_upstream_and_frees_slot(config, fleet) -> None:
    backend = fleet.backends["a"]
    backend.gates[1] = asyncio.Event()  # upstream goes silent after the first event
    async with over_loopback(config, fleet) as h:
        async with h.client.stream("POST", CHAT, headers=auth(), json=_stream_body()) as r:
            await asyncio.wait_for(anext(r.aiter_lines()), 2.0)
            assert h.ctx.scheduler.stats().in_flight == 1
        # Leaving the block closes the connection while upstream is silent.
        await asyncio.wait_for(backend.closed.wait(), 2.0)
        await wait_until(lambda: h.ctx.scheduler.stats().in_flight == 0)
        assert 1 not in backend.sent
        assert 'outcome="cancelled"' in h.ctx.metrics.exposition().decode()


async def test_client_disconnect_while_waiting_for_first_byte(config, fleet) -> None:
    backend = fleet.backends["a"]
    backend.mode = "hold"
    async with over_loopback(config, fleet) as h:
        task = asyncio.ensure_future(h.client.post(CHAT, headers=auth(), json=_stream_body()))
        await asyncio.wait_for(backend.arrived.wait(), 2.0)
        assert h.ctx.scheduler.stats().in_flight == 1
        task.cancel()
        await wait_until(lambda: h.ctx.scheduler.stats().in_flight == 0)
        assert 'outcome="cancelled"' in h.ctx.metrics.exposition().decode()
