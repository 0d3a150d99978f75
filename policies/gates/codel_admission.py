"""``codel_admission``: CoDel (RFC 8289) on the gateway queue's sojourn, applied at submit.

The ``codel`` discipline drops a request that already waited, at dequeue. This gate runs the
very same state machine (``policies.disciplines.codel.Codel``: ``target_s``, ``interval_s``, the
``interval / sqrt(count)`` control law, the re-entry rule and the reset) on a different
sample: at each submission that would have to queue, the sojourn of the oldest queued
request (how long the head of the line has waited so far, in seconds). When the state
machine says "drop", the *new* submission is deferred (429 ``overloaded``) and nothing
already queued loses its place. This is how the reference simulation's (docs/seed-table.md)
"a CoDel target of 8 s defers X %
of submissions" reads: shedding decided by delay, applied to arrivals.

``shed`` chooses how many arrivals a dropping state turns away:
- ``control_law`` (default, the RFC): one per control-law tick, ``interval / sqrt(count)``;
- ``while_dropping``: every arrival while the state machine is in its dropping state (it
  enters and leaves that state exactly as the RFC says; only the drop count differs).

Retry-After: the seconds until the queued work would drain to the target
(queued tokens / measured drain rate - ``target_s``, at least 0; the scheduler applies its
``retry_after`` bounds); None (the scheduler's own drain estimate) without a drain rate.
``check`` is pure (it runs the state machine on a copy); ``commit`` advances the real state
with the same sample, so a shadow gate observes the queue exactly as an enforced one would.
"""

from __future__ import annotations

import copy

from policies.contracts import Gate, GateContext, Verdict
from policies.disciplines.codel import Codel, CodelState
from policies.gates.codel_admission_params import CodelAdmissionParams
from policies.types import Reason, RequestInfo


class CodelAdmission(Gate[CodelState, CodelAdmissionParams]):
    type_name = "codel_admission"
    params_model = CodelAdmissionParams

    state_model = CodelState

    def check(self, state: CodelState, req: RequestInfo, ctx: GateContext) -> Verdict | None:
        if not self._sample(copy.copy(state), ctx):
            return None
        return Verdict(Reason.OVERLOADED, self._retry_after_s(ctx))

    def commit(
        self,
        state: CodelState,
        req: RequestInfo,
        ctx: GateContext,
        verdict: Verdict | None,
        shadow: bool,
    ) -> None:
        """Advance the real state machine with the sample ``check`` judged (shadow too)."""
        self._sample(state, ctx)

    def _sample(self, state: CodelState, ctx: GateContext) -> bool:
        """One RFC 8289 dequeue decision on the head-of-line sojourn; True = shed."""
        codel = Codel(self.params)
        if ctx.room_now or ctx.oldest_queued_s is None:
            codel.on_empty(state)  # nothing would wait: the standing delay is gone
            return False
        dropping_before = state.dropping
        drop = codel.should_drop(state, ctx.oldest_queued_s, ctx.now, backlog=1)
        if self.params.shed == "while_dropping":
            return drop or (dropping_before and state.dropping)
        return drop

    def _retry_after_s(self, ctx: GateContext) -> float | None:
        rate = ctx.drain_tokens_per_s
        if rate is None or rate <= 0:
            return None
        excess_s = ctx.queued_tokens / rate - self.params.target_s
        return max(excess_s, 0.0)
