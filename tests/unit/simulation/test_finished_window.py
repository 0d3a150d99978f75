"""The window of finished requests keeps its latencies sorted and its tokens summed as
requests come and go: at every refresh its signals are those worked out from the requests
in it, one by one."""

from __future__ import annotations

import random
from collections import deque

import pytest

from emulator.engine_values import FinishedRequest
from simulation.engine_adapter import _FinishedWindow
from simulation.metrics import nearest_rank, percentile


def finished(rng: random.Random, at: float) -> FinishedRequest:
    arrival = at - rng.choice((1.0, 2.0, rng.uniform(0.1, 20.0)))  # ties among the latencies
    scheduled = rng.uniform(arrival, at)
    first = rng.uniform(scheduled, at)
    return FinishedRequest(
        "r", rng.randint(1, 900), rng.randint(1, 600), "length", arrival, scheduled, first, at, 0
    )


@pytest.mark.parametrize("seed", range(6))
def test_the_window_reads_as_its_requests_one_by_one(seed: int) -> None:
    rng = random.Random(seed)
    window, plain = _FinishedWindow(), deque[FinishedRequest]()
    now = 0.0
    for _ in range(600):
        now += rng.expovariate(2.0)
        for _ in range(rng.choice((0, 1, 1, 4))):
            f = finished(rng, now)
            window.add(f)
            plain.append(f)
        cutoff = now - rng.uniform(0.0, 30.0)
        window.drop_before(cutoff)
        while plain and plain[0].finished_at < cutoff:
            plain.popleft()
        assert len(window) == len(plain)
        if not plain:
            continue
        for q in (50.0, 90.0):
            assert nearest_rank(window.queue_s, q) == percentile([f.queue_time_s for f in plain], q)
        assert nearest_rank(window.ttft_s, 90.0) == percentile([f.ttft_s for f in plain], 90.0)
        assert nearest_rank(window.e2e_s, 90.0) == percentile([f.e2e_s for f in plain], 90.0)
        assert window.output_tokens == sum(f.output_tokens for f in plain)
        assert window.prompt_tokens == sum(f.prompt_tokens for f in plain)
