from __future__ import annotations

import json

import httpx
from prometheus_client import CollectorRegistry, generate_latest

from gateway.backends.scrape.exposition import backends_admin, register_backend_metrics
from gateway.backends.scrape.scraper import MetricsScraper, ScrapeTarget
from policies.backends import Health
from tests.unit.policies.helpers import ManualClock


def scraper_with(body: str, clock: ManualClock) -> MetricsScraper:
    client = httpx.AsyncClient(
        transport=httpx.MockTransport(lambda _: httpx.Response(200, text=body))
    )
    targets = [
        ScrapeTarget("a", "http://a.test/metrics", max_num_seqs=8),
        ScrapeTarget("b", "http://b.test/metrics"),
    ]
    return MetricsScraper(client, targets, clock=clock)


async def test_backend_gauges_in_the_gateway_registry(under_load: str) -> None:
    clock = ManualClock()
    scraper = scraper_with(under_load, clock)
    await scraper.scrape_once("a")  # b never scraped
    registry = CollectorRegistry()
    health = {"a": Health.HEALTHY, "b": Health.DOWN}
    register_backend_metrics(registry, scraper, clock=clock, health=health.get)
    clock.advance(0.25)
    text = generate_latest(registry).decode()
    assert 'sluicegate_backend_waiting{backend="a"} 12.0' in text
    assert 'sluicegate_backend_running{backend="a"} 8.0' in text
    assert 'sluicegate_backend_capacity_estimate{backend="a"} 8.0' in text
    assert 'sluicegate_backend_signal_age_seconds{backend="a"} 0.25' in text
    assert 'sluicegate_backend_stale{backend="a"} 0.0' in text
    assert 'sluicegate_backend_stale{backend="b"} 1.0' in text
    assert 'sluicegate_backend_waiting{backend="b"}' not in text  # unknown, not zero
    assert 'sluicegate_backend_health{backend="b",state="down"} 1.0' in text
    assert 'sluicegate_backend_health{backend="a",state="down"} 0.0' in text
    assert 'sluicegate_backend_scrape_failures_total{backend="a"} 0.0' in text


async def test_admin_json_explains_the_numbers(under_load: str) -> None:
    clock = ManualClock()
    scraper = scraper_with(under_load, clock)
    await scraper.scrape_once("a")
    body = backends_admin(scraper, clock())
    json.dumps(body, allow_nan=False)  # serialisable as strict JSON
    a, b = body["backends"]
    assert a["signals"]["waiting"] == 12.0
    assert a["waiting_by_reason"] == {"capacity": 12.0, "deferred": 0.0}
    assert a["capacity"]["limited_by"] == "max_num_seqs"
    assert a["capacity"]["kv_cache_tokens"] == 131072.0
    assert a["scrape"]["consecutive_failures"] == 0
    assert b["signals"]["stale"] is True and "capacity" not in b
