from __future__ import annotations

import math

import pytest

from gateway.backends.scrape.derive import (
    capacity,
    counter_delta,
    gain_bound,
    histogram_delta,
    phase_breakdown,
    quantile,
)
from gateway.backends.scrape.engines import VLLM_0_32
from gateway.backends.scrape.parse import parse_narrow, wanted_names
from gateway.backends.scrape.sample import Histogram, extract

INF = math.inf


def hist(bounds: tuple[float, ...], cumulative: tuple[float, ...], total: float = 0.0) -> Histogram:
    return Histogram(bounds, cumulative, total, cumulative[-1])


# 10 observations in (0,1], 20 in (1,2], 10 in (2,4], none above
KNOWN = hist((1.0, 2.0, 4.0, INF), (10.0, 30.0, 40.0, 40.0))


@pytest.mark.parametrize(
    ("q", "value", "lower", "upper"),
    [
        (0.5, 1.5, 1.0, 2.0),  # rank 20: 10 of the 20 in (1,2]
        (0.9, 3.2, 2.0, 4.0),  # rank 36: 6 of the 10 in (2,4]
        (0.25, 1.0, 0.0, 1.0),  # rank 10: exactly the top of the first bucket
    ],
)
def test_quantile_interpolates_inside_its_bucket(
    q: float, value: float, lower: float, upper: float
) -> None:
    est = quantile(KNOWN, q)
    assert est is not None
    assert est.value == pytest.approx(value)
    assert (est.lower, est.upper, est.in_overflow) == (lower, upper, False)


def test_quantile_in_first_bucket_says_only_an_upper_bound_is_known() -> None:
    est = quantile(KNOWN, 0.1)
    assert est is not None
    assert est.in_first_bucket
    assert est.value == pytest.approx(0.4)
    assert est.resolution == "0..1"


def test_quantile_in_overflow_bucket_is_a_floor() -> None:
    est = quantile(hist((1.0, 2.0, 4.0, INF), (10.0, 30.0, 40.0, 50.0)), 0.9)
    assert est is not None
    assert est.in_overflow
    assert (est.value, est.lower, est.upper) == (4.0, 4.0, INF)
    assert est.resolution == ">4"


def test_quantile_of_empty_histogram_is_unknown() -> None:
    assert quantile(hist((1.0, INF), (0.0, 0.0)), 0.5) is None


def test_counter_delta_survives_a_restart() -> None:
    assert counter_delta(100.0, 130.0) == 30.0
    assert counter_delta(100.0, 7.0) == 7.0


def test_histogram_delta_keeps_only_new_observations() -> None:
    old = Histogram((1.0, INF), (5.0, 5.0), 2.0, 5.0)
    new = Histogram((1.0, INF), (5.0, 8.0), 20.0, 8.0)
    delta = histogram_delta(old, new)
    assert delta == Histogram((1.0, INF), (0.0, 3.0), 18.0, 3.0)
    assert histogram_delta(new, old) == old  # went down: reset, count from zero


def test_phase_breakdown_of_the_under_load_dump(under_load: str) -> None:
    sample = extract(parse_narrow(under_load, wanted_names(VLLM_0_32)), VLLM_0_32)
    h = sample.histograms
    phases = phase_breakdown(h["queue_time"], h["prefill_time"], h["decode_time"], h["e2e_latency"])
    assert phases is not None
    # _sum / _count read by hand from the dump, 14 requests each
    assert phases.requests == 14
    assert phases.queue_s == pytest.approx(0.000322137000011935 / 14)
    assert phases.prefill_s == pytest.approx(0.7000079770001548 / 14)
    assert phases.decode_s == pytest.approx(29.65665607799997 / 14)
    assert phases.e2e_s == pytest.approx(30.64816451072693 / 14)
    assert phases.share(phases.decode_s) == pytest.approx(29.65665607799997 / 30.64816451072693)


def test_phase_breakdown_needs_every_phase() -> None:
    assert phase_breakdown(None, KNOWN, KNOWN, KNOWN) is None


def test_capacity_takes_the_tighter_limit() -> None:
    kv_limited = capacity(kv_cache_tokens=1000.0, p90_prompt_tokens=100.0, max_num_seqs=64)
    assert (kv_limited.value, kv_limited.limited_by) == (10.0, "kv_cache")
    seq_limited = capacity(kv_cache_tokens=1000.0, p90_prompt_tokens=10.0, max_num_seqs=64)
    assert (seq_limited.value, seq_limited.limited_by) == (64.0, "max_num_seqs")


def test_capacity_with_one_term_unknown_uses_the_other_and_none_without_either() -> None:
    assert capacity(None, 100.0, 8).value == 8.0
    assert capacity(1000.0, 100.0, None).value == 10.0
    assert capacity(1000.0, None, None).value is None


def test_gain_bound_is_share_times_fraction_removed() -> None:
    # docs/signals.md: prefill 13.7% of e2e, halved -> at most ~6.9% faster
    assert gain_bound(0.137, 0.5) == pytest.approx(0.0685)
