"""``codel_admission``: RFC 8289's state machine on the head-of-line sojourn, at submit."""

from __future__ import annotations

import dataclasses
import itertools
import random

import pytest

from policies.contracts import GateContext
from policies.disciplines.codel import Codel, CodelState
from policies.disciplines.codel_params import CodelParams
from policies.engine.scheduler import Scheduler, Ticket
from policies.gates.codel_admission import CodelAdmission
from policies.gates.codel_admission_params import CodelAdmissionParams
from policies.registry import build_policy
from policies.types import DecisionKind, Ending, Outcome, Reason, RequestInfo, Usage, WorkEstimate
from tests.unit.policies.helpers import ManualClock, backend, fleet, request

REQ = RequestInfo("r", "t", "c", "m", WorkEstimate(0, 100), 0.0)


def ctx(
    now: float, head_s: float | None, queued: int = 1000, rate: float | None = 100.0
) -> GateContext:
    return GateContext(
        now=now,
        queued_tokens=queued,
        drain_tokens_per_s=rate,
        exec_p95_s=None,
        room_now=head_s is None,
        oldest_queued_s=head_s,
    )


def gate(shed: str = "control_law") -> CodelAdmission:
    return CodelAdmission(CodelAdmissionParams(target_s=8.0, interval_s=10.0, shed=shed))  # type: ignore[arg-type]


def answer(g: CodelAdmission, state: CodelState, c: GateContext) -> bool:
    verdict = g.check(state, REQ, c)
    g.commit(state, REQ, c, verdict, False)
    return verdict is not None


def test_a_standing_delay_below_target_never_defers() -> None:
    g = gate()
    state = g.new_state()
    assert not any(answer(g, state, ctx(t, 7.9)) for t in range(0, 200))


def test_check_alone_leaves_the_state_as_it_was() -> None:
    g = gate()
    state = g.new_state()
    answer(g, state, ctx(0.0, 9.0))  # above target: the interval starts
    before = dataclasses.replace(state)
    for t in (11.0, 12.0, 13.0):
        g.check(state, REQ, ctx(t, 9.0))
    assert state == before


def test_same_decisions_as_the_codel_discipline_on_the_same_samples() -> None:
    rng = random.Random(3)
    g, discipline = gate(), Codel(CodelParams(target_s=8.0, interval_s=10.0))
    gs, ds = g.new_state(), discipline.new_state()
    now, ours, theirs = 0.0, [], []
    for _ in range(3000):
        now += rng.expovariate(1.0)
        head = None if rng.random() < 0.05 else rng.uniform(0.0, 16.0)
        ours.append(answer(g, gs, ctx(now, head)))
        if head is None:
            discipline.on_empty(ds)
            theirs.append(False)
        else:
            theirs.append(discipline.should_drop(ds, head, now, 1))
    assert sum(ours) > 0
    assert ours == theirs


def test_control_law_spaces_deferrals_while_dropping_defers_every_arrival() -> None:
    law, every = gate(), gate("while_dropping")
    ls, es = law.new_state(), every.new_state()
    times = [i * 0.5 for i in range(80)]  # 40 s with the head above target throughout
    shed_law = [t for t in times if answer(law, ls, ctx(t, 9.0))]
    shed_every = [t for t in times if answer(every, es, ctx(t, 9.0))]
    assert shed_law[0] == shed_every[0] == pytest.approx(10.0)  # after one interval
    assert shed_every == [t for t in times if t >= 10.0]
    gaps = [b - a for a, b in itertools.pairwise(shed_law)]
    assert all(g > 1.0 for g in gaps) and gaps == sorted(gaps, reverse=True)
    assert answer(every, es, ctx(41.0, 7.0)) is False  # below target: leaves dropping
    assert answer(every, es, ctx(41.5, 9.0)) is False


def test_retry_after_is_the_excess_over_target() -> None:
    g = gate("while_dropping")
    state = g.new_state()
    answer(g, state, ctx(0.0, 9.0))
    verdict = g.check(state, REQ, ctx(10.0, 9.0, queued=1500, rate=100.0))  # 15 s of work
    assert verdict is not None and verdict.reason is Reason.OVERLOADED
    assert verdict.retry_after_s == pytest.approx(7.0)
    assert g.check(state, REQ, ctx(10.0, 9.0, rate=None)).retry_after_s is None  # type: ignore[union-attr]


def test_in_the_scheduler_it_defers_arrivals_and_keeps_the_queue() -> None:
    spec = {
        "type": "codel_admission",
        "parameters": {"target_s": 1.0, "interval_s": 2.0, "shed": "while_dropping"},
    }
    clock = ManualClock()
    sched = Scheduler(build_policy({"gates": [spec], "queue": {"max_wait_s": 600}}), clock=clock)
    f = fleet(clock, backend("a", max_num_seqs=1))
    running = sched.submit(request(clock), f)
    assert isinstance(running, Ticket)
    queued = [sched.submit(request(clock), f) for _ in range(3)]
    assert all(getattr(q, "decision", None) is DecisionKind.DELAY for q in queued)
    outcomes = []
    for _ in range(8):  # the head waits 0.5 .. 4 s, never leaving: the slot stays busy
        clock.advance(0.5)
        outcomes.append(sched.submit(request(clock), f))
    kinds = [getattr(o, "decision", None) for o in outcomes]
    assert DecisionKind.REJECT in kinds
    assert sched.stats().queued == 3 + kinds.count(DecisionKind.DELAY)
    sched.release(running, Ending(Outcome.COMPLETED, Usage(10, 10)))
