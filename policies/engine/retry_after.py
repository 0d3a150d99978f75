"""Retry-After is computed, never a constant: the caller supplies the seconds until the
work ahead drains or a bucket refills; here it is bounded and given upward jitter."""

from __future__ import annotations

import random

from policies.engine.retry_after_params import RetryAfterParams


def retry_after(seconds: float | None, params: RetryAfterParams, rng: random.Random) -> float:
    """Seconds a client should wait: ``seconds`` (None = unknown, use the floor) clamped to
    [min_s, max_s], then stretched by up to ``jitter`` (still at most max_s)."""
    base = params.min_s if seconds is None else min(max(seconds, params.min_s), params.max_s)
    return min(base * (1.0 + params.jitter * rng.random()), params.max_s)


def drain_seconds(work_tokens: float, drain_tokens_per_s: float | None) -> float | None:
    """Seconds for ``work_tokens`` to drain at the measured rate; None if never measured."""
    if drain_tokens_per_s is None or drain_tokens_per_s <= 0:
        return None
    return work_tokens / drain_tokens_per_s
