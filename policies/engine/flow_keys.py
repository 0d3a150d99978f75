"""One shared ``FlowKey`` per distinct flow, for the flows of queued requests.

A queued request keeps its flow key until it dispatches (its DELAY and its dispatch
decision carry it). One object per request would be one more object per queued request
for the garbage collector's young generation to count (a collection every ~700 of them);
one per flow is not. Bounded: the table is emptied when it reaches ``limit`` flows.
"""

from __future__ import annotations

from policies.types import FlowKey, RequestInfo

_LIMIT = 4096
"""Distinct flows kept (tenant x workload class x model x deadline bucket)."""


class FlowKeys:
    __slots__ = ("_keys", "_limit")

    def __init__(self, limit: int = _LIMIT) -> None:
        self._keys: dict[tuple[str, str, str, str], FlowKey] = {}
        self._limit = limit

    def __len__(self) -> int:
        return len(self._keys)

    def of(self, req: RequestInfo) -> FlowKey:
        """``req.flow``, the same object for every request of that flow."""
        fields = req.flow_fields()
        key = self._keys.get(fields)
        if key is None:
            if len(self._keys) >= self._limit:
                self._keys.clear()
            key = self._keys[fields] = FlowKey(*fields)
        return key
