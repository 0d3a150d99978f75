"""The engine's step time now and its floor, from its inter-token latency histogram."""

from __future__ import annotations

import math

import pytest

from gateway.backends.scrape.sample import Histogram
from policies import step_latency
from policies.step_latency import StepLatency


def _hist(total_s: float, count: float) -> Histogram:
    return Histogram(bounds=(math.inf,), cumulative=(count,), sum=total_s, count=count)


class Engine:
    """A cumulative histogram fed step by step, as vLLM's would be."""

    def __init__(self) -> None:
        self.total, self.count = 0.0, 0.0

    def steps(self, n: int, seconds_each: float) -> Histogram:
        self.total += n * seconds_each
        self.count += n
        return _hist(self.total, self.count)


def test_the_mean_covers_the_last_two_seconds_only() -> None:
    eng, s = Engine(), StepLatency()
    for i in range(5):
        s.add(i * 0.5, eng.steps(100, 0.002))
    assert s.itl_s == pytest.approx(0.002)
    for i in range(5, 10):
        s.add(i * 0.5, eng.steps(100, 0.006))
    assert s.itl_s == pytest.approx(0.006)  # the fast steps left the span
    assert s.floor_s == pytest.approx(0.002)


def test_too_few_tokens_say_nothing() -> None:
    eng, s = Engine(), StepLatency()
    s.add(0.0, eng.steps(100, 0.002))
    s.add(0.5, eng.steps(step_latency.MIN_TOKENS - 1, 0.002))
    assert s.itl_s is None and s.floor_s is None


def test_the_floor_is_forgotten_after_its_window() -> None:
    eng, s = Engine(), StepLatency()
    s.add(0.0, eng.steps(100, 0.002))
    s.add(0.5, eng.steps(100, 0.002))
    later = step_latency.FLOOR_WINDOW_S + 10
    s.add(later, eng.steps(100, 0.005))
    s.add(later + 0.5, eng.steps(100, 0.005))
    assert s.floor_s == pytest.approx(0.005)


def test_a_restarted_server_starts_over() -> None:
    eng, s = Engine(), StepLatency()
    s.add(0.0, eng.steps(1000, 0.002))
    s.add(0.5, eng.steps(100, 0.002))
    fresh = Engine()
    s.add(1.0, fresh.steps(100, 0.004))
    assert s.itl_s is None
    s.add(1.5, fresh.steps(100, 0.004))
    assert s.itl_s == pytest.approx(0.004)


def test_no_histogram_no_step_time() -> None:
    eng, s = Engine(), StepLatency()
    s.add(0.0, eng.steps(100, 0.002))
    s.add(0.5, eng.steps(100, 0.002))
    s.add(1.0, None)
    assert s.itl_s is None
    assert s.floor_s == pytest.approx(0.002)  # what was measured stays the floor


def test_the_signal_window_reads_the_engines_inter_token_histogram() -> None:
    from gateway.backends.scrape.sample import MetricsSample
    from gateway.backends.scrape.signals import Observation, SignalWindow

    window, eng = SignalWindow(30.0), Engine()
    for i, each in enumerate((0.002, 0.002, 0.002, 0.002, 0.008, 0.008, 0.008, 0.008, 0.008)):
        hists = {"inter_token_latency": eng.steps(50, each)}
        window.add(Observation(i * 0.5, MetricsSample(histograms=hists)))
    derived = window.derive(8)
    assert derived is not None
    assert derived.itl_s == pytest.approx(0.008)
    assert derived.itl_floor_s == pytest.approx(0.002)
