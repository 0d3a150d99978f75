"""The scrape arithmetic at its edges: a counter or histogram that did not move, quantiles at
q = 0 and 1 and past an empty first bucket, means, phase shares, and capacity when its two
terms tie or one is missing."""

from __future__ import annotations

import math

from gateway.backends.scrape.derive import (
    Capacity,
    PhaseBreakdown,
    Quantile,
    capacity,
    counter_delta,
    histogram_delta,
    mean,
    phase_breakdown,
    quantile,
)
from gateway.backends.scrape.sample import Histogram

INF = math.inf
# none in (0,1], 10 in (1,2], 30 in (2,4], 10 above
SKEWED = Histogram((1.0, 2.0, 4.0, INF), (0.0, 10.0, 40.0, 50.0), 160.0, 50.0)


def test_a_counter_or_histogram_that_did_not_move_gives_nothing_new() -> None:
    assert counter_delta(100.0, 100.0) == 0.0
    assert counter_delta(100.0, 99.0) == 99.0
    same = Histogram((1.0, INF), (5.0, 8.0), 20.0, 8.0)
    assert histogram_delta(same, same) == Histogram((1.0, INF), (0.0, 0.0), 0.0, 0.0)
    rebucketed = Histogram((2.0, INF), (5.0, 9.0), 21.0, 9.0)
    assert histogram_delta(same, rebucketed) is rebucketed


def test_quantile_bounds_of_q_and_of_an_empty_histogram() -> None:
    assert quantile(SKEWED, -0.01) is None and quantile(SKEWED, 1.01) is None
    empty = Histogram((1.0, INF), (0.0, 0.0), 0.0, 0.0)
    assert quantile(empty, 0.5) is None
    assert quantile(SKEWED, 0.0) == Quantile(0.0, 1.0, 1.0, 2.0, False, False)
    assert quantile(SKEWED, 1.0) == Quantile(1.0, 4.0, 4.0, INF, False, True)


def test_quantile_interpolates_past_an_empty_first_bucket() -> None:
    assert quantile(SKEWED, 0.1) == Quantile(0.1, 1.5, 1.0, 2.0, False, False)  # rank 5 of 10
    est = quantile(SKEWED, 0.5)  # rank 25: 15 of the 30 in (2,4]
    assert est == Quantile(0.5, 3.0, 2.0, 4.0, False, False)
    assert est.resolution == "2..4"


def test_quantile_of_only_an_overflow_bucket_is_a_floor_of_zero() -> None:
    only = Histogram((INF,), (4.0,), 10.0, 4.0)
    est = quantile(only, 0.5)
    assert est == Quantile(0.5, 0.0, 0.0, INF, True, True)
    assert est.resolution == ">0"


def test_quantile_of_a_count_beyond_its_buckets_is_unknown() -> None:
    torn = Histogram((1.0, INF), (2.0, 3.0), 4.0, 10.0)  # scraped while being written
    assert quantile(torn, 0.9) is None


def test_mean_is_sum_over_count() -> None:
    assert mean(SKEWED) == 3.2
    assert mean(None) is None
    assert mean(Histogram((INF,), (0.0,), 0.0, 0.0)) is None


def test_phase_breakdown_means_and_what_e2e_holds_beyond_the_phases() -> None:
    def h(total: float, count: float) -> Histogram:
        return Histogram((INF,), (count,), total, count)

    phases = phase_breakdown(h(1.0, 4.0), h(2.0, 4.0), h(8.0, 4.0), h(12.0, 5.0))
    assert phases == PhaseBreakdown(5.0, 0.25, 0.5, 2.0, 2.4)
    assert math.isclose(phases.other_s, 2.4 - 0.25 - 0.5 - 2.0)
    assert phases.share(0.6) == 0.25
    assert PhaseBreakdown(0.0, 0.1, 0.1, 0.1, 0.0).share(0.1) == 0.0
    assert phase_breakdown(h(1.0, 4.0), h(2.0, 4.0), h(8.0, 4.0), None) is None
    assert phase_breakdown(h(1.0, 4.0), h(2.0, 4.0), h(0.0, 0.0), h(12.0, 5.0)) is None


def test_capacity_limited_by_the_smaller_term_and_slots_on_a_tie() -> None:
    tie = capacity(kv_cache_tokens=800.0, p90_prompt_tokens=100.0, max_num_seqs=8)
    assert (tie.value, tie.kv_bound, tie.limited_by) == (8.0, 8.0, "max_num_seqs")
    kv_only = capacity(800.0, 100.0, None)
    assert (kv_only.value, kv_only.limited_by) == (8.0, "kv_cache")
    seqs_only = capacity(800.0, 0.0, 16)
    assert (seqs_only.value, seqs_only.kv_bound) == (16.0, None)
    assert seqs_only.limited_by == "max_num_seqs"
    assert capacity(None, None, None).limited_by == "unknown"


def test_kv_bound_with_output_counts_prompt_and_output() -> None:
    assert capacity(900.0, 100.0, 8, p90_output_tokens=200.0).kv_bound_with_output == 3.0
    assert capacity(900.0, 100.0, 8).kv_bound_with_output is None
    assert Capacity(None, 900.0, 0.0, None, None, 0.0).kv_bound_with_output is None
    assert Capacity(None, None, 100.0, None, None, 10.0).kv_bound_with_output is None


def test_one_observation_has_a_quantile_and_a_mean() -> None:
    one = Histogram((1.0, INF), (1.0, 1.0), 0.25, 1.0)
    assert quantile(one, 0.5) == Quantile(0.5, 0.5, 0.0, 1.0, True, False)
    assert mean(one) == 0.25


def test_a_phase_that_took_no_time_counts_zero() -> None:
    def h(total: float) -> Histogram:
        return Histogram((INF,), (4.0,), total, 4.0)

    assert phase_breakdown(h(0.0), h(0.0), h(8.0), h(12.0)) == PhaseBreakdown(
        4.0, 0.0, 0.0, 2.0, 3.0
    )


def test_kv_bound_with_output_when_a_term_is_zero() -> None:
    assert Capacity(None, 900.0, 0.0, None, None, 100.0).kv_bound_with_output == 9.0
    assert Capacity(None, 900.0, 100.0, None, None, 0.0).kv_bound_with_output == 9.0
    assert Capacity(None, 900.0, 0.5, None, None, 0.5).kv_bound_with_output == 900.0
    assert Capacity(None, 0.0, 100.0, None, None, 50.0).kv_bound_with_output == 0.0
