"""One scraper per backend across the fleet, elected through Redis.

Every ``interval_s / 2`` each replica makes one call (``scrape_scripts.EXCHANGE``): it takes
the lead of every backend nobody leads (``SET NX PX``, ``3 x interval_s``), renews those it
leads, and reads the newest published scrape of the others. The leader scrapes as one
replica does and publishes each scrape with its time on Redis's clock; the others take it
with its age (``MetricsScraper.ingest``), so a leader that died leaves signals that go stale
and the limits treat the backend as saturated, as they do for a backend nobody can scrape,
until another replica's next call takes the lapsed lead. While Redis does not answer every
replica scrapes every backend itself again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis

from gateway.backends.scrape.sample import MetricsSample
from gateway.backends.scrape.scraper import MetricsScraper
from gateway.config.schema import StateConfig
from gateway.replicas import scrape_scripts
from gateway.replicas.sample_codec import decode, encode

log = logging.getLogger("sluicegate.state")

LEAD_INTERVALS = 3
"""A lead lapses after this many scrape intervals without renewal."""
KEEP_INTERVALS = 20
"""A published scrape is deleted after this many intervals without a new one."""


class SharedScrapes:
    def __init__(
        self,
        cfg: StateConfig,
        client: aioredis.Redis,
        replica_id: str,
        scraper: MetricsScraper,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``clock``: the scraper's (its observations' times are on it)."""
        self._cfg, self._client, self._scraper = cfg, client, scraper
        self.replica_id, self._clock = replica_id, clock
        self._exchange = client.register_script(scrape_scripts.EXCHANGE)
        self._publish = client.register_script(scrape_scripts.PUBLISH)
        self._interval_ms = int(scraper.settings.interval_s * 1000)
        self.leading: set[str] = set()
        self.answering = False
        """Redis answered the last exchange (False: every backend is scraped here)."""
        self._seen_at: dict[str, int] = {}
        self._unreadable: set[str] = set()
        """Backends whose published scrape this replica could not read: it scrapes them."""
        self._tasks: set[asyncio.Task[None]] = set()

    def _key(self, kind: str, name: str) -> str:
        return f"{self._cfg.key_prefix}{kind}:{name}"

    def scrapes(self, name: str) -> bool:
        return not self.answering or name in self.leading or name in self._unreadable

    def scraped(self, name: str, sample: MetricsSample, at: float) -> None:
        if self.answering and name in self.leading:
            task = asyncio.ensure_future(self._send(name, sample, at))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send(self, name: str, sample: MetricsSample, at: float) -> None:
        age_ms = max(0, int((self._clock() - at) * 1000))
        keys = [self._key("scrape-lead", name), self._key("signals", name)]
        args: list[str | int] = [
            self.replica_id,
            age_ms,
            encode(sample),
            self._interval_ms * KEEP_INTERVALS,
        ]
        try:
            if not await self._call(self._publish(keys=keys, args=args)):
                self.leading.discard(name)  # another replica took the lead meanwhile
        except Exception as exc:
            self._lost(exc)

    async def run(self) -> None:
        while True:
            try:
                await self.exchange()
            except Exception as exc:  # a bug here must not leave the backends unscraped
                log.exception("scrape sharing failed")
                self._lost(exc)
            await asyncio.sleep(self._interval_ms / 2000)

    async def exchange(self) -> None:
        """Takes or renews the leads, ingests the other leaders' newest scrapes."""
        names = list(self._scraper.names)
        keys: list[str] = []
        for name in names:
            keys += [self._key("scrape-lead", name), self._key("signals", name)]
        try:
            flat = await self._call(
                self._exchange(
                    keys=keys, args=[self.replica_id, self._interval_ms * LEAD_INTERVALS]
                )
            )
        except Exception as exc:
            self._lost(exc)
            return
        if not self.answering:
            log.info("scrape sharing: Redis answers; one replica scrapes each backend")
        self.answering = True
        now = self._clock()
        for i, name in enumerate(names):
            leads, age_ms, made_ms, sample = flat[4 * i : 4 * i + 4]
            if int(leads):
                self.leading.add(name)
                continue
            self.leading.discard(name)
            if int(age_ms) >= 0 and self._seen_at.get(name) != int(made_ms):
                self._seen_at[name] = int(made_ms)  # the same scrape is taken once
                self._ingest(name, sample, now - int(age_ms) / 1000)

    def _ingest(self, name: str, sample: bytes, at: float) -> None:
        try:
            decoded = decode(sample)
        except (ValueError, KeyError, TypeError) as exc:
            if name not in self._unreadable:
                log.warning(
                    "scrape sharing: unreadable scrape of %s (%s); scraping it here",
                    name,
                    type(exc).__name__,
                )
            self._unreadable.add(name)
            return
        self._unreadable.discard(name)
        self._scraper.ingest(name, decoded, at)

    async def _call(self, call: Any) -> Any:
        async with asyncio.timeout(self._cfg.command_timeout_ms / 1000):  # not wait_for
            return await call

    def _lost(self, exc: BaseException) -> None:
        if self.answering:
            log.warning(
                "scrape sharing: Redis failed (%s); scraping every backend here", type(exc).__name__
            )
        self.answering = False
        self.leading.clear()

    async def aclose(self) -> None:
        for task in list(self._tasks):
            await asyncio.gather(task, return_exceptions=True)
        await self._client.aclose()
