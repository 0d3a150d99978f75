"""The mi300x profile reproduces the measurements it was fitted to: Oracle's vLLM
benchmark_latency sweep on 8x MI300X, Llama 3.1 405B FP8 (emulator/profiles/mi300x.yaml
cites it). Each published batch is replayed on the emulator's engine in engine time."""

from __future__ import annotations

import pytest

from emulator.engine import Engine
from emulator.profile import load_profile

PROMPT, OUTPUT = 128, 128
PUBLISHED_LATENCY_S = {  # batch size -> average latency of the whole batch, as published
    1: 3.530,
    2: 3.583,
    4: 3.734,
    8: 3.974,
    16: 4.375,
    32: 5.130,
    64: 6.919,
    128: 10.340,
    256: 17.750,
}
TOLERANCE = 0.03


def replay_batch(batch: int) -> float:
    """Engine seconds from a batch of identical requests arriving together to the last token."""
    engine = Engine(load_profile("mi300x").engine)
    for i in range(batch):
        engine.add(f"r{i}", PROMPT, OUTPUT, now=0.0)
    now = 0.0
    while engine.has_work:
        now = engine.step(now).ended_at
    return now


@pytest.mark.parametrize("batch", sorted(PUBLISHED_LATENCY_S))
def test_the_profile_replays_the_published_sweep(batch: int) -> None:
    published = PUBLISHED_LATENCY_S[batch]
    assert replay_batch(batch) == pytest.approx(published, rel=TOLERANCE)
