"""Builders shared by the policy tests: a manual clock, requests, fleets."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from policies.backends import BackendsSnapshot, BackendView, Health
from policies.contracts import QueuedEntry
from policies.engine.scheduler import Scheduler, Ticket
from policies.policy_set import PolicySet
from policies.registry import build_policy
from policies.types import NO_DEGRADATION, Decision, DecisionKind, Reason, RequestInfo, WorkEstimate

_ids = itertools.count()


class ManualClock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def request(
    clock: ManualClock,
    *,
    tenant: str = "t1",
    workload_class: str = "interactive",
    model: str = "m",
    prompt: int = 100,
    output: int = 100,
    deadline_in: float | None = None,
    **kw: Any,
) -> RequestInfo:
    return RequestInfo(
        request_id=kw.pop("request_id", f"r{next(_ids)}"),
        tenant=tenant,
        workload_class=workload_class,
        model=model,
        estimate=WorkEstimate(prompt, output),
        arrival=clock.now,
        deadline=None if deadline_in is None else clock.now + deadline_in,
        **kw,
    )


def backend(name: str = "b1", models: tuple[str, ...] = ("m",), **kw: Any) -> BackendView:
    return BackendView(name=name, models=frozenset(models), **kw)


def fleet(clock: ManualClock, *backends: BackendView) -> BackendsSnapshot:
    return BackendsSnapshot(at=clock.now, backends=backends or (backend(),))


def down(name: str = "b1") -> BackendView:
    return backend(name, health=Health.DOWN)


def scheduler(clock: ManualClock, raw: Mapping[str, Any] | None = None, seed: int = 7) -> Scheduler:
    import random

    return Scheduler(build_policy(raw), clock=clock, rng=random.Random(seed))


def promising_quota(
    clock: ManualClock,
    limits: Mapping[str, Any],
    slots: int,
    retry_after: Mapping[str, Any],
    backlog_off: bool = True,
) -> tuple[Scheduler, BackendsSnapshot]:
    """A scheduler whose one gate is ``tenant_quota`` with ``limits`` for every tenant and
    whose Retry-After is a promise (no jitter; ``retry_after`` for the rest), the prefill
    backlog off unless ``backlog_off`` is False; and a fleet of one backend of ``slots``."""
    config: dict[str, Any] = {
        "gates": [{"type": "tenant_quota", "parameters": {"default": dict(limits)}}],
        "retry_after": {"jitter": 0.0, **retry_after, "promise": True},
    }
    if backlog_off:
        config["prefill_backlog"] = {"enabled": False}
    return scheduler(clock, config), fleet(clock, backend(max_num_seqs=slots))


def policy(raw: Mapping[str, Any] | None = None) -> PolicySet:
    return build_policy(raw)


def is_ticket(x: Decision | Ticket) -> bool:
    return isinstance(x, Ticket)


def kind(x: Decision | Ticket) -> DecisionKind:
    return x.decision.decision if isinstance(x, Ticket) else x.decision


def queued(req: RequestInfo, seq: int, enqueued_at: float, expires_at: float) -> QueuedEntry:
    """``req`` queued as the scheduler queues one: to be admitted undegraded, held for
    OVERLOADED, in its own flow, with no gates to hand back."""
    return QueuedEntry(
        req,
        DecisionKind.ADMIT,
        NO_DEGRADATION,
        (),
        enqueued_at,
        expires_at,
        Reason.OVERLOADED,
        seq,
        req.flow,
    )


def queued_entry(seq: int, now: float, wait_s: float, tenant: str = "t") -> QueuedEntry:
    """A queue entry as the scheduler makes one: enqueued at ``now``, expiring ``wait_s`` later."""
    req = RequestInfo(f"r{seq}", tenant, "interactive", "m", WorkEstimate(seq % 97, 5), now)
    return queued(req, seq, now, now + wait_s)


_tenant_seq = itertools.count(1)


def tenant_entry(tenant: str, weight: float = 1.0, expires_at: float = 100.0) -> QueuedEntry:
    """A queued chat entry of ``tenant`` (10 prompt and 10 output tokens), enqueued at 0, as
    the fairness disciplines take them: each one a new request and sequence number."""
    n = next(_tenant_seq)
    req = RequestInfo(f"r{n}", tenant, "chat", "m", WorkEstimate(10, 10), 0.0, weight=weight)
    return queued(req, n, 0.0, expires_at)


def refused_after(out: Decision | Ticket, reason: Reason) -> float:
    """The Retry-After of ``out``, which must be a refusal for ``reason``."""
    assert isinstance(out, Decision) and out.reason is reason, out
    assert out.retry_after_s is not None
    return out.retry_after_s
