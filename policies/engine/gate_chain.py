"""The gate chain of one ``PolicySet`` bound to its states, as the scheduler runs it.

``run`` checks the gates in order (each ``check`` followed by its ``commit``) and stops at
the first enforced refusal; shadow refusals are collected; ``promised`` then tells the gate
that refused what Retry-After its client was given. ``accept`` and ``finish`` do the
accounting. Built once per policy (again on ``swap``), so a decision does no lookups by
name; a hook a gate leaves as the contract's no-op is not called at all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from policies.contracts import Gate, GateContext, NamedGate, Verdict
from policies.types import RequestInfo, Usage

_Promised = Callable[[Any, RequestInfo, float, float, float], None]
_Check = tuple[
    str,
    Callable[[Any, RequestInfo, GateContext], Verdict | None],
    Callable[[Any, RequestInfo, GateContext, Verdict | None, bool], None] | None,
    Any,
    bool,
    _Promised | None,
]


class GateChain:
    __slots__ = ("_accepts", "_checks", "_finishes", "_refused_by", "names", "reads_rates")

    def __init__(self, gates: Sequence[NamedGate], states: Mapping[str, Any]) -> None:
        self.names: tuple[str, ...] = tuple(g.name for g in gates)
        """Every gate's name: the gates that accept a request that enters the system."""
        self.reads_rates = any(g.gate.reads_rates() for g in gates)
        """Whether any gate reads the context's drain rate or execution p95."""
        self._checks: tuple[_Check, ...] = tuple(
            (
                g.name,
                g.gate.check,
                g.gate.commit if g.gate.overrides(Gate, "commit") else None,
                states[g.name],
                g.shadow,
                g.gate.promised if g.gate.overrides(Gate, "promised") else None,
            )
            for g in gates
        )
        self._refused_by: tuple[_Promised, Any] | None = None
        """The ``promised`` hook and state of the gate whose refusal ``run`` returned last."""
        self._accepts = tuple(
            (g.gate.on_accept, states[g.name]) for g in gates if g.gate.overrides(Gate, "on_accept")
        )
        self._finishes = tuple(
            (g.name, g.gate.on_finish, states[g.name])
            for g in gates
            if g.gate.overrides(Gate, "on_finish")
        )

    def __bool__(self) -> bool:
        return bool(self.names)

    def run(self, req: RequestInfo, ctx: GateContext) -> tuple[tuple[str, ...], Verdict | None]:
        """(gates in shadow mode that refused, the first enforced refusal or None)."""
        shadowed: tuple[str, ...] = ()
        self._refused_by = None
        for name, check, commit, state, shadow, promised in self._checks:
            verdict = check(state, req, ctx)
            if commit is not None:
                commit(state, req, ctx, verdict, shadow)
            if verdict is None:
                continue
            if shadow:
                shadowed += (name,)
                continue
            if promised is not None:
                self._refused_by = (promised, state)
            return shadowed, verdict
        return shadowed, None

    def promised(self, req: RequestInfo, now: float, after_s: float, lapse_at: float) -> None:
        """The refusal ``run`` just returned for ``req`` was told ``after_s``."""
        refused_by = self._refused_by
        if refused_by is not None:
            self._refused_by = None
            refused_by[0](refused_by[1], req, now, after_s, lapse_at)

    def accept(self, req: RequestInfo, now: float) -> tuple[str, ...]:
        """The request entered the system; returns the names of the gates that accepted it."""
        for on_accept, state in self._accepts:
            on_accept(state, req, now)
        return self.names

    def finish(
        self,
        req: RequestInfo,
        now: float,
        usage: Usage | None,
        *,
        served: bool,
        names: tuple[str, ...],
    ) -> None:
        """The request left the system: ``on_finish`` of those of ``names`` still present."""
        for name, on_finish, state in self._finishes:
            if name in names:
                on_finish(state, req, now, usage, served)
