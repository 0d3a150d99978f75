"""The scraper's bookkeeping to the exact amount: failure counts across a recovery, how long
a scrape took, when signals turn stale, the body cap at its very size, the settings' bounds,
and the staggered first scrapes."""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator

import httpx
import pytest

from gateway.backends.scrape.scraper import (
    MetricsScraper,
    ScrapeSettings,
    ScrapeTarget,
    first_delays,
)
from tests.unit.policies.helpers import ManualClock

BODY = b"vllm:num_requests_running 3\n"


def _scraper(
    responses: list[httpx.Response], clock: ManualClock, scraped: list[str], **settings: float
) -> MetricsScraper:
    def answer(_: httpx.Request) -> httpx.Response:
        clock.advance(0.125)  # the scrape takes this long
        return responses.pop(0)

    client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    targets = [ScrapeTarget("a", "http://a.test/metrics"), ScrapeTarget("b", "http://b.test/m")]
    return MetricsScraper(
        client, targets, clock=clock, on_scrape=scraped.append, settings=ScrapeSettings(**settings)
    )  # type: ignore[arg-type]


async def test_failures_count_until_a_scrape_succeeds_and_the_total_stays() -> None:
    clock, scraped = ManualClock(), list[str]()
    bad = [httpx.Response(503, content=b"busy") for _ in range(3)]
    scraper = _scraper([*bad, httpx.Response(200, content=BODY)], clock, scraped, interval_s=1.0)
    for _ in range(3):
        assert not await scraper.scrape_once("a")
    state = scraper.state("a")
    assert state is not None
    assert (state.consecutive_failures, state.failures_total) == (3, 3)
    assert (state.last_error, state.last_success_at) == ("ScrapeError: HTTP 503", None)
    assert scraper.changes_at("a") is None and scraper.changes_at("zz") is None
    assert await scraper.scrape_once("a")
    assert (state.consecutive_failures, state.failures_total, state.last_error) == (0, 3, None)
    assert state.last_success_at == clock.now and state.last_duration_s == 0.125
    assert state.last_attempt_at == clock.now - 0.125
    assert scraped == ["a", "a", "a", "a"]
    at = clock.now + 3.0  # stale after 3 x 1 s
    assert scraper.changes_at("a") == math.nextafter(at, math.inf)
    assert scraper.signals("a", at)["stale"] is False
    assert scraper.signals("a", scraper.changes_at("a"))["stale"] is True  # type: ignore[arg-type]
    assert scraper.state("b") is not None and scraper.state("zz") is None


async def _chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def test_a_body_at_the_cap_is_read_and_one_byte_more_is_refused() -> None:
    clock, scraped = ManualClock(), list[str]()
    size = len(BODY)
    responses = [
        httpx.Response(200, content=_chunks(BODY[:10], BODY[10:])),  # no length declared
        httpx.Response(200, content=_chunks(BODY, b"\n")),
        httpx.Response(200, content=BODY, headers={"content-length": str(size + 1)}),
    ]
    scraper = _scraper(responses, clock, scraped, max_body_bytes=size)
    assert await scraper.scrape_once("a")
    assert not await scraper.scrape_once("a")
    state = scraper.state("a")
    assert state is not None and state.last_error == f"ScrapeError: body exceeds {size} bytes"
    assert not await scraper.scrape_once("a")
    assert state.last_error == f"ScrapeError: body of {size + 1} bytes exceeds {size}"
    assert state.failures_total == 2


def test_settings_bounds_and_the_default_staleness() -> None:
    assert ScrapeSettings(interval_s=60.0).stale_after_s == 180.0
    assert ScrapeSettings(interval_s=0.25, max_age_s=2.0).stale_after_s == 2.0
    for bad in ({"interval_s": 0.0}, {"interval_s": 60.5}, {"timeout_s": 0.0}, {"window_s": 0.0}):
        with pytest.raises(ValueError):
            ScrapeSettings(**bad)


def test_first_scrapes_are_spread_over_one_interval() -> None:
    assert first_delays(4, 2.0, scraped=False) == [0.0, 0.5, 1.0, 1.5]
    assert first_delays(4, 2.0, scraped=True) == [0.5, 1.0, 1.5, 2.0]
    assert first_delays(1, 2.0, scraped=True) == [2.0]
    assert first_delays(0, 2.0, scraped=False) == []


async def test_a_long_error_is_kept_to_200_characters() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("x" * 500, request=request)

    client = httpx.AsyncClient(transport=httpx.MockTransport(refuse))
    scraper = MetricsScraper(client, [ScrapeTarget("a", "http://a.test/m")], clock=ManualClock())
    assert not await scraper.scrape_once("a")
    state = scraper.state("a")
    assert state is not None and state.last_error == "ConnectError: " + "x" * 186


async def test_failures_are_logged_at_the_1st_10th_and_100th_in_a_row(
    caplog: pytest.LogCaptureFixture,
) -> None:
    responses = [httpx.Response(503) for _ in range(100)]
    scraper = _scraper(responses, ManualClock(), [])
    with caplog.at_level(logging.WARNING, logger="sluicegate.scrape"):
        for _ in range(100):
            await scraper.scrape_once("a")
    assert [r.n for r in caplog.records if r.msg == "scrape failed"] == [1, 10, 100]  # type: ignore[attr-defined]


def test_a_window_under_a_second_is_allowed() -> None:
    assert ScrapeSettings(window_s=0.5, timeout_s=0.5).window_s == 0.5


def test_the_defaults_are_those_docs_signals_md_states() -> None:
    """A 30 s window, a 1 s deadline per scrape, a 2 MiB body cap (docs/signals.md)."""
    s = ScrapeSettings()
    assert (s.window_s, s.timeout_s, s.max_body_bytes) == (30.0, 1.0, 2 * 2**20)
