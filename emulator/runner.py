"""Drives the pure ``Engine`` on the wall clock, ``speed`` times faster, for the HTTP server.

Engine time is virtual and exact: each step starts where the previous one ended (or, after an
idle spell, at the arrival that woke the engine) and lasts what the profile says. The wall
clock only paces it: after scheduling a step the loop sleeps until the wall clock, scaled by
``speed``, reaches the step's end, then delivers its tokens. Step timestamps are engine
time; the metrics report durations in wall seconds (engine seconds / ``speed``: a card
``speed`` times faster, see ``emulator/metrics.py``); if the event loop cannot keep up, the
emulator runs slower than ``speed`` times the wall clock, never with distorted durations.
Arrivals are stamped ``min(wall engine time, end of the step in flight)``, so no request is
stamped after the step that will first see it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from emulator.engine import Engine, EngineBusy, FinishedRequest, StepResult
from emulator.metrics import EmulatorMetrics
from emulator.prefix_hash import BlockHash
from emulator.profile import Profile
from policies.types import Clock


@dataclass(frozen=True, slots=True)
class TokenBatch:
    """``count`` new tokens of one request, produced at engine time ``at``."""

    count: int
    at: float


Event = TokenBatch | FinishedRequest


class EngineRunner:
    """Owns one engine, its metrics and the step loop. All methods run on one event loop."""

    def __init__(
        self,
        profile: Profile,
        model_name: str,
        *,
        speed: float = 1.0,
        clock: Clock = time.monotonic,
    ) -> None:
        if speed <= 0:
            raise ValueError("speed must be > 0")
        self.profile = profile
        self.engine = Engine(profile.engine)
        self.metrics = EmulatorMetrics(model_name, profile.engine, speed=speed)
        self.speed = speed
        self._clock = clock
        self._origin = clock()
        self._queues: dict[str, asyncio.Queue[Event]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._ids = itertools.count()
        self._last_end = 0.0
        self._horizon = math.inf  # end of the step in flight; the clock may not pass it
        self._idle = True
        self._woken_at = 0.0
        self.metrics_served = 0
        """/metrics bodies rendered: how often the engine was scraped (tests count it)."""
        self.scraped_from: set[str] = set()
        """The client connections (``host:port``) that fetched /metrics."""

    def _wall_engine_time(self) -> float:
        return (self._clock() - self._origin) * self.speed

    def now(self) -> float:
        """Engine time, seconds."""
        return min(self._wall_engine_time(), self._horizon)

    def next_id(self, prefix: str) -> str:
        return f"{prefix}-{next(self._ids)}"

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="emulator-engine")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def submit(
        self,
        req_id: str,
        prompt_tokens: int,
        output_tokens: int,
        max_tokens: int,
        reason: str,
        *,
        block_hashes: tuple[BlockHash, ...] = (),
    ) -> None:
        """Queue a request; raises ``EngineBusy`` / ``ValueError`` like ``Engine.add``."""
        stamp = self.now()
        try:
            self.engine.add(
                req_id,
                prompt_tokens,
                output_tokens,
                stamp,
                finish_reason=reason,
                block_hashes=block_hashes,
            )
        except EngineBusy as busy:
            self.metrics.on_rejected(busy.reason)
            raise
        self.metrics.on_admitted(req_id, max_tokens)
        self._queues[req_id] = asyncio.Queue()
        if self._idle:
            self._idle, self._woken_at = False, stamp
            self._wake.set()

    async def events(self, req_id: str) -> AsyncIterator[Event]:
        """Token batches, then the ``FinishedRequest``. Closing early aborts the request."""
        queue = self._queues[req_id]
        try:
            while True:
                event = await queue.get()
                yield event
                if isinstance(event, FinishedRequest):
                    return
        finally:
            self.abort(req_id)

    def abort(self, req_id: str) -> None:
        """Idempotent: frees the request's slot and KV blocks if it is still in the engine."""
        if self._queues.pop(req_id, None) is not None and self.engine.abort(req_id):
            self.metrics.on_aborted(req_id)

    def render_metrics(self, client: str = "") -> bytes:
        self.metrics_served += 1
        self.scraped_from.add(client)
        return self.metrics.render()

    async def _loop(self) -> None:
        start = 0.0
        while True:
            start = max(start, self._woken_at)  # a submit may precede the loop's first turn
            step = self.engine.step(start) if self.engine.has_work else None
            if step is None or step.duration_s <= 0.0:
                start = await self._idle_until_submit()
                continue
            # Like vLLM, gauges are a per-step snapshot: a request that arrives while a step
            # runs is first seen waiting after the next one is scheduled.
            self.metrics.sync(self.engine)
            self._horizon = step.ended_at
            await asyncio.sleep(max(0.0, (step.ended_at - self._wall_engine_time()) / self.speed))
            self._last_end = start = step.ended_at
            self._deliver(step)

    async def _idle_until_submit(self) -> float:
        """Wait for work; return the engine time the next step starts at."""
        self._idle, self._horizon = True, math.inf
        self.metrics.sync(self.engine)  # e.g. running drops to 0 after the last abort
        self._wake.clear()
        await self._wake.wait()
        return max(self._last_end, self._woken_at)

    def _deliver(self, step: StepResult) -> None:
        self.metrics.on_step(step)
        for req_id, count in step.tokens_emitted.items():
            queue = self._queues.get(req_id)
            if queue is not None:
                queue.put_nowait(TokenBatch(count, step.ended_at))
        for finished in step.finished:
            queue = self._queues.pop(finished.req_id, None)
            if queue is not None:
                queue.put_nowait(finished)
