"""The run endpoints (docs/runs.md): ``GET``/``DELETE /v1/runs/{run_id}`` and
``POST /v1/runs/{run_id}/complete``, authenticated as the run's tenant.

A run is visible to its own tenant only: another tenant's run id answers 404, as an
unknown one does. ``DELETE`` cancels: the run's queued calls are refused at once (409
``run_cancelled``), its calls in flight are cut upstream (the engine frees their slots),
its reservation is released. ``complete`` ends it as completed once its calls are done.
Both are idempotent: an ended run answers with its state.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.context import GatewayContext
from gateway.request.auth import authenticate
from gateway.request.errors import ApiError, error_body
from gateway.request.inbound import valid_run_id
from policies.runs.run_state import EndedRunState, RunState


async def run_state(ctx: GatewayContext, request: Request) -> Response:
    return _answer(ctx, request, None)


async def cancel_run(ctx: GatewayContext, request: Request) -> Response:
    return _answer(ctx, request, True)


async def complete_run(ctx: GatewayContext, request: Request) -> Response:
    return _answer(ctx, request, False)


def _answer(ctx: GatewayContext, request: Request, cancel: bool | None) -> Response:
    try:
        tenant = authenticate(ctx.runtime.auth, request.headers)
    except ApiError as err:
        return JSONResponse(err.body(), status_code=err.status)
    run_id = str(request.path_params["run_id"])
    if not valid_run_id(run_id):
        body = error_body(
            "a run id is 1-128 printable ASCII characters", "invalid_request_error", "run_id"
        )
        return JSONResponse(body, status_code=400)
    if cancel is not None:
        ctx.admission.end_run(tenant.name, run_id, cancel=cancel)
    state = ctx.scheduler.runs.state(tenant.name, run_id)
    if state is None:
        body = error_body(f"no agent run {run_id!r}", "not_found_error", None, "run_not_found")
        return JSONResponse(body, status_code=404)
    return JSONResponse(run_body(state))


def run_body(state: RunState) -> dict[str, object]:
    """The ``agent.run`` object of a run's state (docs/runs.md); no prompt, no output."""
    if isinstance(state, EndedRunState):
        return {
            "id": state.run_id,
            "object": "agent.run",
            "status": "ended",
            "reason": state.reason.value,
        }
    res = state.reserved
    return {
        "id": state.run_id,
        "object": "agent.run",
        "status": "closing" if state.closing else "open",
        "age_s": state.age_s,
        "deadline_in_s": state.deadline_in_s,
        "reserved": {
            "tokens": res.tokens,
            "calls": res.calls,
            "branches": res.branches,
            "source": res.source,
        },
        "drawn_tokens": state.drawn_tokens,
        "spent_tokens": state.spent_tokens,
        "calls": state.calls,
        "in_flight": state.in_flight,
        "queued": state.queued,
        "waiting_for_branch": state.waiting_for_branch,
        "peak_parallel": state.peak_parallel,
    }
