"""The prefill backlog's exact amounts: which rate samples count, the engine's rate against
the gateway's, the tokens a first token or an end settles (and an unknown id settles none),
the bound's edge, and the earliest wake-up over two backends with different rates."""

from __future__ import annotations

import math

from policies.engine.prefill_backlog import BackendPrefill, PrefillBacklog, PrefillRate
from policies.engine.prefill_backlog_params import PrefillBacklogParams


def test_samples_without_tokens_or_without_time_are_left_out() -> None:
    rate = PrefillRate(half_life_s=10.0)
    rate.add(0, 1.0, now=0.0)
    rate.add(-5, 1.0, now=0.0)
    rate.add(100, 0.0, now=0.0)
    rate.add(100, -1.0, now=0.0)
    assert rate.tokens_per_s() is None
    rate.add(1, 0.5, now=0.0)  # the smallest sample counts
    assert rate.tokens_per_s() == 2.0
    rate.add(0, 1.0, now=0.0)
    rate.add(100, 0.0, now=0.0)
    assert rate.tokens_per_s() == 2.0


def test_older_samples_weigh_half_per_half_life_and_a_late_sample_decays_nothing() -> None:
    rate = PrefillRate(half_life_s=2.0)
    rate.add(400, 1.0, now=10.0)
    rate.add(600, 1.0, now=14.0)  # two half-lives: 100 tokens in 0.25 s left of the first
    assert rate.tokens_per_s() == 700 / 1.25
    rate.add(300, 0.25, now=12.0)  # an earlier clock reading: no decay, no rewind
    assert rate.tokens_per_s() == 1000 / 1.5
    rate.add(500, 0.5, now=16.0)  # one half-life after 14
    assert rate.tokens_per_s() == 1000 / 1.25


def test_the_engines_rate_wins_when_positive() -> None:
    b = BackendPrefill(half_life_s=10.0)
    assert b.tokens_per_s() is None
    b.rate.add(300, 1.0, now=0.0)
    for engine, expected in ((None, 300.0), (0.0, 300.0), (0.5, 0.5), (2000.0, 2000.0)):
        b.engine_rate = engine
        assert b.tokens_per_s() == expected


def test_a_first_token_settles_its_own_prompt_and_those_before_it_exactly() -> None:
    b = BackendPrefill(half_life_s=10.0)
    b.dispatched("a", 300, now=0.0, streamed=False)
    b.dispatched("b", 200, now=0.5, streamed=True)
    b.dispatched("c", 70, now=0.75, streamed=True)
    assert b.pending_tokens == 570
    b.first_token("nobody", now=1.0)
    b.ended("nobody")
    b.ended("nobody", completed=True)
    assert b.pending_tokens == 570 and b.rate.tokens_per_s() is None
    b.first_token("b", now=1.0)  # a and b: 500 tokens over 1.0 s since a's dispatch
    assert b.pending_tokens == 70 and b.rate.tokens_per_s() == 500.0
    b.dispatched("d", 30, now=1.5, streamed=True)
    b.first_token("d", now=2.0)  # c and d: 100 tokens over the 1.0 s since the last one
    keep = math.exp2(-1.0 / 10.0)  # the first sample, one second older
    assert b.pending_tokens == 0 and b.rate.tokens_per_s() == (500 * keep + 100) / (keep + 1.0)


def test_an_end_without_completion_takes_out_only_its_own_prompt() -> None:
    b = BackendPrefill(half_life_s=10.0)
    b.dispatched("a", 300, now=0.0, streamed=True)
    b.dispatched("b", 200, now=0.5, streamed=True)
    b.ended("b")
    assert b.pending_tokens == 300
    b.dispatched("c", 50, now=0.6, streamed=False)
    b.ended("c", completed=True)
    assert b.pending_tokens == 0 and b.rate.tokens_per_s() is None


def test_estimates_stop_at_a_streamed_entry_and_end_exactly_when_due() -> None:
    b = BackendPrefill(half_life_s=10.0)
    b.engine_rate = 1000.0
    b.dispatched("a", 500, now=1.0, streamed=False)  # due at 1.5
    b.dispatched("s", 100, now=1.0, streamed=True)  # its first token will tell
    b.dispatched("c", 100, now=1.0, streamed=False)
    assert b.estimate(1.5) is None  # a done exactly when due; s is streamed
    assert b.pending_tokens == 200


def _backlog(target_s: float = 0.5) -> PrefillBacklog:
    return PrefillBacklog(PrefillBacklogParams(ttft_target_s=target_s))


def test_the_bound_admits_up_to_the_rate_times_the_target_and_one_token_more_is_refused() -> None:
    backlog = _backlog()
    b = backlog.backend("b1")
    b.engine_rate = 1000.0  # a bound of 500
    assert backlog.bound("b1") == 500.0
    b.dispatched("one", 1, now=0.0, streamed=True)
    assert backlog.admits("b1", 499)
    assert not backlog.admits("b1", 500)
    assert backlog.bound("b2") is None and backlog.admits("b2", 10**6)
    backlog.backend("b3").dispatched("x", 10, now=0.0, streamed=True)
    assert backlog.admits("b3", 10**6)  # no rate measured: no bound


def test_advance_wakes_at_the_earliest_estimated_end_over_the_backends() -> None:
    backlog = _backlog()
    slow, fast = backlog.backend("slow"), backlog.backend("fast")
    slow.engine_rate, fast.engine_rate = 1000.0, 4000.0
    slow.dispatched("s1", 500, now=0.0, streamed=False)  # due at 0.5
    fast.dispatched("f1", 1, now=0.0, streamed=False)  # due at 0.00025
    fast.dispatched("f2", 1200, now=0.0, streamed=False)  # then at 0.30025
    assert backlog.advance(0.0) == 1 / 4000
    assert backlog.advance(0.001) == 1 / 4000 + 1200 / 4000
    assert backlog.pending_tokens() == {"slow": 500, "fast": 1200}
    assert backlog.advance(0.4) == 0.5
    assert backlog.advance(0.5) is None
    assert backlog.pending_tokens() == {"slow": 0, "fast": 0}


def test_a_single_pending_prompt_token_is_estimated_too() -> None:
    backlog = _backlog()
    b = backlog.backend("b1")
    b.engine_rate = 1000.0
    b.dispatched("one", 1, now=2.0, streamed=False)  # due at 2.001
    assert backlog.advance(2.0) == 2.0 + 1 / 1000
    assert backlog.advance(2.001) is None and backlog.pending_tokens() == {"b1": 0}
