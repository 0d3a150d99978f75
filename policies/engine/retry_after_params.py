"""Parameters of ``retry_after.py``, apart from it for mypyc (see ``policies/params.py``)."""

from __future__ import annotations

from pydantic import Field, model_validator

from policies.params import Params


class RetryAfterParams(Params):
    """Bounds in seconds; ``jitter`` is the width of the spread as a fraction of the value:
    added (a client that obeys the header is not told to come back before the budget
    returns) while that fits under ``max_s``, else spread below ``max_s``; 0 = no spread."""

    min_s: float = Field(default=0.5, gt=0)
    max_s: float = Field(default=60.0, gt=0)
    jitter: float = Field(default=0.2, ge=0, le=1)
    promise: bool = False
    """Whether a refusal's Retry-After is a promise of capacity, held for its client
    (``promise_book.py``); false (the default): an estimate only, nothing held. Holding
    capacity for returns makes Retry-After accurate and costs fresh arrivals their place:
    the scenario matrix keeps it off in the default (docs/evaluate.md)."""
    grace_s: float = Field(default=2.0, ge=0)
    """How long after the time it was told a refused client's capacity stays promised to
    it (``promise_book.py``); a client that has not come back by then has lost it."""

    @model_validator(mode="after")
    def _ordered(self) -> RetryAfterParams:
        if self.max_s < self.min_s:
            raise ValueError("max_s must be >= min_s")
        return self
