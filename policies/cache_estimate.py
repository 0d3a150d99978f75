"""How many of a request's prompt tokens the backend's prefix cache is expected to serve,
and what a request costs in the tokens a policy counts.

Two estimates (``cache.estimate``):

- ``hit_rate``: the backend's own measured hit rate (prompt tokens its prefix cache served
  over those looked up, ``BackendView.prefix_cache_hit_rate``) times the prompt. It knows
  nothing of this request's own prefix: a request among well-cached ones is estimated as
  cached as they are.
- ``prefix_model``: the longest prefix of this prompt the scheduler sent to that backend
  (``policies/engine/prefix_model.py``), where its model knows anything; else the hit rate.

The backend is the one the request goes to now, or, while it waits for room, the best of
the backends serving its model (the hit rate: the mean of those that report one). The
truth (``Usage.cached_tokens``) corrects the charges at release where the engine reports it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from policies.backends import BackendView
from policies.gates.quota_params import QuotaCounts
from policies.types import RequestInfo, Usage, WorkEstimate

CachedTokens = Callable[[BackendView, RequestInfo], "int | None"]
"""A backend's expected cached tokens of a request (None: unknown), e.g. the prefix model's."""


def expected_hit_rate(picked: BackendView | None, serving: Sequence[BackendView]) -> float:
    """The hit rate ``picked`` measured, else the mean over ``serving``; 0 when unknown."""
    if picked is not None:
        rate = picked.prefix_cache_hit_rate
        return rate if rate is not None else 0.0
    known = [b.prefix_cache_hit_rate for b in serving if b.prefix_cache_hit_rate is not None]
    return sum(known) / len(known) if known else 0.0


def expected_cached_tokens(
    req: RequestInfo,
    picked: BackendView | None,
    serving: Sequence[BackendView],
    model: CachedTokens | None,
) -> int:
    """``req``'s cached prompt tokens on ``picked`` (None: the best over ``serving``), from
    ``model`` where it knows (None: no model), else from the hit rate."""
    if model is not None:
        known = [c for b in ((picked,) if picked else serving) if (c := model(b, req)) is not None]
        if known:
            return max(known)
    rate = min(1.0, max(0.0, expected_hit_rate(picked, serving)))
    return int(req.estimate.prompt_tokens * rate)


def with_cached_estimate(req: RequestInfo, hit_rate: float) -> RequestInfo:
    """``req`` with ``estimate.cached_prompt_tokens`` = its prompt times ``hit_rate``."""
    rate = min(1.0, max(0.0, hit_rate))
    return with_cached_tokens(req, int(req.estimate.prompt_tokens * rate))


def with_cached_tokens(req: RequestInfo, cached: int) -> RequestInfo:
    """``req`` with ``estimate.cached_prompt_tokens`` = ``cached``."""
    if cached == req.estimate.cached_prompt_tokens:
        return req
    estimate = dataclasses.replace(req.estimate, cached_prompt_tokens=cached)
    return dataclasses.replace(req, estimate=estimate)


def counted(counts: QuotaCounts, estimate: WorkEstimate) -> int:
    """What a request is charged on admission, in the tokens ``counts`` names."""
    if counts is QuotaCounts.COMPUTED_TOKENS:
        return estimate.computed_total
    return estimate.total


def computed_usage(estimate: WorkEstimate, usage: Usage) -> int:
    """The tokens the engine computed for ``usage``: its output and the prompt tokens its
    prefix cache did not serve (``counted_usage`` in ``computed_tokens``)."""
    return counted_usage(QuotaCounts.COMPUTED_TOKENS, estimate, usage)


def counted_usage(counts: QuotaCounts, estimate: WorkEstimate, usage: Usage) -> int:
    """What a request really cost, in the tokens ``counts`` names: the engine's
    ``cached_tokens`` where it reports them, else the cached share estimated at admission
    applied to the actual prompt."""
    if counts is not QuotaCounts.COMPUTED_TOKENS:
        return usage.total
    cached = usage.cached_tokens
    if cached is None:
        cached = 0
        if estimate.prompt_tokens > 0:
            rate = estimate.cached_prompt_tokens / estimate.prompt_tokens
            cached = int(usage.prompt_tokens * rate)
    return usage.total - min(cached, usage.prompt_tokens)
