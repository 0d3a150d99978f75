"""The async handoff as the client sees it (docs/async.md).

A call sent with ``Prefer: respond-async`` that admission refuses for a reason the
``async_jobs:`` section names gets ``202 Accepted``, ``Location: /v1/async/{job_id}``,
``Preference-Applied: respond-async`` and a ``Retry-After`` poll hint instead of its 429.
``GET`` on the location (as the same tenant; 404 otherwise) answers 202 with the job's
status until it ends, then the completion (or the error) as the backend gave it;
``DELETE`` cancels a job not ended yet, or forgets an ended one (204).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.admission.flight import Flight
from gateway.async_jobs.runner import AsyncJobs, AsyncWork
from gateway.async_jobs.store import Job, TenantFull
from gateway.context import GatewayContext
from gateway.request.auth import authenticate
from gateway.request.errors import ApiError, error_body, retry_after_headers
from gateway.request.inbound import ParsedBody
from gateway.request.responses import headers, rejection
from policies.types import Decision

ASYNC_PATH = "/v1/async/{job_id}"


def hand_off(
    jobs: AsyncJobs | None,
    flight: Flight,
    decision: Decision,
    work: tuple[str, ParsedBody, bytes],
) -> Response | None:
    """For a refused call that prefers an async answer: the 202 when the handoff covers the
    refusal's reason and the tenant's async queue has room, the 429 marked
    ``x-sluicegate-async: tenant_queue_full`` when it has none; None when the handoff is off
    or does not cover the reason (the caller answers the refusal as usual)."""
    if jobs is None or not jobs.accepts(decision):
        return None
    try:
        job = jobs.hand_off(flight, AsyncWork(*work))
    except TenantFull:
        jobs.metrics.refused(decision.tenant)
        response = rejection(flight, decision)
        response.headers["x-sluicegate-async"] = "tenant_queue_full"
        return response
    hdrs = {
        **headers(flight),
        **retry_after_headers(jobs.config.poll_interval_s),
        "location": location(job),
        "preference-applied": "respond-async",
    }
    return JSONResponse(status_body(job), status_code=202, headers=hdrs)


def location(job: Job) -> str:
    return ASYNC_PATH.format(job_id=job.id)


def status_body(job: Job) -> dict[str, Any]:
    return {"id": job.id, "object": "async.job", "status": job.state.value}


async def poll(ctx: GatewayContext, jobs: AsyncJobs | None, request: Request) -> Response:
    found = _find(ctx, jobs, request)
    if isinstance(found, Response):
        return found
    jobs, job = found
    result = job.result
    if result is None:
        hdrs = {
            "location": location(job),
            "x-sluicegate-async-status": job.state.value,
            **retry_after_headers(jobs.config.poll_interval_s),
        }
        return JSONResponse(status_body(job), status_code=202, headers=hdrs)
    job.fetched = True
    hdrs = {"x-sluicegate-async-status": job.state.value}
    return Response(result.body, result.status, hdrs, media_type=result.content_type)


async def cancel(ctx: GatewayContext, jobs: AsyncJobs | None, request: Request) -> Response:
    found = _find(ctx, jobs, request)
    if isinstance(found, Response):
        return found
    jobs, job = found
    await jobs.cancel(job)
    return Response(status_code=204)


def _find(
    ctx: GatewayContext, jobs: AsyncJobs | None, request: Request
) -> tuple[AsyncJobs, Job] | Response:
    """The caller's job, or the 401/404 to answer (another tenant's job is not found)."""
    try:
        tenant = authenticate(ctx.runtime.auth, request.headers)
    except ApiError as err:
        return JSONResponse(err.body(), status_code=err.status)
    job = None if jobs is None else jobs.store.get(request.path_params["job_id"], tenant.name)
    if jobs is None or job is None:
        body = error_body("no such async job", "not_found_error", None, "async_job_not_found")
        return JSONResponse(body, status_code=404)
    return jobs, job
