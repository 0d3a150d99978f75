"""The gateway process's footprint (RSS, open file descriptors, asyncio tasks) and its trend."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace

import httpx
from prometheus_client.parser import text_string_to_metric_families

TASKS = "sluicegate_event_loop_tasks"


@dataclass(frozen=True)
class Sample:
    t_s: float
    rss_bytes: int
    fds: int
    tasks: int = -1
    """asyncio tasks alive in the gateway (``sluicegate_event_loop_tasks``); -1: not read."""


def sample(pid: int, t_s: float) -> Sample:
    """VmRSS and the number of entries in /proc/PID/fd, now."""
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
    return Sample(t_s, rss, len(os.listdir(f"/proc/{pid}/fd")))


async def tasks_now(base_url: str) -> int:
    """The gateway's asyncio task count, from its /metrics (-1 when it does not say)."""
    async with httpx.AsyncClient(base_url=base_url, timeout=30.0) as c:
        text = (await c.get("/metrics")).text
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == TASKS:
                return int(s.value)
    return -1


async def with_tasks(s: Sample, base_url: str) -> Sample:
    return replace(s, tasks=await tasks_now(base_url))


async def at_rest(
    pid: int, t_s: float, base_url: str | None = None, reads: int = 10, gap_s: float = 0.1
) -> Sample:
    """A sample at rest: the fewest open fds (and tasks) over ``reads`` reads ``gap_s``
    apart, so a health probe or scrape that happens to hold a socket or a task at the moment
    is not counted (a leaked descriptor or task is there at every read)."""
    samples = [sample(pid, t_s)]
    tasks: list[int] = []
    for _ in range(reads - 1):
        await asyncio.sleep(gap_s)
        samples.append(sample(pid, t_s))
        if base_url is not None:
            tasks.append(await tasks_now(base_url))
    return Sample(t_s, samples[-1].rss_bytes, min(s.fds for s in samples), min(tasks, default=-1))


def slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of ys over xs (0 with fewer than two distinct xs)."""
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx


@dataclass(frozen=True)
class Trend:
    """The fitted trend of quiet-point samples over a window."""

    window_s: float
    rss_mib_per_hour: float
    fds_per_hour: float
    rss_growth_mib: float
    """Fitted RSS change over the window."""
    fds_growth: float
    rss_first_mib: float
    rss_last_mib: float
    fds_first: int
    fds_last: int


def trend(samples: Sequence[Sample]) -> Trend:
    ts = [s.t_s for s in samples]
    window = ts[-1] - ts[0] if ts else 0.0
    rss = slope(ts, [s.rss_bytes / 2**20 for s in samples])
    fds = slope(ts, [float(s.fds) for s in samples])
    return Trend(
        window_s=window,
        rss_mib_per_hour=rss * 3600,
        fds_per_hour=fds * 3600,
        rss_growth_mib=rss * window,
        fds_growth=fds * window,
        rss_first_mib=samples[0].rss_bytes / 2**20,
        rss_last_mib=samples[-1].rss_bytes / 2**20,
        fds_first=samples[0].fds,
        fds_last=samples[-1].fds,
    )
