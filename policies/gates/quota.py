"""``tenant_quota``: per-tenant tokens per minute and concurrent requests.

Tokens: a token bucket per tenant that refills at ``tokens_per_minute / 60`` per second up
to ``burst_tokens`` (default: one minute's worth). A request needs its estimated cost in
the bucket (or a full bucket, if it costs more than the bucket holds); the estimate is
taken on acceptance, corrected with actual usage at release, and refunded in full if the
request never reached a backend. A rejection's Retry-After is a promise
(``policies/engine/promise_book.py``): the exact time until the bucket holds enough tokens
for this request *after* every earlier refused client of the tenant that is still due back
has taken its own, (deficit + tokens promised) / refill rate; until it returns (or its
promise lapses) those tokens are held for it, so a new request is admitted only from what
the bucket holds beyond the promises, and a retry that returns on time draws on them.
A concurrency refusal is a promise of a slot the same way: the time until as many of the
tenant's requests have left as the slots already promised and its own need, at the rate
they are measured to leave (requests per second while the tenant has any in the system;
before any has left, the learned p95 run time, as without a book).
Concurrency counts the tenant's requests in the system (queued or in flight).

``counts`` says which tokens: ``prompt_tokens`` (default) every prompt and output token, as
an API bills them; ``computed_tokens`` only what the engine computes, the prompt tokens its
prefix cache does not serve and the output (a conversation resent turn after turn costs its
new tail). At admission the cached part is ``estimate.cached_prompt_tokens`` (the backend's
measured hit rate); at release ``usage.cached_tokens`` where the engine reports it, else the
same hit rate applied to the actual prompt.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from policies.cache_estimate import counted, counted_usage
from policies.contracts import Gate, GateContext, Verdict
from policies.engine.observe import DrainMeter
from policies.engine.promise_book import PromiseBook
from policies.gates.quota_params import QuotaParams
from policies.types import Reason, RequestInfo, Usage, WorkEstimate


@dataclass(slots=True)
class Bucket:
    level: float
    updated: float


@dataclass
class QuotaState:
    buckets: dict[str, Bucket] = field(default_factory=dict)
    concurrent: Counter[str] = field(default_factory=Counter)
    promised: PromiseBook = field(default_factory=PromiseBook)
    """Tokens of each tenant's bucket promised to refused clients still due back."""
    slots: PromiseBook = field(default_factory=PromiseBook)
    """Slots (1.0 each) promised to clients refused for concurrency, by tenant."""
    departures: dict[str, DrainMeter] = field(default_factory=dict)
    """Per tenant: requests leaving the system per second while it has any there."""
    refused: Reason | None = None
    """The reason of the enforced refusal ``commit`` saw last (read by ``promised``)."""


class TenantQuota(Gate[QuotaState, QuotaParams]):
    type_name = "tenant_quota"
    params_model = QuotaParams

    state_model = QuotaState

    def reads_rates(self) -> bool:
        """Only a concurrency refusal reads ``exec_p95_s`` (its Retry-After)."""
        p = self.params
        return any(lim.max_concurrent is not None for lim in (p.default, *p.tenants.values()))

    def check(self, state: QuotaState, req: RequestInfo, ctx: GateContext) -> Verdict | None:
        tenant = req.tenant
        params = self.params  # limits(tenant), inline
        limits = params.tenants.get(tenant, params.default)
        cap = limits.max_concurrent
        if cap is not None:
            held = state.concurrent.get(tenant, 0)
            slots = state.slots
            ahead = 0.0
            if slots:
                ahead = slots.outstanding(tenant, ctx.now)
                mine = slots.due(tenant, ctx.now) if req.is_retry else None
                if mine is not None:  # back at its time: only the slots taken now count
                    ahead = 0.0 if held < cap else ahead - mine
            if held >= cap or held + ahead >= cap:
                return Verdict(
                    Reason.TENANT_CONCURRENCY,
                    self._slot_wait(state, req, held + ahead + 1 - cap, ctx),
                )
        tpm = limits.tokens_per_minute
        if tpm is None:
            return None
        size = limits.burst_tokens or tpm
        level = _refill(state, tenant, tpm, size, ctx.now).level
        cost = float(self._cost(req.estimate))
        need = size if size < cost else cost  # min(cost, size)
        book = state.promised
        if not book:
            ahead = 0.0
        else:
            ahead = book.outstanding(tenant, ctx.now)
            mine = book.due(tenant, ctx.now) if req.is_retry else None
            if mine is not None:  # a client back at its time: it draws on what was promised
                if level >= need:
                    return None
                ahead -= mine
        if level - ahead >= need:
            return None
        return Verdict(Reason.TENANT_QUOTA, (need + ahead - level) / (tpm / 60.0))

    @staticmethod
    def _slot_wait(
        state: QuotaState, req: RequestInfo, need: float, ctx: GateContext
    ) -> float | None:
        """Seconds until ``need`` more of the tenant's requests have left, at their measured
        rate (none measured: the learned p95 run time)."""
        meter = state.departures.get(req.tenant)
        rate = None if meter is None else meter.rate(ctx.now)
        if rate is None or rate <= 0:
            return ctx.exec_p95_s
        return need / rate

    def commit(
        self,
        state: QuotaState,
        req: RequestInfo,
        ctx: GateContext,
        verdict: Verdict | None,
        shadow: bool,
    ) -> None:
        state.refused = None if verdict is None or shadow else verdict.reason

    def promised(
        self, state: QuotaState, req: RequestInfo, now: float, after_s: float, lapse_at: float
    ) -> None:
        """The refusal books what it promised: a slot, or the request's tokens."""
        tenant, refused = req.tenant, state.refused
        state.refused = None
        if refused is Reason.TENANT_CONCURRENCY:
            book = state.slots
            amount = 1.0
        elif refused is Reason.TENANT_QUOTA:
            params = self.params
            limits = params.tenants.get(tenant, params.default)
            size = limits.burst_tokens or limits.tokens_per_minute or 0
            cost = float(self._cost(req.estimate))
            book, amount = state.promised, (size if size < cost else cost)
        else:
            return
        if req.is_retry:
            book.claim(tenant, now)  # its old promise is replaced by this one
        book.book(tenant, now + after_s, lapse_at, amount)

    def on_accept(self, state: QuotaState, req: RequestInfo, now: float) -> None:
        tenant = req.tenant
        concurrent = state.concurrent
        concurrent[tenant] = concurrent.get(tenant, 0) + 1
        meter = state.departures.get(tenant)
        if meter is None:
            meter = state.departures[tenant] = DrainMeter()
        meter.tick(now, True)
        if req.is_retry and state.slots:
            state.slots.claim(tenant, now)  # kept: its slot leaves the book
        params = self.params
        limits = params.tenants.get(tenant, params.default)
        tpm = limits.tokens_per_minute
        if tpm is not None:
            size = limits.burst_tokens or tpm
            _refill(state, tenant, tpm, size, now).level -= self._cost(req.estimate)
            if req.is_retry and state.promised:
                state.promised.claim(tenant, now)  # kept: its tokens leave the book

    def on_finish(
        self, state: QuotaState, req: RequestInfo, now: float, usage: Usage | None, served: bool
    ) -> None:
        tenant = req.tenant
        concurrent = state.concurrent
        left = concurrent.get(tenant, 0) - 1
        if left <= 0:
            concurrent.pop(tenant, None)
        else:
            concurrent[tenant] = left
        meter = state.departures.get(tenant)
        if meter is not None:
            meter.add(now, 1)
            meter.tick(now, left > 0)
        params = self.params
        limits = params.tenants.get(tenant, params.default)
        tpm = limits.tokens_per_minute
        if tpm is None:  # no bucket
            return
        size = limits.burst_tokens or tpm
        bucket = _refill(state, tenant, tpm, size, now)
        if not served:
            bucket.level += self._cost(req.estimate)
        elif usage is not None:
            bucket.level += self._cost(req.estimate) - self._spent(req.estimate, usage)
        level = bucket.level
        bucket.level = level if level < size else size  # min(level, size)

    def _cost(self, estimate: WorkEstimate) -> int:
        """What the bucket is charged on admission."""
        return counted(self.params.counts, estimate)

    def _spent(self, estimate: WorkEstimate, usage: Usage) -> int:
        """What the request really cost, in the tokens this quota counts."""
        return counted_usage(self.params.counts, estimate, usage)


def _refill(state: QuotaState, tenant: str, tpm: int, size: int, now: float) -> Bucket:
    """The tenant's bucket refilled up to ``now`` (created full)."""
    bucket = state.buckets.get(tenant)
    if bucket is None:
        bucket = state.buckets[tenant] = Bucket(size, now)
    elif bucket.updated == now and bucket.level <= size:
        return bucket  # refilled at this instant already (check, then on_accept): a no-op
    elapsed = now - bucket.updated
    if elapsed < 0.0:
        elapsed = 0.0
    level = bucket.level + elapsed * tpm / 60.0
    bucket.level = level if level < size else size  # min(size, level)
    bucket.updated = now
    return bucket
