"""The async jobs of every tenant, in memory: bounded in number, bytes and time.

A job is pending until it ends in exactly one terminal state (done, failed, expired,
cancelled). Its result (the response body, never logged) is kept ``result_ttl_s`` after it
ends and then dropped with the job; a job that waited ``max_pending_s`` without ending
expires. Bytes are bounded per job and in total: a result that does not fit ends its job
as an error, and the results already kept stay. Jobs are found by id *and* tenant only, so
one tenant never sees another's. The clock is injected; nothing here does I/O.
"""

from __future__ import annotations

import enum
import json
import secrets
from collections import Counter
from dataclasses import dataclass, field

from policies.types import Clock


class JobState(str, enum.Enum):  # noqa: UP042
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    EXPIRED = "expired"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self not in (JobState.PENDING, JobState.RUNNING)


TERMINAL = tuple(s for s in JobState if s.terminal)


@dataclass(frozen=True)
class StoreLimits:
    max_pending_per_tenant: int
    max_pending_s: float
    result_ttl_s: float
    max_result_bytes: int
    max_total_result_bytes: int


@dataclass(frozen=True)
class Result:
    """What the poll endpoint answers once the job has ended."""

    status: int
    body: bytes
    content_type: str = "application/json"
    made_here: bool = False
    """An error the gateway wrote (a short constant): outside the byte bounds, which are
    for what backends answered."""


@dataclass(eq=False)
class Job:
    id: str
    tenant: str
    created_at: float
    start_by: float
    """Still pending (not started) by then: it expires. A running job is bounded by the
    upstream's own timeouts instead."""
    work: object | None
    """What the runner runs (dropped when the job ends: the prompt is not kept longer)."""
    state: JobState = JobState.PENDING
    result: Result | None = None
    ended_at: float | None = None
    fetched: bool = False

    @property
    def size(self) -> int:
        """Bytes of the backend's answer kept (0 for an error the gateway wrote)."""
        result = self.result
        return 0 if result is None or result.made_here else len(result.body)


@dataclass
class Swept:
    """Jobs the store let go of in one sweep."""

    expired: list[Job] = field(default_factory=list)
    """Pending too long: now ended EXPIRED (their result is an error, kept for the TTL)."""
    dropped: list[Job] = field(default_factory=list)
    """Ended jobs past their TTL: removed with their result."""


class TenantFull(Exception):
    """The tenant already has ``max_pending_per_tenant`` jobs pending."""


class JobStore:
    def __init__(self, limits: StoreLimits, *, clock: Clock) -> None:
        self.limits = limits
        self._clock = clock
        self._jobs: dict[str, Job] = {}
        self._pending: Counter[str] = Counter()
        self._bytes = 0

    @property
    def result_bytes(self) -> int:
        return self._bytes

    def pending(self, tenant: str | None = None) -> int:
        if tenant is None:
            return sum(self._pending.values())
        return self._pending[tenant]

    def jobs(self) -> list[Job]:
        return list(self._jobs.values())

    def add(self, tenant: str, work: object) -> Job:
        """A new pending job; raises ``TenantFull`` when the tenant is at its bound."""
        if self._pending[tenant] >= self.limits.max_pending_per_tenant:
            raise TenantFull(tenant)
        now = self._clock()
        job = Job(_new_id(), tenant, now, now + self.limits.max_pending_s, work)
        self._jobs[job.id] = job
        self._pending[tenant] += 1
        return job

    def get(self, job_id: str, tenant: str) -> Job | None:
        """The job, if it exists and is ``tenant``'s (else None, the same for both)."""
        job = self._jobs.get(job_id)
        return job if job is not None and job.tenant == tenant else None

    def start(self, job: Job) -> bool:
        """Pending -> running; False if the job has ended meanwhile."""
        if job.state is not JobState.PENDING:
            return False
        job.state = JobState.RUNNING
        return True

    def requeue(self, job: Job) -> None:
        """Running -> pending again: the backend refused it before doing any work."""
        if job.state is JobState.RUNNING:
            job.state = JobState.PENDING

    def finish(self, job: Job, state: JobState, result: Result) -> JobState | None:
        """End ``job`` once; returns the state it ended in (FAILED if the result does not
        fit the byte bounds), or None if it had ended already."""
        if job.state.terminal or not state.terminal:
            return None
        size = 0 if result.made_here else len(result.body)
        if size > self.limits.max_result_bytes:
            state, result = JobState.FAILED, too_large(self.limits.max_result_bytes, "job")
        elif self._bytes + size > self.limits.max_total_result_bytes:
            state, result = JobState.FAILED, too_large(self.limits.max_total_result_bytes, "all")
        job.state, job.result, job.work = state, result, None
        job.ended_at = self._clock()
        self._bytes += job.size
        self._pending[job.tenant] -= 1
        if not self._pending[job.tenant]:
            del self._pending[job.tenant]
        return state

    def remove(self, job: Job) -> None:
        """Forget an ended job and its result now (idempotent)."""
        if job.state.terminal and self._jobs.pop(job.id, None) is not None:
            self._bytes -= job.size

    def sweep(self) -> Swept:
        """Expire jobs still pending (not started) past ``start_by``; drop ended jobs past
        their TTL."""
        now = self._clock()
        swept = Swept()
        for job in list(self._jobs.values()):
            if job.state is JobState.PENDING:
                if now >= job.start_by:
                    self.finish(job, JobState.EXPIRED, EXPIRED)
                    swept.expired.append(job)
            elif job.ended_at is not None and now >= job.ended_at + self.limits.result_ttl_s:
                self.remove(job)
                swept.dropped.append(job)
        return swept

    def next_due(self) -> float | None:
        """The earliest clock time at which ``sweep`` has something to do."""
        ttl = self.limits.result_ttl_s
        times = [
            job.ended_at + ttl if job.ended_at is not None else job.start_by
            for job in self._jobs.values()
            if job.state is not JobState.RUNNING
        ]
        return min(times, default=None)


def _new_id() -> str:
    """Unguessable (128 random bits): knowing a job id is not enough to read it anyway
    (the tenant must match), but ids must not be enumerable."""
    return "job_" + secrets.token_hex(16)


def error_result(status: int, message: str, type_: str, code: str) -> Result:
    """An OpenAI-style error body as a job's result."""
    error = {"message": message, "type": type_, "param": None, "code": code}
    return Result(status, json.dumps({"error": error}).encode(), made_here=True)


def too_large(limit: int, scope: str) -> Result:
    where = "per job" if scope == "job" else "for all kept results"
    return error_result(
        507,
        f"the result exceeds the {limit} bytes kept {where}",
        "server_error",
        "async_result_too_large",
    )


EXPIRED = error_result(
    503, "no capacity for the job before it expired", "overloaded", "async_job_expired"
)
