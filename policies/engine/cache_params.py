"""Parameters of the prefix-cache-aware parts of the scheduler (``prefix_model.py``,
``routing.py``'s locality score, the fair share's cost), apart from them for mypyc (see
``policies/params.py``)."""

from __future__ import annotations

import enum

from pydantic import Field

from policies.gates.quota_params import QuotaCounts
from policies.params import Params


class CacheEstimate(str, enum.Enum):  # noqa: UP042
    """Where a request's cached prompt tokens are estimated from."""

    HIT_RATE = "hit_rate"
    """The backend's measured hit rate times the prompt (blind to this request's prefix)."""
    PREFIX_MODEL = "prefix_model"
    """The longest prefix of the prompt the gateway itself sent to that backend (still in
    its model of the backend's cache); the hit rate where the model knows nothing."""


class CacheParams(Params):
    estimate: CacheEstimate = CacheEstimate.PREFIX_MODEL
    fairness_counts: QuotaCounts = QuotaCounts.PROMPT_TOKENS
    """What the fair share charges a tenant: ``prompt_tokens`` every prompt and output
    token; ``computed_tokens`` only those the engine computes (the estimate's uncached
    prompt and the output, corrected at release as a ``computed_tokens`` quota is)."""
    locality_weight: float = Field(default=0.0, ge=0)
    """Placement by locality: a request goes to the backend with room where its tokens in
    flight plus ``locality_weight`` times the request's prompt tokens that backend's prefix
    cache would not serve (its prefix model's estimate) are the least; so it stays where
    its prefix is until another backend is lighter by more than the prefill it would
    redo. 0: cache-blind placement (least loaded). A backend without room is never a
    candidate: locality never overfills a backend."""
