"""``sluicegate_event_loop_tasks``: the gateway's asyncio tasks, counted at scrape time, so a
task leaked per request shows from outside the process (the soak reads it at rest)."""

from __future__ import annotations

import asyncio

from prometheus_client.parser import text_string_to_metric_families

from gateway.config.schema import GatewayConfig
from tests.unit.gateway.conftest import Harness, in_process
from tests.unit.gateway.fakes import FakeFleet


async def _tasks(h: Harness) -> float:
    text = (await h.client.get("/metrics")).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "sluicegate_event_loop_tasks":
                return sample.value
    raise AssertionError("sluicegate_event_loop_tasks is not exported")


async def test_the_gauge_counts_the_tasks_alive(config: GatewayConfig, fleet: FakeFleet) -> None:
    async with in_process(config, fleet) as h:
        before = await _tasks(h)
        parked = [asyncio.ensure_future(asyncio.Event().wait()) for _ in range(7)]
        try:
            assert await _tasks(h) == before + 7
        finally:
            for task in parked:
                task.cancel()
            await asyncio.gather(*parked, return_exceptions=True)
        assert await _tasks(h) == before
