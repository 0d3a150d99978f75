"""The soak's backend faults, taken in turn: an emulator frozen (SIGSTOP) for longer than
the stall watch allows, then resumed; an emulator killed (SIGKILL, mid-request) and started
again on its port. The gateway must cut or retry what was on it and forget nothing."""

from __future__ import annotations

import asyncio
import os
import signal
from urllib.parse import urlsplit

from bench.hotpath.procs import Proc, wait_http
from bench.soak.fleet import Fleet

FREEZE_S = 8.0
"""Longer than the stall watch's bound on a frozen backend (about 5-6 s)."""
DOWN_S = 2.0
"""How long a killed emulator stays down: a few health probes see it."""


async def inject(fleet: Fleet, n: int) -> None:
    """The ``n``-th fault: even ones freeze the first emulator, odd ones kill the second."""
    if n % 2 == 0:
        await freeze(fleet.emulators[0], FREEZE_S)
    else:
        await restart(fleet.emulators[1], fleet.backends[1], DOWN_S)


async def freeze(proc: Proc, seconds: float) -> None:
    os.killpg(proc.pid, signal.SIGSTOP)
    try:
        await asyncio.sleep(seconds)
    finally:
        os.killpg(proc.pid, signal.SIGCONT)


async def restart(proc: Proc, url: str, down_s: float) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    assert proc.popen is not None
    await asyncio.to_thread(proc.popen.wait)
    await asyncio.sleep(down_s)
    proc.start()
    port = urlsplit(url).port
    assert port is not None
    await asyncio.to_thread(wait_http, proc, "127.0.0.1", port, "/health", 60.0)
