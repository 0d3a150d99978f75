"""Async jobs as background work: one task per job, the same scheduler as every call.

A handed-off call keeps its ``Flight``: the job's end is the call's one terminal outcome
(its record and its outcome metric), whatever the client was told at once (202). A job
runs in the configured workload class (``background`` by default, which the ladder sheds
first) one priority band below its tenant, and obeys the tenant's gates (quota, fair
share) like any call: a refusal only sends it back to wait. It is submitted only while
nobody waits in the gateway's queue, so at most one job at a time queues beside
interactive calls, and a job never overtakes a call already waiting.

The result body lives in the store only; records carry the prompt's hash, never the body.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import httpx

from gateway.admission.flight import Flight
from gateway.async_jobs.config import AsyncJobsConfig
from gateway.async_jobs.metrics import AsyncMetrics
from gateway.async_jobs.store import (
    Job,
    JobState,
    JobStore,
    Result,
    StoreLimits,
    error_result,
    too_large,
)
from gateway.context import GatewayContext
from gateway.forward.upstream import BackendBusy, open_upstream, upstream_body, usage_from_body
from gateway.metrics.records import CLIENT_CLOSED_REQUEST
from gateway.request.admit import admit_shared
from gateway.request.attempts import Failed, Gone, attempt
from gateway.request.inbound import ParsedBody
from policies.engine.scheduler_types import Ticket
from policies.shared_mode import rules
from policies.types import Decision, Outcome, RequestInfo, Usage

log = logging.getLogger("sluicegate.async_jobs")

_OUTCOME = {
    JobState.DONE: Outcome.COMPLETED,
    JobState.FAILED: Outcome.FAILED,
    JobState.EXPIRED: Outcome.EXPIRED,
    JobState.CANCELLED: Outcome.CANCELLED,
}
CANCELLED = error_result(
    CLIENT_CLOSED_REQUEST, "the job was cancelled", "invalid_request_error", "async_job_cancelled"
)
_STREAM_FIELDS = ("stream", "stream_options")


@dataclass(frozen=True)
class AsyncWork:
    """What a handed-off call needs to run later: its path and validated body."""

    path: str
    parsed: ParsedBody
    raw: bytes


@dataclass(frozen=True)
class Ending:
    state: JobState
    result: Result
    usage: Usage | None = None


Send = Callable[[Ticket], Awaitable[Ending | Failed]]


def limits_of(cfg: AsyncJobsConfig) -> StoreLimits:
    return StoreLimits(
        cfg.max_pending_per_tenant,
        cfg.max_pending_s,
        cfg.result_ttl_s,
        cfg.max_result_bytes,
        cfg.max_total_result_bytes,
    )


class AsyncJobs:
    """The store, the job tasks and the sweep loop (``run``); ``aclose`` cancels every job."""

    def __init__(self, ctx: GatewayContext) -> None:
        self.ctx = ctx
        self.store = JobStore(limits_of(self.config), clock=ctx.clock)
        self.metrics = AsyncMetrics(ctx.metrics, self.store, lambda: self.config.enabled)
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._changed = asyncio.Event()

    @property
    def config(self) -> AsyncJobsConfig:
        return self.ctx.runtime.loaded.config.async_jobs

    def accepts(self, decision: Decision) -> bool:
        """The handoff is on and ``decision`` is a refusal it may turn into a 202."""
        cfg = self.config
        return cfg.enabled and decision.reason.value in cfg.on_reasons

    def hand_off(self, flight: Flight, work: AsyncWork) -> Job:
        """A pending job that owns ``flight`` from now on; raises ``TenantFull``."""
        self.store.limits = limits_of(self.config)
        assert flight.request is not None
        job = self.store.add(flight.request.tenant, work)
        if flight.grant is not None:  # the call's hold on shared limits: refused, refunded
            self.ctx.shared.release(flight.grant, None, served=False)
            flight.grant = None
        self.metrics.queued(job.tenant)
        flight.record.extra["async_job"] = job.id
        if flight.trace is not None:  # the job's spans follow the call's, under its trace
            flight.trace.handed_off(job.id)
        self._tasks[job.id] = asyncio.get_running_loop().create_task(self._run(job, flight))
        self._changed.set()
        return job

    async def cancel(self, job: Job) -> None:
        """End a pending or running job as cancelled (its ticket goes back), then forget it."""
        task = self._tasks.get(job.id)
        if task is not None:
            task.cancel()
            await asyncio.wait({task})
        self.store.remove(job)

    async def run(self) -> None:
        """The sweep loop: expire jobs pending too long, drop results past their TTL."""
        while True:
            self.sweep()
            due = self.store.next_due()
            wait = 1.0 if due is None else min(1.0, max(0.0, due - self.ctx.clock()))
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._changed.wait()

    def sweep(self) -> None:
        self.store.limits = limits_of(self.config)
        swept = self.store.sweep()
        for job in swept.expired:
            task = self._tasks.get(job.id)
            if task is not None:
                task.cancel()  # its ending sees the job expired
        for job in swept.dropped:
            self.metrics.dropped(job.fetched)

    async def aclose(self) -> None:
        """Shutdown: every job still pending or running ends cancelled, tickets released."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- one job ---------------------------------------------------------------------------

    async def _run(self, job: Job, flight: Flight) -> None:
        try:
            ending = await self._serve(job, flight)
        except asyncio.CancelledError:
            ending = Ending(JobState.CANCELLED, CANCELLED)
        except Exception:
            log.exception("async job failed in the gateway")
            ending = Ending(JobState.FAILED, _GATEWAY_ERROR)
        finally:
            self._tasks.pop(job.id, None)
        self._end(job, flight, ending)

    def _end(self, job: Job, flight: Flight, ending: Ending) -> None:
        """The job's one ending (or the expiry the store already gave it), and the call's
        one terminal outcome."""
        self.store.finish(job, ending.state, ending.result)
        result = job.result or ending.result
        usage = ending.usage  # what the backend did, kept or not: the charge is corrected
        error = None if job.state is JobState.DONE else job.state.value
        flight.finish(_OUTCOME[job.state], status=result.status, usage=usage, error=error)
        self.metrics.ended(job.tenant, job.state)
        self._changed.set()

    async def _serve(self, job: Job, flight: Flight) -> Ending:
        """The job through the attempt loop, as every call goes: a refusal is waited out
        (not counted against the attempts), a failed attempt sends it back to the queue."""
        assert flight.request is not None and isinstance(job.work, AsyncWork)
        work, req = job.work, self._background(flight.request, job.id)
        max_attempts = self.ctx.runtime.loaded.config.server.max_attempts
        failures = 0

        async def send(ticket: Ticket) -> Ending | Failed:
            nonlocal failures
            self.store.start(job)
            ending = await self._forward(flight, job.id, work, ticket)
            if ending is not None:
                return ending
            failures += 1
            if failures < max_attempts:
                self.store.requeue(job)
                await asyncio.sleep(self.config.retry_interval_s)  # not straight back at it
                await self._turn()
            return Failed("failed", avoid=False)

        while True:
            await self._turn()
            outcome = await self._attempt(flight, req, send, max_attempts - failures)
            if isinstance(outcome, Decision):
                if flight.grant is not None:
                    self.ctx.shared.release(flight.grant, None, served=False)
                    flight.grant = None
                await asyncio.sleep(self._pause(outcome.retry_after_s))
                continue
            if isinstance(outcome, Ending):
                return outcome
            return Ending(JobState.FAILED, _NO_BACKEND)

    async def _attempt(
        self, flight: Flight, req: RequestInfo, send: Send, tries: int
    ) -> Ending | Decision | Failed | Gone:
        """Shared limits first in fleet mode (a grant is kept after a failed try), then the
        attempt loop; a refusal is waited out, so it is not counted as a decision."""
        ctx = self.ctx
        if rules(ctx.shared.mode).consults_store and flight.grant is None:
            refusal = await admit_shared(ctx, flight, req, count_refusal=False)
            if refusal is not None:
                return refusal
        async with _never() as gone:  # cancellation comes as the task's own
            return await attempt(
                ctx, flight, req, send, tries=tries, gone=gone, count_refusal=False
            )

    def _background(self, req: RequestInfo, job_id: str) -> RequestInfo:
        """The call as background work: the job's id, class and band; no deadline (its
        wait is bounded by ``max_pending_s``); not streamed."""
        cfg = self.config
        return dataclasses.replace(
            req,
            request_id=job_id,
            workload_class=cfg.workload_class,
            deadline=None,
            priority=req.priority + cfg.priority_offset,
            stream=False,
        )

    async def _turn(self) -> None:
        """Until nobody waits in the gateway's queue: a job never overtakes a waiting call."""
        while self.ctx.admission.waiting:
            await asyncio.sleep(self.config.retry_interval_s)

    def _pause(self, retry_after_s: float | None) -> float:
        interval = self.config.retry_interval_s
        return interval if retry_after_s is None else min(interval, max(retry_after_s, 0.0))

    async def _forward(
        self, flight: Flight, job_id: str, work: AsyncWork, ticket: Ticket
    ) -> Ending | None:
        """Send, read the whole answer (bounded), end; None when another try may help."""
        ctx, backend = self.ctx, ticket.backend
        try:
            upstream = await open_upstream(
                ctx.pool.client(backend),
                ctx.pool.upstream(backend),
                work.path,
                job_body(work, ticket.request),
                job_id,
                None if flight.trace is None else flight.trace.carrier(),
            )
        except (httpx.ConnectError, httpx.ConnectTimeout, BackendBusy) as exc:
            kind = "busy" if isinstance(exc, BackendBusy) else "connect"
            ctx.metrics.upstream_errors.labels(backend, kind).inc()
            if kind == "connect":
                ctx.pool.note_connect_error(backend)
            flight.release_attempt(Outcome.FAILED)
            return None
        except httpx.HTTPError:
            ctx.metrics.upstream_errors.labels(backend, "protocol").inc()
            return Ending(JobState.FAILED, _UPSTREAM_ERROR)
        ctx.pool.note_success(backend)
        limit = self.config.max_result_bytes
        try:
            data = await _read_at_most(upstream.aiter_raw(), limit)
        except httpx.HTTPError:
            return Ending(JobState.FAILED, _UPSTREAM_ERROR)
        finally:
            await upstream.aclose()
        flight.first_byte()
        if data is None:
            return Ending(JobState.FAILED, too_large(limit, "job"))
        status = upstream.status_code
        media = upstream.headers.get("content-type", "application/json")
        state = JobState.DONE if status < 400 else JobState.FAILED
        usage = usage_from_body(data) if status == 200 else None
        return Ending(state, Result(status, data, media), usage)


def job_body(work: AsyncWork, sent: RequestInfo) -> bytes:
    """The upstream body, never streamed: a call that asked for a stream gets the whole
    completion as one JSON body when it polls."""
    parsed = work.parsed
    body = {k: v for k, v in parsed.body.items() if k not in _STREAM_FIELDS}
    return upstream_body(
        body,
        model=sent.model,
        max_tokens=sent.max_tokens,
        stream=False,
        raw=None if parsed.stream else work.raw,
        key=parsed.max_tokens_field,
    )


async def _read_at_most(chunks: AsyncIterator[bytes], limit: int) -> bytes | None:
    """The whole body, or None as soon as it exceeds ``limit`` bytes."""
    parts: list[bytes] = []
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            return None
        parts.append(chunk)
    return b"".join(parts)


@contextlib.asynccontextmanager
async def _never() -> AsyncIterator[asyncio.Future[None]]:
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    try:
        yield future
    finally:
        future.cancel()


_GATEWAY_ERROR = error_result(500, "internal gateway error", "server_error", "internal_error")
_UPSTREAM_ERROR = error_result(502, "the backend failed", "upstream_error", "upstream_error")
_NO_BACKEND = error_result(503, "no backend took the job", "overloaded", "no_healthy_backend")
