"""Fair share across gateway replicas: what a replica reports, what it learns back, and
when it holds a tenant back.

Each replica keeps its own queue and its own VTC. Every sync it reports the virtual time it
served since the last report (tokens / weight, per tenant) and which tenants it has queued;
it gets back the fleet's counters and which tenants are queued on *other* replicas
(``FleetShare``). It then orders its own queue by the fleet's counters, and holds back a
tenant that leads another tenant, queued elsewhere, by more than ``allowance``: that other
replica can then take the capacity this one leaves. A tenant queued nowhere else is never
held, so capacity is never left idle while nobody else waits. No I/O here: the store
(``gateway/replicas/``) and the simulator move these values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ShareReport:
    """What a replica tells the fleet at one sync."""

    served: Mapping[str, float]
    """Virtual time served per tenant since the last report (tokens / weight; negative
    corrects an estimate that was too high)."""
    backlogged: frozenset[str]
    """Tenants with queued requests on this replica now."""


@dataclass(frozen=True, slots=True)
class FleetShare:
    """The fleet's view at one sync (virtual time: tokens / weight)."""

    counters: Mapping[str, float]
    """The fleet's counters of the tenants this replica reported and of those queued
    elsewhere (this replica's own service up to its report included)."""
    elsewhere: Mapping[str, float]
    """Tenants queued on another replica, with their counters."""
    allowance: float
    """How far a tenant may lead the least-served tenant queued elsewhere before it is
    held back."""
    lowest: tuple[tuple[float, str], ...] = ()
    """The two smallest (counter, tenant) of ``elsewhere`` (``share_of`` fills it)."""

    def floor_for(self, tenant: str) -> float | None:
        """The smallest counter among the tenants queued elsewhere, ``tenant`` left out."""
        for counter, other in self.lowest:
            if other != tenant:
                return counter
        return None

    def holds(self, tenant: str, counter: float) -> bool:
        """Whether ``tenant``, at ``counter``, waits for a tenant queued elsewhere."""
        floor = self.floor_for(tenant)
        return floor is not None and counter - floor > self.allowance


def share_of(
    counters: Mapping[str, float], elsewhere: Mapping[str, float], allowance: float
) -> FleetShare:
    lowest = tuple(sorted((c, t) for t, c in elsewhere.items())[:2])
    return FleetShare(counters, elsewhere, allowance, lowest)


def local_counters(
    share: FleetShare, counters: dict[str, float], unsent: Mapping[str, float]
) -> list[str]:
    """Sets ``counters`` to the fleet's plus what this replica served since its report
    (``unsent``); returns the tenants whose counter changed."""
    changed = []
    for tenant, fleet in share.counters.items():
        value = fleet + unsent.get(tenant, 0.0)
        if counters.get(tenant) != value:
            counters[tenant] = value
            changed.append(tenant)
    return changed
