"""What a flow's runs usually take, learned from its completed runs (calls, tokens, fan-out).

The same idea as the token estimator's output length: a quantile of the newest completed
runs of the flow (tenant, workload class, model of the run's first call). ``error`` is the
mean absolute relative error of the token reservations made from it, against what the
runs then used (``docs/runs.md``): the price of reserving without hints.
"""

from __future__ import annotations

import math
from collections import deque

RunFlow = tuple[str, str, str]
"""tenant, workload class, model of a run's first call."""

_FLOWS = 4096
"""Flows kept; the table is emptied when it reaches this many (as ``FlowKeys``)."""
_ERRORS = 256
"""Reservation errors kept for ``error`` (the newest)."""


class Learned:
    """A flow's typical run: the quantile of its completed runs' calls, tokens, fan-out."""

    __slots__ = ("branches", "calls", "tokens")

    def __init__(self, calls: int, tokens: int, branches: int) -> None:
        self.calls = calls
        self.tokens = tokens
        self.branches = branches


class RunLearner:
    __slots__ = ("_errors", "_flows")

    def __init__(self) -> None:
        self._flows: dict[RunFlow, deque[tuple[int, int, int]]] = {}
        self._errors: deque[float] = deque(maxlen=_ERRORS)

    def typical(self, flow: RunFlow, quantile: float) -> Learned | None:
        """The flow's typical run, or None before its first completed run."""
        runs = self._flows.get(flow)
        if not runs:
            return None
        return Learned(
            _quantile([r[0] for r in runs], quantile),
            _quantile([r[1] for r in runs], quantile),
            _quantile([r[2] for r in runs], quantile),
        )

    def observe(
        self, flow: RunFlow, keep: int, calls: int, tokens: int, branches: int, reserved: int
    ) -> None:
        """A run of ``flow`` completed with these totals; ``reserved`` is what it reserved."""
        runs = self._flows.get(flow)
        if runs is None or runs.maxlen != keep:
            if len(self._flows) >= _FLOWS:
                self._flows.clear()
            runs = self._flows[flow] = deque(runs or (), maxlen=keep)
        runs.append((calls, tokens, branches))
        if tokens > 0:
            self._errors.append(abs(reserved - tokens) / tokens)

    def error(self) -> float | None:
        """Mean absolute relative error of recent token reservations (0-1+), or None."""
        errors = self._errors
        return sum(errors) / len(errors) if errors else None


def _quantile(values: list[int], q: float) -> int:
    """The ``q`` order statistic (nearest rank) of ``values`` (not empty)."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))]
