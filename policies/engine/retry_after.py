"""Retry-After is computed, never a constant: the caller supplies the seconds until the
work ahead drains or a bucket refills; here it is bounded and spread by jitter.

Jitter must survive the bounds, or every client refused at the clamp comes back in the same
instant. ``retry_after`` spreads a value over a window ``jitter x base`` wide: upward from
the computed value when that fits under ``max_s`` (never earlier than computed), else the
window ends at ``max_s`` (spread below the maximum, never above it). ``JitterSequence``
hands out where in the window each value falls: a golden-ratio sequence from a random
start, so any run of N consecutive values is spread evenly over the window with gaps of at
least about 0.38/N of it (never the clumps of independent draws). Simultaneous rejections
with the same window get distinct milliseconds as long as the window holds ~2.6 ms per
rejection (1,000 at the default 60 s clamp and 20 % jitter need 2.6 s; the window is 12 s).
"""

from __future__ import annotations

import math
import random

from policies.engine.retry_after_params import RetryAfterParams

_GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0


class JitterSequence:
    """Fractions in [0, 1), one per Retry-After: ``start + k x 0.618...`` modulo 1, with the
    start drawn from the injected RNG (deterministic given its seed)."""

    __slots__ = ("_at",)

    def __init__(self, rng: random.Random) -> None:
        self._at = rng.random()

    def next(self) -> float:
        self._at = (self._at + _GOLDEN) % 1.0
        return self._at


def retry_after(seconds: float | None, params: RetryAfterParams, fraction: float) -> float:
    """Seconds a client should wait: ``seconds`` (None = unknown, use the floor) clamped to
    [min_s, max_s], then placed at ``fraction`` (in [0, 1)) of a window ``jitter`` x that
    wide: [base, base + width] when it fits under max_s, else ending at max_s (and not
    below min_s). Jitter 0 gives the value itself below the maximum; past it, the window
    is at least ``min_s`` wide, so clients refused beyond ``max_s`` (promises the bound
    cannot keep) never all come back in the same instant. A wait that is unknown (no drain
    measured: at start, or while nothing completes) or shorter than ``min_s`` has no value
    to keep either (the floor is the policy's, not a measurement): its window is also at
    least ``min_s`` wide, whatever the jitter, so that the clients refused together (while
    the engines stall, or queued together and expiring together) do not all return
    together."""
    clamped = seconds is not None and seconds > params.max_s
    base = params.min_s if seconds is None else min(max(seconds, params.min_s), params.max_s)
    width = params.jitter * base
    if seconds is None or seconds < params.min_s:
        width = max(width, params.min_s)  # no value to keep above the floor: spread anyway
    if base + width <= params.max_s and not clamped:
        return base + width * fraction
    if clamped and width < params.min_s:
        width = params.min_s
    low = max(params.min_s, params.max_s - width)
    return low + (params.max_s - low) * fraction


def drain_seconds(work_tokens: float, drain_tokens_per_s: float | None) -> float | None:
    """Seconds for ``work_tokens`` to drain at the measured rate; None if never measured."""
    if drain_tokens_per_s is None or drain_tokens_per_s <= 0:
        return None
    return work_tokens / drain_tokens_per_s
