"""Micro-benchmark of one policy decision: ``Scheduler.submit``/``poll``/``release``.

    python bench/decision_bench.py [--queued 10000] [--tenants 1000] [--ops 20000]
                                   [--scrape-s 0.5]

The scheduler runs the benchmark's realistic policy (server_signals limit, VTC fair share,
CoDel, tenant quota and retry budget gates) on a virtual clock. The fleet is filled to its
limit, then ``--queued`` requests from ``--tenants`` tenants are queued. The steady state
then repeats what the gateway does when a slot frees while the queue stays at that depth:
``release`` one ticket, ``poll`` (fairness picks the next flow and dispatches it), and
``submit`` a new request (queued behind the others). Each call gets its own
``BackendsSnapshot`` (the gateway takes one per call); as in the gateway's ``BackendPool``,
the backend views in it are rebuilt only when a scrape lands, every ``--scrape-s``
seconds of the virtual clock (``--scrape-s 0`` rebuilds them for every call: the cost
right after each scrape). Snapshots and requests are built outside the timed region.

Each call is timed on its own with ``perf_counter_ns`` and ``thread_time_ns``; the garbage
collector stays on with the settings ``sluicegate serve`` gives it (``commands/gc_tuning.py``:
startup objects frozen, generation 0 every 50,000 allocations); ``--gc python-default``
keeps Python's own thresholds instead (generation 0 every 700 allocations).

It measures the decision core it imports: an installed one (compiled by a regular
``pip install``, see setup.py) before this checkout's sources, and says which.
Prints p50/p99/max in microseconds per call; the issue's target is a decision in <= 50 us
p99. Two reference rows measured in the same run read the machine rather than the
scheduler: ``timer floor`` (an empty call through the same timing) and ``fixed work`` (the
same small pure-Python loop every time, sized near a decision's p50): its p99/p50 is the
spread this machine adds to a constant cost.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # an installed core comes first

from commands.gc_tuning import tune_gc
from policies.backends import BackendsSnapshot, BackendView
from policies.build import core
from policies.engine.scheduler import Scheduler, Ticket
from policies.registry import build_policy
from policies.types import Decision, DecisionKind, Ending, Outcome, RequestInfo, Usage, WorkEstimate
from simulation.flags import choice_flag

POLICY = {
    "name": "decision-bench",
    "limit": {"type": "server_signals"},
    "fairness": {"type": "vtc"},
    "queue": {"max_wait_s": 3600, "discipline": {"type": "codel"}},
    "gates": [
        {"type": "tenant_quota", "parameters": {"default": {"tokens_per_minute": 10**9}}},
        {"type": "retry_budget"},
    ],
}
MODEL = "m"


class VirtualClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def views(backends: int, slots: int) -> tuple[BackendView, ...]:
    return tuple(
        BackendView(
            name=f"b{i}",
            models=frozenset({MODEL}),
            max_num_seqs=slots,
            running=float(slots),
            waiting=0.0,
            kv_cache_usage=0.5,
            signal_age_s=0.1,
        )
        for i in range(backends)
    )


class Fleet:
    """Snapshots as ``BackendPool.snapshot`` makes them: a new one per call, the same views
    until the next scrape (``scrape_s`` seconds; 0: new views for every snapshot)."""

    def __init__(self, clock: VirtualClock, backends: int, slots: int, scrape_s: float) -> None:
        self._clock, self._backends, self._slots, self._scrape_s = clock, backends, slots, scrape_s
        self._views = views(backends, slots)
        self._next_scrape = clock.now + scrape_s

    def snapshot(self) -> BackendsSnapshot:
        now = self._clock.now
        if now >= self._next_scrape:
            self._views = views(self._backends, self._slots)
            self._next_scrape = now + self._scrape_s
        return BackendsSnapshot(now, self._views)


def fixed_work() -> int:
    total = 0
    for i in range(_FIXED_WORK_LOOPS):
        total += i
    return total


_FIXED_WORK_LOOPS = 400


def request(seq: int, tenants: int, rng: random.Random, now: float) -> RequestInfo:
    tenant = rng.randrange(tenants)
    return RequestInfo(
        request_id=f"r{seq}",
        tenant=f"t{tenant}",
        workload_class="interactive",
        model=MODEL,
        estimate=WorkEstimate(rng.randint(50, 2000), rng.randint(16, 512)),
        arrival=now,
        weight=1.0 + tenant % 4,
    )


Samples = tuple[list[int], list[int]]
"""(wall ns, CPU ns) per call."""


def timed(call: Callable[[], object], into: Samples) -> object:
    """Wall time and this thread's CPU time of one call. On a shared core the wall p99 is
    mostly the kernel handing the core to a neighbour; the CPU time excludes that."""
    wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
    out = call()
    into[1].append(time.thread_time_ns() - cpu)
    into[0].append(time.perf_counter_ns() - wall)
    return out


def population_args(description: str, ops: int) -> argparse.ArgumentParser:
    """The options of a decision benchmark: the queue it fills, the tenants, the steady-state
    iterations, the backends and their slots, the scrape period."""
    p = argparse.ArgumentParser(description=description.splitlines()[0])
    p.add_argument("--queued", type=int, default=10_000)
    p.add_argument("--tenants", type=int, default=1_000)
    p.add_argument("--ops", type=int, default=ops, help="steady-state iterations")
    p.add_argument("--backends", type=int, default=4)
    p.add_argument("--slots", type=int, default=64, help="max_num_seqs per backend")
    p.add_argument("--scrape-s", type=float, default=0.5, help="seconds between scrapes")
    return p


def main(argv: list[str] | None = None) -> int:
    p = population_args(__doc__, 20_000)
    collector = "the collector's settings: as sluicegate serve sets them, or Python's"
    choice_flag(p, "--gc", ("serve", "python-default"), collector)
    backlog = "the prefill backlog bound's accounting (policies/engine/prefill_backlog.py)"
    choice_flag(p, "--prefill-backlog", ("on", "off"), backlog)
    args = p.parse_args(argv)
    if args.gc == "serve":
        tune_gc()  # at startup, before any request, as serve does
    rng, clock = random.Random(6), VirtualClock()
    policy = {**POLICY, "prefill_backlog": {"enabled": args.prefill_backlog == "on"}}
    sched = Scheduler(build_policy(policy), clock=clock, rng=random.Random(7))
    fleet = Fleet(clock, args.backends, args.slots, args.scrape_s)
    tickets: list[Ticket] = []
    seq = 0
    fill_ns: Samples = ([], [])
    queued = 0
    while queued < args.queued:
        clock.now += 1e-5
        req = request(seq, args.tenants, rng, clock.now)
        snap = fleet.snapshot()
        out = timed(partial(sched.submit, req, snap), fill_ns)
        if isinstance(out, Ticket):
            tickets.append(out)
        elif isinstance(out, Decision) and out.decision is DecisionKind.DELAY:
            queued += 1
        else:
            raise SystemExit(f"unexpected decision while filling: {out}")
        seq += 1
    submit_ns: Samples = ([], [])
    poll_ns: Samples = ([], [])
    release_ns: Samples = ([], [])
    floor_ns: Samples = ([], [])
    fixed_ns: Samples = ([], [])
    for _ in range(args.ops):
        clock.now += 1e-4
        done = tickets.pop(rng.randrange(len(tickets)))
        usage = Usage(done.request.estimate.prompt_tokens, rng.randint(1, 512))
        ending = Ending(Outcome.COMPLETED, usage, latency_s=1.0)
        timed(partial(sched.release, done, ending), release_ns)
        out = timed(partial(sched.poll, fleet.snapshot()), poll_ns)
        assert isinstance(out, list)
        tickets += [t for t in out if isinstance(t, Ticket)]
        rejected = [d for d in out if isinstance(d, Decision)]
        if rejected:
            raise SystemExit(f"unexpected rejects in steady state: {rejected[0].reason}")
        req = request(seq, args.tenants, rng, clock.now)
        timed(partial(sched.submit, req, fleet.snapshot()), submit_ns)
        seq += 1
        timed(_nothing, floor_ns)
        timed(fixed_work, fixed_ns)
    stats = sched.stats()
    where = Path(sys.modules["policies"].__file__ or "?").parent
    print(f"decision core: {core()} (policies from {where})")
    print(
        f"queued {stats.queued} across {args.tenants} tenants, in flight {stats.in_flight} "
        f"on {args.backends} backends; {args.ops} steady-state iterations; gc {args.gc} "
        f"(thresholds {gc.get_threshold()})"
    )
    rows = (
        ("submit (queued)", submit_ns),
        ("poll (dispatch 1)", poll_ns),
        ("release", release_ns),
        ("submit while filling", fill_ns),
        ("ref: timer floor", floor_ns),
        ("ref: fixed work", fixed_ns),
    )
    for name, samples in rows:
        print(_line(name, samples))
    ref = statistics.median(fixed_ns[1])
    ratios = ", ".join(
        f"{name.split()[0]} {statistics.median(s[1]) / ref:.2f}" for name, s in rows[:3]
    )
    print(f"cpu p50 in units of the fixed work's p50 (compares runs across machine load): {ratios}")
    return 0


def _nothing() -> None:
    return None


def _line(name: str, samples: Samples) -> str:
    parts = []
    for kind, ns in zip(("wall", "cpu"), samples, strict=True):
        us = sorted(s / 1000 for s in ns)
        p99 = us[min(len(us) - 1, int(0.99 * len(us)))]
        parts.append(f"{kind} p50 {statistics.median(us):6.1f} p99 {p99:7.1f} max {us[-1]:8.1f}")
    return f"{name:<21} {' | '.join(parts)} us (n={len(samples[0])})"


if __name__ == "__main__":
    raise SystemExit(main())
