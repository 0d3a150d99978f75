"""``vtc``: token-weighted fair share with a virtual token counter (VTC, OSDI'24).

Each tenant has a counter of the service it received, in tokens divided by its weight
(``RequestInfo.weight``). The backlogged tenant with the smallest counter dispatches next;
within a tenant, earliest expiry first (its deadline, else the queue's wait bound, which is
arrival order), so a tenant's interactive turn is not stuck behind its own batch. The
estimate is charged at dispatch and corrected with the actual tokens at release. A tenant
that becomes backlogged is lifted to the smallest counter among the backlogged (or to the
last served counter when nobody is), so idle time cannot be banked for a later burst.
Tenants with equal counters go in the order in which their counters took that value or they
became backlogged, whichever came later (an entry handed back keeps its tenant's place); the
state holds that order (``VtcState.ties``), so compacting the heap never changes it.
Between two backlogged tenants the service gap stays within 2 x the largest request cost
(the VTC bound).

Fleet mode (``policies/fairness/fleet_share.py``): the counters are the fleet's, merged at
each sync with what this replica served since; a tenant that leads a tenant queued on
another replica by more than the allowance is passed over, and the lift counts the tenants
queued elsewhere.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass, field

from policies.contracts import Allow, Fairness, QueuedEntry
from policies.engine.dead_entries import Item, live_head, live_items, must_rebuild
from policies.fairness.fleet_share import FleetShare, ShareReport, local_counters
from policies.params import NoParams
from policies.types import RequestInfo

_MIN_WEIGHT = 1e-9


@dataclass
class VtcState:
    queues: dict[str, list[Item]] = field(default_factory=dict)  # per tenant, EDF heap
    live: dict[str, int] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)
    heap: list[tuple[float, int, str]] = field(default_factory=list)
    """(counter, tie, tenant); an item is current while its tie is the tenant's and the
    tenant is backlogged (others are dropped when they reach the head)."""
    ties: dict[str, int] = field(default_factory=dict)
    """Per tenant, when its counter took its value or it last became backlogged (the
    later; a handed-back entry keeps its tenant's): the order of equal counters."""
    last_served: float = 0.0
    seq: int = 0
    sharing: bool = False
    """Fleet mode: ``unsent`` accumulates for the next report."""
    unsent: dict[str, float] = field(default_factory=dict)
    """Virtual time served per tenant since the last report to the fleet."""
    fleet: FleetShare | None = None
    """The fleet's view at the last sync (None: fairness within this replica only)."""


class Vtc(Fairness[VtcState, NoParams]):
    type_name = "vtc"

    state_model = VtcState

    def push(self, state: VtcState, entry: QueuedEntry, now: float) -> None:
        tenant = entry.request.tenant
        live = state.live
        before = live.get(tenant, 0)
        if before == 0:
            _lift(state, tenant)
        _push_entry(state, entry)
        live[tenant] = before + 1  # _add_live(state, tenant, 1), inline: never below 0
        if before == 0:
            _renew(state, tenant)
            _push_heap(state, tenant)

    def pop(self, state: VtcState, now: float, allow: Allow | None = None) -> QueuedEntry | None:
        """The least-served backlogged tenant's most urgent entry; tenants ``allow``
        refuses are passed over (their place is kept)."""
        fleet = state.fleet
        if allow is None and fleet is None:
            return _pop_first(state)
        passed: list[tuple[float, int, str]] = []
        found: QueuedEntry | None = None
        while found is None and _min_backlogged(state) is not None:
            tenant = state.heap[0][2]
            head = live_head(state.queues[tenant])
            if head is None:
                state.live[tenant] = 0  # only dead entries were left
            elif (fleet is not None and fleet.holds(tenant, state.counters[tenant])) or (
                allow is not None and not allow(head)
            ):
                passed.append(heapq.heappop(state.heap))
            else:
                heapq.heappop(state.queues[tenant])
                found = head
                _add_live(state, tenant, -1)
        for item in passed:
            heapq.heappush(state.heap, item)
        return found

    def push_back(self, state: VtcState, entry: QueuedEntry) -> None:
        """``entry``, popped from ``state``, is handed back: its tenant keeps its place (its
        tie; a counter charged meanwhile has a new one)."""
        _push_entry(state, entry)
        _add_live(state, entry.request.tenant, 1)

    def discard(self, state: VtcState, entry: QueuedEntry) -> None:
        """``entry`` leaves unpopped (the caller marks it dead after this). Its heap item
        stays until it reaches the head, so a tenant that stays backlogged while its clients
        cancel would keep every cancelled item; the tenant's heap is rebuilt from its live
        items by the rule of ``policies/engine/dead_entries.py``."""
        tenant = entry.request.tenant
        _add_live(state, tenant, -1)
        queue = state.queues.get(tenant)
        if queue is not None and must_rebuild(len(queue), state.live.get(tenant, 0)):
            state.queues[tenant] = live_items(queue, entry)

    def charge(self, state: VtcState, req: RequestInfo, tokens: float) -> None:
        tenant = req.tenant
        counters = state.counters
        counter = counters.get(tenant, state.last_served)
        weight = req.weight
        served = tokens / (_MIN_WEIGHT if weight < _MIN_WEIGHT else weight)
        counters[tenant] = counter + served
        if state.sharing:
            state.unsent[tenant] = state.unsent.get(tenant, 0.0) + served
        if tokens > 0 and counter > state.last_served:  # max(last_served, counter)
            state.last_served = counter
        if counters[tenant] != counter:
            _moved(state, tenant)

    def share_report(self, state: VtcState) -> ShareReport:
        state.sharing = True
        served, state.unsent = state.unsent, {}
        return ShareReport(served, frozenset(t for t, n in state.live.items() if n > 0))

    def share_merge(
        self, state: VtcState, share: FleetShare | None, failed: ShareReport | None = None
    ) -> None:
        if failed is not None:  # sent again with the next report
            for tenant, served in failed.served.items():
                state.unsent[tenant] = state.unsent.get(tenant, 0.0) + served
        state.fleet = share
        if share is None:
            return
        for tenant in local_counters(share, state.counters, state.unsent):
            _moved(state, tenant)

    def deficits(self, state: VtcState) -> Mapping[str, float]:
        """Each tenant's counter above the least-served backlogged one (weighted tokens)."""
        floor = _min_backlogged(state)
        floor = state.last_served if floor is None else floor
        return {t: c - floor for t, c in state.counters.items()}


def _lift(state: VtcState, tenant: str) -> None:
    """``tenant`` became backlogged here: lifted to the least-served backlogged tenant (here
    or, in fleet mode, elsewhere), unless the fleet has it queued elsewhere already."""
    fleet = state.fleet
    floor = _min_backlogged(state)
    if fleet is not None:
        if tenant in fleet.elsewhere:
            state.counters.setdefault(tenant, fleet.elsewhere[tenant])
            return
        remote = fleet.floor_for(tenant)
        if remote is not None and (floor is None or remote < floor):
            floor = remote
    floor = state.last_served if floor is None else floor
    state.counters[tenant] = max(state.counters.get(tenant, floor), floor)


def _pop_first(state: VtcState) -> QueuedEntry | None:
    """``pop`` without ``allow``: the least-served backlogged tenant's most urgent entry."""
    live, heap = state.live, state.heap
    while _min_backlogged(state) is not None:
        tenant = heap[0][2]
        head = live_head(state.queues[tenant])
        if head is None:
            live[tenant] = 0  # only dead entries were left
            continue
        heapq.heappop(state.queues[tenant])
        left = live[tenant] - 1  # _add_live(state, tenant, -1): it is backlogged
        live[tenant] = left if left > 0 else 0
        return head
    return None


def _push_entry(state: VtcState, entry: QueuedEntry) -> None:
    tenant = entry.request.tenant
    queue = state.queues.get(tenant)
    if queue is None:
        queue = state.queues[tenant] = []
    heapq.heappush(queue, (entry.expires_at, entry.seq, entry.gen, entry))


def _add_live(state: VtcState, tenant: str, delta: int) -> None:
    """A handed-back entry (``push_back``) whose tenant had nothing else queued brings the
    tenant back with its tie: it keeps its place."""
    before = state.live.get(tenant, 0)
    after = before + delta
    state.live[tenant] = after if after > 0 else 0
    if before == 0 and delta > 0:
        _push_heap(state, tenant)


def _moved(state: VtcState, tenant: str) -> None:
    """``tenant``'s counter took a new value: a new tie, and its current item when it is
    backlogged (an idle tenant gets one when it is pushed or handed back)."""
    _renew(state, tenant)
    if state.live.get(tenant, 0) > 0:
        _push_heap(state, tenant)


def _renew(state: VtcState, tenant: str) -> None:
    """A new tie for ``tenant``: behind every tenant already at its counter. Every change of
    a counter renews the tie, so an item whose tie is current has the current counter."""
    state.seq += 1
    state.ties[tenant] = state.seq


def _push_heap(state: VtcState, tenant: str) -> None:
    """The tenant's current item. Items it replaces stay until they reach the head
    (``_min_backlogged``)."""
    heapq.heappush(state.heap, (state.counters[tenant], state.ties[tenant], tenant))
    if len(state.heap) > 4 * len(state.queues) + 64:
        _rebuild(state)


def _rebuild(state: VtcState) -> None:
    """The heap of the current items only, one per backlogged tenant. The order is the
    order of (counter, tie), which the state holds, not the items: a rebuild changes no
    pop, whenever it happens."""
    counters, ties = state.counters, state.ties
    state.heap = [(counters[t], ties[t], t) for t, n in state.live.items() if n > 0]
    heapq.heapify(state.heap)


def _min_backlogged(state: VtcState) -> float | None:
    """The smallest counter among backlogged tenants, dropping stale heap entries."""
    heap = state.heap
    while heap:
        counter, tie, tenant = heap[0]
        if state.live.get(tenant, 0) > 0 and tie == state.ties[tenant]:  # counter: _renew
            return counter
        heapq.heappop(heap)
    return None
