"""What the scheduler learns from completed requests: the token drain rate while busy and
the execution time per cost class. Pure: every method takes the clock reading.

Both are read on every decision, so each keeps what a read needs ready: the drain meter
the running sums of its closed buckets, the quantiles a sorted copy of each class's
samples. Results are the same floats the plain definitions give (same summation order,
same order statistic).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import deque

_BUCKETS = 10
_SAMPLES_PER_CLASS = 128
_MIN_SAMPLES = 5
_CLASSES = 66
"""Cost classes kept apart (``cost_class`` of any int64 token count is below this)."""


def cost_class(tokens: int) -> int:
    """Power-of-two bucket of a request's estimated total tokens."""
    return max(tokens, 1).bit_length()


class DrainMeter:
    """Tokens completed per second of busy time over a sliding window of ``window_s``.

    Busy time (something in flight) is the denominator, so an idle lull does not make the
    backlog look slower to drain than it is.
    """

    __slots__ = ("_bucket_s", "_buckets", "_busy", "_closed", "_last", "_span")

    def __init__(self, window_s: float = 30.0) -> None:
        self._bucket_s = window_s / _BUCKETS
        self._span = self._bucket_s * _BUCKETS
        self._buckets: deque[list[float]] = deque()  # [start, tokens, busy_s]
        self._last: float | None = None
        self._busy = False
        self._closed = [0.0, 0.0]
        """Sums of tokens and busy seconds over every bucket but the newest, added left to
        right as ``sum`` would (only the newest bucket still changes)."""

    def tick(self, now: float, busy: bool) -> None:
        """Account the time since the last tick to the busy state that held during it."""
        last = self._last
        if last is not None and self._busy and now > last:
            buckets = self._buckets
            # the newest bucket still open and nothing to evict: _bucket(now) without calls
            if (
                buckets
                and now < buckets[-1][0] + self._bucket_s
                and buckets[0][0] + self._bucket_s >= now - self._span
            ):
                buckets[-1][2] += now - last
            else:
                self._bucket(now)[2] += now - last
        self._last = now
        self._busy = busy

    def add(self, now: float, tokens: int) -> None:
        self._bucket(now)[1] += tokens

    def rate(self, now: float) -> float | None:
        """Tokens/second, or None before the first completion."""
        self._evict(now)
        if not self._buckets:
            return None
        newest, closed = self._buckets[-1], self._closed
        tokens = closed[0] + newest[1]
        busy = closed[1] + newest[2]
        if tokens <= 0 or busy <= 0:
            return None
        return tokens / busy

    def _bucket(self, now: float) -> list[float]:
        self._evict(now)
        buckets = self._buckets
        if not buckets:
            buckets.append([now, 0.0, 0.0])
        elif now >= buckets[-1][0] + self._bucket_s:
            newest, closed = buckets[-1], self._closed
            closed[0] += newest[1]
            closed[1] += newest[2]
            buckets.append([now, 0.0, 0.0])
        return buckets[-1]

    def _evict(self, now: float) -> None:
        buckets = self._buckets
        horizon = now - self._span
        if not buckets or buckets[0][0] + self._bucket_s >= horizon:
            return
        while buckets and buckets[0][0] + self._bucket_s < horizon:
            buckets.popleft()
        tokens = busy = 0.0
        for i in range(len(buckets) - 1):
            tokens += buckets[i][1]
            busy += buckets[i][2]
        self._closed = [tokens, busy]


class ExecQuantiles:
    """p95 of observed end-to-end latency (seconds) per cost class, last 128 samples each."""

    __slots__ = ("_answer", "_own", "_samples", "_sorted")

    def __init__(self) -> None:
        self._samples: dict[int, deque[float]] = {}
        self._sorted: dict[int, list[float]] = {}
        """The same samples in ascending order, kept by insertion."""
        self._own: list[float | None] = [None] * _CLASSES
        """Each class's own p95 (None below ``_MIN_SAMPLES`` samples)."""
        self._answer: list[float | None] = [None] * _CLASSES
        """What ``p95`` answers per class: its own, else the nearest cheaper class's."""

    def add(self, tokens: int, latency_s: float) -> None:
        if latency_s != latency_s:  # NaN: no order to keep it in
            return
        cls = cost_class(tokens)
        samples = self._samples.get(cls)
        if samples is None:
            samples = self._samples[cls] = deque()
            self._sorted[cls] = []
        ordered = self._sorted[cls]
        if len(samples) >= _SAMPLES_PER_CLASS:
            del ordered[bisect_left(ordered, samples.popleft())]
        samples.append(latency_s)
        insort(ordered, latency_s)
        if cls >= _CLASSES:
            return
        n = len(ordered)
        own, answer = self._own, self._answer
        before = own[cls]
        p95 = own[cls] = _p95_of(ordered) if n >= _MIN_SAMPLES else None
        if p95 == before:
            return  # the class's own p95 is unchanged, so is every answer (a function of own)
        for c in range(cls, _CLASSES):  # up to the next class that answers for itself
            if c > cls and own[c] is not None:
                break
            answer[c] = own[c] if own[c] is not None else answer[c - 1]

    def p95(self, tokens: int) -> float | None:
        """p95 for this class, or for the nearest cheaper class with enough samples (an
        underestimate, so a cold class never causes a false rejection); None if none."""
        cls = tokens.bit_length() if tokens > 1 else 1  # cost_class
        if cls < _CLASSES:
            return self._answer[cls]
        for c in range(cls, _CLASSES - 1, -1):  # beyond any int64 count: read the samples
            ordered = self._sorted.get(c)
            if ordered is not None and len(ordered) >= _MIN_SAMPLES:
                return _p95_of(ordered)
        return self._answer[_CLASSES - 1]


def _p95_of(ordered: list[float]) -> float:
    """The 95th-percentile order statistic of ascending ``ordered`` (not empty)."""
    n = len(ordered)
    return ordered[min(n - 1, int(0.95 * n))]
