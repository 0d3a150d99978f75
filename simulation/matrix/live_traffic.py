"""A matrix cell's tenants as real OpenAI clients over HTTP: the live side of the subset.

The same tenants (``measure.cell_tenants``) and the same client rules as the simulated
loop (``loop.request_lengths``, ``next_turn``, ``retry_wait``, ``MAX_ATTEMPTS``): a
closed-loop client sends, waits, thinks and sends again; an open-loop tenant's arrivals
are drawn up front; a refused client comes back when Retry-After says. Each request asks
for exactly its drawn length (``max_tokens`` + ``ignore_eos``). A conversation's later turn
sends the turns before it as messages, so its prompt holds the earlier ones as a prefix;
no other two prompts share one (``prompt_messages``).
The records are ``loop.Request`` / ``loop.Return`` in emulated seconds (wall x ``speed``),
measured by ``measure.measure_requests`` as the simulator's are. Prompts are filler text
and never logged.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

import httpx

from simulation.matrix.chat_clients import ask_room
from simulation.matrix.loop import (
    MAX_ATTEMPTS,
    CellRun,
    Request,
    Return,
    next_turn,
    request_lengths,
    retry_wait,
)
from simulation.matrix.traffic import Tenant
from simulation.swarm import DEFERRAL_STATUSES, is_token, streamed_chat

CHARS_PER_TOKEN = 4
"""The emulator's prompt count: one token per 4 characters of the rendered chat."""


@dataclass
class LiveClock:
    """Emulated seconds since ``start``: wall seconds x ``speed``."""

    speed: float
    start: float = field(default_factory=time.monotonic)

    def now(self) -> float:
        return (time.monotonic() - self.start) * self.speed

    async def sleep(self, emulated_s: float) -> None:
        await asyncio.sleep(max(0.0, emulated_s) / self.speed)


def prompt_messages(
    history: list[dict[str, str]], prompt_tokens: int, tag: str = ""
) -> list[dict[str, str]]:
    """``history`` and one more user message that opens with ``tag``, rendered to exactly
    ``prompt_tokens`` (``chat_clients.ask_room``, which the simulator's clients size their
    messages by); the history is dropped when it alone is longer (the client drops the
    oldest context). A distinct ``tag`` per conversation keeps the engine's prefix cache
    from matching one request's prompt to another's: the simulated engine is given no
    prompt hashes, so it never hits, and only a conversation's own turns share a prefix."""
    total = prompt_tokens * CHARS_PER_TOKEN
    room = ask_room(history, total)
    if room < 0:
        history, room = [], ask_room([], total)
    text = tag + "word " * math.ceil(max(0, room) / 5)
    return [*history, {"role": "user", "content": text[: max(0, room)]}]


@dataclass
class LiveRequests:
    """One cell's request-level tenants against ``client`` (the gateway's base URL);
    ``keys`` maps a tenant to its API key."""

    client: httpx.AsyncClient
    tenants: list[Tenant]
    keys: dict[str, str]
    model: str
    max_len: int
    duration_s: float
    clock: LiveClock
    seed: int = 1
    out: CellRun = field(default_factory=CellRun)
    failures: int = 0
    """Attempts that ended neither served nor refused (transport errors, other statuses)."""
    cut: int = 0
    """Requests still open when the drain ended (counted as given up then)."""

    async def run(self, drain_s: float) -> CellRun:
        """Every tenant until ``duration_s``, then at most ``drain_s`` (emulated) more."""
        rng = random.Random(self.seed)
        tasks = [
            asyncio.create_task(job) for t in self.tenants for job in self._jobs(t, rng.random())
        ]
        _, pending = await asyncio.wait(
            tasks, timeout=(self.duration_s + drain_s) / self.clock.speed
        )
        for task in pending:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return self.out

    def _jobs(self, t: Tenant, salt: float) -> list[Coroutine[Any, Any, None]]:
        rng = random.Random(f"{t.name}-{salt}")
        if t.clients:
            return [self._closed(t, c, random.Random(rng.random())) for c in range(t.clients)]
        arrivals = t.arrivals(self.duration_s, rng)
        return [
            self._open(t, -1 - i, at, random.Random(rng.random())) for i, at in enumerate(arrivals)
        ]

    async def _open(self, t: Tenant, client: int, at: float, rng: random.Random) -> None:
        await self.clock.sleep(at - self.clock.now())
        prompt, output = request_lengths(t, 0, 0, rng, self.max_len)
        await self._request(t, client, prompt, output, 0, [])

    async def _closed(self, t: Tenant, client: int, rng: random.Random) -> None:
        await self.clock.sleep(rng.uniform(0.0, max(t.think_mean_s, 1.0)))
        turn, context, history = 0, 0, list[dict[str, str]]()
        while self.clock.now() < self.duration_s:
            prompt, output = request_lengths(t, turn, context, rng, self.max_len)
            req = await self._request(t, client, prompt, output, turn, history)
            turn, context = next_turn(t, req)
            history = history if turn else []
            await self.clock.sleep(t.think_s(rng))

    async def _request(
        self,
        t: Tenant,
        client: int,
        prompt: int,
        output: int,
        turn: int,
        history: list[dict[str, str]],
    ) -> Request:
        """One request until served or given up; a conversation's ``history`` grows by
        its prompt and answer."""
        req = Request(t.name, client, prompt, output, t.shape.stream, self.clock.now(), turn=turn)
        self.out.requests.append(req)
        tag = f"{t.name} client {client} request {len(self.out.requests)}: "
        messages = prompt_messages(history, prompt, tag)
        try:
            await self._serve(t, req, messages)
        finally:
            if req.finished is None and req.gave_up_at is None:  # cut at the drain's end
                self.cut += 1
                req.gave_up_at = self.clock.now()
        history[:] = [*messages, {"role": "assistant", "content": "word " * output}]
        return req

    async def _serve(self, t: Tenant, req: Request, messages: list[dict[str, str]]) -> None:
        """Every call of ``req`` until its whole answer is in or it is given up: an answer
        cut short (a degrade capped ``max_tokens``) is asked for again with the answer so
        far as its context, as the simulated client does."""
        call = messages
        while True:
            got = await self._call(t, req, call)
            if got is None:
                return
            if got == 0:  # a 200 with nothing in it: the client stops here
                self.failures += 1
                req.gave_up_at = self.clock.now()
                return
            req.received += got
            if req.received >= req.output_tokens:
                req.finished = self.clock.now()
                return
            partial = {"role": "assistant", "content": "word " * req.received}
            call = [*messages, partial]
            req.attempts = 0

    async def _call(self, t: Tenant, req: Request, messages: list[dict[str, str]]) -> int | None:
        """One call until served (its output tokens) or given up (None)."""
        pending: Return | None = None
        while True:
            req.attempts += 1
            status, retry_after, got = await self._attempt(t, req, messages)
            if pending is not None:
                pending.admitted = status == 200
                pending = None
            if status == 200:
                return got
            if req.attempts >= MAX_ATTEMPTS:
                req.gave_up_at = self.clock.now()
                return None
            wait = retry_wait(retry_after or None, req.attempts)
            if retry_after:
                pending = Return(self.clock.now() + wait, on_time=True)
                self.out.returns.append(pending)
            await self.clock.sleep(wait)

    async def _attempt(
        self, t: Tenant, req: Request, messages: list[dict[str, str]]
    ) -> tuple[int, float, int]:
        """One HTTP attempt: (status, emulated Retry-After, output tokens served); 200 when
        served to its end."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "max_tokens": req.output_tokens - req.received,
            "ignore_eos": True,
            "stream": req.stream,
        }
        if req.stream:
            body["stream_options"] = {"include_usage": True}
        headers = {
            "authorization": f"Bearer {self.keys[t.name]}",
            "x-retry-attempt": str(req.attempts - 1),
        }
        if t.shape.turns > 1:
            headers["x-session-id"] = f"{t.name}-c{req.client}"
        got = 0

        async def served(r: httpx.Response) -> None:
            nonlocal got
            if req.dispatched is None:
                req.dispatched = self.clock.now()
            async for line in r.aiter_lines():
                if req.first_token is None and (not req.stream or is_token(line)):
                    req.first_token = self.clock.now()
                got = max(got, completion_tokens(line))

        status, retry_after = await streamed_chat(
            self.client, body, headers, self.clock.speed, served
        )
        if status != 200:
            if status not in DEFERRAL_STATUSES:
                self.failures += 1
            return status, retry_after, 0
        if req.first_token is None:
            req.first_token = self.clock.now()
        return 200, 0.0, got


def completion_tokens(line: str) -> int:
    """The ``usage.completion_tokens`` a response line reports (a non-streamed body, or a
    stream's usage chunk); 0 when it reports none."""
    text = line.removeprefix("data: ")
    if '"completion_tokens"' not in text or not text.startswith("{"):
        return 0
    usage = json.loads(text).get("usage") or {}
    return int(usage.get("completion_tokens", 0))
