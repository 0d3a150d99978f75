"""Headroom: keep the last slots from a tenant crowding the others out, so a tenant that is
quiet for a moment still finds a free slot when its next turn arrives.

Fair share at dispatch is not enough on non-preemptive slots: when one tenant's long
requests hold every slot, another tenant's turn waits for one to free however fair the
order is. With ``reserve_fraction`` > 0, once fewer than ``reserve = ceil(reserve_fraction
x limit)`` slots would remain free, a tenant takes one only while it holds less than its
weighted share of the limit plus ``reserve``: past that it is crowding the others out (a
flood beside a quiet tenant). A tenant merely over its share among tenants alike (three
chat tenants' turns arriving at random) still takes the slot instead of leaving it idle
for turns that are not there. The others find a free slot while together they hold at
most ``limit x (1 - share) - 2 x reserve`` (on 8 slots, 1 reserved, beside one flood: 2).
Shares are among the tenants active in the last ``active_window_s`` (that submitted in it)
plus the asking tenant itself, so a tenant whose backlog is old still counts. The limit is
the backends' own (``max_num_seqs``, ``fixed``, ``adaptive``); with ``server_signals`` and
no ``max_num_seqs`` there is no slot count and the reserve does nothing. The cost: reserved
slots may idle while the quiet tenant stays quiet (not work-conserving, by design).

A free slot is not free on every engine. Where an engine's step grows with its batch (a
CPU's, or a GPU's with long contexts), each long sequence a tenant adds slows every other
tenant's decode. With ``decode_slowdown_max``, while the engines step more than that many
times slower than with their lightest recent batch (``BackendView.itl_s`` against
``itl_floor_s``), a tenant that already holds its weighted share of the estimated tokens in
flight there (of the slots, while its sequences are alone in the batch) adds none until
they are back within it. Where the step is flat in the batch (a
GPU's decode) the ratio stays near 1 and nothing is held. Off by default.
"""

from __future__ import annotations

import math
from collections import deque

from policies.engine.headroom_params import HeadroomParams


class ActiveTenants:
    """Weights of tenants seen in the last ``window_s`` seconds, with their running sum."""

    __slots__ = ("_order", "_seen", "total_weight")

    def __init__(self) -> None:
        self._seen: dict[str, tuple[float, float]] = {}  # tenant -> (last seen, weight)
        self._order: deque[tuple[float, str]] = deque()
        self.total_weight = 0.0

    def touch(self, tenant: str, weight: float, now: float) -> None:
        old = self._seen.get(tenant)
        if old is not None:
            self.total_weight -= old[1]
        self._seen[tenant] = (now, weight)
        self.total_weight += weight
        self._order.append((now, tenant))

    def expire(self, now: float, window_s: float) -> None:
        order, seen = self._order, self._seen
        if not order or order[0][0] >= now - window_s:
            return  # nothing left the window (and an empty map was already zeroed)
        while order and order[0][0] < now - window_s:
            seen_at, tenant = order.popleft()
            current = seen.get(tenant)
            if current is not None and current[0] == seen_at:
                del seen[tenant]
                self.total_weight -= current[1]
        if not seen:
            self.total_weight = 0.0  # no float drift once empty

    def alone(self, tenant: str) -> bool:
        """Whether no tenant but ``tenant`` is active: headroom then has nobody to keep
        slots for, and holds nothing back."""
        seen = self._seen
        return not seen or (len(seen) == 1 and tenant in seen)

    def several(self) -> bool:
        """Whether two or more tenants are active."""
        return len(self._seen) >= 2

    def weight(self, tenant: str) -> float | None:
        found = self._seen.get(tenant)
        return None if found is None else found[1]


def decode_allows(
    slowdown_max: float | None,
    slowdown: float | None,
    tokens_in_flight: int,
    tenant_tokens: int,
    tenant_in_flight: int,
    slots: float | None,
    tenant_weight: float,
    active_weight: float,
) -> bool:
    """Whether the engines' decode slowdown lets a tenant add one more request (see above).

    ``slowdown``: the engines' step time now over their floor (None: unknown, no hold).
    Held only while another tenant is active (``active_weight`` above the tenant's own):
    while others have sequences in the batch, a tenant holding at least its weighted share
    of the estimated tokens in flight (a long sequence slows a step more than a short one);
    while it is alone in the batch (the mean may still show a flood already gone, or the
    others are between turns), a tenant holding its weighted share of the ``slots``."""
    if slowdown_max is None or slowdown is None or slowdown <= slowdown_max:
        return True
    if active_weight <= tenant_weight:
        return True  # nobody else to protect
    share = tenant_weight / active_weight
    if tokens_in_flight > tenant_tokens:
        return tenant_tokens < tokens_in_flight * share
    return slots is None or tenant_in_flight < slots * share


def may_take_slot(
    params: HeadroomParams,
    limit: float | None,
    in_flight: int,
    tenant_in_flight: int,
    tenant_weight: float,
    active_weight: float,
) -> bool:
    """Whether a tenant may take one more of ``limit`` slots with ``in_flight`` taken: yes
    while the reserve stays free, else only below its weighted share plus the reserve."""
    if params.reserve_fraction <= 0 or limit is None or active_weight <= 0:
        return True
    reserve = math.ceil(params.reserve_fraction * limit)
    if limit - in_flight - 1 >= reserve:
        return True
    return tenant_in_flight < limit * tenant_weight / active_weight + reserve
