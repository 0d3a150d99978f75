"""The scraper's reading of the emulator's /metrics: a contract between two rooms.

The emulator exposes vLLM 0.32's families; if a name, label or bucket drifts on either side,
these signals go None and the tests fail.
"""

from __future__ import annotations

import pytest

from emulator.engine import Engine
from emulator.metrics import EmulatorMetrics
from emulator.profile import load_profile
from gateway.backends.scrape.engines import VLLM_0_32
from gateway.backends.scrape.parse import parse_narrow, wanted_names
from gateway.backends.scrape.sample import MetricsSample, extract
from gateway.backends.scrape.signals import Observation, SignalWindow

WANTED = wanted_names(VLLM_0_32)


def scrape(metrics: EmulatorMetrics, engine: Engine) -> MetricsSample:
    metrics.sync(engine)
    return extract(parse_narrow(metrics.render().decode(), WANTED), VLLM_0_32)


def test_a_burst_beyond_the_slots_reads_as_waiting_then_as_queue_time() -> None:
    config = load_profile("cpu-medium").engine
    engine, metrics = Engine(config), EmulatorMetrics("m", config)
    window = SignalWindow(window_s=1e9)
    window.add(Observation(0.0, scrape(metrics, engine)))
    burst = config.max_num_seqs + 3
    for i in range(burst):
        engine.add(f"r{i}", prompt_tokens=50, output_tokens=20, now=0.0)
        metrics.on_admitted(f"r{i}", 20)
    step = engine.step(0.0)
    metrics.on_step(step)
    busy = scrape(metrics, engine)
    assert (busy.running, busy.waiting) == (config.max_num_seqs, 3)
    assert busy.kv_cache_tokens == config.kv_cache_size_tokens
    now = step.ended_at
    while engine.has_work:
        step = engine.step(now)
        metrics.on_step(step)
        now = step.ended_at
    window.add(Observation(now, scrape(metrics, engine)))
    derived = window.derive(max_num_seqs=config.max_num_seqs)
    assert derived is not None and derived.phases is not None and derived.capacity is not None
    assert derived.phases.requests == burst
    assert derived.phases.queue_s > 0  # the 3 that waited for a slot
    queue = derived.latency["queue_time"]
    assert queue[0.9].value > queue[0.5].value  # the second wave
    assert derived.rates["generation_tokens_per_s"] == pytest.approx(burst * 20 / now)
    p90_prompt = 20 + (50 - 20) * 0.9  # all 50-token prompts fall in the (20, 50] bucket
    expected = min(config.kv_cache_size_tokens / p90_prompt, config.max_num_seqs)
    assert derived.capacity.value == pytest.approx(expected)
