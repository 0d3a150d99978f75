"""The diagnosis as text (docs/signals.md, "sluicegate diagnose"): where the time goes,
whether the queue comes in waves,
the measured capacity and its derivation, and the most any optimization could gain.

Pure: takes ``DerivedSignals``, returns lines. ``sluicegate diagnose`` prints them.
"""

from __future__ import annotations

import math

from gateway.backends.scrape.derive import Capacity, PhaseBreakdown, Quantile, gain_bound
from gateway.backends.scrape.signals import DerivedSignals

WAVES_RATIO = 10.0
"""p90 / p50 of queue time above which the wave fingerprint is reported."""
FRACTIONS_REMOVED = (0.25, 0.5, 1.0)


def render(title: str, d: DerivedSignals) -> list[str]:
    span = "cumulative since server start" if d.since_start else "between two scrapes"
    if d.window_s > 0:
        span = f"window {d.window_s:.1f} s"
    lines = [f"== {title} ({span})", ""]
    lines += _now(d)
    lines += _phases(d.phases)
    lines += _queue(d.latency.get("queue_time", {}))
    lines += _capacity(d.capacity, d.capacity_basis)
    return lines


def _now(d: DerivedSignals) -> list[str]:
    reasons = ", ".join(f"{k} {v:g}" for k, v in sorted(d.waiting_by_reason.items()))
    kv = "?" if d.kv_cache_usage is None else f"{d.kv_cache_usage:.1%}"
    out = [
        f"Now: running {_num(d.running)}, waiting {_num(d.waiting)}"
        + (f" ({reasons})" if reasons else "")
        + f", KV cache {kv}"
    ]
    if d.rates:
        rates = ", ".join(f"{k} {v:.2f}" for k, v in sorted(d.rates.items()))
        out.append(f"Rates over the window: {rates}")
    return [*out, ""]


def _phases(p: PhaseBreakdown | None) -> list[str]:
    if p is None or p.requests <= 0:
        return ["Where the time goes: no request finished in the window.", ""]
    rows = [("Queue", p.queue_s), ("Prefill", p.prefill_s), ("Decode", p.decode_s)]
    out = [
        f"Where the time goes, mean per request over {p.requests:g} requests:",
        "| Phase      | Per request | Share  |",
        "|------------|-------------|--------|",
    ]
    out += [f"| {name:<10} | {sec:>9.3f} s | {p.share(sec):>6.1%} |" for name, sec in rows]
    out.append(f"| {'Other':<10} | {p.other_s:>9.3f} s | {p.share(p.other_s):>6.1%} |")
    out.append(f"| {'End to end':<10} | {p.e2e_s:>9.3f} s |        |")
    out += ["", "Largest possible e2e gain of an optimization (share x fraction it removes):"]
    out.append("  phase    " + "".join(f"  remove {f:>4.0%}" for f in FRACTIONS_REMOVED))
    for name, sec in rows:
        gains = "".join(f"  {gain_bound(p.share(sec), f):>11.1%}" for f in FRACTIONS_REMOVED)
        out.append(f"  {name.lower():<8} {gains}")
    return [*out, ""]


def _queue(q: dict[float, Quantile]) -> list[str]:
    p50, p90 = q.get(0.5), q.get(0.9)
    if p50 is None or p90 is None:
        return ["Queue time: no request finished in the window.", ""]
    out = [f"Queue time: p50 {_quantile(p50)}, p90 {_quantile(p90)}"]
    if p90.in_first_bucket:
        out.append(
            f"  Both under {p90.upper:g} s, the first bucket: the histogram cannot tell them apart."
        )
    elif p50.value > 0 and p90.value / max(p50.value, 1e-9) >= WAVES_RATIO:
        floor = p90.lower / p50.upper if p50.upper > 0 and not math.isinf(p50.upper) else 0.0
        out += [
            f"  p90 is {p90.value / p50.value:.0f}x p50"
            + (f" (at least {floor:.0f}x given the bucket bounds)." if floor > 1 else "."),
            "  That is the 'waves' fingerprint: most requests get a slot at once and",
            "  a minority waits for a second wave that starts only when the first one finishes.",
            "  waves = ceil(simultaneous requests / concurrency limit). Look at bursts and the",
            "  limit in front of the server before mean utilization, which hides the waves.",
        ]
    else:
        out.append(f"  p90/p50 below {WAVES_RATIO:g}x: no wave fingerprint.")
    return [*out, ""]


def _capacity(cap: Capacity | None, basis: str) -> list[str]:
    if cap is None:
        return ["Capacity: unknown.", ""]
    kv = "?" if cap.kv_cache_tokens is None else f"{cap.kv_cache_tokens:.0f}"
    prompt = "?" if cap.p90_prompt_tokens is None else f"{cap.p90_prompt_tokens:.1f}"
    bound = "?" if cap.kv_bound is None else f"{cap.kv_bound:.1f}"
    seqs = "not configured" if cap.max_num_seqs is None else str(cap.max_num_seqs)
    value = "unknown" if cap.value is None else f"{cap.value:.1f} concurrent requests"
    out = [
        f"Capacity: {value}, limited by {cap.limited_by}",
        f"  = min(KV-cache tokens / p90 prompt tokens, max_num_seqs)"
        f" = min({kv} / {prompt} = {bound}, {seqs})",
        "  KV-cache tokens: vllm:cache_config_info (kv_cache_size_tokens, or"
        " num_gpu_blocks x block_size)",
        f"  p90 prompt: vllm:request_prompt_tokens histogram ({basis})",
    ]
    with_output = cap.kv_bound_with_output
    if with_output is not None and with_output < (cap.value or math.inf):
        out += [
            f"  Outputs are long: KV tokens / (p90 prompt + p90 output {cap.p90_output_tokens:.0f})"
            f" = {with_output:.1f}.",
            "  The KV cache fills with generated tokens before the prompt-only bound is reached:",
            "  expect preemptions above that many concurrent requests.",
        ]
    if cap.max_num_seqs is None:
        out.append(
            "  max_num_seqs is in no vLLM metric: pass --max-num-seqs or set it in the config."
        )
    return [*out, ""]


def _quantile(q: Quantile) -> str:
    if q.in_first_bucket and not q.in_overflow:
        return f"<= {q.upper:g} s (first bucket)"
    if q.in_overflow:
        return f"> {q.lower:g} s (above the last bucket)"
    return f"{q.value:.3g} s (bucket {q.resolution} s)"


def _num(value: float | None) -> str:
    return "?" if value is None else f"{value:g}"
