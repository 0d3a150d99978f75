"""``Engine.decode_ahead`` runs plain decode steps back to back: the engine it leaves is the
one ``step`` leaves after the same steps, and it stops wherever a step would be seen (a
finish, a request that could join, a preemption, the caller's next event)."""

from __future__ import annotations

import copy
import random

import pytest

from emulator.engine import Engine, _Seq
from emulator.profile import EngineConfig, StepTimeModel
from tests.unit.emulator.test_engine import make_config as engine_config

STEP = StepTimeModel(
    base_s=0.01, per_prefill_token_s=0.001, per_decode_seq_s=0.002, per_context_token_s=1e-6
)


SMALL = dict(max_num_seqs=6, num_gpu_blocks=80, block_size=4, max_model_len=128)
"""Small blocks, which sequences cross often."""


def make_config(**overrides: object) -> EngineConfig:
    """A step time that grows with the context, on ``SMALL``."""
    return engine_config(**{**SMALL, "step_time": STEP, **overrides})


def running(engine: Engine) -> list[_Seq]:
    """The running sequences, each one's counts up to date."""
    engine._sync_all()
    return list(engine._running)


def state(engine: Engine) -> list[tuple[object, ...]]:
    seqs = running(engine) + list(engine._waiting)
    return [
        (s.req_id, s.computed, s.generated, list(s.blocks), s.last_token_at, s.preemptions)
        for s in seqs
    ] + [(list(engine._pool._free), engine.num_preemptions)]


def plain_steps(engine: Engine, now: float, n: int) -> tuple[float, list[float]]:
    """``n`` steps one at a time, each one that no caller would see: the end and each
    step's inter-token latency sum."""
    sums: list[float] = []
    for _ in range(n):
        result = engine.step(now)
        assert not result.finished and not result.preempted and not result.ttft_s
        sums.append(sum(result.inter_token_latencies_s))
        now = result.ended_at
    return now, sums


def seen(engine: Engine, now: float) -> bool:
    """Whether the next step (tried on a copy) finishes, preempts or starts decoding."""
    result = copy.deepcopy(engine).step(now)
    return bool(result.finished or result.preempted or result.ttft_s)


def decoding_engine(seed: int, **overrides: object) -> tuple[Engine, float]:
    rng = random.Random(seed)
    engine = Engine(make_config(**overrides))
    for i in range(rng.randint(1, engine.config.max_num_seqs)):
        engine.add(f"r{i}", rng.randint(1, 30), rng.randint(20, 90), now=0.0)
    now = 0.0
    while any(s.last_token_at != now for s in running(engine)) or not engine._running:
        now = engine.step(now).ended_at
    return engine, now


@pytest.mark.parametrize("seqs", [6, 48])
@pytest.mark.parametrize("seed", range(12))
def test_the_run_leaves_the_engine_stepping_one_at_a_time_leaves(seed: int, seqs: int) -> None:
    config = {"max_num_seqs": seqs, "num_gpu_blocks": 40 * seqs}
    fast, now = decoding_engine(seed, **config)
    slow, _ = decoding_engine(seed, **config)
    until = now + random.Random(seed).uniform(0.05, 2.0)
    run = fast.decode_ahead(now, until)
    steps = 0 if run is None else len(run.itl_sums)
    end, sums = plain_steps(slow, now, steps)
    assert state(fast) == state(slow)
    if not slow.num_waiting:  # (else it may stop early: a step could admit one)
        assert end >= until or seen(slow, end)
    if run is None:
        return
    assert run.ended_at == end  # the same float: each step's end is the last one's plus it
    assert list(run.itl_sums) == sums  # each step's latencies added as ``sum`` adds them
    assert run.batch == slow.num_running


def test_it_stops_before_the_step_that_finishes_a_sequence() -> None:
    engine = Engine(make_config())
    engine.add("short", 4, 6, now=0.0)
    engine.add("long", 4, 60, now=0.0)
    now = engine.step(0.0).ended_at  # both prefilled: one token each
    run = engine.decode_ahead(now, float("inf"))
    assert run is not None and len(run.itl_sums) == 4  # tokens 2-5; the 6th finishes it
    assert engine.step(run.ended_at).finished[0].req_id == "short"


def test_nothing_runs_ahead_while_a_waiting_request_could_join() -> None:
    engine = Engine(make_config())
    engine.add("a", 4, 60, now=0.0)
    now = engine.step(0.0).ended_at
    engine.add("b", 4, 60, now=now)
    assert engine.decode_ahead(now, float("inf")) is None


def test_a_full_batch_runs_ahead_past_the_waiting_queue() -> None:
    engine = Engine(make_config(max_num_seqs=2))
    for name in ("a", "b", "c"):
        engine.add(name, 4, 60, now=0.0)
    now = engine.step(0.0).ended_at
    run = engine.decode_ahead(now, now + 0.1)
    assert run is not None and engine.num_waiting == 1
    assert run.ended_at >= now + 0.1 > run.ended_at - (STEP.base_s + 1.0)


def test_a_step_starts_only_before_the_callers_next_event() -> None:
    engine = Engine(make_config())
    engine.add("a", 4, 100, now=0.0)
    now = engine.step(0.0).ended_at
    until = now + 0.05
    run = engine.decode_ahead(now, until)
    assert run is not None
    # its last step started before ``until`` and ended at or after it
    last = STEP.duration(0, 1, 4 + len(run.itl_sums))
    assert run.ended_at - last < until <= run.ended_at
    assert engine.decode_ahead(run.ended_at, run.ended_at) is None


def test_it_stops_where_a_step_would_preempt() -> None:
    # 3 sequences, 4-token blocks, 8 blocks: they fill the pool as they decode
    config = make_config(num_gpu_blocks=8, max_num_seqs=3, max_model_len=32)
    fast, slow = Engine(config), Engine(config)
    for engine in (fast, slow):
        for name in ("a", "b", "c"):
            engine.add(name, 4, 20, now=0.0)
    now = fast.step(0.0).ended_at
    run = fast.decode_ahead(now, float("inf"))
    assert run is not None
    step = fast.step(run.ended_at)
    assert step.preempted  # the step after the run needed a block none had
    t = slow.step(0.0).ended_at
    while not (result := slow.step(t)).preempted:
        t = result.ended_at
    assert result.started_at == run.ended_at
    assert state(fast) == state(slow)
