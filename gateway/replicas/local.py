"""One replica: nothing is shared, the decision core's own gates enforce every limit."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.replicas.contract import Grant, Refusal
from policies.gates.quota_params import TenantLimits
from policies.shared_mode import SharedMode
from policies.types import RequestInfo, Usage


class LocalState:
    mode = SharedMode.LOCAL
    replicas = 1
    failures = 0

    async def admit(self, req: RequestInfo, limits: TenantLimits | None) -> Grant | Refusal | None:
        return None

    def release(self, grant: Grant, usage: Usage | None, served: bool) -> None:
        return None

    async def run(self) -> None:
        await asyncio.Event().wait()  # nothing to do in the background; ends on cancel

    async def fleet(self) -> dict[str, Any]:
        return {"mode": self.mode.value, "replicas": self.replicas, "members": []}

    async def aclose(self) -> None:
        return None
