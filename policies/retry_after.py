"""Retry-After is computed, never a constant: the caller supplies the seconds until the
work ahead drains or a bucket refills; here it is bounded and given upward jitter."""

from __future__ import annotations

import random

from pydantic import Field, model_validator

from policies.contracts import Params


class RetryAfterParams(Params):
    """Bounds in seconds; ``jitter`` is the largest fraction added (never subtracted, so a
    client that obeys the header is never told to come back before the budget returns)."""

    min_s: float = Field(default=0.5, gt=0)
    max_s: float = Field(default=60.0, gt=0)
    jitter: float = Field(default=0.2, ge=0, le=1)

    @model_validator(mode="after")
    def _ordered(self) -> RetryAfterParams:
        if self.max_s < self.min_s:
            raise ValueError("max_s must be >= min_s")
        return self


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
