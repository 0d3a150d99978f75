"""``wait_reservation`` to the second and the token: the predicted wait and its Retry-After, the
reserved tokens counted ahead of later arrivals, the exact moment a reservation lapses, the
holder let in at its time or moved on, and what ``commit`` records (or, shadowed, does not).
Sessions reserve different numbers of tokens and the drain rate, target and grace differ, so
no amount can stand in for another."""

from __future__ import annotations

from policies.contracts import GateContext, Verdict
from policies.gates.reservation import ReservationState, WaitReservation
from policies.gates.reservation_params import ReservationParams
from policies.types import Reason, RequestInfo, WorkEstimate

TARGET, GRACE, RATE = 10.0, 30.0, 100.0  # seconds, seconds, tokens per second


def gate() -> tuple[WaitReservation, ReservationState]:
    g = WaitReservation(ReservationParams(target_wait_s=TARGET, grace_s=GRACE))
    return g, g.new_state()


def req(session: str | None, prompt: int = 200, output: int = 100) -> RequestInfo:
    return RequestInfo(
        "r", "t", "interactive", "m", WorkEstimate(prompt, output), 0.0, session_id=session
    )


def ctx(now: float, queued: int, rate: float | None = RATE) -> GateContext:
    return GateContext(now, queued, rate, None, False)


def wait(verdict: Verdict | None) -> float | None:
    """The Retry-After of a refusal (None: let in)."""
    if verdict is None:
        return None
    assert verdict.reason is Reason.OVERLOADED
    return verdict.retry_after_s


def refused(
    g: WaitReservation, st: ReservationState, r: RequestInfo, c: GateContext
) -> float | None:
    """``check`` then an enforced ``commit``, as the chain does; the Retry-After given."""
    verdict = g.check(st, r, c)
    g.commit(st, r, c, verdict, False)
    return wait(verdict)


def held(st: ReservationState) -> dict[str, tuple[float, int]]:
    return {s: (r.due, r.tokens) for s, r in st.held.items()}


def test_the_wait_past_the_target_is_the_retry_after() -> None:
    g, st = gate()
    assert wait(g.check(st, req("s"), ctx(0.0, 1500))) == 5.0  # 15 s of work, target 10
    assert g.check(st, req("s"), ctx(0.0, 1000)) is None  # exactly the target: let in
    assert st.held == {}  # check alone holds nothing


def test_no_evidence_never_refuses() -> None:
    g, st = gate()
    assert g.check(st, req(None), ctx(0.0, 10**6)) is None  # no session to hold a place for
    assert g.check(st, req("s"), ctx(0.0, 10**6, None)) is None  # no drain rate
    assert g.check(st, req("s"), ctx(0.0, 10**6, 0.0)) is None
    assert g.check(st, req("s"), ctx(0.0, 10**6, -1.0)) is None


def test_an_enforced_refusal_reserves_the_sessions_tokens_until_its_time() -> None:
    g, st = gate()
    assert refused(g, st, req("s1", 200, 100), ctx(4.0, 1500)) == 5.0
    assert held(st) == {"s1": (9.0, 300)}
    # a later arrival counts the reserved tokens as work ahead of it: (800 + 300) / 100 = 11 s
    assert refused(g, st, req("s2", 50, 20), ctx(4.0, 800)) == 1.0
    assert held(st) == {"s1": (9.0, 300), "s2": (5.0, 70)}
    assert g.check(st, req("s3"), ctx(4.0, 630)) is None  # 630 + 370 = 1000: the target


def test_a_shadowed_or_sessionless_or_accepted_refusal_reserves_nothing() -> None:
    g, st = gate()
    c = ctx(0.0, 1500)
    g.commit(st, req("s"), c, g.check(st, req("s"), c), True)  # shadow
    g.commit(st, req(None), c, Verdict(Reason.OVERLOADED, 5.0), False)
    g.commit(st, req("s"), c, None, False)
    assert st.held == {}
    g.commit(st, req("s"), c, Verdict(Reason.OVERLOADED, None), False)  # no time: due now
    assert held(st) == {"s": (0.0, 300)}


def test_the_holder_is_let_in_at_its_time_and_its_reservation_consumed() -> None:
    g, st = gate()
    refused(g, st, req("s1"), ctx(0.0, 1500))  # due at 5
    assert wait(g.check(st, req("s1"), ctx(2.0, 1000))) == 3.0  # early: come back at 5
    assert held(st) == {"s1": (5.0, 300)}  # check moves nothing
    assert g.check(st, req("s1"), ctx(5.0, 1000)) is None  # on time, the queue at target
    g.on_accept(st, req("s1"), 5.0)
    assert st.held == {}
    g.on_accept(st, req(None), 5.0)  # no session: nothing to consume, no error


def test_a_holder_behind_a_slow_queue_keeps_its_place_and_is_moved_on() -> None:
    g, st = gate()
    refused(g, st, req("s1"), ctx(0.0, 1500))  # due at 5, 300 tokens
    # at 6 the real queue holds 12 s of work: 2 s late; its own tokens are not ahead of it
    assert refused(g, st, req("s1", 900, 900), ctx(6.0, 1200)) == 2.0
    assert held(st) == {"s1": (8.0, 300)}  # moved, the same tokens
    # early and late at once: the later of the two times
    assert wait(g.check(st, req("s1"), ctx(7.0, 1500))) == 5.0  # 7 + (15 - 10) = 12 > 8
    assert wait(g.check(st, req("s1"), ctx(7.0, 1050))) == 1.0  # 7 + 0.5 < 8
    assert wait(g.check(st, req("s1"), ctx(8.0, 1050))) == 0.5  # on time, half a second late
    assert wait(g.check(st, req("s1"), ctx(9.0, 1000, None))) is None  # no rate: no queue


def test_a_reservation_lapses_grace_seconds_after_its_time() -> None:
    g, st = gate()
    refused(g, st, req("s1"), ctx(0.0, 1500))  # due at 5, 300 tokens, lapses after 35
    assert refused(g, st, req("s2", 60, 40), ctx(20.0, 1500)) == 8.0  # (1500 + 300) / 100 - 10
    assert st.reserved_tokens(35.0, GRACE) == 400
    assert st.reserved_tokens(35.5, GRACE) == 100
    assert wait(g.check(st, req("s3"), ctx(35.0, 700))) == 1.0  # (700 + 400) / 100 - 10
    assert g.check(st, req("s3"), ctx(35.5, 700)) is None  # (700 + 100) / 100
    # still its own at 35: let in on its promise; lapsed at 35.5: a new arrival, judged on
    # the queue and the reservations ahead of it
    assert g.check(st, req("s1"), ctx(35.0, 1000)) is None
    assert wait(g.check(st, req("s1"), ctx(35.5, 1000))) == 1.0  # (1000 + 100) / 100 - 10


def test_commit_forgets_lapsed_reservations_and_keeps_live_ones() -> None:
    g, st = gate()
    refused(g, st, req("old"), ctx(0.0, 1500))  # due 5, lapses after 35
    refused(g, st, req("live", 10, 10), ctx(20.0, 1500))  # (1500 + 300) / 100 - 10 = 8 s
    assert held(st) == {"old": (5.0, 300), "live": (28.0, 20)}
    refused(g, st, req("new", 1, 1), ctx(35.5, 1500))  # (1500 + 20) / 100 - 10 = 5.2
    assert held(st) == {"live": (28.0, 20), "new": (40.7, 2)}


def test_a_drain_rate_below_one_token_a_second_is_still_a_rate() -> None:
    g, st = gate()
    assert wait(g.check(st, req("s"), ctx(0.0, 6, 0.5))) == 2.0  # 6 / 0.5 = 12 s
    refused(g, st, req("s"), ctx(0.0, 6, 0.5))  # due at 2
    assert wait(g.check(st, req("s"), ctx(2.0, 6, 0.5))) == 2.0  # 12 s queued: 2 s late
    assert g.check(st, req("s"), ctx(2.0, 6, 0.0)) is None  # no rate: no queue to be late in


def test_without_a_rate_the_holders_queue_is_empty() -> None:
    g = WaitReservation(ReservationParams(target_wait_s=0.5, grace_s=GRACE))
    st = g.new_state()
    assert refused(g, st, req("s"), ctx(0.0, 100)) == 0.5  # 1 s of work, target 0.5
    assert g.check(st, req("s"), ctx(0.5, 10**6, None)) is None


def test_a_session_reserves_the_tokens_its_engine_computes_not_its_cached_prompt() -> None:
    g, st = gate()
    cached = RequestInfo(
        "r",
        "t",
        "interactive",
        "m",
        WorkEstimate(200, 100, cached_prompt_tokens=150),
        0.0,
        session_id="s",
    )
    assert refused(g, st, cached, ctx(0.0, 1500)) == 5.0
    assert held(st) == {"s": (5.0, 150)}  # 50 uncached prompt + 100 output


def test_room_now_lets_a_new_arrival_in_whatever_is_reserved() -> None:
    g, st = gate()
    refused(g, st, req("s1", 900, 600), ctx(0.0, 1500))  # 1,500 tokens held until 5
    roomy = GateContext(1.0, 0, RATE, None, True)
    # no room: (100 + 1500) / 100 = 16 s, 6 s past the target
    assert wait(g.check(st, req("s2", 1, 0), ctx(1.0, 100))) == 6.0
    assert g.check(st, req("s2", 1, 0), roomy) is None  # room now: no wait to predict
    assert held(st) == {"s1": (5.0, 1500)}  # the holder keeps its place
