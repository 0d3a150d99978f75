"""Derived signals of one backend over a sliding window of scrapes (pure; times passed in).

Gauges (running, waiting, KV usage) come from the newest scrape. Rates and quantiles come
from the difference between the newest scrape and the oldest one still covering the window,
so they describe the last ``window_s`` seconds, not the server's lifetime.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from gateway.backends.scrape.derive import (
    Capacity,
    PhaseBreakdown,
    Quantile,
    capacity,
    counter_delta,
    histogram_delta,
    phase_breakdown,
    quantile,
)
from gateway.backends.scrape.sample import Histogram, MetricsSample
from policies.step_latency import StepLatency

QUANTILES = (0.5, 0.9, 0.99)
LATENCY_FIELDS = ("queue_time", "ttft", "e2e_latency")
RATE_FIELDS = {
    "preemptions": "preemptions_per_s",
    "prompt_tokens": "prompt_tokens_per_s",
    "generation_tokens": "generation_tokens_per_s",
    "admission_rejections": "engine_rejections_per_s",
    "request_success": "requests_per_s",
}


@dataclass(frozen=True, slots=True)
class Observation:
    at: float
    """Clock seconds when the scrape's body was complete."""
    sample: MetricsSample


@dataclass(frozen=True, slots=True)
class DerivedSignals:
    """Everything a backend's /metrics told us over one window. None = unknown."""

    at: float
    window_s: float
    """Span actually covered by the rates and quantiles (0 with a single scrape)."""
    running: float | None
    waiting: float | None
    waiting_by_reason: dict[str, float]
    kv_cache_usage: float | None
    rates: dict[str, float] = field(default_factory=dict)
    """``RATE_FIELDS`` values (per second) → rate over the window."""
    latency: dict[str, dict[float, Quantile]] = field(default_factory=dict)
    """``LATENCY_FIELDS`` → {q: Quantile}; absent when no request finished in the window."""
    phases: PhaseBreakdown | None = None
    capacity: Capacity | None = None
    capacity_basis: str = "none"
    """``window`` (prompt p90 over the window) or ``lifetime`` (no prompts in the window)."""
    since_start: bool = False
    """No baseline: histograms and counters cover the server's whole life."""
    prefill_tokens_per_s: float | None = None
    """Prompt tokens per second of prefill time, over the requests that finished in the
    window (their prompt-length and prefill-time histograms' sums)."""
    running_peak: float | None = None
    """The highest ``running`` of every scrape so far (not only the window's)."""
    itl_s: float | None = None
    """Mean inter-token latency over the last second (``step_latency.py``)."""
    itl_floor_s: float | None = None
    """The lowest such mean seen lately: the engine's step time with a light batch."""
    kv_cache_tokens: float | None = None
    """The KV cache's capacity in tokens (the cache-config info gauge)."""
    kv_block_size: int | None = None
    """Tokens per KV block (the cache-config info gauge)."""
    prefix_cache_hit_rate: float | None = None
    """Prompt tokens served by the engine's prefix cache over those looked up, in the window
    (over the server's life when the window looked nothing up); None without the counters."""


def derive(
    baseline: Observation | None,
    newest: Observation,
    max_num_seqs: int | None,
    running_peak: float | None = None,
    step: StepLatency | None = None,
) -> DerivedSignals:
    """Signals between ``baseline`` (None: since the server started) and ``newest``."""
    new = newest.sample
    span = newest.at - baseline.at if baseline is not None else 0.0
    hists = _histogram_deltas(baseline.sample if baseline else None, new)
    cap, basis = _capacity(hists, new, max_num_seqs)
    return DerivedSignals(
        at=newest.at,
        window_s=span,
        running=new.running,
        waiting=new.waiting,
        waiting_by_reason=dict(new.waiting_by_reason),
        kv_cache_usage=new.kv_cache_usage,
        rates=_rates(baseline.sample, new, span) if baseline is not None and span > 0 else {},
        latency=_latency(hists),
        phases=phase_breakdown(
            hists.get("queue_time"),
            hists.get("prefill_time"),
            hists.get("decode_time"),
            hists.get("e2e_latency"),
        ),
        capacity=cap,
        capacity_basis="lifetime" if baseline is None and basis == "window" else basis,
        since_start=baseline is None,
        prefill_tokens_per_s=_prefill_rate(hists),
        running_peak=running_peak,
        itl_s=step.itl_s if step is not None else None,
        itl_floor_s=step.floor_s if step is not None else None,
        kv_cache_tokens=new.kv_cache_tokens,
        kv_block_size=new.kv_block_size,
        prefix_cache_hit_rate=_hit_rate(baseline.sample if baseline else None, new),
    )


def _hit_rate(old: MetricsSample | None, new: MetricsSample) -> float | None:
    queries, hits = new.counters.get("prefix_cache_queries"), new.counters.get("prefix_cache_hits")
    if queries is None or hits is None:
        return None
    if old is not None and "prefix_cache_queries" in old.counters:
        window_q = counter_delta(old.counters["prefix_cache_queries"], queries)
        if window_q > 0:
            window_h = counter_delta(old.counters.get("prefix_cache_hits", 0.0), hits)
            return min(1.0, window_h / window_q)
    return min(1.0, hits / queries) if queries > 0 else None


def _prefill_rate(hists: dict[str, Histogram]) -> float | None:
    prompts, prefill = hists.get("prompt_tokens_per_request"), hists.get("prefill_time")
    if prompts is None or prefill is None or prefill.sum <= 0 or prompts.count <= 0:
        return None
    return prompts.sum / prefill.sum


def _rates(old: MetricsSample, new: MetricsSample, span_s: float) -> dict[str, float]:
    out: dict[str, float] = {}
    for counter, name in RATE_FIELDS.items():
        if counter in old.counters and counter in new.counters:
            out[name] = counter_delta(old.counters[counter], new.counters[counter]) / span_s
    return out


def _histogram_deltas(old: MetricsSample | None, new: MetricsSample) -> dict[str, Histogram]:
    out: dict[str, Histogram] = {}
    for name, hist in new.histograms.items():
        previous = old.histograms.get(name) if old is not None else None
        out[name] = histogram_delta(previous, hist) if previous is not None else hist
    return out


def _latency(hists: dict[str, Histogram]) -> dict[str, dict[float, Quantile]]:
    out: dict[str, dict[float, Quantile]] = {}
    for name in LATENCY_FIELDS:
        hist = hists.get(name)
        estimates = {q: quantile(hist, q) for q in QUANTILES} if hist is not None else {}
        found = {q: e for q, e in estimates.items() if e is not None}
        if found:
            out[name] = found
    return out


def _capacity(
    window: dict[str, Histogram], new: MetricsSample, max_num_seqs: int | None
) -> tuple[Capacity, str]:
    """Prompt p90 over the window, else over the server's lifetime, else no KV term.

    A p90 in the +Inf bucket is only a floor on prompt length, so it bounds nothing.
    """
    for basis, hists in (("window", window), ("lifetime", new.histograms)):
        p90 = _p90(hists.get("prompt_tokens_per_request"))
        if p90 is not None:
            output = _p90(hists.get("generation_tokens_per_request"))
            return capacity(new.kv_cache_tokens, p90, max_num_seqs, output), basis
    fallback = "max_num_seqs" if max_num_seqs is not None else "none"
    return capacity(new.kv_cache_tokens, None, max_num_seqs), fallback


def _p90(hist: Histogram | None) -> float | None:
    est = quantile(hist, 0.9) if hist is not None else None
    return est.value if est is not None and not est.in_overflow else None


class SignalWindow:
    """The scrapes of one backend that cover the last ``window_s`` seconds."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._observations: deque[Observation] = deque()
        self.running_peak: float | None = None
        self.step = StepLatency()

    def add(self, observation: Observation) -> None:
        self._observations.append(observation)
        running = observation.sample.running
        if running is not None and (self.running_peak is None or running > self.running_peak):
            self.running_peak = running
        cutoff = observation.at - self.window_s
        # keep one observation at or before the cutoff: it is the window's baseline
        while len(self._observations) >= 2 and self._observations[1].at <= cutoff:
            self._observations.popleft()
        self.step.add(observation.at, observation.sample.histograms.get("inter_token_latency"))

    @property
    def newest(self) -> Observation | None:
        return self._observations[-1] if self._observations else None

    def derive(self, max_num_seqs: int | None) -> DerivedSignals | None:
        if not self._observations:
            return None
        newest = self._observations[-1]
        baseline = self._observations[0] if len(self._observations) >= 2 else newest
        return derive(baseline, newest, max_num_seqs, self.running_peak, self.step)
