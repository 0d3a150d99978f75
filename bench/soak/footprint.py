"""The gateway process's footprint (RSS, open file descriptors) and its trend."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Sample:
    t_s: float
    rss_bytes: int
    fds: int


def sample(pid: int, t_s: float) -> Sample:
    """VmRSS and the number of entries in /proc/PID/fd, now."""
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
    return Sample(t_s, rss, len(os.listdir(f"/proc/{pid}/fd")))


async def at_rest(pid: int, t_s: float, reads: int = 10, gap_s: float = 0.1) -> Sample:
    """A sample at rest: the fewest open fds over ``reads`` reads ``gap_s`` apart, so a
    health probe or scrape that happens to hold a socket at the moment is not counted (a
    leaked descriptor is there at every read)."""
    samples = [sample(pid, t_s)]
    for _ in range(reads - 1):
        await asyncio.sleep(gap_s)
        samples.append(sample(pid, t_s))
    return Sample(t_s, samples[-1].rss_bytes, min(s.fds for s in samples))


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
        window_s=window, rss_mib_per_hour=rss * 3600, fds_per_hour=fds * 3600,
        rss_growth_mib=rss * window, fds_growth=fds * window,
        rss_first_mib=samples[0].rss_bytes / 2**20, rss_last_mib=samples[-1].rss_bytes / 2**20,
        fds_first=samples[0].fds, fds_last=samples[-1].fds,
    )  # fmt: skip
