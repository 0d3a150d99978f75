"""The retry budget across replicas: what the request path needs.

In shared mode Redis decides a retry (``retry_scripts.ADMIT_RETRY``: the fleet's retries in
the window are counted exactly, one per admitted retry), so the decision core leaves its own
``retry_budget`` gate out of the policy it runs in that mode (it would count this replica's
retries only; ``policies.shared_mode.for_mode``). The budget's other side, first attempts,
costs no round trip: each replica counts its own here (``FirstAttempts``) and publishes them
every ``peer_sync_interval_ms``; the script adds the other replicas' last published counts to
this replica's current one. While Redis fails the core's gate is back with its floor divided
by N (the ratio already sums over replicas: each holds its retries to ``ratio`` of its own
first attempts).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from policies.gates.retry_budget import RetryBudget
from policies.gates.retry_budget_params import RetryBudgetParams
from policies.policy_set import PolicySet
from policies.types import RequestInfo

SLICES = 10
"""Slices per window, as the core's gate keeps them."""


@dataclass(frozen=True, slots=True)
class RetryRule:
    """The enforcing ``retry_budget`` gate's parameters, in the units the script takes."""

    params: RetryBudgetParams

    def key(self, req: RequestInfo) -> str:
        return req.tenant if self.params.per_tenant else ""

    @property
    def window_ms(self) -> int:
        return max(1, int(self.params.window_s * 1000))

    @property
    def floor(self) -> float:
        return self.params.min_retries_per_s * self.params.window_s


def retry_rule(policy: PolicySet | None) -> RetryRule | None:
    """The policy's first enforcing ``retry_budget`` gate (None: none)."""
    if policy is None:
        return None
    gate = policy.first_enforcing(RetryBudget)
    return None if gate is None else RetryRule(gate.params)


class FirstAttempts:
    """This replica's first attempts per budget key over a sliding window (slices of
    ``window_s / SLICES``, as the core's gate counts them); times in seconds."""

    def __init__(self) -> None:
        self._slices: dict[str, deque[list[float]]] = {}
        self._counts: dict[str, int] = {}

    def add(self, key: str, now: float, window_s: float) -> None:
        slices = self._slices.setdefault(key, deque())
        self._expire(key, now, window_s)
        if not slices or now >= slices[-1][0] + window_s / SLICES:
            slices.append([now, 0.0])
        slices[-1][1] += 1
        self._counts[key] = self._counts.get(key, 0) + 1

    def count(self, key: str, now: float, window_s: float) -> int:
        self._expire(key, now, window_s)
        return self._counts.get(key, 0)

    def counts(self, now: float, window_s: float) -> dict[str, int]:
        """Every key's count; keys whose window emptied are forgotten."""
        for key in list(self._slices):
            if self.count(key, now, window_s) == 0:
                del self._slices[key], self._counts[key]
        return dict(self._counts)

    def _expire(self, key: str, now: float, window_s: float) -> None:
        slices = self._slices.get(key)
        while slices and slices[0][0] + window_s <= now:
            self._counts[key] -= int(slices.popleft()[1])
