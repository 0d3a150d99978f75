"""Capacity, measured: the simulator runs the workload's main tenant against the cell's
engines, saturated and alone, with nothing in the gateway's way.

- *rate*: requests completed per second with twice as many clients as the engines have
  slots, none of them thinking (the engines never idle), over three quarters of the
  duration after a warmup. The warmup is the first quarter, unless the flood has finished
  nothing by then (its clients all start at once, and prompts long enough for that many
  slots keep the engines prefilling for minutes: ``noisy-3000`` on ``mi300x``); then it
  lasts until every client's first request has finished, and the window is at least that
  long (the flood's clients, started together, come back in waves of about that period);
- *service*: the mean latency of one request with one client, nothing else running.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from emulator.profile import Profile
from simulation.matrix.loop import MatrixSimulation, Request
from simulation.matrix.traffic import Tenant
from simulation.matrix.workloads import Capacity, Workload

NEUTRAL: dict[str, Any] = {
    "name": "measure",
    "queue": {"max_wait_s": 1.0e9},
    "ladder": {"steps": []},
    "prefill_backlog": {"enabled": False},
}
"""Dispatch while the engine reports room, never refuse, never degrade."""


def _window(requests: list[Request], start: float, end: float) -> list[Request]:
    return [r for r in requests if start <= r.first_submit < end and r.finished is not None]


def run_alone(
    tenant: Tenant, profile: Profile, backends: int, duration_s: float, seed: int
) -> list[Request]:
    """``tenant``'s requests on the cell's engines, no other tenant and no gateway policy."""
    sim = MatrixSimulation.alone(
        tenant, NEUTRAL, profile, backends, duration_s=duration_s, seed=seed
    )
    return sim.run().requests


def first_round_done(requests: list[Request]) -> float:
    """When every client's first request had finished: the flood's start washed out."""
    first: dict[int, Request] = {}
    for r in requests:
        if r.client not in first or r.first_submit < first[r.client].first_submit:
            first[r.client] = r
    return max(r.finished if r.finished is not None else float("inf") for r in first.values())


def _saturated_rate(
    flood: Tenant, profile: Profile, backends: int, duration_s: float, seed: int
) -> float:
    warmup, span, run = duration_s / 4, duration_s * 3 / 4, duration_s
    ran = run_alone(flood, profile, backends, run, seed)
    if min((r.finished for r in ran if r.finished is not None), default=run) >= warmup:
        while True:  # the flood's arrivals must cover a window of a first round at least
            warmup = first_round_done(ran)
            span = max(duration_s * 3 / 4, warmup)
            if warmup + span <= run:
                break
            run = warmup + span
            ran = run_alone(flood, profile, backends, run, seed)
    done = [r for r in ran if r.finished is not None and warmup <= r.finished < warmup + span]
    return len(done) / span


def measure_capacity(
    workload: Workload, profile: Profile, backends: int, duration_s: float, seed: int = 1
) -> Capacity:
    main = workload.main(profile)
    slots = profile.engine.max_num_seqs * backends
    flood = replace(main, clients=2 * slots, think_mean_s=0.0)
    rate = _saturated_rate(flood, profile, backends, duration_s, seed)
    one = replace(main, clients=1, think_mean_s=0.0)
    alone = _window(run_alone(one, profile, backends, duration_s, seed), 0.0, duration_s)
    service = sum((r.finished or 0.0) - r.first_submit for r in alone) / max(1, len(alone))
    return Capacity(rate_per_s=rate, service_s=service)
