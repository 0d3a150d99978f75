"""Parameters of ``quota.py``, apart from it for mypyc (see ``policies/params.py``)."""

from __future__ import annotations

import enum

from pydantic import ConfigDict, Field

from policies.params import Params


class QuotaCounts(str, enum.Enum):  # noqa: UP042
    """What a token quota counts."""

    PROMPT_TOKENS = "prompt_tokens"
    """Every prompt and output token, cached or not: what an API bills."""
    COMPUTED_TOKENS = "computed_tokens"
    """Tokens the engine computes: the prompt tokens its prefix cache did not serve, and
    the output. Estimated at admission from the backend's measured hit rate, corrected at
    release with the engine's ``cached_tokens`` where it reports them."""


class TenantLimits(Params):
    tokens_per_minute: int | None = Field(default=None, gt=0)
    burst_tokens: int | None = Field(default=None, gt=0)
    max_concurrent: int | None = Field(default=None, gt=0)


class QuotaParams(Params):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"default": {"tokens_per_minute": 6000, "max_concurrent": 4}}]
        }
    )
    default: TenantLimits = Field(default_factory=TenantLimits)
    tenants: dict[str, TenantLimits] = Field(default_factory=dict)
    counts: QuotaCounts = QuotaCounts.PROMPT_TOKENS
    """``prompt_tokens`` by default: a quota written as an API's tokens per minute keeps
    meaning what the API bills; ``computed_tokens`` where the quota guards the engine."""

    def tenant_references(self) -> list[tuple[tuple[str | int, ...], str]]:
        return [(("tenants", name), name) for name in self.tenants]
