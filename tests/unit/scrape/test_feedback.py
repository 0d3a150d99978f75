"""The loop closed: what vLLM's /metrics says changes a decision; the client count does not."""

from __future__ import annotations

import re

import httpx

from gateway.backends.scrape.scraper import MetricsScraper, ScrapeTarget
from policies.backends import BackendView
from policies.contracts import BackendLoad
from policies.registry import build_policy
from tests.unit.policies.helpers import ManualClock

_WAITING = re.compile(r"^(vllm:num_requests_waiting(?:_by_reason)?\{.*\}) \S+$", re.M)


async def view_after_scrape(body: str, clock: ManualClock) -> BackendView:
    client = httpx.AsyncClient(
        transport=httpx.MockTransport(lambda _: httpx.Response(200, text=body))
    )
    scraper = MetricsScraper(client, [ScrapeTarget("a", "http://a.test/metrics", 8)], clock=clock)
    assert await scraper.scrape_once("a")
    signals = scraper.signals("a", clock())
    return BackendView(name="a", models=frozenset({"tiny"}), max_num_seqs=8, **signals)  # type: ignore[arg-type]


async def test_server_reported_queue_closes_the_backend_at_the_same_client_count(
    under_load: str,
) -> None:
    limit = build_policy(None).limit  # the default: server_signals
    state = limit.new_state()
    ours = BackendLoad(in_flight=2)  # the same client-side count in both cases
    calm = await view_after_scrape(_WAITING.sub(r"\1 0.0", under_load), ManualClock())
    busy = await view_after_scrape(under_load, ManualClock())  # vLLM reports 12 waiting
    assert (calm.waiting, busy.waiting) == (0.0, 12.0)
    assert limit.has_room(state, calm, ours)
    assert not limit.has_room(state, busy, ours)


async def test_a_backend_whose_signal_ages_out_is_closed(under_load: str) -> None:
    limit = build_policy(None).limit
    calm = _WAITING.sub(r"\1 0.0", under_load)
    client = httpx.AsyncClient(
        transport=httpx.MockTransport(lambda _: httpx.Response(200, text=calm))
    )
    clock = ManualClock()
    scraper = MetricsScraper(client, [ScrapeTarget("a", "http://a.test/metrics")], clock=clock)
    assert await scraper.scrape_once("a")

    def view() -> BackendView:
        return BackendView(name="a", models=frozenset(), **scraper.signals("a", clock()))  # type: ignore[arg-type]

    assert limit.has_room(limit.new_state(), view(), BackendLoad(in_flight=2))
    clock.advance(3 * scraper.settings.interval_s + 0.01)  # no successful scrape since
    assert view().stale
    assert not limit.has_room(limit.new_state(), view(), BackendLoad(in_flight=2))
