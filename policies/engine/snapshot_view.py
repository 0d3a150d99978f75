"""One ``BackendsSnapshot`` with the lookups a decision repeats, memoised until the next one.

Every lookup depends on the snapshot's ``backends`` only (frozen views), so a snapshot of a
later instant that carries the very same ``backends`` tuple may take over the memo.
"""

from __future__ import annotations

from collections.abc import Callable

from policies.backends import BackendsSnapshot, BackendView
from policies.contracts import BackendLoad
from policies.engine.routing import Bounded, Candidate
from policies.ladder.ladder import pool_saturation
from policies.ladder.ladder_params import LadderParams


class SnapshotView:
    __slots__ = (
        "_bounds",
        "_by_name",
        "_candidates",
        "_saturation",
        "_served",
        "_serving",
        "fleet",
    )

    def __init__(self, fleet: BackendsSnapshot) -> None:
        self.fleet = fleet
        self._serving: dict[str, tuple[BackendView, ...]] = {}
        self._candidates: dict[str, tuple[Candidate, ...]] = {}
        self._bounds: dict[str, tuple[Bounded, ...]] = {}
        self._saturation: dict[str, float] = {}
        self._served: frozenset[str] | None = None
        self._by_name: dict[str, BackendView] | None = None

    def serving(self, model: str) -> tuple[BackendView, ...]:
        """Backends that are not down and serve ``model``."""
        found = self._serving.get(model)
        if found is None:
            found = self._serving[model] = self.fleet.serving(model)
        return found

    def candidates(
        self, model: str, load_of: Callable[[str], BackendLoad]
    ) -> tuple[Candidate, ...]:
        """``serving(model)``, each with the gateway's load on it (``load_of(name)``, whose
        objects must live longer than this snapshot: they are kept, not copied)."""
        found = self._candidates.get(model)
        if found is None:
            found = tuple((b, load_of(b.name)) for b in self.serving(model))
            self._candidates[model] = found
        return found

    def room_bounds(
        self,
        model: str,
        load_of: Callable[[str], BackendLoad],
        bound_of: Callable[[BackendView], float],
    ) -> tuple[Bounded, ...]:
        """``candidates(model)``, each with the limit's ``room_bound`` of its backend."""
        found = self._bounds.get(model)
        if found is None:
            found = tuple((b, load, bound_of(b)) for b, load in self.candidates(model, load_of))
            self._bounds[model] = found
        return found

    def get(self, name: str) -> BackendView | None:
        """The backend named ``name`` (first of that name, as ``BackendsSnapshot.get``)."""
        by_name = self._by_name
        if by_name is None:
            by_name = {}
            for b in self.fleet.backends:
                by_name.setdefault(b.name, b)
            self._by_name = by_name
        return by_name.get(name)

    def served_models(self) -> frozenset[str]:
        """Every model some available backend serves."""
        if self._served is None:
            backends = self.fleet.backends
            self._served = frozenset(m for b in backends if b.available for m in b.models)
        return self._served

    def saturation(self, model: str, params: LadderParams) -> float:
        """Pool saturation of ``model``'s backends (see ``ladder.pool_saturation``)."""
        found = self._saturation.get(model)
        if found is None:
            found = self._saturation[model] = pool_saturation(self.serving(model), params)
        return found

    def forget_policy(self) -> None:
        """The policy's parameters changed (swap): saturation and room bounds read them."""
        self._saturation.clear()
        self._bounds.clear()
