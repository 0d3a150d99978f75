"""How many of a request's prompt tokens the backend's prefix cache is expected to serve.

The simplest honest estimate: the backend's own measured hit rate (prompt tokens its prefix
cache served over those looked up, ``BackendView.prefix_cache_hit_rate``) times the prompt.
The backend is the one the request goes to now, or, while it waits for room, the mean of
the backends serving its model that report a rate. It knows nothing of this request's own
prefix: a request among well-cached ones is estimated as cached as they are, and the truth
(``Usage.cached_tokens``) corrects the charge at release where the engine reports it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from policies.fleet import BackendView
from policies.types import RequestInfo


def expected_hit_rate(picked: BackendView | None, serving: Sequence[BackendView]) -> float:
    """The hit rate ``picked`` measured, else the mean over ``serving``; 0 when unknown."""
    if picked is not None:
        rate = picked.prefix_cache_hit_rate
        return rate if rate is not None else 0.0
    known = [b.prefix_cache_hit_rate for b in serving if b.prefix_cache_hit_rate is not None]
    return sum(known) / len(known) if known else 0.0


def with_cached_estimate(req: RequestInfo, hit_rate: float) -> RequestInfo:
    """``req`` with ``estimate.cached_prompt_tokens`` = its prompt times ``hit_rate``."""
    rate = min(1.0, max(0.0, hit_rate))
    cached = int(req.estimate.prompt_tokens * rate)
    if cached == req.estimate.cached_prompt_tokens:
        return req
    estimate = dataclasses.replace(req.estimate, cached_prompt_tokens=cached)
    return dataclasses.replace(req, estimate=estimate)
