"""Where a request may go now: the current snapshot's memo, the gateway's own load on each
backend, the limit's room (read as per-snapshot bounds when the limit states them),
routing, and headroom. The scheduler keeps one: ``bind`` follows a policy swap,
``observe`` each new snapshot, ``took``/``gave_back`` account dispatch and release.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from policies.backends import BackendsSnapshot, BackendView
from policies.contracts import BackendLoad, Limit, QueuedEntry
from policies.engine.headroom import ActiveTenants, decode_allows, may_take_slot
from policies.engine.headroom_params import HeadroomParams
from policies.engine.prefill_backlog import PrefillBacklog
from policies.engine.prefix_model import PrefixModels
from policies.engine.queue_book import plain
from policies.engine.routing import (
    Clearing,
    Local,
    any_room,
    around_prefill,
    choose_backend,
    least_loaded_within,
    most_local,
    pick_within,
)
from policies.engine.snapshot_view import SnapshotView
from policies.policy_set import PolicySet
from policies.types import RequestInfo


class Placement:
    __slots__ = (
        "_allowed",
        "_headroom",
        "_limit",
        "_locality",
        "_lstate",
        "_now",
        "_only_prefill",
        "_refused",
        "_room",
        "_room_bound",
        "_scanning",
        "_unplaced",
        "active",
        "loads",
        "prefill",
        "prefixes",
        "tenant_in_flight",
        "tenant_tokens",
        "view",
    )

    def __init__(self, policy: PolicySet, limit_state: Any, now: float) -> None:
        self.view = SnapshotView(BackendsSnapshot(at=now))
        self.loads: dict[str, BackendLoad] = {}
        self.tenant_in_flight: dict[str, int] = {}
        self.tenant_tokens: dict[str, int] = {}
        """Each tenant's estimated tokens in flight (what the decode hold weighs)."""
        self.active = ActiveTenants()
        self.prefill: PrefillBacklog | None = None
        self.prefixes: PrefixModels | None = None
        """The model of each backend's prefix cache (None: ``cache.estimate: hit_rate``
        and no locality: nothing reads it, nothing is kept)."""
        self._now = now
        self._scanning = False
        self._refused: dict[str, int] = {}
        self._allowed: dict[tuple[str, str, float, bool], bool] = {}
        self._unplaced: set[tuple[str, int, bool]] = set()
        self._only_prefill: dict[tuple[str, bool], bool] = {}
        self._room: dict[str, tuple[BackendView | bool, bool]] = {}
        self.bind(policy, limit_state)

    def bind(self, policy: PolicySet, limit_state: Any) -> None:
        """New parameters (a swap): the limit, its state, headroom; room is read afresh."""
        self._changed()
        self._limit: Limit[Any, Any] = policy.limit
        self._lstate = limit_state
        self._headroom: HeadroomParams = policy.headroom
        self._room_bound = _room_bound(policy.limit)
        self.view.forget_policy()
        self.prefill = _prefill(policy, self.prefill)
        self._locality = policy.cache.locality_weight
        if not policy.models_prefixes:
            self.prefixes = None
        elif self.prefixes is None:
            self.prefixes = PrefixModels()

    def observe(self, fleet: BackendsSnapshot, now: float) -> None:
        self._changed()
        view = self.view
        if fleet is not view.fleet:
            if fleet.backends is view.fleet.backends:
                view.fleet = fleet  # a new instant, the same views: the lookups still hold
            else:
                self.view = SnapshotView(fleet)
                if self.prefill is not None:
                    self.prefill.observe(fleet.backends)
                if self.prefixes is not None:
                    self.prefixes.keep_only(b.name for b in fleet.backends)
        self.active.expire(now, self._headroom.active_window_s)
        self._now = now

    def scan(self, on: bool) -> None:
        """A scan of the queue begins (``on``) or ends. Within one, nothing but ``took``
        changes what ``may_take`` and ``prefill_admits`` read (the clock, the snapshot, the
        limit's state, the active tenants, the prefill backlog), so their answers are kept
        until the next ``took``: a poll asks them of many queued requests alike."""
        self._scanning = on
        self._changed()

    def _changed(self) -> None:
        """What the kept answers read may have changed: forget them."""
        if self._refused:
            self._refused.clear()
        if self._allowed:
            self._allowed.clear()
        if self._unplaced:
            self._unplaced.clear()
        if self._only_prefill:
            self._only_prefill.clear()
        if self._room:
            self._room.clear()

    def _by_prompt(self, req: RequestInfo) -> bool:
        """Whether ``pick(req)`` finding nothing depends on nothing of ``req`` but its
        model, its prompt tokens and whether it has a session (no prefix model): it finds
        nothing exactly when no backend of the model with room admits the prompt, whichever
        its session's home. Then requests alike get the same answer."""
        return self._scanning and self.prefixes is None

    def load(self, name: str) -> BackendLoad:
        load = self.loads.get(name)
        if load is None:
            load = self.loads[name] = BackendLoad()
        return load

    def local(self, req: RequestInfo) -> bool:
        """Whether ``pick`` may place ``req`` by locality (else by load, or its session)."""
        return self._locality > 0 and req.blocks is not None and self.prefixes is not None

    def pick(self, req: RequestInfo) -> BackendView | None:
        """The backend ``req`` dispatches to now, or None when none of its model has room."""
        if not self.prefill_binds(req) or not self._by_prompt(req):
            return self._pick(req)
        key = (req.model, req.estimate.prompt_tokens, not req.session_id)
        if key in self._unplaced:
            return None
        best = self._pick(req)
        if best is None:
            self._unplaced.add(key)
        return best

    def _pick(self, req: RequestInfo) -> BackendView | None:
        if self.local(req):
            local = self._pick_local(req)
            if local is not None:
                return local
        if self._clear_routing() and not req.session_id:
            clear = self._pick_clear(req)
            if clear is not None:
                return clear
        bound_of = self._room_bound
        if bound_of is not None and not req.session_id:
            bounded = self.view.room_bounds(req.model, self.load, bound_of)
            best = least_loaded_within(bounded)
            if best is None or self.prefill is None or self.prefill_admits(best, req):
                return best
            return least_loaded_within([c for c in bounded if self.prefill_admits(c[0], req)])
        candidates = self.view.candidates(req.model, self.load)
        best = choose_backend(self._limit, self._lstate, candidates, req.session_id)
        if best is None or self.prefill is None or self.prefill_admits(best, req):
            return best
        admitted = [c for c in candidates if self.prefill_admits(c[0], req)]
        return choose_backend(self._limit, self._lstate, admitted, req.session_id)

    def _pick_local(self, req: RequestInfo) -> BackendView | None:
        """``most_local`` of the backends with room for ``req``; None when none holds any of
        its prompt (then load, or its session, places it)."""
        prefixes = self.prefixes
        assert prefixes is not None
        prompt = req.estimate.prompt_tokens
        scored: list[Local] = []
        any_hit = False
        for b, load in self._with_room(req):
            cached = prefixes.cached_tokens(b, req) or 0
            any_hit = any_hit or cached > 0
            scored.append((b, load, prompt - cached))
        return most_local(scored, self._locality) if any_hit else None

    def _clear_routing(self) -> bool:
        """Whether ``pick`` routes around pending prefill now (``route_around_prefill``,
        the prefill backlog on, two or more tenants active)."""
        return (
            self._headroom.route_around_prefill
            and self.prefill is not None
            and self.active.several()
        )

    def _pick_clear(self, req: RequestInfo) -> BackendView | None:
        """``around_prefill`` of the backends with room for ``req``: each one's pending
        prompts, and ``req``'s own prefill, timed at the fastest prefill rate measured among
        them (one scale for all: each backend's own estimate is noisy, and the same prompt
        ahead must weigh the same everywhere). None when fewer than two have room or no
        rate is measured yet (then load places it)."""
        prefill = self.prefill
        assert prefill is not None
        rooms = self._with_room(req)
        if len(rooms) < 2:
            return None
        rate = prefill.fastest_rate([b.name for b, _ in rooms])
        if rate is None:
            return None
        now = self._now
        scored: list[Clearing] = [
            (b, ld, max(0.0, prefill.backend(b.name).clears_at(rate) - now)) for b, ld in rooms
        ]
        own_s = min(self.uncached_tokens(b, req) for b, _ in rooms) / rate
        return around_prefill(scored, own_s)

    def _with_room(self, req: RequestInfo) -> list[tuple[BackendView, BackendLoad]]:
        """The backends of ``req``'s model with room for it now (the limit's and the prefill
        backlog bound's)."""
        bound_of = self._room_bound
        if bound_of is not None:
            bounded = self.view.room_bounds(req.model, self.load, bound_of)
            rooms = [(b, ld) for b, ld, n in bounded if ld.in_flight == 0 or ld.in_flight < n]
        else:
            limit, lstate = self._limit, self._lstate
            candidates = self.view.candidates(req.model, self.load)
            rooms = [(b, ld) for b, ld in candidates if limit.has_room(lstate, b, ld)]
        if self.prefill is None:
            return rooms
        return [(b, ld) for b, ld in rooms if self.prefill_admits(b, req)]

    def prefill_refused(self, req: RequestInfo) -> bool:
        """After ``pick(req)`` found nothing: whether only the prefill bound refused it (a
        backend has room for one more request, just not for this prompt now)."""
        if not self.prefill_binds(req):
            return False
        if self._by_prompt(req):  # without the bound, the prompt plays no part either
            key = (req.model, not req.session_id)
            refused = self._only_prefill.get(key)
            if refused is None:
                refused = self._only_prefill[key] = self._prefill_refused(req)
            return refused
        return self._prefill_refused(req)

    def _prefill_refused(self, req: RequestInfo) -> bool:
        saved, self.prefill = self.prefill, None
        try:
            return self.pick(req) is not None
        finally:
            self.prefill = saved

    def refuses_alike(self, req: RequestInfo) -> bool:
        """After the prefill bound alone refused ``req`` (``prefill_refused``): whether it
        refuses, until the next dispatch, every request of the model that is plain as
        ``req`` is (``queue_book.plain``) with a prompt at least as long. The bound is
        monotone in the uncached tokens, which the backend's hit rate gives alike for every
        plain prompt, and it holds every tenant alike unless ``between_tenants``."""
        prefill = self.prefill
        return prefill is not None and not prefill.params.between_tenants and plain(req)

    def prefill_binds(self, req: RequestInfo) -> bool:
        """Whether the prefill backlog bound may hold ``req``: it is on and, with
        ``between_tenants``, a tenant other than ``req``'s is active."""
        prefill = self.prefill
        if prefill is None:
            return False
        return not (prefill.params.between_tenants and self.active.alone(req.tenant))

    def prefill_admits(self, backend: BackendView, req: RequestInfo) -> bool:
        """The prefill backlog bound (see ``prefill_backlog.py``), with the rate estimate
        brought up to now before a refusal."""
        prefill = self.prefill
        if prefill is None or not self.prefill_binds(req):
            return True
        tokens = self.uncached_tokens(backend, req)
        name = backend.name
        refused = self._refused.get(name)
        if refused is not None and tokens >= refused:
            return False  # the bound is monotone in the prompt: a larger one is refused too
        if prefill.admits(name, tokens):
            return True
        prefill.backend(name).estimate(self._now)
        if prefill.admits(name, tokens):
            return True
        if self._scanning:
            self._refused[name] = tokens
        return False

    def uncached_tokens(self, backend: BackendView, req: RequestInfo) -> int:
        """``req``'s prompt tokens ``backend`` is expected to compute: those its prefix cache
        will not serve, by the prefix model where it knows, else by the backend's hit rate."""
        prompt = req.estimate.prompt_tokens
        cached = None if self.prefixes is None else self.prefixes.cached_tokens(backend, req)
        if cached is None:
            hit = backend.prefix_cache_hit_rate
            cached = 0 if hit is None else int(prompt * min(1.0, max(0.0, hit)))
        return prompt - cached

    def room_now(self, models: Mapping[str, int]) -> tuple[BackendView | bool, bool]:
        """Cheap pre-check when one model is queued: False when no backend for it has room.
        With room bounds, the least-loaded backend with room: the one ``pick`` picks for
        any request of that model without a session (one scan serves both), and whether
        room may remain after it takes one (``pick_within``); True while ``pick`` routes
        around pending prefill.
        True: there may be room (several models queued: each request's pick decides)."""
        if len(models) != 1:
            return True, True
        (model,) = models
        if not self._scanning:
            return self._room_now(model)
        room = self._room.get(model)
        if room is None:
            room = self._room[model] = self._room_now(model)
        return room

    def _room_now(self, model: str) -> tuple[BackendView | bool, bool]:
        bound_of = self._room_bound
        if bound_of is None:
            candidates = self.view.candidates(model, self.load)
            return any_room(self._limit, self._lstate, candidates), True
        best, spare = pick_within(self.view.room_bounds(model, self.load, bound_of))
        if best is None:
            return False, spare
        if self._clear_routing():
            return True, True  # where it goes depends on each one's prompt: ``pick`` says
        return best, spare

    def headroom_on(self) -> bool:
        params = self._headroom
        return params.reserve_fraction > 0 or params.decode_slowdown_max is not None

    def allow(self, entry: QueuedEntry) -> bool:
        return self.may_take(entry.request, queued=True)

    def may_take(self, req: RequestInfo, *, queued: bool = False) -> bool:
        """Headroom: may ``req``'s tenant take one more slot of its model's backends?
        ``queued``: ``req`` waits in the queue (else it just arrived to an empty one, and
        the reserve holds it only with ``hold_arrivals``)."""
        if not self._scanning:
            return self._may_take(req, queued)
        key = (req.tenant, req.model, req.weight, queued)
        allowed = self._allowed.get(key)
        if allowed is None:
            allowed = self._allowed[key] = self._may_take(req, queued)
        return allowed

    def _may_take(self, req: RequestInfo, queued: bool) -> bool:
        params = self._headroom
        reserve = params.reserve_fraction > 0 and (queued or params.hold_arrivals)
        if not (reserve or params.decode_slowdown_max is not None) or self.active.alone(req.tenant):
            return True  # every submit asks: no scan when nothing may hold it, or alone
        limit, lstate = self._limit, self._lstate
        total: float | None = 0.0
        in_flight, tokens, slowdowns, slowed = 0, 0, 0, 0.0
        for b, load in self.view.candidates(req.model, self.load):
            current = limit.current(lstate, b, load) if total is not None else None
            total = None if current is None or total is None else total + current
            in_flight, tokens = in_flight + load.in_flight, tokens + load.in_flight_tokens
            if b.itl_s is not None and b.itl_floor_s is not None and b.itl_floor_s > 0:
                slowdowns, slowed = slowdowns + 1, slowed + b.itl_s / b.itl_floor_s
        seen = self.active.weight(req.tenant)
        weight = req.weight if seen is None else seen
        active = self.active.total_weight + (weight if seen is None else 0.0)  # with itself
        mine = self.tenant_in_flight.get(req.tenant, 0)
        if slowdowns and params.decode_slowdown_max is not None:
            held = self.tenant_tokens.get(req.tenant, 0)
            slowdown_max, slowdown = params.decode_slowdown_max, slowed / slowdowns
            if not decode_allows(slowdown_max, slowdown, tokens, held, mine, total, weight, active):
                return False
        if total is None or not reserve:
            return True  # no slot count, or an arrival with nobody waiting: not held
        return may_take_slot(params, total, in_flight, mine, weight, active)

    def took(self, backend: str, req: RequestInfo, tokens: int) -> None:
        """``req`` (``tokens`` estimated) was dispatched to ``backend``."""
        self._changed()
        view = self.view.get(backend)
        if self.prefill is not None:
            prompt = req.estimate.prompt_tokens
            uncached = prompt if view is None else self.uncached_tokens(view, req)
            self.prefill.backend(backend).dispatched(
                req.request_id, uncached, self._now, req.stream
            )
        if self.prefixes is not None and req.blocks is not None and view is not None:
            self.prefixes.sent(view, req)  # (after: its own prompt is not its cache)
        load = self.load(backend)
        load.in_flight += 1
        load.in_flight_tokens += tokens
        tenants = self.tenant_in_flight
        tenants[req.tenant] = tenants.get(req.tenant, 0) + 1
        held = self.tenant_tokens
        held[req.tenant] = held.get(req.tenant, 0) + tokens

    def gave_back(
        self, backend: str, req: RequestInfo, tokens: int, completed: bool = False
    ) -> BackendLoad:
        """``req``'s dispatch to ``backend`` ended (``completed``: it finished); returns the
        backend's load after it."""
        self._changed()
        if self.prefill is not None:
            self.prefill.backend(backend).ended(req.request_id, completed)
        load = self.load(backend)
        load.in_flight -= 1
        load.in_flight_tokens -= tokens
        tenants = self.tenant_in_flight
        left = tenants.get(req.tenant, 0) - 1
        held = self.tenant_tokens
        if left <= 0:
            tenants.pop(req.tenant, None)
            held.pop(req.tenant, None)
        else:
            tenants[req.tenant] = left
            held[req.tenant] = held.get(req.tenant, 0) - tokens
        return load

    def limits(self) -> dict[str, float | None]:
        """Each backend's limit now, for stats."""
        limit, lstate = self._limit, self._lstate
        return {
            b.name: limit.current(lstate, b, self.load(b.name)) for b in self.view.fleet.backends
        }


def _room_bound(limit: Limit[Any, Any]) -> Callable[[BackendView], float] | None:
    """The limit's ``room_bound`` when it states one (see ``Limit.room_bound``); None: ask
    ``has_room`` every time."""
    return limit.room_bound if limit.overrides(Limit, "room_bound") else None


def _prefill(policy: PolicySet, current: PrefillBacklog | None) -> PrefillBacklog | None:
    """The prefill backlog for ``policy``: None when off; else the current one (its
    measurements and pending prompts survive a swap) with the new parameters."""
    params = policy.prefill_backlog
    if not params.enabled:
        return None
    if current is None:
        return PrefillBacklog(params)
    current.params = params
    return current
