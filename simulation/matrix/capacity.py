"""Capacity, measured: the simulator runs the workload's main tenant against the cell's
engines, saturated and alone, with nothing in the gateway's way.

- *rate*: requests completed per second with twice as many clients as the engines have
  slots, none of them thinking (the engines never idle);
- *service*: the mean latency of one request with one client, nothing else running.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from emulator.profile import Profile
from simulation.matrix.loop import MatrixSimulation, Request
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


def measure_capacity(
    workload: Workload, profile: Profile, backends: int, duration_s: float, seed: int = 1
) -> Capacity:
    main = workload.main(profile)
    warmup = duration_s / 4
    slots = profile.engine.max_num_seqs * backends
    flood = replace(main, clients=2 * slots, think_mean_s=0.0)
    sim = MatrixSimulation(
        tenants=[flood],
        policy=NEUTRAL,
        profile=profile,
        backends=backends,
        duration_s=duration_s,
        seed=seed,
        probe=False,
    )
    ran = sim.run().requests
    done = [r for r in ran if r.finished is not None and warmup <= r.finished < duration_s]
    rate = len(done) / (duration_s - warmup)
    one = replace(main, clients=1, think_mean_s=0.0)
    sim = MatrixSimulation(
        tenants=[one],
        policy=NEUTRAL,
        profile=profile,
        backends=backends,
        duration_s=duration_s,
        seed=seed,
        probe=False,
    )
    alone = _window(sim.run().requests, 0.0, duration_s)
    service = sum((r.finished or 0.0) - r.first_submit for r in alone) / max(1, len(alone))
    return Capacity(rate_per_s=rate, service_s=service)
