"""CPU time of a process group, read from /proc: the cost side of every cell.

Throughput on a shared, noisy machine moves with the neighbours; the proxy's own CPU time
per request moves much less, so the report gives both.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

_TICK = os.sysconf("SC_CLK_TCK")


def group_cpu_s(pgids: Iterable[int]) -> float:
    """User + system seconds of every live process whose group is in ``pgids``."""
    wanted = set(pgids)
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        # after the comm field: state ppid pgrp ... utime(12th) stime(13th)
        if int(fields[2]) in wanted:
            total += int(fields[11]) + int(fields[12])
    return total / _TICK


def settle(
    pgids: Iterable[int],
    *,
    idle_share: float = 0.05,
    window_s: float = 0.3,
    max_wait_s: float = 30.0,
) -> float:
    """Wait until the groups use under ``idle_share`` of a core over ``window_s`` (a proxy
    still chewing on requests the last cell abandoned must not steal the next cell's CPU).
    Returns the seconds waited."""
    groups = list(pgids)
    start = time.monotonic()
    before = group_cpu_s(groups)
    while time.monotonic() - start < max_wait_s:
        time.sleep(window_s)
        after = group_cpu_s(groups)
        if after - before < idle_share * window_s:
            break
        before = after
    return time.monotonic() - start
