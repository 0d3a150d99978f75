"""``deadline_feasibility``: reject before any backend work when the deadline cannot be met.

Predicted completion = now + predicted wait + predicted execution, where the wait is the
queued work ahead (estimated tokens) divided by the measured drain rate (tokens per second
of busy time) times ``wait_factor``, and the execution is the p95 end-to-end latency learned
for the request's cost class. Missing evidence never rejects: with no drain rate measured
the wait is taken as zero, and a cold cost class falls back to a cheaper class or to zero.
Requests still queued at their deadline are expired by the scheduler for every policy.
"""

from __future__ import annotations

from policies.contracts import Gate, GateContext, Verdict
from policies.engine.retry_after import drain_seconds
from policies.gates.deadline_params import DeadlineParams
from policies.types import Reason, RequestInfo


class DeadlineFeasibility(Gate[None, DeadlineParams]):
    type_name = "deadline_feasibility"
    params_model = DeadlineParams

    def check(self, state: None, req: RequestInfo, ctx: GateContext) -> Verdict | None:
        if req.deadline is None:
            return None
        wait = 0.0
        if not ctx.room_now:
            wait = drain_seconds(ctx.queued_tokens, ctx.drain_tokens_per_s) or 0.0
        predicted = ctx.now + wait * self.params.wait_factor + (ctx.exec_p95_s or 0.0)
        if predicted <= req.deadline:
            return None
        return Verdict(Reason.DEADLINE_INFEASIBLE, wait or None)
