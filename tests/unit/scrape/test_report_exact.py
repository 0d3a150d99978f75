"""The diagnosis text line by line for signals whose every number is known: the phase table
and the gain bounds, the queue's waves at and below the ratio that names them, and the
capacity derivation with and without long outputs."""

from __future__ import annotations

import math

from gateway.backends.scrape.derive import Capacity, PhaseBreakdown, Quantile
from gateway.backends.scrape.report import render
from gateway.backends.scrape.signals import DerivedSignals

INF = math.inf


def _signals(**kw: object) -> DerivedSignals:
    base: dict[str, object] = {
        "at": 0.0,
        "window_s": 12.34,
        "running": 3.0,
        "waiting": None,
        "waiting_by_reason": {"deferred": 1.0, "capacity": 2.5},
        "kv_cache_usage": 0.123,
    }
    return DerivedSignals(**(base | kw))  # type: ignore[arg-type]


def _q(value: float, lower: float, upper: float, first: bool = False) -> Quantile:
    return Quantile(0.5, value, lower, upper, first, math.isinf(upper))


def test_the_header_gauges_and_rates() -> None:
    lines = render("b1", _signals(rates={"b_per_s": 2.0, "a_per_s": 0.125}))
    assert lines[:5] == [
        "== b1 (window 12.3 s)",
        "",
        "Now: running 3, waiting ? (capacity 2.5, deferred 1), KV cache 12.3%",
        "Rates over the window: a_per_s 0.12, b_per_s 2.00",
        "",
    ]
    lone = render(
        "b2", _signals(window_s=0.0, since_start=True, waiting_by_reason={}, kv_cache_usage=None)
    )
    assert lone[:4] == [
        "== b2 (cumulative since server start)",
        "",
        "Now: running 3, waiting ?, KV cache ?",
        "",
    ]
    assert render("b3", _signals(window_s=0.0))[0] == "== b3 (between two scrapes)"


def test_the_phase_table_and_the_largest_gains() -> None:
    phases = PhaseBreakdown(requests=8, queue_s=0.5, prefill_s=0.25, decode_s=1.0, e2e_s=2.0)
    lines = render("b", _signals(phases=phases))
    start = lines.index("Where the time goes, mean per request over 8 requests:")
    assert lines[start + 1 : start + 16] == [
        "| Phase      | Per request | Share  |",
        "|------------|-------------|--------|",
        "| Queue      |     0.500 s |  25.0% |",
        "| Prefill    |     0.250 s |  12.5% |",
        "| Decode     |     1.000 s |  50.0% |",
        "| Other      |     0.250 s |  12.5% |",
        "| End to end |     2.000 s |        |",
        "",
        "Largest possible e2e gain of an optimization (share x fraction it removes):",
        "  phase      remove  25%  remove  50%  remove 100%",
        "  queue             6.2%        12.5%        25.0%",
        "  prefill           3.1%         6.2%        12.5%",
        "  decode           12.5%        25.0%        50.0%",
        "",
        "Queue time: no request finished in the window.",
    ]
    empty = PhaseBreakdown(requests=0, queue_s=0, prefill_s=0, decode_s=0, e2e_s=0)
    assert "Where the time goes: no request finished in the window." in render(
        "b", _signals(phases=empty)
    )


def _queue_time(p50: Quantile, p90: Quantile) -> list[str]:
    """The report of a backend whose window holds only these queue-time quantiles."""
    return render("b", _signals(latency={"queue_time": {0.5: p50, 0.9: p90}}))


def test_waves_are_named_from_ten_times_the_median() -> None:
    waves = _queue_time(_q(0.2, 0.0, 0.3, first=True), _q(2.0, 1.0, 10.0))
    at = waves.index("Queue time: p50 <= 0.3 s (first bucket), p90 2 s (bucket 1..10 s)")
    assert waves[at + 1] == "  p90 is 10x p50 (at least 3x given the bucket bounds)."
    assert waves[at + 2].startswith("  That is the 'waves' fingerprint")
    calm = _queue_time(_q(0.2, 0.0, 0.3, first=True), _q(1.99, 1.0, 10.0))
    assert "  p90/p50 below 10x: no wave fingerprint." in calm
    near = _queue_time(_q(0.5, 0.3, 1.0), _q(20.0, 10.0, INF))
    assert "Queue time: p50 0.5 s (bucket 0.3..1 s), p90 > 10 s (above the last bucket)" in near
    assert "  p90 is 40x p50 (at least 10x given the bucket bounds)." in near
    floor_one = _queue_time(_q(0.5, 0.3, 1.0), _q(5.0, 1.0, 10.0))
    assert "  p90 is 10x p50." in floor_one
    both_first = _queue_time(_q(0.1, 0.0, 0.3, first=True), _q(0.28, 0.0, 0.3, first=True))
    assert (
        "  Both under 0.3 s, the first bucket: the histogram cannot tell them apart." in both_first
    )


def test_the_capacity_derivation() -> None:
    cap = Capacity(10.0, 1000.0, 100.0, 10.0, None, p90_output_tokens=400.0)
    lines = render("b", _signals(capacity=cap, capacity_basis="window"))
    at = lines.index("Capacity: 10.0 concurrent requests, limited by kv_cache")
    assert lines[at + 1 : at + 9] == [
        "  = min(KV-cache tokens / p90 prompt tokens, max_num_seqs)"
        " = min(1000 / 100.0 = 10.0, not configured)",
        "  KV-cache tokens: vllm:cache_config_info (kv_cache_size_tokens, or"
        " num_gpu_blocks x block_size)",
        "  p90 prompt: vllm:request_prompt_tokens histogram (window)",
        "  Outputs are long: KV tokens / (p90 prompt + p90 output 400) = 2.0.",
        "  The KV cache fills with generated tokens before the prompt-only bound is reached:",
        "  expect preemptions above that many concurrent requests.",
        "  max_num_seqs is in no vLLM metric: pass --max-num-seqs or set it in the config.",
        "",
    ]
    short = Capacity(8.0, 1000.0, 100.0, 10.0, 8, p90_output_tokens=25.0)
    lines = render("b", _signals(capacity=short, capacity_basis="lifetime"))
    at = lines.index("Capacity: 8.0 concurrent requests, limited by max_num_seqs")
    assert lines[at + 1].endswith("= min(1000 / 100.0 = 10.0, 8)")
    assert lines[at + 3 :] == ["  p90 prompt: vllm:request_prompt_tokens histogram (lifetime)", ""]
    unknown = render("b", _signals(capacity=Capacity(None, None, None, None, None)))
    assert "Capacity: unknown, limited by unknown" in unknown
    assert (
        "  = min(KV-cache tokens / p90 prompt tokens, max_num_seqs)"
        " = min(? / ? = ?, not configured)" in unknown
    )
    assert render("b", _signals())[-2:] == ["Capacity: unknown.", ""]


def test_one_finished_request_has_its_phase_table() -> None:
    one = PhaseBreakdown(requests=1, queue_s=0.5, prefill_s=0.25, decode_s=1.0, e2e_s=2.0)
    assert "Where the time goes, mean per request over 1 requests:" in render(
        "b", _signals(phases=one)
    )
