"""Counters and histograms kept as plain numbers, exported at scrape time.

prometheus_client's ``Counter.inc``/``Histogram.observe`` take a lock and check the
metric's state on every call, and a labelled child is found through ``labels()``: a few
per cent of the gateway's CPU per request. The request path only needs ``+=`` on a float
in the event loop's thread; the exposition is built when Prometheus asks.

A ``CounterTally``/``HistogramTally`` is a registry collector that exports exactly what
the prometheus_client metric of the same name, help and labels would (the same samples,
in the same order, ``_created`` included unless the library's environment switch turns
it off); ``tests/unit/metrics/test_tally.py`` compares the two exposition texts.

Values are read from the scrape without a lock: under the GIL a copy of a dict is taken
in one step, so a scrape sees each series either before or after an increment.
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Callable, Iterable, Sequence

from prometheus_client import metrics as _metrics
from prometheus_client.core import Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

Key = tuple[str, ...]
WallClock = Callable[[], float]


def _created_series() -> bool:
    return bool(_metrics._use_created)


class CounterTally(Collector):
    """``Counter(name, documentation, labelnames)`` as a dict of floats by label values."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        *,
        wall: WallClock = time.time,
    ) -> None:
        self.name = name.removesuffix("_total")
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.values: dict[Key, float] = {}
        self._created: dict[Key, float] = {}
        self._wall = wall

    def touch(self, key: Key) -> None:
        """The series exists (exported at 0), as after ``counter.labels(*key)``."""
        if key not in self.values:
            _check_key(self.name, self.labelnames, key)
            self._created[key] = self._wall()
            self.values[key] = 0.0

    def forget(self, keep: Callable[[Key], bool]) -> None:
        """Remove every series whose label values ``keep`` refuses (``counter.remove``)."""
        for key in [k for k in self.values if not keep(k)]:
            del self.values[key], self._created[key]

    def inc(self, key: Key, amount: float = 1.0) -> None:
        """``counter.labels(*key).inc(amount)``."""
        if amount < 0:
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        values = self.values
        if key in values:
            values[key] += amount
        else:
            self.touch(key)
            values[key] += amount

    def describe(self) -> Iterable[Metric]:
        return [Metric(self.name, self.documentation, "counter")]

    def collect(self) -> Iterable[Metric]:
        metric = Metric(self.name, self.documentation, "counter")
        created = _created_series()
        for key, value in list(self.values.items()):
            labels = dict(zip(self.labelnames, key, strict=True))
            metric.add_sample(self.name + "_total", labels, value)
            if created:
                metric.add_sample(self.name + "_created", dict(labels), self._created[key])
        return [metric]


def _check_key(name: str, labelnames: Sequence[str], key: Key) -> None:
    if len(key) != len(labelnames):
        raise ValueError(f"{name}: {len(labelnames)} label values expected")


class HistogramTally(Collector):
    """``Histogram(name, documentation, labelnames, buckets=...)`` as plain counts."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        buckets: Sequence[float],
        *,
        wall: WallClock = time.time,
    ) -> None:
        bounds = [float(b) for b in buckets]
        if bounds and bounds[-1] != math.inf:
            bounds.append(math.inf)
        if bounds != sorted(bounds) or len(bounds) < 2:
            raise ValueError("buckets must be sorted, with at least one finite bound")
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._bounds = bounds
        self._le = [floatToGoString(b) for b in bounds]  # type: ignore[no-untyped-call]
        self._series: dict[Key, list[float]] = {}
        """Per label values: one count per bucket (not cumulative), then the sum."""
        self._created: dict[Key, float] = {}
        self._wall = wall

    def touch(self, key: Key) -> list[float]:
        """The series exists (exported at 0), as after ``histogram.labels(*key)``."""
        series = self._series.get(key)
        if series is None:
            _check_key(self.name, self.labelnames, key)
            self._created[key] = self._wall()
            series = self._series[key] = [0.0] * (len(self._bounds) + 1)
        return series

    def forget(self, keep: Callable[[Key], bool]) -> None:
        """Remove every series whose label values ``keep`` refuses (``histogram.remove``)."""
        for key in [k for k in self._series if not keep(k)]:
            del self._series[key], self._created[key]

    def observe(self, key: Key, amount: float) -> None:
        """``histogram.labels(*key).observe(amount)``."""
        series = self._series.get(key)
        if series is None:
            series = self.touch(key)
        series[-1] += amount
        if amount == amount:  # NaN falls in no bucket (it only poisons the sum), as there
            series[bisect.bisect_left(self._bounds, amount)] += 1.0

    def describe(self) -> Iterable[Metric]:
        return [Metric(self.name, self.documentation, "histogram")]

    def collect(self) -> Iterable[Metric]:
        metric = Metric(self.name, self.documentation, "histogram")
        created = _created_series()
        name = self.name
        for key, series in list(self._series.items()):
            counts = list(series)
            labels = dict(zip(self.labelnames, key, strict=True))
            acc = 0.0
            for le, count in zip(self._le, counts, strict=False):
                acc += count
                metric.add_sample(name + "_bucket", {**labels, "le": le}, acc)
            metric.add_sample(name + "_count", dict(labels), acc)
            if self._bounds[0] >= 0:
                metric.add_sample(name + "_sum", dict(labels), counts[-1])
            if created:
                metric.add_sample(name + "_created", dict(labels), self._created[key])
        return [metric]
