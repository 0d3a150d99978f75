"""A poll's scan of the queue stops once the prefill backlog bound has refused a plain prompt
no longer than any request of its model queued (``QueueBook.none_smaller``,
``Placement.refuses_alike``): what it dispatches is what the full scan dispatches."""

from __future__ import annotations

import random
from typing import Any

import pytest

from policies.build import core
from policies.engine.placement import Placement
from policies.engine.queue_book import QueueBook
from policies.engine.scheduler import Scheduler, Ticket
from policies.registry import build_policy
from policies.types import Ending, Outcome, PromptBlocks, RequestInfo
from tests.unit.policies.helpers import ManualClock, backend, fleet, queued, request

ON = {"limit": {"type": "server_signals"}, "prefill_backlog": {"ttft_target_s": 0.5}}


def _book(*reqs: RequestInfo) -> QueueBook:
    book = QueueBook()
    for i, req in enumerate(reqs):
        book.add(queued(req, i, 0.0, 60.0), ())
    return book


def test_none_smaller_is_the_smallest_plain_prompt_of_the_model_queued() -> None:
    clock = ManualClock()
    a, b, c = (request(clock, prompt=p) for p in (300, 300, 500))
    other_model = request(clock, prompt=10, model="n")
    book = _book(a, b, c, other_model)
    assert book.none_smaller(a) and not book.none_smaller(c)
    book.remove(book.get(a.request_id))  # type: ignore[arg-type]
    assert not book.none_smaller(c)  # one 300 is still queued
    book.remove(book.get(b.request_id))  # type: ignore[arg-type]
    assert book.none_smaller(c) and book.none_smaller(request(clock, prompt=400))
    assert not book.none_smaller(request(clock, prompt=501))


def test_a_session_or_a_hashed_prompt_queued_makes_no_prompt_the_smallest() -> None:
    clock = ManualClock()
    plain = request(clock, prompt=300)
    for odd in (
        request(clock, prompt=900, session_id="s"),
        request(clock, prompt=900, blocks=PromptBlocks((1, 2), 16)),
    ):
        book = _book(plain, odd)
        assert not book.none_smaller(plain)  # its cost is not its size alone
        book.remove(book.get(odd.request_id))  # type: ignore[arg-type]
        assert book.none_smaller(plain)
        assert not book.none_smaller(odd)  # nor is the asking request's


def test_sizes_that_come_and_go_leave_the_smallest_right() -> None:
    clock = ManualClock()
    rng = random.Random(3)
    book = QueueBook()
    inside: dict[str, RequestInfo] = {}
    for i in range(3000):
        if inside and rng.random() < 0.5:
            gone = inside.pop(rng.choice(sorted(inside)))
            book.remove(book.get(gone.request_id))  # type: ignore[arg-type]
        else:
            req = request(clock, prompt=rng.choice((50, 60, 70, 4000)))
            inside[req.request_id] = req
            book.add(queued(req, i, 0.0, 60.0), ())
        probe = request(clock, prompt=rng.choice((40, 50, 60, 70, 80)))
        smallest = min((r.estimate.prompt_tokens for r in inside.values()), default=None)
        expected = smallest is None or smallest >= probe.estimate.prompt_tokens
        assert book.none_smaller(probe) == expected, i


class _FullScan(QueueBook):
    """The queue as the full scan saw it: no request is known refused before it is asked."""

    def none_smaller(self, req: RequestInfo) -> bool:
        return False


class _CountPicks(Placement):
    __slots__ = ()
    picks = 0

    def pick(self, req: RequestInfo) -> Any:
        type(self).picks += 1
        return super().pick(req)


interpreted = pytest.mark.skipif(
    core() != "interpreted",
    reason="swaps the class of the scheduler's queue or placement, which a compiled core "
    "refuses; the interpreted tier runs it on the same source",
)


def _measured(raw: dict[str, Any] = ON) -> tuple[ManualClock, Scheduler, Any]:
    """One backend of 64 slots whose prefill rate was measured at 1,000 tokens/s: the bound
    (0.5 s) holds 500 un-prefilled tokens."""
    clock = ManualClock()
    s = Scheduler(build_policy(raw), clock=clock, rng=random.Random(1))
    f = fleet(clock, backend(max_num_seqs=64))
    probe = s.submit(request(clock, tenant="probe", prompt=1000, stream=True), f)
    assert isinstance(probe, Ticket)
    clock.advance(1.0)
    s.first_token(probe)
    s.release(probe, Ending(Outcome.COMPLETED))
    return clock, s, f


@interpreted
def test_a_poll_asks_one_of_many_prompts_alike_the_bound_refuses() -> None:
    picks = []
    for full in (False, True):
        clock, s, f = _measured()
        flood = [s.submit(request(clock, tenant="noisy", prompt=1500), f) for _ in range(40)]
        assert sum(isinstance(x, Ticket) for x in flood) == 1
        s._place.__class__ = _CountPicks
        if full:
            s._queue.__class__ = _FullScan
        _CountPicks.picks = 0
        assert s.poll(f) == []
        picks.append(_CountPicks.picks)
        s.submit(request(clock, tenant="noisy", prompt=1500), f)  # queued ahead of it
        short = s.submit(request(clock, tenant="noisy", prompt=60), f)
        (went,) = s.poll(f)  # behind 40 refused prompts: the scan goes on for a shorter one
        assert isinstance(went, Ticket) and went.request_id == short.request_id
    assert picks[0] <= 2 < 39 <= picks[1]  # one refused prompt asked (and its check) vs 39


BETWEEN = {**ON, "prefill_backlog": {"ttft_target_s": 0.5, "between_tenants": True}}


@interpreted
@pytest.mark.parametrize(("seed", "raw"), [(1, ON), (2, ON), (3, ON), (4, BETWEEN), (5, BETWEEN)])
def test_the_scan_that_stops_dispatches_what_the_full_scan_dispatches(
    seed: int, raw: dict[str, Any]
) -> None:
    """Prompts of a few sizes, some in sessions, from three tenants (with
    ``between_tenants``, one of them often alone), released at random: every poll's answers
    equal the full scan's."""
    runs = []
    for full in (False, True):
        clock, s, f = _measured(raw)
        if full:
            s._queue.__class__ = _FullScan
        rng = random.Random(seed)
        out: list[Any] = []
        tickets: list[Ticket] = []
        for i in range(600):
            clock.advance(rng.choice((0.001, 0.01, 0.1)))
            sid = f"s{rng.randrange(3)}" if rng.random() < 0.2 else None
            req = request(
                clock,
                tenant=f"t{rng.randrange(3)}" if i % 200 < 100 else "t0",
                prompt=rng.choice((40, 300, 300, 900, 1500)),
                session_id=sid,
                stream=rng.random() < 0.5,
                request_id=f"q{i}",
            )
            for got in [s.submit(req, f), *s.poll(f)]:
                out.append(got)
                if isinstance(got, Ticket):
                    tickets.append(got)
            for _ in range(min(len(tickets), rng.choice((0, 0, 1, 2)))):
                done = tickets.pop(rng.randrange(len(tickets)))
                if done.request.stream:
                    s.first_token(done)
                s.release(done, Ending(Outcome.COMPLETED))
        runs.append([(type(o).__name__, o.request_id, getattr(o, "backend", None)) for o in out])
    assert runs[0] == runs[1]
    assert sum(1 for kind, _, _ in runs[0] if kind == "Ticket") > 100


def test_only_a_bound_that_holds_every_tenant_alike_refuses_alike() -> None:
    """With ``between_tenants`` the bound holds a tenant only while another is active, so
    one tenant's refusal says nothing of another's request of the same size."""
    clock = ManualClock()
    for raw, alike in (
        (ON, True),
        (BETWEEN, False),
        ({"prefill_backlog": {"enabled": False}}, False),
    ):
        policy = build_policy(raw)
        place = Placement(policy, policy.limit.new_state(), clock.now)
        assert place.refuses_alike(request(clock, prompt=900)) is alike
        assert not place.refuses_alike(request(clock, prompt=900, session_id="s"))
        hashed = request(clock, prompt=900, blocks=PromptBlocks((1, 2), 16))
        assert not place.refuses_alike(hashed)
