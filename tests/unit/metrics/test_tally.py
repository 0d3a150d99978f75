"""The plain-number tallies export exactly what prometheus_client's metrics would.

Each test drives a prometheus_client metric and its tally with the same operations and
compares the two exposition texts line by line (``_created`` timestamps, taken from the
wall clock at different instants, are compared as present, not by value)."""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from gateway.metrics.exporter import QUEUE_WAIT_BUCKETS
from gateway.metrics.tally import CounterTally, HistogramTally

_CREATED = re.compile(r"^(\S+_created(?:\{.*\})?) \S+$")


def _text(registry: CollectorRegistry) -> list[str]:
    lines = generate_latest(registry).decode().splitlines()
    return [_CREATED.sub(r"\1 <t>", line) for line in lines]


def test_counter_exposition_matches_prometheus_client() -> None:
    ref, new = CollectorRegistry(), CollectorRegistry()
    names = ["decision", "reason", "tenant", "class"]
    counter = Counter("sluicegate_decisions", "Decisions made", names, registry=ref)
    tally = CounterTally("sluicegate_decisions", "Decisions made", names)
    new.register(tally)
    rng = random.Random(7)
    values = [
        ("admit", "room", "acme", "chat"),
        ("reject", "quota", "other", "batch"),
        ("delay", "queue", 'we"ird\\', "chat"),
    ]
    for _ in range(200):
        key = rng.choice(values)
        amount = rng.choice([1, 1, 0, 3, 0.25, 17])
        counter.labels(*key).inc(amount)
        tally.inc(key, amount)
    assert _text(new) == _text(ref)
    assert any(line.endswith(" <t>") for line in _text(new))


def _counters(ref: CollectorRegistry) -> tuple[Counter, CounterTally]:
    name, help_, labels = "sluicegate_actual_tokens", "Actual tokens", ["kind"]
    return Counter(name, help_, labels, registry=ref), CounterTally(name, help_, labels)


def _histograms(ref: CollectorRegistry) -> tuple[Histogram, HistogramTally]:
    hist = Histogram("h", "help", ["a"], buckets=(1, 2), registry=ref)
    return hist, HistogramTally("h", "help", ["a"], (1, 2))


# (the metric and its tally, registered in a registry; their method that adds; an amount)
TOUCHED: list[tuple[Callable[[CollectorRegistry], tuple[Any, Any]], str, float]] = [
    (_counters, "inc", 5),
    (_histograms, "observe", 1.5),
]


@pytest.mark.parametrize(("pair", "add", "amount"), TOUCHED, ids=["counter", "histogram"])
def test_a_series_touched_is_exported_at_zero(
    pair: Callable[[CollectorRegistry], tuple[Any, Any]], add: str, amount: float
) -> None:
    ref, new = CollectorRegistry(), CollectorRegistry()
    metric, tally = pair(ref)
    new.register(tally)
    for key in ("prompt", "output"):
        metric.labels(key)
        tally.touch((key,))
    assert _text(new) == _text(ref)
    getattr(metric.labels("output"), add)(amount)
    getattr(tally, add)(("output",), amount)
    tally.touch(("output",))  # touching again keeps the counts
    assert _text(new) == _text(ref)


def test_counter_refuses_what_prometheus_client_refuses() -> None:
    tally = CounterTally("c", "help", ["a"])
    with pytest.raises(ValueError):
        tally.inc(("x",), -1)
    with pytest.raises(ValueError):
        tally.inc(("x", "y"))
    assert tally.values == {}


def test_histogram_exposition_matches_prometheus_client() -> None:
    ref, new = CollectorRegistry(), CollectorRegistry()
    help_ = "Time spent queued in the gateway before dispatch"
    name, labels = "sluicegate_queue_wait_seconds", ["tenant", "class"]
    hist = Histogram(name, help_, labels, buckets=QUEUE_WAIT_BUCKETS, registry=ref)
    tally = HistogramTally(name, help_, labels, QUEUE_WAIT_BUCKETS)
    new.register(tally)
    rng = random.Random(11)
    # Values on, just below and just above every bound, zero, huge, and random ones.
    probes = [0.0, 1e9] + [b + d for b in QUEUE_WAIT_BUCKETS for d in (0.0, -1e-9, 1e-9)]
    for i in range(400):
        amount = probes[i] if i < len(probes) else rng.expovariate(2.0)
        key = rng.choice([("acme", "chat"), ("other", "batch")])
        hist.labels(*key).observe(amount)
        tally.observe(key, amount)
    assert _text(new) == _text(ref)


def test_histogram_nan_only_poisons_the_sum_as_in_prometheus_client() -> None:
    ref, new = CollectorRegistry(), CollectorRegistry()
    hist = Histogram("h", "help", ["a"], buckets=(1, 2), registry=ref)
    tally = HistogramTally("h", "help", ["a"], (1, 2))
    new.register(tally)
    for amount in (0.5, math.nan, 3.0):
        hist.labels("x").observe(amount)
        tally.observe(("x",), amount)
    assert _text(new) == _text(ref)


def test_forgetting_a_series_is_removing_it() -> None:
    ref, new = CollectorRegistry(), CollectorRegistry()
    counter = Counter("c", "help", ["a", "b"], registry=ref)
    hist = Histogram("h", "help", ["a"], buckets=(1, 2), registry=ref)
    counts = CounterTally("c", "help", ["a", "b"])
    tally = HistogramTally("h", "help", ["a"], (1, 2))
    new.register(counts)
    new.register(tally)
    for a in ("keep", "gone"):
        counter.labels(a, "1").inc(2)
        counts.inc((a, "1"), 2)
        hist.labels(a).observe(0.5)
        tally.observe((a,), 0.5)
    counter.remove("gone", "1")
    hist.remove("gone")
    counts.forget(lambda key: key[0] != "gone")
    tally.forget(lambda key: key[0] != "gone")
    assert _text(new) == _text(ref)
    counts.inc(("gone", "1"))  # a series that comes back starts again from 0
    counter.labels("gone", "1").inc()
    assert _text(new) == _text(ref)
