from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from gateway.backends.scrape.scraper import (
    MetricsScraper,
    ScrapeSettings,
    ScrapeTarget,
    first_delays,
)
from tests.unit.policies.helpers import ManualClock

URL = "http://backend-a.test/metrics"
Handler = Callable[[httpx.Request], httpx.Response]


def scraper_for(
    handler: Handler,
    clock: ManualClock,
    on_scrape: Callable[[str], None] | None = None,
    **settings: Any,
) -> MetricsScraper:
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    target = ScrapeTarget("a", URL, max_num_seqs=8)
    return MetricsScraper(
        client, [target], clock=clock, settings=ScrapeSettings(**settings), on_scrape=on_scrape
    )


async def test_scrape_feeds_signals_and_they_go_stale(under_load: str) -> None:
    clock = ManualClock()
    scraper = scraper_for(lambda _: httpx.Response(200, text=under_load), clock, interval_s=0.5)
    assert scraper.signals("a", clock())["stale"] is True  # not scraped yet
    assert await scraper.scrape_once("a")
    fresh = scraper.signals("a", clock())
    assert (fresh["running"], fresh["waiting"], fresh["stale"]) == (8.0, 12.0, False)
    # capacity: prompts all in (5, 10] -> p90 9.5 tokens; 131072 / 9.5 >> 8 seqs
    assert fresh["capacity_estimate"] == 8.0
    clock.advance(1.6)  # > 3 x 0.5 s without a successful scrape
    assert scraper.signals("a", clock())["stale"] is True
    assert scraper.signals("unknown", clock()) == {}


@pytest.mark.parametrize(
    "response",
    [
        httpx.Response(200, text="<html>not metrics</html>"),
        httpx.Response(500, text="vllm:num_requests_running 1\n"),
        httpx.Response(200, content=b"\xff\xfe\x00 invalid utf-8"),
    ],
)
async def test_bad_responses_count_as_failures_and_never_raise(
    response: httpx.Response, under_load: str
) -> None:
    clock = ManualClock()
    bodies = iter([httpx.Response(200, text=under_load), response])
    scraper = scraper_for(lambda _: next(bodies), clock)
    assert await scraper.scrape_once("a")
    clock.advance(0.1)
    assert not await scraper.scrape_once("a")
    state = scraper.state("a")
    assert state is not None
    assert (state.consecutive_failures, state.failures_total) == (1, 1)
    assert scraper.signals("a", clock())["running"] == 8.0  # last good signal kept, aging


async def test_connection_error_is_a_failure() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    scraper = scraper_for(refuse, ManualClock())
    assert not await scraper.scrape_once("a")
    state = scraper.state("a")
    assert state is not None and state.last_error is not None
    assert "ConnectError" in state.last_error


async def test_huge_body_is_cut_off_at_the_cap() -> None:
    sent: list[int] = []

    async def endless() -> AsyncIterator[bytes]:
        line = b"vllm:num_requests_running 1\n" * 1000
        while True:
            sent.append(len(line))
            yield line

    scraper = scraper_for(
        lambda _: httpx.Response(200, content=endless()), ManualClock(), max_body_bytes=100_000
    )
    assert not await scraper.scrape_once("a")
    state = scraper.state("a")
    assert state is not None and "exceeds" in (state.last_error or "")
    assert sum(sent) < 200_000  # stopped reading soon after the cap


async def test_declared_huge_body_is_refused_before_reading() -> None:
    response = httpx.Response(200, headers={"content-length": str(10**9)}, content=b"x")
    scraper = scraper_for(lambda _: response, ManualClock(), max_body_bytes=1000)
    assert not await scraper.scrape_once("a")


async def test_slow_metrics_never_blocks_a_request(under_load: str) -> None:
    """A /metrics that never finishes: the scrape times out; requests flow meanwhile."""
    scrape_started, never = asyncio.Event(), asyncio.Event()

    async def trickle() -> AsyncIterator[bytes]:
        yield b"vllm:num_requests_running 1\n"
        scrape_started.set()
        await never.wait()
        yield b""

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            return httpx.Response(200, content=trickle())
        return httpx.Response(200, json={"ok": True})

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    scraper = MetricsScraper(
        client,
        [ScrapeTarget("a", URL)],
        clock=ManualClock(),
        settings=ScrapeSettings(interval_s=0.05, timeout_s=0.2),
    )
    running = asyncio.create_task(scraper.run())
    try:
        await asyncio.wait_for(scrape_started.wait(), timeout=5)
        # the request path: a completion call and the signal lookup, while the scrape hangs
        reply = await asyncio.wait_for(client.post("http://backend-a.test/v1/completions"), 5)
        assert reply.json() == {"ok": True}
        assert scraper.signals("a", 0.0)["stale"] is True
        assert not scrape_done(scraper)  # the scrape really was still in flight
    finally:
        scraper.stop()
        await asyncio.wait_for(running, timeout=5)
    state = scraper.state("a")
    assert state is not None and state.failures_total >= 1
    assert "Timeout" in (state.last_error or "")


def scrape_done(scraper: MetricsScraper) -> bool:
    state = scraper.state("a")
    return state is not None and state.last_duration_s is not None


async def test_run_loop_scrapes_until_stopped(under_load: str) -> None:
    scraped = asyncio.Event()
    scraper = scraper_for(
        lambda _: httpx.Response(200, text=under_load),
        ManualClock(),
        on_scrape=lambda name: scraped.set(),
        interval_s=0.05,
    )
    running = asyncio.create_task(scraper.run())
    await asyncio.wait_for(scraped.wait(), timeout=5)
    scraper.stop()
    await asyncio.wait_for(running, timeout=5)
    assert scraper.signals("a", 1000.0)["running"] == 8.0


def test_unknown_engine_is_refused_at_construction() -> None:
    client = httpx.AsyncClient(transport=httpx.MockTransport(lambda _: httpx.Response(200)))
    with pytest.raises(ValueError, match="unknown engine"):
        MetricsScraper(client, [ScrapeTarget("a", URL, engine="tgi-9")], clock=ManualClock())


async def test_scrapes_ask_for_an_uncompressed_body(under_load: str) -> None:
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("accept-encoding"))
        return httpx.Response(200, text=under_load)

    assert await scraper_for(handler, ManualClock()).scrape_once("a")
    assert seen == ["identity"]


async def test_a_body_flooded_with_known_series_is_refused() -> None:
    flood = "".join(f'vllm:num_requests_running{{engine="{i}"}} 1\n' for i in range(6_000))
    scraper = scraper_for(lambda _: httpx.Response(200, text=flood), ManualClock())
    assert not await scraper.scrape_once("a")
    state = scraper.state("a")
    assert state is not None and "samples of known families" in (state.last_error or "")


def test_scrape_loops_are_staggered_over_one_interval() -> None:
    # From a cold start backend 0 is scraped at once; after the gateway's startup scrape of
    # every backend, none is scraped again at once and the spacing stays one interval/count.
    assert first_delays(4, 1.0, scraped=False) == [0.0, 0.25, 0.5, 0.75]
    assert first_delays(4, 1.0, scraped=True) == [0.25, 0.5, 0.75, 1.0]
    assert first_delays(1, 0.5, scraped=True) == [0.5]
    assert first_delays(0, 0.5, scraped=True) == []
