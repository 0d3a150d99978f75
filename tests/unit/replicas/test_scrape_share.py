"""One scraper per backend across replicas, against a real redis-server: the election, the
hand-over of scrapes with their age, the takeover of a lapsed lead, Redis failing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import httpx
import pytest
import redis

from gateway.backends.scrape.engines import ENGINES
from gateway.backends.scrape.parse import parse_narrow, wanted_names
from gateway.backends.scrape.sample import extract
from gateway.backends.scrape.scraper import MetricsScraper, ScrapeSettings, ScrapeTarget
from gateway.config.schema import StateConfig
from gateway.replicas.redis_store import connect
from gateway.replicas.sample_codec import decode, encode
from gateway.replicas.scrape_share import SharedScrapes
from tests.redis_server import RedisServer
from tests.unit.policies.helpers import ManualClock
from tests.unit.scrape.conftest import FIXTURES

BACKENDS = ("a", "b")
BODY = (FIXTURES / "vllm-0.32-metrics-under-load.txt").read_text()  # running 8, waiting 12


@dataclass
class Replica:
    scraper: MetricsScraper
    share: SharedScrapes
    fetched: dict[str, int]
    """/metrics requests this replica sent, per backend."""

    async def tick(self) -> None:
        """What the scrape loop does once per interval: scrape what this replica scrapes."""
        for name in BACKENDS:
            if self.share.scrapes(name):
                await self.scraper.scrape_once(name)
        await asyncio.gather(*self.share._tasks)  # the publications


Make = Callable[[str], Replica]


@pytest.fixture
async def replicas(redis_server: RedisServer) -> AsyncIterator[tuple[Make, ManualClock]]:
    clock = ManualClock()
    made: list[Replica] = []

    def make(name: str, timeout_ms: int = 2000) -> Replica:
        fetched = dict.fromkeys(BACKENDS, 0)

        def handler(request: httpx.Request) -> httpx.Response:
            fetched[request.url.host] += 1
            return httpx.Response(200, text=BODY)

        client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
        targets = [ScrapeTarget(b, f"http://{b}/metrics", max_num_seqs=8) for b in BACKENDS]
        scraper = MetricsScraper(
            client, targets, clock=clock, settings=ScrapeSettings(interval_s=0.2)
        )
        cfg = StateConfig.model_validate(
            {"backend": "redis", "url": redis_server.url, "command_timeout_ms": timeout_ms}
        )
        share = SharedScrapes(cfg, connect(cfg), name, scraper, clock=clock)
        scraper.share = share
        made.append(Replica(scraper, share, fetched))
        return made[-1]

    yield make, clock
    for replica in made:
        await replica.share.aclose()


async def test_one_replica_scrapes_and_the_others_take_its_signals_with_their_age(
    replicas: tuple[Make, ManualClock],
) -> None:
    make, clock = replicas
    fleet = [make(f"replica-{i}") for i in range(3)]
    for replica in fleet:
        await replica.share.exchange()
    assert [sorted(r.share.leading) for r in fleet] == [["a", "b"], [], []]
    for _ in range(4):
        for replica in fleet:
            await replica.tick()
            await replica.share.exchange()
    assert [r.fetched for r in fleet] == [{"a": 4, "b": 4}, {"a": 0, "b": 0}, {"a": 0, "b": 0}]
    seen = fleet[2].scraper.signals("a", clock())
    assert (seen["running"], seen["waiting"], seen["stale"]) == (8.0, 12.0, False)
    clock.advance(0.7)  # older than 3 scrape intervals: the leader's last scrape is stale
    assert fleet[2].scraper.signals("a", clock())["stale"] is True


async def test_a_lead_that_lapses_is_taken_over(replicas: tuple[Make, ManualClock]) -> None:
    make, _ = replicas
    first, second = make("first"), make("second")
    await first.share.exchange()
    await second.share.exchange()
    assert (first.share.leading, second.share.leading) == ({"a", "b"}, set())
    # the leader stops renewing (it died): its lead lapses after 3 intervals (0.6 s)
    while second.share.leading != {"a", "b"}:
        await asyncio.sleep(0.05)
        await second.share.exchange()
    await second.tick()
    assert second.fetched == {"a": 1, "b": 1}
    await first.share.exchange()  # back: it follows the new leader
    assert first.share.leading == set()


async def test_while_redis_fails_every_replica_scrapes_for_itself(
    replicas: tuple[Make, ManualClock], redis_server: RedisServer
) -> None:
    make, _ = replicas
    fleet = [make("one", timeout_ms=100), make("two", timeout_ms=100)]
    for replica in fleet:
        await replica.share.exchange()
    redis_server.pause()
    try:
        for replica in fleet:
            await replica.share.exchange()
            await replica.tick()
    finally:
        redis_server.resume()
    assert [r.fetched for r in fleet] == [{"a": 1, "b": 1}, {"a": 1, "b": 1}]


def test_a_scrape_survives_the_trip_through_json() -> None:
    engine = ENGINES["vllm-0.32"]
    sample = extract(parse_narrow(BODY, wanted_names(engine)), engine)
    assert sample.histograms  # +Inf bounds among them
    assert decode(encode(sample)) == sample


async def test_an_unreadable_published_scrape_is_scraped_here(
    replicas: tuple[Make, ManualClock], redis_server: RedisServer
) -> None:
    make, _ = replicas
    leader, follower = make("leader"), make("follower")
    await leader.share.exchange()
    await leader.tick()
    await follower.share.exchange()
    assert not follower.share.scrapes("a")
    client = redis.Redis.from_url(redis_server.url)
    client.hset("sluicegate:signals:a", "sample", "not json")  # the default key prefix
    client.hset("sluicegate:signals:a", "at", 1)  # a new scrape, as far as its time says
    await follower.share.exchange()
    assert follower.share.scrapes("a") and not follower.share.scrapes("b")
    client.close()
