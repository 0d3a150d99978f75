"""``tenant_quota``: per-tenant tokens per minute and concurrent requests.

Tokens: a token bucket per tenant that refills at ``tokens_per_minute / 60`` per second up
to ``burst_tokens`` (default: one minute's worth). A request needs its estimated cost in
the bucket (or a full bucket, if it costs more than the bucket holds); the estimate is
taken on acceptance, corrected with actual usage at release, and refunded in full if the
request never reached a backend. A rejection's Retry-After is the exact time until enough
tokens return. Concurrency counts the tenant's requests in the system (queued or in flight).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from pydantic import Field

from policies.contracts import Gate, GateContext, Params, Verdict
from policies.types import Reason, RequestInfo, Usage


class TenantLimits(Params):
    tokens_per_minute: int | None = Field(default=None, gt=0)
    burst_tokens: int | None = Field(default=None, gt=0)
    max_concurrent: int | None = Field(default=None, gt=0)

    @property
    def bucket_size(self) -> float | None:
        return self.burst_tokens or self.tokens_per_minute


class QuotaParams(Params):
    default: TenantLimits = Field(default_factory=TenantLimits)
    tenants: dict[str, TenantLimits] = Field(default_factory=dict)

    def limits(self, tenant: str) -> TenantLimits:
        return self.tenants.get(tenant, self.default)


@dataclass(slots=True)
class Bucket:
    level: float
    updated: float


@dataclass
class QuotaState:
    buckets: dict[str, Bucket] = field(default_factory=dict)
    concurrent: Counter[str] = field(default_factory=Counter)


class TenantQuota(Gate[QuotaState, QuotaParams]):
    type_name = "tenant_quota"
    params_model = QuotaParams

    def new_state(self) -> QuotaState:
        return QuotaState()

    def check(self, state: QuotaState, req: RequestInfo, ctx: GateContext) -> Verdict | None:
        limits = self.params.limits(req.tenant)
        if limits.max_concurrent is not None and (
            state.concurrent.get(req.tenant, 0) >= limits.max_concurrent
        ):
            return Verdict(Reason.TENANT_CONCURRENCY, ctx.exec_p95_s)
        bucket = self._bucket(state, req.tenant, limits, ctx.now)
        if bucket is None or limits.tokens_per_minute is None:
            return None
        size = limits.burst_tokens or limits.tokens_per_minute  # bucket_size, not None here
        cost = float(req.estimate.total)
        need = size if size < cost else cost  # min(cost, size)
        if bucket.level >= need:
            return None
        rate = limits.tokens_per_minute / 60.0
        return Verdict(Reason.TENANT_QUOTA, (need - bucket.level) / rate)

    def on_accept(self, state: QuotaState, req: RequestInfo, now: float) -> None:
        state.concurrent[req.tenant] = state.concurrent.get(req.tenant, 0) + 1
        bucket = self._bucket(state, req.tenant, self.params.limits(req.tenant), now)
        if bucket is not None:
            bucket.level -= req.estimate.total

    def on_finish(
        self, state: QuotaState, req: RequestInfo, now: float, usage: Usage | None, served: bool
    ) -> None:
        left = state.concurrent.get(req.tenant, 0) - 1
        if left <= 0:
            state.concurrent.pop(req.tenant, None)
        else:
            state.concurrent[req.tenant] = left
        limits = self.params.limits(req.tenant)
        bucket = self._bucket(state, req.tenant, limits, now)
        if bucket is None or limits.bucket_size is None:
            return
        if not served:
            bucket.level += req.estimate.total
        elif usage is not None:
            bucket.level += req.estimate.total - usage.total
        bucket.level = min(bucket.level, limits.bucket_size)

    def _bucket(
        self, state: QuotaState, tenant: str, limits: TenantLimits, now: float
    ) -> Bucket | None:
        tpm = limits.tokens_per_minute
        if tpm is None:
            return None
        size = limits.burst_tokens or tpm  # bucket_size
        bucket = state.buckets.get(tenant)
        if bucket is None:
            bucket = state.buckets[tenant] = Bucket(size, now)
        elapsed = now - bucket.updated
        if elapsed < 0.0:
            elapsed = 0.0
        level = bucket.level + elapsed * tpm / 60.0
        bucket.level = level if level < size else size  # min(size, level)
        bucket.updated = now
        return bucket
