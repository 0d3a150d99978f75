"""The pieces the decision's hot path was made cheaper with, each against the plain
definition it replaces: ``quick_init`` against the dataclass's generated ``__init__``, the
drain meter and the latency quantiles against straightforward re-computation, the gate
chain's skipped hooks, and the snapshot memo across snapshots."""

from __future__ import annotations

import dataclasses
import random
from collections import deque
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.backends import BackendsSnapshot, BackendView, Health
from policies.build import core
from policies.contracts import BackendLoad, Gate, GateContext, NamedGate, Verdict
from policies.engine.flow_keys import FlowKeys
from policies.engine.gate_chain import GateChain
from policies.engine.observe import DrainMeter, ExecQuantiles, cost_class
from policies.engine.placement import Placement
from policies.engine.routing import least_loaded, least_loaded_within, pick_within
from policies.engine.scheduler import Scheduler, Ticket
from policies.engine.scheduler_types import make_decision
from policies.ladder.ladder import LadderResult
from policies.limits.server_signals import ServerSignals
from policies.limits.server_signals_params import ServerSignalsParams
from policies.native.quick_init import quick_init
from policies.params import NoParams
from policies.registry import build_policy
from policies.types import (
    DECISION_FIELDS,
    Decision,
    DecisionKind,
    Degradation,
    Ending,
    FlowKey,
    Outcome,
    Reason,
    RequestInfo,
    Usage,
    WorkEstimate,
)

from .helpers import ManualClock, backend, fleet, request

QUICK = [
    FlowKey,
    WorkEstimate,
    Usage,
    RequestInfo,
    Degradation,
    BackendView,
    BackendsSnapshot,
    LadderResult,
    Verdict,
]


def _generated(cls: type[Any], *args: Any, **kwargs: Any) -> Any:
    obj = object.__new__(cls)
    cls.__init__.__wrapped__(obj, *args, **kwargs)
    return obj


def _value(f: dataclasses.Field[Any], rng: random.Random) -> Any:
    return f"{f.name}-{rng.random()}"  # any object: the init only stores it


@pytest.mark.parametrize("cls", QUICK, ids=lambda c: c.__name__)
def test_quick_init_stores_what_the_generated_init_stores(cls: type[Any]) -> None:
    rng = random.Random(cls.__name__)
    fields = dataclasses.fields(cls)
    full = [_value(f, rng) for f in fields]
    assert cls(*full) == _generated(cls, *full)
    kwargs = {f.name: v for f, v in zip(fields, full, strict=True)}
    assert cls(**kwargs) == _generated(cls, **kwargs)
    required = {
        f.name: v
        for f, v in zip(fields, full, strict=True)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    quick, generated = cls(**required), _generated(cls, **required)
    assert quick == generated  # defaults and default factories alike
    for f in fields:
        assert getattr(quick, f.name) == getattr(generated, f.name)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(quick, fields[0].name, None)
    with pytest.raises(TypeError):
        cls(*full, None)  # one argument too many, as before


def test_quick_init_gives_each_instance_its_own_factory_value() -> None:
    @quick_init
    @dataclasses.dataclass(frozen=True, slots=True)
    class Holder:
        items: list[int] = dataclasses.field(default_factory=list)

    a, b = Holder(), Holder()
    a.items.append(1)
    assert b.items == []


def test_quick_init_refuses_what_it_cannot_reproduce() -> None:
    @dataclasses.dataclass(slots=True)
    class Mutable:
        x: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        x: int

        def __post_init__(self) -> None:
            raise AssertionError

    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        x: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class KeywordOnly:
        x: int = dataclasses.field(kw_only=True)

    @dataclasses.dataclass(frozen=True, slots=True)
    class NotInInit:
        x: int = dataclasses.field(default=0, init=False)

    for cls in (Mutable, Checked, NoSlots, KeywordOnly, NotInInit):
        with pytest.raises(TypeError):
            quick_init(cls)


class _PlainDrain:
    """The drain meter as first written: sums over every bucket on each read."""

    def __init__(self, window_s: float = 30.0) -> None:
        self._bucket_s = window_s / 10
        self._buckets: deque[list[float]] = deque()
        self._last: float | None = None
        self._busy = False

    def tick(self, now: float, busy: bool) -> None:
        if self._last is not None and self._busy and now > self._last:
            self._bucket(now)[2] += now - self._last
        self._last, self._busy = now, busy

    def add(self, now: float, tokens: int) -> None:
        self._bucket(now)[1] += tokens

    def rate(self, now: float) -> float | None:
        self._evict(now)
        tokens = sum(b[1] for b in self._buckets)
        busy = sum(b[2] for b in self._buckets)
        return None if tokens <= 0 or busy <= 0 else tokens / busy

    def _bucket(self, now: float) -> list[float]:
        self._evict(now)
        if not self._buckets or now >= self._buckets[-1][0] + self._bucket_s:
            self._buckets.append([now, 0.0, 0.0])
        return self._buckets[-1]

    def _evict(self, now: float) -> None:
        horizon = now - self._bucket_s * 10
        while self._buckets and self._buckets[0][0] + self._bucket_s < horizon:
            self._buckets.popleft()


drain_ops = st.lists(
    st.tuples(
        st.floats(0, 7, allow_nan=False),
        st.sampled_from(["tick-busy", "tick-idle", "add", "rate"]),
        st.integers(0, 5000),
    ),
    max_size=300,
)


@settings(max_examples=200, deadline=None)
@given(drain_ops)
def test_drain_meter_reads_exactly_what_summing_every_bucket_gives(ops: list[Any]) -> None:
    fast, plain = DrainMeter(), _PlainDrain()
    now = 100.0
    for step, op, tokens in ops:
        now += step
        if op == "add":
            fast.add(now, tokens)
            plain.add(now, tokens)
        elif op == "rate":
            assert fast.rate(now) == plain.rate(now)
        else:
            fast.tick(now, op == "tick-busy")
            plain.tick(now, op == "tick-busy")
        assert fast.rate(now) == plain.rate(now)


@pytest.mark.parametrize(("start", "window_s"), [(0.0, 10.0), (100.0, 10.0), (7.5, 30.0)])
def test_drain_meter_matches_the_plain_definition_on_exact_bucket_and_window_edges(
    start: float, window_s: float
) -> None:
    """Times on a grid of binary fractions, so that ticks land exactly on bucket starts,
    bucket ends and the window's edge (random floats almost never do), from a clock at 0
    (bucket starts smaller than their busy seconds) as well as later."""
    rng = random.Random(int(start * 4 + window_s))
    fast, plain = DrainMeter(window_s), _PlainDrain(window_s)
    now = start
    for _ in range(3000):
        now += rng.choice([0.0, 0.0, 0.25, 0.5, 1.0, 2.5, window_s / 10, window_s])
        op = rng.choice(["tick-busy", "tick-busy", "tick-idle", "add", "add-one", "rate"])
        if op.startswith("add"):
            tokens = 1 if op == "add-one" else rng.randrange(0, 500)
            fast.add(now, tokens)
            plain.add(now, tokens)
        elif op.startswith("tick"):
            fast.tick(now, op == "tick-busy")
            plain.tick(now, op == "tick-busy")
        assert fast.rate(now) == plain.rate(now)


def test_a_meter_with_one_token_and_busy_time_has_a_rate() -> None:
    meter = DrainMeter(10.0)
    meter.tick(0.0, True)
    meter.add(0.5, 1)
    meter.tick(0.75, False)
    assert meter.rate(0.75) == 1 / 0.75


TOKENS = st.sampled_from([1, 3, 100, 3000, 2**70])  # few classes, so some fill past 128 samples


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(TOKENS, st.floats(0, 100, allow_nan=False)), max_size=700))
def test_latency_p95_is_the_order_statistic_of_the_last_samples(
    samples: list[tuple[int, float]],
) -> None:
    _check_p95(samples)


def test_latency_p95_follows_a_long_stream() -> None:
    rng = random.Random(95)
    _check_p95([(rng.choice([1, 3, 100]), rng.expovariate(1.0)) for _ in range(2000)])


def test_latency_p95_beyond_the_classes_kept_in_the_table() -> None:
    """Token counts past any int64 (cost classes 65 to 71): the edge of the answer table and
    the classes read from their samples."""
    rng = random.Random(65)
    samples = [
        (rng.choice([2**64, 2**65, 2**66 + 1, 2**70]), rng.expovariate(1.0)) for _ in range(400)
    ]
    _check_p95(samples)
    edge = ExecQuantiles()
    for _ in range(5):
        edge.add(2**65, 3.0)  # class 66, the first past the table
    assert edge.p95(2**65) == edge.p95(2**66) == edge.p95(2**70) == 3.0
    assert edge.p95(2**64) is None
    table = ExecQuantiles()
    for _ in range(5):
        table.add(2**64, 2.0)  # class 65, the last in the table
    assert table.p95(2**70) == 2.0 and table.p95(2**65) == 2.0


def _check_p95(samples: list[tuple[int, float]]) -> None:
    quantiles = ExecQuantiles()
    last: dict[int, deque[float]] = {}
    for tokens, latency in samples:
        quantiles.add(tokens, latency)
        last.setdefault(cost_class(tokens), deque(maxlen=128)).append(latency)
        for probe in (tokens, 2, 5000, 2**64, 2**65, 2**66, 2**80):
            assert quantiles.p95(probe) == _plain_p95(last, probe)


def _plain_p95(last: dict[int, deque[float]], tokens: int) -> float | None:
    for cls in range(cost_class(tokens), 0, -1):
        kept = last.get(cls)
        if kept is not None and len(kept) >= 5:
            ordered = sorted(kept)
            return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return None


class _Recording(Gate[list[str], NoParams]):
    """Refuses tenant ``no``; records the hooks it overrides."""

    type_name = "recording"

    def new_state(self) -> list[str]:
        return []

    def check(self, state: list[str], req: RequestInfo, ctx: GateContext) -> Verdict | None:
        state.append("check")
        return Verdict(Reason.OVERLOADED) if req.tenant == "no" else None

    def on_finish(
        self, state: list[str], req: RequestInfo, now: float, usage: Usage | None, served: bool
    ) -> None:
        state.append("finish")


class _Committing(_Recording):
    def commit(
        self,
        state: list[str],
        req: RequestInfo,
        ctx: GateContext,
        verdict: Verdict | None,
        shadow: bool,
    ) -> None:
        state.append(f"commit:{verdict is not None}:{shadow}")


def test_gate_chain_runs_in_order_stops_at_an_enforced_no_and_collects_shadows() -> None:
    gates = [
        NamedGate("shadowed", _Committing(NoParams()), shadow=True),
        NamedGate("enforced", _Recording(NoParams())),
        NamedGate("after", _Committing(NoParams())),
    ]
    states: dict[str, list[str]] = {g.name: [] for g in gates}
    chain = GateChain(gates, states)
    clock = ManualClock()
    ctx = GateContext(clock.now, 0, None, None, True)
    shadowed, verdict = chain.run(request(clock, tenant="no"), ctx)
    assert shadowed == ("shadowed",)
    assert verdict is not None and verdict.reason is Reason.OVERLOADED
    assert states == {"shadowed": ["check", "commit:True:True"], "enforced": ["check"], "after": []}
    shadowed, verdict = chain.run(request(clock), ctx)
    assert (shadowed, verdict) == ((), None)
    assert states["after"] == ["check", "commit:False:False"]
    req = request(clock)
    assert chain.accept(req, clock.now) == ("shadowed", "enforced", "after")
    chain.finish(req, clock.now, None, served=False, names=("enforced",))
    assert states["enforced"][-1] == "finish"
    assert states["shadowed"][-1] != "finish" and states["after"][-1] != "finish"


def test_a_later_snapshot_with_new_views_is_read_afresh() -> None:
    clock = ManualClock()
    sched = Scheduler(build_policy({}), clock=clock)
    views = (backend("b1"),)
    first = sched.submit(request(clock), BackendsSnapshot(clock.now, views))
    assert isinstance(first, Ticket)
    clock.advance(1)
    same_views = sched.submit(request(clock), BackendsSnapshot(clock.now, views))
    assert not isinstance(same_views, Decision) or same_views.decision is not DecisionKind.REJECT
    clock.advance(1)
    gone = sched.submit(request(clock), fleet(clock, backend("b1", health=Health.DOWN)))
    assert isinstance(gone, Decision) and gone.reason is Reason.NO_HEALTHY_BACKEND


def test_room_is_read_from_the_load_the_scheduler_keeps() -> None:
    clock = ManualClock()
    sched = Scheduler(build_policy({}), clock=clock)
    snap = fleet(clock, backend("b1", max_num_seqs=1), backend("b2", max_num_seqs=1))
    a, b = sched.submit(request(clock), snap), sched.submit(request(clock), snap)
    assert isinstance(a, Ticket) and isinstance(b, Ticket)
    assert {a.backend, b.backend} == {"b1", "b2"}
    waiting = sched.submit(request(clock), snap)  # the same snapshot: its memo must see the load
    assert isinstance(waiting, Decision) and waiting.decision is DecisionKind.DELAY
    sched.release(a, Ending(Outcome.COMPLETED))
    (out,) = sched.poll(snap)
    assert isinstance(out, Ticket) and out.backend == a.backend
    assert sched.stats().in_flight_by_backend == {"b1": 1, "b2": 1}


def test_make_decision_fills_every_field_by_name() -> None:
    clock = ManualClock()
    policy = build_policy({"name": "named"})
    req = request(clock, tenant="tn", prompt=7, output=5)
    shadowed, degradation = ("g",), Degradation(steps=("s",))
    d = make_decision(
        policy,
        req,
        DecisionKind.DELAY,
        Reason.QUEUED_FOR_CAPACITY,
        retry_after_s=1.5,
        queue_position=3,
        degradation=degradation,
        shadowed=shadowed,
        backend="b9",
    )
    expected = {
        "decision": DecisionKind.DELAY,
        "reason": Reason.QUEUED_FOR_CAPACITY,
        "request_id": req.request_id,
        "tenant": "tn",
        "flow": req.flow,
        "estimate": req.estimate,
        "policy": "named",
        "policy_version": policy.version,
        "reservation_tokens": 12,
        "retry_after_s": 1.5,
        "queue_position": 3,
        "degradation": degradation,
        "backend": "b9",
        "shadowed": shadowed,
    }
    assert {name: getattr(d, name) for name in DECISION_FIELDS} == expected
    rejected = make_decision(policy, req, DecisionKind.REJECT, Reason.OVERLOADED)
    assert rejected.reservation_tokens == 0 and rejected.degradation == Degradation()


def test_gate_context_carries_the_scheduler_readings_by_name() -> None:
    clock = ManualClock()
    sched = Scheduler(build_policy({"queue": {"max_wait_s": 60}}), clock=clock)
    snap = fleet(clock, backend("b1", max_num_seqs=1))
    sched.submit(request(clock), snap)
    queued = sched.submit(request(clock, prompt=30, output=20), snap)
    assert isinstance(queued, Decision) and queued.decision is DecisionKind.DELAY
    clock.advance(2.5)
    oldest = sched._queue.oldest()
    ctx = sched._gate_context(request(clock, prompt=4000), clock.now, False, oldest, True)
    assert (ctx.now, ctx.queued_tokens, ctx.room_now, ctx.oldest_queued_s, ctx.appointment) == (
        clock.now,
        50,
        False,
        2.5,
        True,
    )
    assert ctx.drain_tokens_per_s is None and ctx.exec_p95_s is None  # nothing completed yet
    now_ctx = sched._gate_context(request(clock), clock.now, True, None, False)
    assert (now_ctx.queued_tokens, now_ctx.room_now, now_ctx.oldest_queued_s) == (0, True, None)


maybe = st.one_of(st.none(), st.floats(0, 200, allow_nan=False))


@settings(max_examples=300, deadline=None)
@given(
    st.builds(
        BackendView,
        name=st.just("b"),
        models=st.just(frozenset({"m"})),
        max_num_seqs=st.one_of(st.none(), st.integers(1, 64)),
        running=maybe,
        waiting=maybe,
        kv_cache_usage=st.one_of(st.none(), st.floats(0, 1)),
        queue_time_p50_s=maybe,
        stale=st.booleans(),
        capacity_estimate=maybe,
        running_peak=maybe,
    ),
    st.fixed_dictionaries(
        {},
        optional={
            "max_waiting": st.floats(0, 5),
            "max_kv_usage": st.floats(0.1, 1),
            "max_queue_time_s": st.floats(0.1, 50),
            "slow_start": st.booleans(),
            "fuse": st.integers(1, 100),
        },
    ),
)
def test_server_signals_room_bound_answers_as_has_room(
    view: BackendView, params: dict[str, Any]
) -> None:
    p = ServerSignalsParams(**params)
    limit = ServerSignals(p)
    bound = limit.room_bound(view)
    for in_flight in range(402):  # past every bound drawn (2 x running <= 400)
        load = BackendLoad(in_flight, 0)
        rule = _room_rule(view, in_flight, p)
        assert limit.has_room(None, view, load) == rule
        assert (in_flight == 0 or in_flight < bound) == rule


def _room_rule(b: BackendView, n: int, p: ServerSignalsParams) -> bool:
    """server_signals' room rule, stated test by test (the limit reads it as one bound)."""
    if n == 0:
        return True
    if b.stale or (p.fuse is not None and n >= p.fuse):
        return False
    if b.max_num_seqs is not None and n >= b.max_num_seqs:
        return False
    if b.waiting is not None and b.waiting > p.max_waiting:
        return False
    if b.kv_cache_usage is not None and b.kv_cache_usage > p.max_kv_usage:
        return False
    qt = b.queue_time_p50_s
    if p.max_queue_time_s is not None and qt is not None and qt > p.max_queue_time_s:
        return False
    if p.slow_start and b.running is not None:
        known = b.capacity_estimate if b.max_num_seqs is not None else b.running_peak
        return n < max(2 * max(1.0, b.running), known or 0.0)
    return True


def test_a_swap_rereads_room_even_for_the_same_views() -> None:
    def policy(fuse: int) -> Any:
        return build_policy({"limit": {"type": "server_signals", "parameters": {"fuse": fuse}}})

    clock = ManualClock()
    sched = Scheduler(policy(1), clock=clock)
    views = (backend("b1", waiting=0.0),)
    assert isinstance(sched.submit(request(clock), BackendsSnapshot(clock.now, views)), Ticket)
    queued = sched.submit(request(clock), BackendsSnapshot(clock.now, views))
    assert isinstance(queued, Decision) and queued.decision is DecisionKind.DELAY
    assert sched.poll(BackendsSnapshot(clock.now, views)) == []
    sched.swap(policy(2))
    (out,) = sched.poll(BackendsSnapshot(clock.now, views))
    assert isinstance(out, Ticket) and out.request_id == queued.request_id


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.integers(1, 8)),
            maybe,
            st.booleans(),
            st.integers(0, 10),
            st.integers(0, 3000),
        ),
        max_size=6,
    )
)
def test_least_loaded_within_bounds_picks_what_has_room_picks(backends: list[Any]) -> None:
    limit = ServerSignals(ServerSignalsParams())
    candidates = [
        (
            BackendView(
                name=f"b{i}",
                models=frozenset({"m"}),
                max_num_seqs=seqs,
                running=running,
                waiting=0.0,
                stale=stale,
            ),
            BackendLoad(n, tokens),
        )
        for i, (seqs, running, stale, n, tokens) in enumerate(backends)
    ]
    bounded = [(b, load, limit.room_bound(b)) for b, load in candidates]
    assert least_loaded_within(bounded) == least_loaded(limit, None, candidates)
    best, spare = pick_within(bounded)
    assert best == least_loaded(limit, None, candidates)
    if best is not None:  # one more request on the pick: is there room anywhere still?
        next(load for b, load in candidates if b is best).in_flight += 1
        assert spare == any(limit.has_room(None, b, load) for b, load in candidates)


class _PickEach(Placement):
    """The poll as it was: a yes/no room check, then each request's own pick."""

    __slots__ = ()

    def room_now(self, models: Mapping[str, int]) -> tuple[BackendView | bool, bool]:
        return super().room_now(models)[0] is not False, True


@pytest.mark.skipif(
    core() != "interpreted",
    reason="swaps the class of the scheduler's Placement, which a compiled core refuses; "
    "the interpreted tier runs it on the same source",
)
@pytest.mark.parametrize("sessions", [False, True])
def test_poll_dispatches_where_picking_each_request_would(sessions: bool) -> None:
    raw = {"limit": {"type": "server_signals"}, "fairness": {"type": "vtc"}}
    runs = []
    for pick_each in (False, True):
        clock, rng = ManualClock(), random.Random(11)
        s = Scheduler(build_policy(raw), clock=clock, rng=random.Random(1))
        if pick_each:
            s._place.__class__ = _PickEach
        views = [backend(f"b{i}", max_num_seqs=2 + i, running=1.0 + i) for i in range(3)]
        out: list[Any] = []
        tickets: list[Ticket] = []
        for i in range(400):
            clock.advance(0.01)
            snap = fleet(clock, *views)
            sid = f"s{rng.randrange(5)}" if sessions and rng.random() < 0.5 else None
            req = request(
                clock,
                tenant=f"t{rng.randrange(4)}",
                output=rng.randint(1, 300),
                session_id=sid,
                request_id=f"q{i}",
            )
            for got in [s.submit(req, snap), *s.poll(snap)]:
                out.append(got)
                if isinstance(got, Ticket):
                    tickets.append(got)
            for _ in range(min(len(tickets), rng.choice([0, 0, 1, 3]))):  # several slots free
                s.release(tickets.pop(rng.randrange(len(tickets))), Ending(Outcome.COMPLETED))
        runs.append([(type(o).__name__, o.request_id, getattr(o, "backend", None)) for o in out])
    assert runs[0] == runs[1]
    assert sum(1 for kind, _, _ in runs[0] if kind == "Ticket") > 100


def test_flow_keys_are_the_request_flow_shared_per_flow_and_bounded() -> None:
    clock = ManualClock()
    keys = FlowKeys(limit=8)
    for i in range(200):
        clock.advance(0.1)
        req = request(
            clock,
            tenant=f"t{i % 5}",
            workload_class=("a", "b")[i % 2],
            deadline_in=(None, 0.5, 5.0, 3600.0)[i % 4],
        )
        got = keys.of(req)
        assert got == req.flow
        assert len(keys) <= 8
    seen: dict[FlowKey, FlowKey] = {}
    shared = FlowKeys()
    for i in range(40):  # 20 flows, each asked twice: one object per flow
        req = request(clock, tenant=f"t{i % 10}", workload_class=("a", "b")[i % 20 // 10])
        assert seen.setdefault(req.flow, shared.of(req)) is shared.of(req)
    assert len(seen) == 20


@pytest.mark.parametrize(
    ("gates", "reads"),
    [
        ([{"type": "retry_budget"}], False),
        ([{"type": "tenant_quota", "parameters": {"default": {"tokens_per_minute": 9**9}}}], False),
        ([{"type": "tenant_quota", "parameters": {"tenants": {"x": {"max_concurrent": 3}}}}], True),
        ([{"type": "retry_budget"}, {"type": "deadline_feasibility"}], True),
    ],
)
def test_gate_context_rates_are_computed_when_a_gate_may_read_them(
    gates: list[dict[str, Any]], reads: bool
) -> None:
    clock = ManualClock()
    sched = Scheduler(build_policy({"gates": gates}), clock=clock)
    snap = fleet(clock, backend("b1", max_num_seqs=4))
    for _ in range(6):  # completions: a drain rate and a p95 exist
        ticket = sched.submit(request(clock), snap)
        assert isinstance(ticket, Ticket)
        clock.advance(1.0)
        sched.release(ticket, Ending(Outcome.COMPLETED, Usage(100, 100), latency_s=1.0))
    rates = (sched._drain.rate(clock.now), sched._exec.p95(200))
    assert None not in rates
    ctx = sched._gate_context(request(clock), clock.now, False, None, False)
    assert (ctx.drain_tokens_per_s, ctx.exec_p95_s) == (rates if reads else (None, None))
