"""``sluicegate swarm``: the reference closed-loop agents (docs/seed-table.md) over real
HTTP (async httpx).

Each agent thinks, then streams one chat completion with an exact length (``max_tokens`` +
``ignore_eos``, drawn from the profile's mixture), and on 429/503 backs off (Retry-After
and the agent's own schedule) and resubmits. The numbers are the simulator's (see
``simulation.metrics``): decoding starts at the first streamed token. ``--speed K`` matches
an emulator run K times faster than real time: think and backoff shrink by K, and every
reported time is scaled back up, so the CSV compares directly with ``simulate``.
Bounded: new turns stop at ``--duration``; turns still open ``--drain`` seconds later are
cancelled. Prompts are fixed filler text and never logged.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import httpx

from emulator.profile import load_profile
from simulation.chart import ChartUnavailable, draw
from simulation.engine_adapter import knee_agents
from simulation.metrics import TurnRecord, summarise_runs
from simulation.output_flags import add_output_flags
from simulation.results import Row, format_table, write_csv
from simulation.workload import AgentWorkload
from simulation.workload_flags import add_agent_workload_flags, agent_workload_of

DEFERRAL_STATUSES = frozenset({429, 503})


W = TypeVar("W")
R = TypeVar("R")


@dataclass
class LiveLoad(Generic[W, R]):
    """Shared state of a load over HTTP against an emulator running ``speed`` times faster
    than its profile: the clients' ``workload`` and the ``records`` they append."""

    client: httpx.AsyncClient
    model: str
    workload: W
    speed: float
    start: float = field(default_factory=time.monotonic)
    records: list[R] = field(default_factory=list)
    failures: int = 0

    def now(self) -> float:
        """Seconds on the *emulated* clock since ``start`` (wall seconds x speed)."""
        return (time.monotonic() - self.start) * self.speed

    async def sleep(self, emulated_s: float) -> None:
        await asyncio.sleep(max(0.0, emulated_s) / self.speed)

    async def sleep_until(self, emulated: float) -> None:
        await self.sleep(emulated - self.now())


@dataclass
class SwarmRun(LiveLoad[AgentWorkload, TurnRecord]):
    """Shared state of one run of agents; its turns end at ``stop_at`` emulated seconds."""

    stop_at: float = field(kw_only=True)
    open_turns: int = 0
    short_streams: int = 0


async def agent(run: SwarmRun, index: int, rng: random.Random) -> None:
    prompt = "Refactor the module below for clarity. " * max(1, run.workload.prompt_tokens // 8)
    while True:
        await run.sleep(run.workload.think_s(rng))
        if run.now() >= run.stop_at:
            return
        record = TurnRecord(index, run.workload.output_tokens(rng), first_submit=run.now())
        run.open_turns += 1
        try:
            await turn(run, record, prompt, rng)
        finally:
            run.open_turns -= 1
        run.records.append(record)


async def turn(run: SwarmRun, record: TurnRecord, prompt: str, rng: random.Random) -> None:
    """Submit until one attempt is served; fills ``record`` in emulated seconds."""
    while True:
        sent = run.now()
        record.attempts.append(sent)
        try:
            retry_after = await attempt(run, record, prompt, sent)
        except httpx.HTTPError:
            run.failures += 1  # transport trouble: back off like a deferral, counted apart
            retry_after = 0.0
        if retry_after is None:
            return
        record.deferrals.append(sent)
        await run.sleep(run.workload.backoff.delay(len(record.deferrals) - 1, retry_after, rng))


async def attempt(run: SwarmRun, record: TurnRecord, prompt: str, sent: float) -> float | None:
    """One streamed request. None when served; else the emulated Retry-After (or 0)."""
    body = {
        "model": run.model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": record.output_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    headers = {
        "x-session-id": f"agent-{record.agent}",
        "x-retry-attempt": str(len(record.attempts) - 1),
    }
    async with run.client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as r:
        if r.status_code in DEFERRAL_STATUSES:
            await r.aread()
            return retry_after_s(r.headers) * run.speed
        if r.status_code != 200:
            await r.aread()
            run.failures += 1
            return 0.0
        tokens = 0
        async for line in r.aiter_lines():
            if is_token(line):
                tokens += 1
                if record.decode_start is None:
                    record.decode_start = run.now()
                    record.accepted_submit = sent
    record.finished = run.now()
    if tokens < record.output_tokens:  # cut short: its times are not a real turn's
        run.short_streams += 1
    if record.decode_start is None:  # an empty stream: count it as starting at its end
        record.decode_start, record.accepted_submit = record.finished, sent
    return None


def is_token(line: str) -> bool:
    """A chunk that carries generated content: the start of decoding.

    A chat stream opens with a chunk whose delta is ``{"role": "assistant", "content": ""}``.
    vLLM sends it together with the first output token, but a server may send it as soon as
    it accepts the request (the emulator did, while the request still waited for a slot), so
    it is never taken as the first token.
    """
    return line.startswith("data: {") and '"content"' in line and '"role":' not in line


async def streamed_chat(
    client: httpx.AsyncClient,
    body: dict[str, Any],
    headers: dict[str, str],
    speed: float,
    served: Callable[[httpx.Response], Awaitable[None]],
) -> tuple[int, float]:
    """One streamed chat request whose 200 answer ``served`` reads: (status, emulated
    Retry-After), a refusal read to its end; (0, 0.0) when the transport failed."""
    try:
        async with client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as r:
            if r.status_code != 200:
                await r.aread()
                return r.status_code, retry_after_s(r.headers) * speed
            await served(r)
    except httpx.HTTPError:
        return 0, 0.0
    return 200, 0.0


def retry_after_s(headers: httpx.Headers) -> float:
    """The server's wall-clock Retry-After in seconds (``retry-after-ms`` preferred)."""
    if (ms := headers.get("retry-after-ms")) is not None:
        return float(ms) / 1000.0
    if (s := headers.get("retry-after")) is not None and s.replace(".", "", 1).isdigit():
        return float(s)
    return 0.0


async def progress(run: SwarmRun, n: int) -> None:
    while True:
        deferred = sum(len(r.deferrals) for r in run.records)
        line = (
            f"\r[swarm N={n}] t={run.now():7.1f}s  turns done {len(run.records):5d}  "
            f"open {run.open_turns:3d}  deferrals {deferred:5d}  failures {run.failures}  "
            f"short {run.short_streams}"
        )
        if sys.stderr.isatty():
            print(line, end="", file=sys.stderr, flush=True)
            await asyncio.sleep(1.0)
        else:  # a log file: one plain line every 10 s
            print(line.lstrip("\r"), file=sys.stderr, flush=True)
            await asyncio.sleep(10.0)


async def swarm_once(
    args: argparse.Namespace,
    workload: AgentWorkload,
    n: int,
    transport: httpx.AsyncBaseTransport | None = None,
) -> SwarmRun:
    """One bounded run of ``n`` agents; ``transport`` replaces the network (tests)."""
    limits = httpx.Limits(max_connections=n + 4, max_keepalive_connections=n + 4)
    timeout = httpx.Timeout(args.request_timeout)
    async with httpx.AsyncClient(
        base_url=args.url, limits=limits, timeout=timeout, transport=transport
    ) as client:
        run = SwarmRun(client, args.model, workload, args.speed, stop_at=args.duration)
        rng = random.Random(args.seed)
        agents = [asyncio.create_task(agent(run, i, random.Random(rng.random()))) for i in range(n)]
        ticker = asyncio.create_task(progress(run, n))
        drain_wall_s = (args.duration + args.drain) / args.speed
        _, pending = await asyncio.wait(agents, timeout=drain_wall_s)
        for task in (*pending, ticker):
            task.cancel()
        await asyncio.gather(*pending, ticker, return_exceptions=True)
        print(file=sys.stderr)
        return run


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sluicegate swarm", description=__doc__.split("\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8000", help="OpenAI-compatible base URL")
    p.add_argument("--model", required=True, help="model name to request")
    p.add_argument("--agents", default="12", help="N values, e.g. 12,24 (one run each)")
    p.add_argument("--label", default="live", help="policy label written in the CSV")
    p.add_argument("--speed", type=float, default=1.0, help="the emulator's --speed")
    p.add_argument("--duration", type=float, default=600.0, help="emulated seconds of arrivals")
    p.add_argument("--warmup", type=float, default=60.0, help="unmeasured emulated seconds")
    p.add_argument("--drain", type=float, default=120.0, help="emulated seconds to finish")
    p.add_argument("--request-timeout", type=float, default=600.0, help="wall seconds")
    add_agent_workload_flags(p)
    p.add_argument("--seed", type=int, default=1)
    add_output_flags(p, "bench/seed000/swarm", "writes PREFIX.csv and PREFIX.png")
    p.add_argument(
        "--records",
        type=Path,
        default=None,
        help="also write each turn (lengths, times; no text) as JSON lines",
    )
    return p


def write_records(records: list[TurnRecord], n: int, path: Path) -> None:
    """Append one JSON line per turn: agent, tokens, attempt/deferral/decode/finish times."""
    with path.open("a") as out:
        for r in records:
            line = {"n": n, **{k: getattr(r, k) for k in TurnRecord.__slots__}}
            out.write(json.dumps(line) + "\n")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    profile = load_profile(args.profile)
    workload = agent_workload_of(args, profile)
    rows: list[Row] = []
    for n in (int(x) for x in args.agents.split(",") if x):
        run = asyncio.run(swarm_once(args, workload, n))
        summary = summarise_runs([(run.records, args.warmup, args.duration)])
        rows.append(Row.of("swarm", args.label, n, args.seed, summary))
        if args.records is not None:
            write_records(run.records, n, args.records)
        if run.failures:
            print(f"warning: {run.failures} attempts failed (non-429/503)", file=sys.stderr)
        if run.short_streams:
            print(f"warning: {run.short_streams} streams ended short", file=sys.stderr)
    write_csv(rows, args.out.with_suffix(".csv"))
    print(format_table(rows))
    if not args.no_chart and len(rows) > 1:
        try:
            knee = knee_agents(profile, args.think)
            title = f"p99 queue wait vs agents, live swarm ({args.label}; dotted: goodput)"
            draw(rows, args.out.with_suffix(".png"), knee_n=knee, title=title)
        except ChartUnavailable as exc:
            print(f"no chart: {exc}", file=sys.stderr)
    return 0
