"""The emulator's /metrics against a real vLLM 0.32 dump: same families, types, labels, buckets."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from emulator.engine import Engine
from emulator.metrics import EmulatorMetrics
from emulator.profile import load_profile

FIXTURES = Path(__file__).parents[2] / "fixtures"
# Each dump with the --max-model-len of the run that produced it (../shared/notes/vllm-cpu.md):
# vLLM sizes its token-count histograms by it.
DUMPS = [("vllm-0.32-metrics-under-load.txt", 2048), ("vllm-0.32-metrics-preemption.txt", 1024)]

Shape = dict[str, tuple[str, frozenset[str], tuple[float, ...]]]


def family_shapes(exposition: str) -> Shape:
    """name -> (type, label names, bucket bounds) for every ``vllm:`` family."""
    shapes: Shape = {}
    for family in text_string_to_metric_families(exposition):
        if not family.name.startswith("vllm:"):
            continue
        labels = frozenset(k for s in family.samples for k in s.labels if k != "le")
        bounds = sorted({float(s.labels["le"]) for s in family.samples if "le" in s.labels})
        shapes[family.name] = (family.type, labels, tuple(bounds))
    return shapes


def emulator_exposition(max_model_len: int | None = None) -> str:
    config = load_profile("cpu-medium").engine
    if max_model_len is not None:
        config = config.model_copy(update={"max_model_len": max_model_len})
    metrics = EmulatorMetrics("medium", config)
    metrics.sync(Engine(config))
    return metrics.render().decode()


@pytest.mark.parametrize(("dump", "max_model_len"), DUMPS)
def test_families_match_a_real_vllm_dump(dump: str, max_model_len: int) -> None:
    real = family_shapes((FIXTURES / dump).read_text(encoding="utf-8"))
    ours = family_shapes(emulator_exposition(max_model_len))
    assert sorted(set(real) ^ set(ours)) == []
    mismatched = {name: (real[name], ours[name]) for name in real if real[name] != ours[name]}
    assert mismatched == {}


def test_identity_labels_carry_the_served_model_and_engine_index() -> None:
    for family in text_string_to_metric_families(emulator_exposition()):
        for sample in family.samples:
            assert sample.labels.get("model_name", "medium") == "medium"
            assert sample.labels.get("engine", "0") == "0"


def sample_value(exposition: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.name == name and labels.items() <= sample.labels.items():
                return float(sample.value)
    raise KeyError(name)


def test_metrics_follow_the_engine() -> None:
    profile = load_profile("cpu-medium")
    engine, metrics = Engine(profile.engine), EmulatorMetrics("m", profile.engine)
    n = profile.engine.max_num_seqs + 2
    for i in range(n):
        engine.add(f"r{i}", prompt_tokens=50, output_tokens=7, now=0.0)
        metrics.on_admitted(f"r{i}", 7)
    step = engine.step(0.0)
    metrics.on_step(step)
    metrics.sync(engine)
    busy = metrics.render().decode()
    assert sample_value(busy, "vllm:num_requests_running") == profile.engine.max_num_seqs
    assert sample_value(busy, "vllm:num_requests_waiting") == n - profile.engine.max_num_seqs
    assert 0.0 < sample_value(busy, "vllm:kv_cache_usage_perc") <= 1.0
    now = step.ended_at
    while engine.has_work:
        step = engine.step(now)
        metrics.on_step(step)
        now = step.ended_at
    metrics.sync(engine)
    done = metrics.render().decode()
    assert sample_value(done, "vllm:request_success_total", finished_reason="length") == n
    assert sample_value(done, "vllm:generation_tokens_total") == n * 7
    assert sample_value(done, "vllm:prompt_tokens_total") == n * 50
    assert sample_value(done, "vllm:e2e_request_latency_seconds_count") == n
    assert sample_value(done, "vllm:inter_token_latency_seconds_count") == n * 6
    assert sample_value(done, "vllm:num_requests_running") == 0
    assert sample_value(done, "vllm:kv_cache_usage_perc") == 0.0


def test_admission_rejections_are_counted_by_reason() -> None:
    profile = load_profile("cpu-medium")
    metrics = EmulatorMetrics("m", profile.engine)
    metrics.on_rejected("max_num_queued_reqs")
    text = metrics.render().decode()
    assert sample_value(text, "vllm:admission_rejections_total", reason="max_num_queued_reqs") == 1
    assert (
        sample_value(text, "vllm:admission_rejections_total", reason="max_num_queued_tokens") == 0
    )
