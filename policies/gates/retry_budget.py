"""``retry_budget``: retries (``RequestInfo.is_retry``) may be at most ``ratio`` of first
attempts over a sliding ``window_s``, plus a small floor (``min_retries_per_s``) so a quiet
tenant can still retry. Over budget the reason is ``retry_budget_exhausted``; Retry-After
is the time until the oldest counted slice of the window leaves it (when the budget can
next change). Kept per tenant unless ``per_tenant`` is false. A retry that keeps an
appointment (``GateContext.appointment``: back when a Retry-After told it) is what the
gateway asked for, not a storm: it passes, and counts as a retry in the window.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from policies.contracts import Gate, GateContext, Verdict
from policies.gates.retry_budget_params import RetryBudgetParams
from policies.types import Reason, RequestInfo

_SLICES = 10


@dataclass(slots=True)
class Window:
    slices: deque[list[float]] = field(default_factory=deque)  # [start, firsts, retries]
    firsts: float = 0.0
    retries: float = 0.0


@dataclass
class RetryState:
    windows: dict[str, Window] = field(default_factory=dict)


class RetryBudget(Gate[RetryState, RetryBudgetParams]):
    type_name = "retry_budget"
    params_model = RetryBudgetParams

    state_model = RetryState

    def reads_rates(self) -> bool:
        return False

    def check(self, state: RetryState, req: RequestInfo, ctx: GateContext) -> Verdict | None:
        if not req.is_retry or ctx.appointment:
            return None
        window = self._window(state, req, ctx.now)
        p = self.params
        allowed = p.ratio * window.firsts + p.min_retries_per_s * p.window_s
        if window.retries + 1 <= allowed:
            return None
        oldest = window.slices[0][0] if window.slices else ctx.now
        return Verdict(Reason.RETRY_BUDGET_EXHAUSTED, oldest + p.window_s - ctx.now)

    def on_accept(self, state: RetryState, req: RequestInfo, now: float) -> None:
        window = self._window(state, req, now)
        slices = window.slices
        if not slices or now >= slices[-1][0] + self.params.window_s / _SLICES:
            newest = [now, 0.0, 0.0]
            slices.append(newest)
        else:
            newest = slices[-1]
        if req.is_retry:
            newest[2] += 1
            window.retries += 1
        else:
            newest[1] += 1
            window.firsts += 1

    def _window(self, state: RetryState, req: RequestInfo, now: float) -> Window:
        key = req.tenant if self.params.per_tenant else ""
        window = state.windows.get(key)
        if window is None:
            window = state.windows[key] = Window()
        slices, window_s = window.slices, self.params.window_s
        while slices and slices[0][0] + window_s <= now:
            _, firsts, retries = slices.popleft()
            window.firsts -= firsts
            window.retries -= retries
        return window
