"""The pure engine model: continuous batching as vLLM V1 does it, on a virtual clock."""

from __future__ import annotations

import pytest

from emulator.engine import Engine, EngineBusy, StepResult
from emulator.profile import EngineConfig, StepTimeModel

STEP = StepTimeModel(base_s=0.01, per_prefill_token_s=0.001, per_decode_seq_s=0.002)


def make_config(**overrides: object) -> EngineConfig:
    fields: dict[str, object] = {
        "max_num_seqs": 4,
        "max_num_batched_tokens": 64,
        "num_gpu_blocks": 64,
        "block_size": 16,
        "max_model_len": 512,
        "step_time": STEP,
    }
    fields.update(overrides)
    return EngineConfig.model_validate(fields)


def run_to_end(engine: Engine, now: float = 0.0, limit: int = 100_000) -> list[StepResult]:
    steps: list[StepResult] = []
    for _ in range(limit):
        if not engine.has_work:
            return steps
        step = engine.step(now)
        now = step.ended_at
        steps.append(step)
    raise AssertionError("engine did not drain")


def test_slots_fill_then_waiting_requests_join_as_others_finish() -> None:
    cfg = make_config()
    engine = Engine(cfg)
    n = cfg.max_num_seqs + 3
    for i in range(n):
        engine.add(f"r{i}", prompt_tokens=4, output_tokens=2 if i == 0 else 50, now=0.0)
    first = engine.step(0.0)
    assert engine.num_running == cfg.max_num_seqs
    assert engine.num_waiting == n - cfg.max_num_seqs
    second = engine.step(first.ended_at)
    assert [f.req_id for f in second.finished] == ["r0"]
    third = engine.step(second.ended_at)  # r0's slot goes to the head of the queue
    assert f"r{cfg.max_num_seqs}" in third.tokens_emitted
    assert engine.num_running == cfg.max_num_seqs


def test_long_prompt_is_prefilled_in_budget_sized_chunks() -> None:
    cfg = make_config()
    engine = Engine(cfg)
    prompt = cfg.max_num_batched_tokens * 2 + 5
    engine.add("long", prompt_tokens=prompt, output_tokens=3, now=0.0)
    steps = run_to_end(engine)
    assert [s.prefill_tokens for s in steps[:3]] == [
        cfg.max_num_batched_tokens,
        cfg.max_num_batched_tokens,
        5,
    ]
    assert [bool(s.tokens_emitted) for s in steps] == [False, False, True, True, True]
    assert steps[2].new_prompt_tokens == prompt


def test_decodes_share_the_budget_with_a_prefill_chunk() -> None:
    cfg = make_config()
    engine = Engine(cfg)
    engine.add("a", prompt_tokens=4, output_tokens=20, now=0.0)
    engine.step(0.0)
    engine.add("b", prompt_tokens=cfg.max_num_batched_tokens * 3, output_tokens=2, now=0.0)
    step = engine.step(1.0)
    assert step.decode_seqs == 1
    assert step.prefill_tokens == cfg.max_num_batched_tokens - 1


def test_step_duration_follows_the_profile_for_the_batch_it_ran() -> None:
    cfg = make_config()
    engine = Engine(cfg)
    engine.add("a", prompt_tokens=10, output_tokens=5, now=0.0)
    engine.add("b", prompt_tokens=20, output_tokens=5, now=0.0)
    prefill = engine.step(0.0)
    assert prefill.duration_s == pytest.approx(STEP.duration(30, 0, 0))
    decode = engine.step(prefill.ended_at)
    assert decode.decode_seqs == 2
    assert decode.duration_s == pytest.approx(STEP.duration(0, 2, 30))


def test_waiting_queue_is_first_come_first_served() -> None:
    engine = Engine(make_config(max_num_seqs=1))
    for i in range(5):
        engine.add(f"r{i}", prompt_tokens=3, output_tokens=2, now=float(i) * 1e-3)
    order = [f.req_id for s in run_to_end(engine, now=1.0) for f in s.finished]
    assert order == [f"r{i}" for i in range(5)]


def test_kv_exhaustion_preempts_the_latest_and_recomputes_it() -> None:
    cfg = make_config(num_gpu_blocks=8, max_model_len=128, max_num_batched_tokens=128)
    engine = Engine(cfg)
    for i in range(4):  # each grows to 100 tokens = 7 blocks; together far beyond 8 blocks
        engine.add(f"r{i}", prompt_tokens=20, output_tokens=80, now=0.0)
    steps = run_to_end(engine)
    finished = [f for s in steps for f in s.finished]
    assert sorted(f.req_id for f in finished) == [f"r{i}" for i in range(4)]
    assert all(f.output_tokens == 80 for f in finished)
    assert engine.num_preemptions > 0
    assert sum(f.num_preemptions for f in finished) == engine.num_preemptions
    assert "r0" not in {r for s in steps for r in s.preempted}  # the oldest is never the victim
    assert engine.kv_cache_usage == 0.0


def test_abort_frees_slot_and_blocks_for_the_next_request() -> None:
    cfg = make_config(max_num_seqs=1)
    engine = Engine(cfg)
    engine.add("a", prompt_tokens=40, output_tokens=100, now=0.0)
    engine.add("b", prompt_tokens=4, output_tokens=1, now=0.0)
    engine.step(0.0)
    assert engine.kv_cache_usage > 0.0
    assert engine.abort("a") is True
    assert engine.kv_cache_usage == 0.0
    assert engine.abort("a") is False
    step = engine.step(1.0)
    assert [f.req_id for f in step.finished] == ["b"]
    assert not engine.has_work


def test_abort_of_a_waiting_request_removes_it() -> None:
    engine = Engine(make_config(max_num_seqs=1))
    engine.add("a", prompt_tokens=4, output_tokens=3, now=0.0)
    engine.add("b", prompt_tokens=4, output_tokens=3, now=0.0)
    engine.step(0.0)
    assert engine.abort("b")
    assert engine.num_waiting == 0
    assert [f.req_id for s in run_to_end(engine) for f in s.finished] == ["a"]


def test_max_num_queued_reqs_caps_waiting_plus_running() -> None:
    cfg = make_config(max_num_queued_reqs=3, max_num_seqs=2)
    engine = Engine(cfg)
    for i in range(3):
        engine.add(f"r{i}", prompt_tokens=4, output_tokens=5, now=0.0)
    engine.step(0.0)
    with pytest.raises(EngineBusy) as busy:
        engine.add("over", prompt_tokens=4, output_tokens=5, now=0.0)
    assert busy.value.reason == "max_num_queued_reqs"
    assert "over" not in engine
    run_to_end(engine)
    engine.add("later", prompt_tokens=4, output_tokens=5, now=9.0)


def test_max_num_queued_tokens_caps_the_prefill_backlog() -> None:
    engine = Engine(make_config(max_num_queued_tokens=10))
    engine.add("a", prompt_tokens=12, output_tokens=5, now=0.0)
    with pytest.raises(EngineBusy) as busy:
        engine.add("b", prompt_tokens=1, output_tokens=5, now=0.0)
    assert busy.value.reason == "max_num_queued_tokens"


def test_requests_longer_than_max_model_len_are_refused() -> None:
    cfg = make_config()
    engine = Engine(cfg)
    with pytest.raises(ValueError):
        engine.add("x", prompt_tokens=cfg.max_model_len, output_tokens=1, now=0.0)


def test_timestamps_give_vllm_latency_breakdown() -> None:
    engine = Engine(make_config(max_num_seqs=1))
    engine.add("a", prompt_tokens=8, output_tokens=4, now=0.0)
    engine.add("b", prompt_tokens=8, output_tokens=4, now=0.0)
    steps = run_to_end(engine)
    a, b = (f for s in steps for f in s.finished)
    assert a.queue_time_s == 0.0
    assert b.scheduled_at == pytest.approx(a.finished_at)  # b waited for a's slot
    assert b.queue_time_s == pytest.approx(a.e2e_s)
    assert b.e2e_s == pytest.approx(b.queue_time_s + b.prefill_time_s + b.decode_time_s)
    assert b.ttft_s == pytest.approx(b.queue_time_s + b.prefill_time_s)
    itl = [x for s in steps for x in s.inter_token_latencies_s]
    assert len(itl) == 2 * (4 - 1)
    assert sum(itl) == pytest.approx(a.decode_time_s + b.decode_time_s)


def test_an_idle_engine_takes_no_time() -> None:
    step = Engine(make_config()).step(5.0)
    assert step.duration_s == 0.0
    assert not step.tokens_emitted
