"""``GET /admin/backends`` and the backend gauges to the exact amount, from a body whose every
number is known: phase means and shares, quantiles with their buckets, the capacity
derivation, the scrape state, and failures counted per backend."""

from __future__ import annotations

import re

import httpx
from prometheus_client import CollectorRegistry, generate_latest

from gateway.backends.scrape.exposition import backends_admin, register_backend_metrics
from gateway.backends.scrape.scraper import MetricsScraper, ScrapeTarget
from policies.backends import Health
from tests.unit.policies.helpers import ManualClock


def _hist(name: str, bound: float, total: float) -> str:
    return (
        f'vllm:{name}_bucket{{le="{bound}"}} 4\nvllm:{name}_bucket{{le="+Inf"}} 4\n'
        f"vllm:{name}_sum {total}\nvllm:{name}_count 4\n"
    )


BODY = (
    'vllm:num_requests_running 1\nvllm:cache_config_info{kv_cache_size_tokens="1000"} 1\n'
    'vllm:request_queue_time_seconds_bucket{le="0.5"} 2\n'
    'vllm:request_queue_time_seconds_bucket{le="+Inf"} 4\n'
    "vllm:request_queue_time_seconds_sum 3\nvllm:request_queue_time_seconds_count 4\n"
    + _hist("request_prefill_time_seconds", 1.0, 2.0)
    + _hist("request_decode_time_seconds", 10.0, 8.0)
    + _hist("e2e_request_latency_seconds", 10.0, 16.0)
    + _hist("request_prompt_tokens", 100.0, 200.0)
    + _hist("request_generation_tokens", 1000.0, 2000.0)
)


ZERO = re.sub(r"(_bucket\{[^}]*\}|_sum|_count) \S+", r"\1 0", BODY)
"""The same server before any request finished."""


def _scraper(clock: ManualClock) -> MetricsScraper:
    bodies = [ZERO, BODY]

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.host == "b.test":
            return httpx.Response(500)
        return httpx.Response(200, text=bodies.pop(0) if len(bodies) > 1 else bodies[0])

    client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    targets = [
        ScrapeTarget("a", "http://a.test/metrics", max_num_seqs=8),
        ScrapeTarget("b", "http://b.test/metrics"),
    ]
    return MetricsScraper(client, targets, clock=clock)


async def _scraped(clock: ManualClock) -> MetricsScraper:
    """``_scraper`` after a's two scrapes 4 s apart (a window) and b's first, failed one."""
    scraper = _scraper(clock)
    await scraper.scrape_once("a")
    clock.advance(4.0)
    await scraper.scrape_once("a")
    await scraper.scrape_once("b")
    return scraper


async def test_admin_json_holds_every_number_behind_the_signals() -> None:
    clock = ManualClock()
    scraper = await _scraped(clock)
    clock.advance(0.5)
    body = backends_admin(scraper, clock(), {"a": Health.DEGRADED}.get)
    assert (body["at"], body["stale_after_s"]) == (clock(), 1.5)
    a, b = body["backends"]
    assert (a["name"], a["health"], b["health"]) == ("a", "degraded", None)
    assert a["phases"] == {
        "requests": 4.0,
        "seconds": {"queue": 0.75, "prefill": 0.5, "decode": 2.0, "e2e": 4.0},
        "shares": {"queue": 0.1875, "prefill": 0.125, "decode": 0.5},
    }
    assert a["latency"]["queue_time"] == {
        "p50": {"value": 0.5, "bucket": [0.0, 0.5], "in_first_bucket": True, "in_overflow": False},
        "p90": {"value": 0.5, "bucket": [0.5, None], "in_first_bucket": False, "in_overflow": True},
        "p99": {"value": 0.5, "bucket": [0.5, None], "in_first_bucket": False, "in_overflow": True},
    }
    assert a["latency"]["e2e_latency"]["p50"]["value"] == 5.0 and "ttft" not in a["latency"]
    assert a["capacity"] == {
        "value": 8.0,
        "limited_by": "max_num_seqs",
        "basis": "window",
        "kv_cache_tokens": 1000.0,
        "p90_prompt_tokens": 90.0,
        "kv_bound": 1000.0 / 90.0,
        "max_num_seqs": 8,
        "p90_output_tokens": 900.0,
        "kv_bound_with_output": 1000.0 / 990.0,
    }
    assert (a["window_s"], a["waiting_by_reason"], a["rates_per_s"]) == (4.0, {}, {})
    assert a["scrape"] == {
        "engine": "vllm-0.32",
        "metrics_url": "http://a.test/metrics",
        "last_success_age_s": 0.5,
        "last_duration_s": 0.0,
        "consecutive_failures": 0,
        "failures_total": 0,
        "last_error": None,
    }
    assert b["scrape"]["last_success_age_s"] is None and b["scrape"]["failures_total"] == 1
    assert "phases" not in b and b["signals"] == {"signal_age_s": None, "stale": True}


async def test_gauges_and_failures_per_backend_without_a_health_lookup() -> None:
    clock = ManualClock()
    scraper = await _scraped(clock)
    await scraper.scrape_once("b")
    registry = CollectorRegistry()
    register_backend_metrics(registry, scraper, clock=clock)
    clock.advance(2.0)
    text = generate_latest(registry).decode()
    lines = {line for line in text.splitlines() if not line.startswith("#")}
    assert lines == {
        'sluicegate_backend_running{backend="a"} 1.0',
        'sluicegate_backend_capacity_estimate{backend="a"} 8.0',
        'sluicegate_backend_queue_time_p90_seconds{backend="a"} 0.5',
        'sluicegate_backend_signal_age_seconds{backend="a"} 2.0',
        'sluicegate_backend_stale{backend="a"} 1.0',
        'sluicegate_backend_stale{backend="b"} 1.0',
        'sluicegate_backend_scrape_failures_total{backend="a"} 0.0',
        'sluicegate_backend_scrape_failures_total{backend="b"} 2.0',
    }
    assert "sluicegate_backend_health" not in text
