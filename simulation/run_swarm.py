"""``sluicegate swarm-runs``: the agent runs of ``simulate-runs`` over real HTTP (async
httpx), each call carrying ``X-Agent-Run-*`` headers (docs/runs.md).

The runs are the simulator's very runs (same seed, same arrivals and shapes). A run sends
its step's calls together (streams with an exact length: ``max_tokens`` + ``ignore_eos``),
waits for all of them, thinks, goes on; a 429/503 is retried after Retry-After (and the
run's backoff) while its deadline allows, else the run is given up (``DELETE
/v1/runs/{id}``); a 409 means the gateway ended the run; at its deadline the client drops
its streams (the gateway cuts them upstream). A completed run says so (``POST
/v1/runs/{id}/complete``). ``--speed K`` matches an emulator K times faster than real
time: arrivals, think time, deadlines and backoffs shrink by K and every reported time is
scaled back, so the CSV compares directly with ``simulate-runs``. Prompts are filler text,
each opening with its call's own tag (no two share a prefix cache block), never logged.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from emulator.profile import load_profile
from simulation.agent_runs import RunPlan, RunWorkload, arrivals, capacity_runs_per_s
from simulation.run_cli import (
    RunRow,
    add_workload_flags,
    format_rows,
    workload_of,
    write_rows,
)
from simulation.run_metrics import RunRecord, summarise_run_records
from simulation.swarm import DEFERRAL_STATUSES, LiveLoad, is_token, streamed_chat


class RunOver(Exception):
    """The run cannot go on: the gateway ended it, or its client gave up."""


@dataclass
class RunSwarm(LiveLoad[RunWorkload, RunRecord]):
    """Shared state of the agent runs: times in emulated seconds since ``start``."""

    rng: random.Random = field(default_factory=lambda: random.Random(0))
    call_ttft: list[tuple[float, float]] = field(default_factory=list)
    """Each served call's (first attempt, time to its first token from then)."""


async def agent_run(swarm: RunSwarm, plan: RunPlan) -> None:
    """One run from its arrival to its end; appends its record."""
    await swarm.sleep_until(plan.arrival)
    record = RunRecord(plan.index, plan.arrival, plan.calls)
    deadline = plan.arrival + swarm.workload.deadline_s
    try:
        async with asyncio.timeout((deadline - swarm.now()) / swarm.speed):
            await _steps(swarm, plan, record)
        record.completed = True
        await _say(swarm, "POST", f"/v1/runs/run-{plan.index}/complete")
    except RunOver:
        await _say(swarm, "DELETE", f"/v1/runs/run-{plan.index}")
    except TimeoutError:
        pass  # abandoned at its deadline; the gateway ends the run itself
    record.ended = min(swarm.now(), deadline)
    swarm.records.append(record)


async def _steps(swarm: RunSwarm, plan: RunPlan, record: RunRecord) -> None:
    """Each step's branches to their ends; the first RunOver (or a cancellation) stops the
    others, whose streams close."""
    for i, step in enumerate(plan.steps):
        if i:
            await asyncio.sleep(plan.think_s[i - 1] / swarm.speed)
        try:
            async with asyncio.TaskGroup() as branches:
                for n, tokens in enumerate(step):
                    branches.create_task(_call(swarm, plan, record, n, tokens))
        except* RunOver:
            raise RunOver from None


async def _call(
    swarm: RunSwarm, plan: RunPlan, record: RunRecord, branch: int, tokens: int
) -> None:
    """One call, retried until served; RunOver when the run cannot go on. An answer cut
    short (a degrade capped ``max_tokens``) is continued: the rest is asked for with the
    context the longer by what came, as the simulator's client does (``run_core``)."""
    deferrals, first_try, received = 0, swarm.now(), 0
    while True:
        status, retry_after, got = await _attempt(
            swarm, plan, record, (branch, tokens - received, deferrals, received), first_try
        )
        if status == 200:
            received += got
            if received >= tokens or not got:
                return
            continue
        if status == 409:
            raise RunOver
        record.refusals += 1
        wait = swarm.workload.backoff.delay(deferrals, retry_after, swarm.rng)
        deferrals += 1
        if swarm.now() + wait >= swarm.workload.retry_until(plan.arrival, record.started):
            raise RunOver
        await asyncio.sleep(wait / swarm.speed)


async def _attempt(
    swarm: RunSwarm,
    plan: RunPlan,
    record: RunRecord,
    call: tuple[int, int, int, int],
    first_try: float,
) -> tuple[int, float, int]:
    """One streamed call (branch, tokens, retry, tokens already received of this answer)
    whose first attempt was at ``first_try``: (status, emulated Retry-After, output tokens
    streamed); 200 when served to its end."""
    branch, tokens, retry, received = call
    deadline = plan.arrival + swarm.workload.deadline_s
    w = swarm.workload
    tag = f"Run {plan.index}, branch {branch}, at {swarm.now():.6f}. "  # no shared prefix
    filler = "Plan the next tool call. "  # about 6 tokens
    messages = [{"role": "user", "content": tag + filler * max(1, w.prompt_tokens // 6)}]
    if received:  # the answer so far, as the context of its continuation
        messages.append({"role": "assistant", "content": filler * max(1, received // 6)})
    got = 0
    body = {
        "model": swarm.model,
        "messages": messages,
        "max_tokens": tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    headers = run_headers(w, plan, deadline - swarm.now(), swarm.speed)
    headers |= {"x-session-id": f"run-{plan.index}-b{branch}", "x-retry-attempt": str(retry)}

    async def served(r: httpx.Response) -> None:
        nonlocal got
        record.spent_tokens += w.prompt_tokens + received
        record.started = True
        async for line in r.aiter_lines():
            if is_token(line):
                if got == 0 and not received:  # the call's first token
                    swarm.call_ttft.append((first_try, swarm.now() - first_try))
                got += 1
                record.spent_tokens += 1
                if record.first_token is None:
                    record.first_token = swarm.now()
            elif '"error"' in line:
                raise RunOver  # the gateway cut the stream: the run ended

    status, retry_after = await streamed_chat(swarm.client, body, headers, swarm.speed, served)
    if status not in (200, *DEFERRAL_STATUSES, 409):
        swarm.failures += 1
    return status, retry_after, got


def run_headers(w: RunWorkload, plan: RunPlan, left_s: float, speed: float) -> dict[str, str]:
    """``X-Agent-Run-*`` for one call of ``plan``: the hints its workload sends. The
    deadline is the wall milliseconds left (the gateway fixes it at the run's first call)."""
    out = {"x-agent-run-id": f"run-{plan.index}"}
    if "calls" in w.hints:
        out["x-agent-run-calls"] = str(plan.calls)
    if "tokens" in w.hints:
        out["x-agent-run-tokens"] = str(plan.tokens(w.prompt_tokens))
    if "branches" in w.hints:
        out["x-agent-run-branches"] = str(plan.branches)
    if "deadline" in w.hints:
        out["x-agent-run-deadline-ms"] = str(max(1, round(left_s / speed * 1000)))
    return out


async def _say(swarm: RunSwarm, method: str, path: str) -> None:
    """Tell the gateway the run's end; its answer changes nothing for the client."""
    with contextlib.suppress(httpx.HTTPError):
        await swarm.client.request(method, path)


async def swarm_runs(
    args: argparse.Namespace,
    workload: RunWorkload,
    plans: list[RunPlan],
    transport: httpx.AsyncBaseTransport | None = None,
) -> RunSwarm:
    """Every run of ``plans``, each ended by completion, refusal or its deadline."""
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
    timeout = httpx.Timeout(args.request_timeout)
    async with httpx.AsyncClient(
        base_url=args.url, limits=limits, transport=transport, timeout=timeout
    ) as client:
        swarm = RunSwarm(client, args.model, workload, args.speed)
        await asyncio.gather(*(agent_run(swarm, p) for p in plans))
        return swarm


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sluicegate swarm-runs", description=__doc__.split("\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8000", help="OpenAI-compatible base URL")
    p.add_argument("--model", required=True, help="model name to request")
    p.add_argument("--load", type=float, default=2.0, help="runs/s as a multiple of capacity")
    p.add_argument("--label", default="live", help="policy label written in the CSV")
    p.add_argument("--speed", type=float, default=1.0, help="the emulator's --speed")
    p.add_argument("--duration", type=float, default=1800.0, help="emulated seconds of arrivals")
    p.add_argument("--warmup", type=float, default=300.0, help="unmeasured emulated seconds")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--request-timeout", type=float, default=600.0, help="wall seconds")
    p.add_argument("--out", type=Path, default=Path("bench/runs/swarm"))
    add_workload_flags(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    profile = load_profile(args.profile)
    workload = workload_of(args, profile)
    rate = args.load * capacity_runs_per_s(profile, workload)
    plans = arrivals(workload, rate, args.duration, args.seed)
    swarm = asyncio.run(swarm_runs(args, workload, plans))
    summary = summarise_run_records(swarm.records, args.warmup, args.duration)
    rows = [RunRow("swarm", args.label, args.load, rate, summary)]
    write_rows(rows, args.out.with_suffix(".csv"))
    print(format_rows(rows))
    if swarm.failures:
        print(f"warning: {swarm.failures} calls failed (not 200/409/429/503)", file=sys.stderr)
    return 0
