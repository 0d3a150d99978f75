"""The ``async_jobs:`` section: the asynchronous handoff (``Prefer: respond-async``).

Off by default: with it on, the gateway keeps completions in its own memory until they are
fetched or expire, which an operator should choose knowingly (docs/async.md). Without the
header nothing changes either way.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

HandoffReason = Literal[
    "deadline_infeasible",
    "tenant_quota_exceeded",
    "tenant_concurrency_exceeded",
    "queue_full",
    "overloaded",
    "class_shed",
    "deadline_expired",
]
"""The refusals a client may trade for a 202 (``policies.types.Reason`` values)."""


class AsyncJobsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = False
    on_reasons: list[HandoffReason] = Field(
        default=["deadline_infeasible", "tenant_quota_exceeded", "tenant_concurrency_exceeded"],
        min_length=1,
        description="refusals answered with 202 when the client prefers respond-async",
    )
    workload_class: str = Field(default="background", min_length=1)
    priority_offset: int = Field(
        default=-1, le=0, description="added to the tenant's priority for its background jobs"
    )
    max_pending_per_tenant: int = Field(default=16, ge=1)
    max_pending_s: float = Field(
        default=600.0, gt=0, description="a job not started by then ends expired"
    )
    result_ttl_s: float = Field(default=300.0, gt=0, description="a finished job is kept this long")
    max_result_bytes: int = Field(default=1_048_576, gt=0, description="per job; larger fails")
    max_total_result_bytes: int = Field(default=67_108_864, gt=0)
    retry_interval_s: float = Field(
        default=1.0, gt=0, description="the longest a job waiting for capacity sleeps between tries"
    )
    poll_interval_s: float = Field(default=1.0, gt=0, description="Retry-After of a pending job")

    @model_validator(mode="after")
    def _coherent(self) -> AsyncJobsConfig:
        if self.max_result_bytes > self.max_total_result_bytes:
            raise ValueError("max_result_bytes must not exceed max_total_result_bytes")
        return self
