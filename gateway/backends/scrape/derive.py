"""Pure arithmetic on samples: counter and histogram deltas, bucket-interpolated
quantiles that say how coarse they are, the queue/prefill/decode breakdown, capacity.

No clock and no I/O: every time is an argument (clock seconds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gateway.backends.scrape.sample import Histogram


def counter_delta(old: float, new: float) -> float:
    """Increase of a counter; a counter that went down was reset (restart): count from 0."""
    return new if new < old else new - old


def histogram_delta(old: Histogram, new: Histogram) -> Histogram:
    """Observations made between two scrapes. A reset or re-bucketing → ``new`` as is."""
    if old.bounds != new.bounds or new.count < old.count:
        return new
    cumulative = tuple(n - o for n, o in zip(new.cumulative, old.cumulative, strict=True))
    return Histogram(new.bounds, cumulative, new.sum - old.sum, new.count - old.count)


@dataclass(frozen=True, slots=True)
class Quantile:
    """A quantile estimated by linear interpolation inside one histogram bucket.

    The truth lies somewhere in ``[lower, upper]`` (the bucket's bounds); ``value`` is the
    interpolated guess. ``in_first_bucket``: the value is below the smallest bound, so only
    ``≤ upper`` is known. ``in_overflow``: the rank landed in the +Inf bucket; ``value`` is
    then the largest finite bound, a floor, and ``upper`` is +Inf.
    """

    q: float
    value: float
    lower: float
    upper: float
    in_first_bucket: bool
    in_overflow: bool

    @property
    def resolution(self) -> str:
        if self.in_overflow:
            return f">{self.lower:g}"
        return f"{self.lower:g}..{self.upper:g}"


def quantile(hist: Histogram, q: float) -> Quantile | None:
    """Prometheus ``histogram_quantile`` semantics; None when the histogram is empty."""
    if hist.count <= 0 or not 0.0 <= q <= 1.0:
        return None
    rank = q * hist.count
    for i, (bound, cum) in enumerate(zip(hist.bounds, hist.cumulative, strict=True)):
        if cum >= rank and cum > 0:
            lower = hist.bounds[i - 1] if i > 0 else 0.0
            below = hist.cumulative[i - 1] if i > 0 else 0.0
            if math.isinf(bound):
                return Quantile(q, lower, lower, bound, i == 0, True)
            fraction = (rank - below) / (cum - below) if cum > below else 1.0
            value = lower + (bound - lower) * fraction
            return Quantile(q, value, lower, bound, i == 0, False)
    return None


def mean(hist: Histogram | None) -> float | None:
    """Mean observation (``sum / count``), exact, unlike quantiles."""
    if hist is None or hist.count <= 0:
        return None
    return hist.sum / hist.count


@dataclass(frozen=True, slots=True)
class PhaseBreakdown:
    """Mean seconds per request in each phase and their share of e2e.

    ``other_s`` is what e2e holds beyond queue+prefill+decode (API server, detokenize);
    it can be slightly negative when the histograms' request sets differ at the window edge.
    """

    requests: float
    queue_s: float
    prefill_s: float
    decode_s: float
    e2e_s: float

    @property
    def other_s(self) -> float:
        return self.e2e_s - self.queue_s - self.prefill_s - self.decode_s

    def share(self, phase_s: float) -> float:
        return phase_s / self.e2e_s if self.e2e_s > 0 else 0.0


def phase_breakdown(
    queue: Histogram | None,
    prefill: Histogram | None,
    decode: Histogram | None,
    e2e: Histogram | None,
) -> PhaseBreakdown | None:
    """None unless all four histograms saw requests."""
    means = [mean(h) for h in (queue, prefill, decode, e2e)]
    if e2e is None or any(m is None for m in means):
        return None
    q, p, d, total = (m or 0.0 for m in means)
    return PhaseBreakdown(e2e.count, q, p, d, total)


@dataclass(frozen=True, slots=True)
class Capacity:
    """Concurrent requests one backend can hold (docs/signals.md, "sluicegate diagnose").

    ``min(kv_cache_tokens ÷ p90_prompt_tokens, max_num_seqs)``; either term may be
    unknown, and the estimate is the smaller known one (None if neither is known).
    """

    value: float | None
    kv_cache_tokens: float | None
    p90_prompt_tokens: float | None
    kv_bound: float | None
    max_num_seqs: int | None
    p90_output_tokens: float | None = None
    """Not in the estimate (it counts prompts only); see ``kv_bound_with_output``."""

    @property
    def kv_bound_with_output(self) -> float | None:
        """KV tokens / (p90 prompt + p90 output): the bound when outputs fill the cache too.

        Far below ``kv_bound`` means long outputs, not prompts, will exhaust the KV cache
        (preemptions) before ``value`` requests run; operators should read both.
        """
        if None in (self.kv_cache_tokens, self.p90_prompt_tokens, self.p90_output_tokens):
            return None
        total = (self.p90_prompt_tokens or 0.0) + (self.p90_output_tokens or 0.0)
        return (self.kv_cache_tokens or 0.0) / total if total > 0 else None

    @property
    def limited_by(self) -> str:
        if self.value is None:
            return "unknown"
        if self.kv_bound is not None and (
            self.max_num_seqs is None or self.kv_bound < self.max_num_seqs
        ):
            return "kv_cache"
        return "max_num_seqs"


def capacity(
    kv_cache_tokens: float | None,
    p90_prompt_tokens: float | None,
    max_num_seqs: int | None,
    p90_output_tokens: float | None = None,
) -> Capacity:
    kv_bound = None
    if kv_cache_tokens is not None and p90_prompt_tokens is not None and p90_prompt_tokens > 0:
        kv_bound = kv_cache_tokens / p90_prompt_tokens
    known = [b for b in (kv_bound, max_num_seqs) if b is not None]
    value = float(min(known)) if known else None
    return Capacity(
        value, kv_cache_tokens, p90_prompt_tokens, kv_bound, max_num_seqs, p90_output_tokens
    )


def gain_bound(share: float, fraction_removed: float) -> float:
    """Largest e2e gain of an optimization: share of the phase it touches * what it removes."""
    return share * fraction_removed
