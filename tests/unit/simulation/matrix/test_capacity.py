"""The capacity that defines a cell's 1x: a saturated flood's steady rate."""

from __future__ import annotations

from dataclasses import replace

from emulator.profile import load_profile
from simulation.matrix.capacity import measure_capacity, run_alone
from simulation.matrix.cells import Cell
from simulation.matrix.measure import cell_tenants
from simulation.matrix.workloads import WORKLOADS


def test_a_flood_still_prefilling_after_the_warmup_is_measured_at_its_steady_rate() -> None:
    # 2,048 clients of 3,000-token prompts keep mi300x's engine prefilling for six
    # minutes before anything finishes: a window from a quarter of 240 s saw nothing done,
    # and every load of the cell got one flooding client.
    profile, workload = load_profile("mi300x"), WORKLOADS["noisy-3000"]
    cap = measure_capacity(workload, profile, backends=1, duration_s=240.0)

    flood = replace(workload.main(profile), clients=2 * profile.engine.max_num_seqs)
    ran = run_alone(flood, profile, 1, 3000.0, seed=1)
    steady = [r for r in ran if r.finished is not None and 1500.0 <= r.finished < 3000.0]
    assert abs(cap.rate_per_s / (len(steady) / 1500.0) - 1) < 0.1

    noisy = {
        load: next(
            t.clients
            for t in cell_tenants(Cell("noisy-3000", "mi300x", load, 1), cap)
            if t.name == "noisy"
        )
        for load in (1.0, 4.0)
    }
    assert 1 < noisy[1.0] < noisy[4.0]
