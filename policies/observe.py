"""What the scheduler learns from completed requests: the token drain rate while busy and
the execution time per cost class. Pure: every method takes the clock reading."""

from __future__ import annotations

from collections import deque

_BUCKETS = 10
_SAMPLES_PER_CLASS = 128
_MIN_SAMPLES = 5


def cost_class(tokens: int) -> int:
    """Power-of-two bucket of a request's estimated total tokens."""
    return max(tokens, 1).bit_length()


class DrainMeter:
    """Tokens completed per second of busy time over a sliding window of ``window_s``.

    Busy time (something in flight) is the denominator, so an idle lull does not make the
    backlog look slower to drain than it is.
    """

    def __init__(self, window_s: float = 30.0) -> None:
        self._bucket_s = window_s / _BUCKETS
        self._buckets: deque[list[float]] = deque()  # [start, tokens, busy_s]
        self._last: float | None = None
        self._busy = False

    def tick(self, now: float, busy: bool) -> None:
        """Account the time since the last tick to the busy state that held during it."""
        if self._last is not None and self._busy and now > self._last:
            self._bucket(now)[2] += now - self._last
        self._last = now
        self._busy = busy

    def add(self, now: float, tokens: int) -> None:
        self._bucket(now)[1] += tokens

    def rate(self, now: float) -> float | None:
        """Tokens/second, or None before the first completion."""
        self._evict(now)
        tokens = sum(b[1] for b in self._buckets)
        busy = sum(b[2] for b in self._buckets)
        if tokens <= 0 or busy <= 0:
            return None
        return tokens / busy

    def _bucket(self, now: float) -> list[float]:
        self._evict(now)
        if not self._buckets or now >= self._buckets[-1][0] + self._bucket_s:
            self._buckets.append([now, 0.0, 0.0])
        return self._buckets[-1]

    def _evict(self, now: float) -> None:
        horizon = now - self._bucket_s * _BUCKETS
        while self._buckets and self._buckets[0][0] + self._bucket_s < horizon:
            self._buckets.popleft()


class ExecQuantiles:
    """p95 of observed end-to-end latency (seconds) per cost class, last 128 samples each."""

    def __init__(self) -> None:
        self._samples: dict[int, deque[float]] = {}
        self._cache: dict[int, float] = {}

    def add(self, tokens: int, latency_s: float) -> None:
        cls = cost_class(tokens)
        self._samples.setdefault(cls, deque(maxlen=_SAMPLES_PER_CLASS)).append(latency_s)
        self._cache.pop(cls, None)

    def p95(self, tokens: int) -> float | None:
        """p95 for this class, or for the nearest cheaper class with enough samples (an
        underestimate, so a cold class never causes a false rejection); None if none."""
        for cls in range(cost_class(tokens), 0, -1):
            cached = self._cache.get(cls)
            if cached is not None:
                return cached
            samples = self._samples.get(cls)
            if samples is not None and len(samples) >= _MIN_SAMPLES:
                ordered = sorted(samples)
                value = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
                self._cache[cls] = value
                return value
        return None
