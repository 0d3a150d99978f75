"""One ``FleetSnapshot`` with the lookups a decision repeats, memoised until the next one."""

from __future__ import annotations

from policies.fleet import BackendView, FleetSnapshot
from policies.ladder import LadderParams, pool_saturation


class SnapshotView:
    def __init__(self, fleet: FleetSnapshot) -> None:
        self.fleet = fleet
        self._serving: dict[str, tuple[BackendView, ...]] = {}
        self._saturation: dict[str, float] = {}
        self._served: frozenset[str] | None = None

    def serving(self, model: str) -> tuple[BackendView, ...]:
        """Backends that are not down and serve ``model``."""
        found = self._serving.get(model)
        if found is None:
            found = self._serving[model] = self.fleet.serving(model)
        return found

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

    def forget_saturation(self) -> None:
        """The ladder parameters changed (policy swap)."""
        self._saturation.clear()
