"""What the request path asks the shared state, and what it gets back.

At admission, before the decision core sees the request, ``admit`` takes the tenant's
global concurrency lease and reserves its estimated tokens (one round trip, or none when the
tenant has no quota). ``release`` gives both back at the request's end, settling the tokens
with actual usage; it never waits and is idempotent on the store's side.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from policies.gates.quota_params import TenantLimits
from policies.shared_mode import SharedMode
from policies.types import Reason, RequestInfo, Usage


@dataclass(frozen=True, slots=True)
class Grant:
    """A request's hold on its tenant's shared limits, to hand back through ``release``."""

    member: str
    """The lease's member in the tenant's lease set: unique per request and replica."""
    tenant: str
    limits: TenantLimits
    cost: int
    """Estimated tokens reserved in the tenant's bucket."""


@dataclass(frozen=True, slots=True)
class Refusal:
    reason: Reason
    retry_after_s: float | None


class SharedState(Protocol):
    replicas: int
    """Gateway replicas alive at the last heartbeat (1 for one replica)."""
    failures: int
    """Redis calls that failed or timed out so far (0 for one replica)."""

    @property
    def mode(self) -> SharedMode:
        """Where the shared limits are decided now (``rules(mode)`` says what it implies)."""

    async def admit(self, req: RequestInfo, limits: TenantLimits | None) -> Grant | Refusal | None:
        """None: nothing shared to take (the core's own gates decide alone)."""

    def release(self, grant: Grant, usage: Usage | None, served: bool) -> None:
        """Give the lease back and settle the reservation (``served``: it reached a backend;
        otherwise the reservation is refunded in full). Never raises, never waits."""

    async def run(self) -> None:
        """The background job: heartbeats, lease renewal, rejoining after a failure."""

    async def fleet(self) -> dict[str, Any]:
        """The fleet view of ``GET /admin/fleet``."""

    async def aclose(self) -> None: ...
