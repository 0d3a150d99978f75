"""``retry_budget`` to the retry: the exact number of retries a window allows (``ratio`` of first
attempts plus the ``min_retries_per_s`` floor), the slices first attempts and retries are
counted in, the moment a slice leaves the window, the exact Retry-After, and windows kept per
tenant or pooled. Ratio, floor and window differ, so none can stand in for another."""

from __future__ import annotations

from typing import Any

from policies.contracts import GateContext
from policies.gates.retry_budget import RetryBudget, RetryState
from policies.gates.retry_budget_params import RetryBudgetParams
from policies.types import Reason, RequestInfo, WorkEstimate

WINDOW = 10.0  # seconds, so a slice is 1 s
RATIO, FLOOR = 0.25, 0.1  # the floor is one retry per window


def gate(**params: Any) -> tuple[RetryBudget, RetryState]:
    raw = {"ratio": RATIO, "window_s": WINDOW, "min_retries_per_s": FLOOR, **params}
    g = RetryBudget(RetryBudgetParams.model_validate(raw))
    return g, g.new_state()


def req(tenant: str = "a", retry: bool = False) -> RequestInfo:
    return RequestInfo("r", tenant, "interactive", "m", WorkEstimate(10, 10), 0.0, is_retry=retry)


def ctx(now: float) -> GateContext:
    return GateContext(now, 0, None, None, True)


def firsts(g: RetryBudget, st: RetryState, now: float, n: int, tenant: str = "a") -> None:
    for _ in range(n):
        assert g.check(st, req(tenant), ctx(now)) is None
        g.on_accept(st, req(tenant), now)


def retries_let_in(g: RetryBudget, st: RetryState, now: float, tenant: str = "a") -> int:
    """Retries accepted at ``now`` until the first refusal (at most 50)."""
    for n in range(50):
        if g.check(st, req(tenant, True), ctx(now)) is not None:
            return n
        g.on_accept(st, req(tenant, True), now)
    return 50


def retry_after(g: RetryBudget, st: RetryState, now: float, tenant: str = "a") -> float | None:
    verdict = g.check(st, req(tenant, True), ctx(now))
    assert verdict is not None and verdict.reason is Reason.RETRY_BUDGET_EXHAUSTED
    return verdict.retry_after_s


def counted(st: RetryState, tenant: str = "a") -> tuple[float, float, list[list[float]]]:
    w = st.windows[tenant]
    return w.firsts, w.retries, [list(s) for s in w.slices]


def test_a_window_allows_the_ratio_of_first_attempts_plus_the_floor() -> None:
    g, st = gate()
    firsts(g, st, 100.0, 8)
    assert retries_let_in(g, st, 100.0) == 3  # 0.25 x 8 + 0.1 x 10
    assert counted(st) == (8.0, 3.0, [[100.0, 8.0, 3.0]])
    g, st = gate(min_retries_per_s=0.0)
    firsts(g, st, 100.0, 8)
    assert retries_let_in(g, st, 100.0) == 2


def test_first_attempts_are_never_refused() -> None:
    g, st = gate(min_retries_per_s=0.0)
    assert retries_let_in(g, st, 100.0) == 0
    assert g.check(st, req(), ctx(100.0)) is None


def test_counts_go_into_one_slice_per_tenth_of_the_window() -> None:
    g, st = gate()
    firsts(g, st, 100.0, 1)
    firsts(g, st, 100.5, 1)
    firsts(g, st, 100.95, 1)  # still the first slice
    firsts(g, st, 101.0, 3)  # a slice later
    assert retries_let_in(g, st, 101.5) == 2  # 0.25 x 6 + 1 = 2.5
    assert counted(st) == (6.0, 2.0, [[100.0, 3.0, 0.0], [101.0, 3.0, 2.0]])


def test_a_slice_leaves_the_window_exactly_a_window_after_it_started() -> None:
    g, st = gate()
    firsts(g, st, 100.0, 8)
    firsts(g, st, 101.0, 4)
    assert retries_let_in(g, st, 101.0) == 4  # 0.25 x 12 + 1
    assert retries_let_in(g, st, 109.5) == 0
    assert counted(st) == (12.0, 4.0, [[100.0, 8.0, 0.0], [101.0, 4.0, 4.0]])
    assert retry_after(g, st, 110.0) == 1.0  # the slice of 100 left; 101's leaves at 111
    assert counted(st) == (4.0, 4.0, [[101.0, 4.0, 4.0]])
    assert retries_let_in(g, st, 111.0) == 1  # both gone: the floor alone
    assert counted(st) == (0.0, 1.0, [[111.0, 0.0, 1.0]])


def test_retry_after_is_the_time_until_the_oldest_slice_leaves() -> None:
    g, st = gate(min_retries_per_s=0.0)
    firsts(g, st, 100.0, 4)
    firsts(g, st, 103.0, 4)
    assert retries_let_in(g, st, 104.0) == 2
    assert retry_after(g, st, 104.0) == 6.0  # 100 + 10 - 104
    assert retry_after(g, st, 109.25) == 0.75
    g, st = gate(min_retries_per_s=0.0)
    assert retry_after(g, st, 100.0) == WINDOW  # nothing counted yet: a whole window


def test_each_tenant_has_its_own_window_unless_pooled() -> None:
    g, st = gate(min_retries_per_s=0.0)
    firsts(g, st, 100.0, 8, "a")
    assert retries_let_in(g, st, 100.0, "b") == 0
    assert retries_let_in(g, st, 100.0, "a") == 2
    g, st = gate(min_retries_per_s=0.0, per_tenant=False)
    firsts(g, st, 100.0, 4, "a")
    firsts(g, st, 100.0, 4, "b")
    assert retries_let_in(g, st, 100.0, "c") == 2
    assert retries_let_in(g, st, 100.0, "a") == 0
    assert list(st.windows) == [""]


def test_a_retry_keeping_an_appointment_passes_an_exhausted_budget_and_counts() -> None:
    g, st = gate()
    firsts(g, st, 0.0, 4)  # one retry by ratio, one by the floor
    assert retries_let_in(g, st, 0.0) == 2
    kept = GateContext(0.0, 0, None, None, True, None, True)
    assert g.check(st, req(retry=True), kept) is None  # the gateway asked it back now
    g.on_accept(st, req(retry=True), 0.0)
    assert st.windows["a"].retries == 3
    refused = g.check(st, req(retry=True), ctx(0.0))
    assert refused is not None and refused.reason is Reason.RETRY_BUDGET_EXHAUSTED
