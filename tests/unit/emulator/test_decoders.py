"""A step that schedules every running sequence whole counts the plain decoders' tokens once
(``_Decoders``): each step's result and the engine it leaves are those of the step taken
one sequence at a time, whatever joins, finishes, preempts, aborts or runs ahead."""

from __future__ import annotations

import random

import pytest

from emulator.engine import Engine, StepResult
from emulator.prefix_hash import block_hashes
from tests.unit.emulator.test_decode_ahead import make_config, state


class EachStep(Engine):
    """The engine that steps one sequence at a time, always."""

    def _step_in_full(self, now: float) -> StepResult | None:
        return None


class CountedSteps(Engine):
    """The engine as it ships, counting the steps that took the decoders as one."""

    in_full = 0

    def _step_in_full(self, now: float) -> StepResult | None:
        result = super()._step_in_full(now)
        self.in_full += result is not None and self._decoders.size > 0
        return result


def outcome(step: StepResult) -> tuple[object, ...]:
    """A step's result, the order of what it lists included."""
    return (
        step.started_at,
        step.duration_s,
        step.prefill_tokens,
        step.decode_seqs,
        list(step.tokens_emitted.items()),
        list(step.ttft_s.items()),
        step.new_prompt_tokens,
        step.new_cached_tokens,
        step.prefix_cache_queries,
        step.prefix_cache_hits,
        step.inter_token_latencies_s,
        step.finished,
        step.preempted,
    )


def drive(engine: Engine, seed: int, steps: int) -> list[object]:
    """Random traffic (shared prompts, aborts, runs ahead) through ``engine``: what it said
    at each step and its state after."""
    rng = random.Random(seed)
    block = engine.config.block_size
    said: list[object] = []
    now, ids = 0.0, 0
    for _ in range(steps):
        for _ in range(rng.choice((0, 0, 0, 1, 3))):
            prompt = [rng.randint(0, 2) for _ in range(rng.randint(1, 40))]
            hashes = block_hashes(prompt, block) if rng.random() < 0.5 else ()
            engine.add(f"r{ids}", len(prompt), rng.randint(1, 60), now, block_hashes=hashes)
            ids += 1
        if rng.random() < 0.05 and ids:
            said.append(engine.abort(f"r{rng.randrange(ids)}"))
        if rng.random() < 0.1:
            run = engine.decode_ahead(now, now + rng.uniform(0.0, 0.5))
            if run is not None:
                said.append((run.ended_at, run.batch, run.itl_sums))
                now = run.ended_at
        if not engine.has_work:
            now += 0.1
            continue
        step = engine.step(now)
        said.append(outcome(step))
        said.append(state(engine))
        now = step.ended_at
    return said


@pytest.mark.parametrize(
    "config",
    [
        {"max_num_seqs": 6, "num_gpu_blocks": 80},
        {"max_num_seqs": 24, "num_gpu_blocks": 60, "max_num_batched_tokens": 48},
        {"max_num_seqs": 48, "num_gpu_blocks": 400, "max_num_batched_tokens": 64},
    ],
)
@pytest.mark.parametrize("seed", range(8))
def test_the_decoders_counted_once_step_as_each_sequence_would(
    seed: int, config: dict[str, int]
) -> None:
    counted = CountedSteps(make_config(**config))
    each = EachStep(make_config(**config))
    assert drive(counted, seed, 400) == drive(each, seed, 400)
    assert counted.in_full > 0  # (else the comparison says nothing of them)


def test_a_member_reports_its_tokens_as_it_goes() -> None:
    engine = Engine(make_config())
    engine.add("a", 4, 30, now=0.0)
    now = 0.0
    for _ in range(5):
        now = engine.step(now).ended_at
    assert engine._decoders.size == 1
    assert engine.generated_tokens("a") == 5
    assert engine.generated_tokens("gone") is None
