"""Parameters of ``quota.py``, apart from it for mypyc (see ``policies/params.py``)."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from policies.params import Params


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
