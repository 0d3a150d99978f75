"""Decision cost with 10,000 queued: local state versus Redis state, side by side in one run.

    python bench/fleet_decision_bench.py [--queued 10000] [--tenants 1000] [--ops 5000]
                                         [--retries 0.05]

Two schedulers run ``bench/decision_bench.py``'s policy (server_signals, VTC, CoDel,
tenant_quota, retry_budget) on one virtual clock, each filled to ``--queued`` requests from
``--tenants`` tenants. ``local``: the gateway's one-replica path (``LocalState.admit``, then
``Scheduler.submit``). ``redis``: the fleet path against a real ``redis-server`` on loopback
(``RedisState.admit``: one script call, the tenant's lease and token reservation, or the
fleet retry budget for a retry; then ``submit`` on the policy the shared mode runs). Every
queued request holds its lease in Redis, as in a real fleet. The steady state repeats, for
each side in turn: release one ticket (and its lease), ``poll`` (dispatch one), and admit +
submit a new request (``--retries`` of them retries). Each call is timed alone (wall and
this thread's CPU); the Redis side's wall time includes its round trip.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import redis

sys.path.append(str(Path(__file__).resolve().parents[1]))

from bench.decision_bench import POLICY, Fleet, VirtualClock, population_args, request
from commands.gc_tuning import tune_gc
from gateway.config.schema import StateConfig
from gateway.replicas.contract import Grant, Refusal, SharedState
from gateway.replicas.local import LocalState
from gateway.replicas.quota_limits import quota_limits
from gateway.replicas.redis_store import RedisState, connect
from gateway.replicas.shared_retries import SharedRetries
from policies.engine.scheduler import Scheduler, Ticket
from policies.policy_set import PolicySet
from policies.registry import build_policy
from policies.shared_mode import for_mode
from policies.types import Decision, DecisionKind, Ending, Outcome, RequestInfo, Usage
from scripts.service_argv import redis_server
from scripts.vllm.serve import free_port

Samples = tuple[list[int], list[int]]


@dataclass
class Side:
    name: str
    shared: SharedState
    sched: Scheduler
    full: PolicySet
    """The configured policy (the scheduler runs what the state's mode makes of it)."""
    tickets: list[Ticket] = field(default_factory=list)
    grants: dict[str, Grant] = field(default_factory=dict)
    refused: int = 0
    rows: dict[str, Samples] = field(default_factory=dict)

    def samples(self, row: str) -> Samples:
        return self.rows.setdefault(row, ([], []))


async def atimed(call: Callable[[], Awaitable[Any]], into: Samples) -> Any:
    wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
    out = await call()
    into[1].append(time.thread_time_ns() - cpu)
    into[0].append(time.perf_counter_ns() - wall)
    return out


def timed(call: Callable[[], Any], into: Samples) -> Any:
    wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
    out = call()
    into[1].append(time.thread_time_ns() - cpu)
    into[0].append(time.perf_counter_ns() - wall)
    return out


async def admit(side: Side, req: RequestInfo, fleet: Fleet) -> object:
    """What the gateway does before the decision core, then the core's decision."""
    held = await side.shared.admit(req, quota_limits(side.full, req.tenant))
    if isinstance(held, Refusal):
        return held
    if isinstance(held, Grant):
        side.grants[req.request_id] = held
    return side.sched.submit(req, fleet.snapshot())


async def settle(side: Side) -> None:
    """Lets the background releases (Redis side) run, outside the timed calls."""
    tasks: set[asyncio.Task[None]] = getattr(side.shared, "_tasks", set())
    if tasks:
        await asyncio.gather(*list(tasks))


def release(side: Side, ticket: Ticket, usage: Usage) -> None:
    side.sched.release(ticket, Ending(Outcome.COMPLETED, usage, latency_s=1.0))
    grant = side.grants.pop(ticket.request.request_id, None)
    if grant is not None:
        side.shared.release(grant, usage, served=True)


async def fill(side: Side, args: argparse.Namespace, clock: VirtualClock, fleet: Fleet) -> int:
    rng, seq, queued = random.Random(6), 0, 0
    while queued < args.queued:
        clock.now += 1e-5
        out = await admit(side, request(seq, args.tenants, rng, clock.now), fleet)
        if isinstance(out, Ticket):
            side.tickets.append(out)
        elif isinstance(out, Decision) and out.decision is DecisionKind.DELAY:
            queued += 1
        else:
            raise SystemExit(f"{side.name}: unexpected answer while filling: {out}")
        seq += 1
    return seq


async def step(side: Side, req: RequestInfo, rng: random.Random, fleet: Fleet) -> None:
    done = side.tickets.pop(rng.randrange(len(side.tickets)))
    usage = Usage(done.request.estimate.prompt_tokens, rng.randint(1, 512))
    timed(lambda: release(side, done, usage), side.samples("release"))
    await settle(side)
    out = timed(lambda: side.sched.poll(fleet.snapshot()), side.samples("poll (dispatch 1)"))
    side.tickets += [t for t in out if isinstance(t, Ticket)]
    answer = await atimed(lambda: admit(side, req, fleet), side.samples("admit + submit"))
    if isinstance(answer, Refusal) or (
        isinstance(answer, Decision) and answer.decision is DecisionKind.REJECT
    ):
        side.refused += 1


def side(name: str, shared: SharedState, clock: VirtualClock) -> Side:
    full = build_policy(POLICY)
    sched = Scheduler(for_mode(full, shared.mode, 1), clock=clock, rng=random.Random(7))
    return Side(name, shared, sched, full)


async def run(args: argparse.Namespace, url: str) -> list[Side]:
    clock = VirtualClock()
    fleet = Fleet(clock, args.backends, args.slots, args.scrape_s)
    cfg = StateConfig.model_validate({"backend": "redis", "url": url, "command_timeout_ms": 5000})
    client, full = connect(cfg), build_policy(POLICY)
    redis_state = RedisState(cfg, client, replica_id="bench", policy=lambda: full)
    # first attempts counted on the schedulers' virtual clock, as the local gate counts them
    redis_state.retries = SharedRetries(cfg, client, "bench", lambda: full, clock=clock)
    await redis_state.beat()
    sides = [side("local", LocalState(), clock), side("redis", redis_state, clock)]
    seq = 0
    for s in sides:
        seq = await fill(s, args, clock, fleet)
    rng = random.Random(8)
    for _ in range(args.ops):
        clock.now += 1e-4
        req = request(seq, args.tenants, rng, clock.now)
        req = replace(req, is_retry=rng.random() < args.retries)
        seq += 1
        for s in sides:  # side by side: the same request to each, in turn
            await step(s, req, random.Random(seq), fleet)
    await redis_state.aclose()
    return sides


def main(argv: list[str] | None = None) -> int:
    p = population_args(__doc__, 5_000)
    p.add_argument("--retries", type=float, default=0.05, help="share of retries")
    args = p.parse_args(argv)
    tune_gc()
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        server = subprocess.Popen(
            redis_server(shutil.which("redis-server") or "redis-server", port, tmp),
            stdout=subprocess.DEVNULL,
        )
        try:
            wait_redis(port)
            sides = asyncio.run(run(args, f"redis://127.0.0.1:{port}/0"))
        finally:
            server.terminate()
            server.wait(10)
    report(sides, args)
    return 0


def wait_redis(port: int) -> None:
    client = redis.Redis(port=port)
    for _ in range(200):
        try:
            if client.ping():
                return
        except redis.ConnectionError:
            time.sleep(0.05)
    raise SystemExit("redis-server did not answer")


def report(sides: list[Side], args: argparse.Namespace) -> None:
    print(
        f"queued {args.queued} per side across {args.tenants} tenants; {args.ops} "
        f"steady-state iterations, {args.retries:.0%} retries"
    )
    local, shared = sides
    for row in local.rows:
        for s in sides:
            print(_line(f"{row} [{s.name}]", s.rows[row]))
        ratios = []
        for kind, i in (("wall", 0), ("cpu", 1)):
            for q in (0.5, 0.99):
                a, b = _pct(local.rows[row][i], q), _pct(shared.rows[row][i], q)
                ratios.append(f"{kind} p{int(q * 100)} {b / a:.2f}")
        print(f"  redis ÷ local: {', '.join(ratios)}")
    print(f"refused in steady state: local {local.refused}, redis {shared.refused}")


def _pct(ns: list[int], q: float) -> float:
    s = sorted(ns)
    return s[min(len(s) - 1, int(q * len(s)))] / 1000


def _line(name: str, samples: Samples) -> str:
    parts = []
    for kind, ns in zip(("wall", "cpu"), samples, strict=True):
        us = sorted(n / 1000 for n in ns)
        parts.append(f"{kind} p50 {statistics.median(us):7.1f} p99 {_pct(ns, 0.99):8.1f}")
    return f"{name:<26} {' | '.join(parts)} us (n={len(samples[0])})"


if __name__ == "__main__":
    raise SystemExit(main())
