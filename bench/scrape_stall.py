"""Event-loop stall while a hostile /metrics body (near the caps) is scraped.

    python bench/scrape_stall.py

A ticker measures how late a 1 ms sleep wakes up, first with nothing else running, then
during five scrapes of a body just under the caps (max samples of known families, padded
with junk lines to just under max_body_bytes) through ``MetricsScraper`` (parse in a worker
thread), then while the same body is parsed inline on the loop. Prints the worst lateness.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import httpx

from gateway.backends.scrape.engines import VLLM_0_32
from gateway.backends.scrape.parse import DEFAULT_MAX_SAMPLES, parse_narrow, wanted_names
from gateway.backends.scrape.scraper import MetricsScraper, ScrapeSettings, ScrapeTarget


def hostile_body(limit: int) -> bytes:
    n = DEFAULT_MAX_SAMPLES - 10
    known = "".join(f'vllm:num_requests_running{{engine="{i}",x="{i}"}} 1\n' for i in range(n))
    junk = "junk_metric_line 1\n"
    pad = (limit - len(known) - 1024) // len(junk)
    return (known + junk * pad).encode()


async def worst_lateness_ms(work: Callable[[], Awaitable[object]]) -> float:
    worst, done = 0.0, False

    async def ticker() -> None:
        nonlocal worst
        while not done:
            start = time.perf_counter()
            await asyncio.sleep(0.001)
            worst = max(worst, time.perf_counter() - start - 0.001)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    for _ in range(5):
        await work()
        await asyncio.sleep(0.005)
    done = True
    await task
    return worst * 1000


async def main() -> None:
    settings = ScrapeSettings()
    body = hostile_body(settings.max_body_bytes)
    text = body.decode()
    client = httpx.AsyncClient(
        transport=httpx.MockTransport(lambda _: httpx.Response(200, content=body))
    )
    scraper = MetricsScraper(client, [ScrapeTarget("a", "http://a/metrics")], clock=time.monotonic)
    wanted = wanted_names(VLLM_0_32)

    async def idle() -> None:
        await asyncio.sleep(0.05)

    async def inline() -> None:
        parse_narrow(text, wanted)

    print(f"body {len(body) / 2**20:.2f} MiB, {DEFAULT_MAX_SAMPLES - 10} known samples")
    print(f"  idle loop:                   worst lateness {await worst_lateness_ms(idle):7.1f} ms")
    print(
        "  MetricsScraper (thread):     worst lateness "
        f"{await worst_lateness_ms(lambda: scraper.scrape_once('a')):7.1f} ms"
    )
    print(
        f"  parse inline on the loop:    worst lateness {await worst_lateness_ms(inline):7.1f} ms"
    )
    await client.aclose()


if __name__ == "__main__":
    asyncio.run(main())
