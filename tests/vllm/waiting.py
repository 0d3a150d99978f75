"""Bounded waiting on a condition: poll a probe until it holds or the deadline passes.

Tests wait on observable state (a metric, a gauge) instead of sleeping a fixed time; the
timeout only bounds a failure, it is never what makes a test pass.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    probe: Callable[[], T],
    holds: Callable[[T], bool],
    *,
    timeout_s: float = 10.0,
    interval_s: float = 0.02,
) -> T:
    """Return the first probe value that ``holds``; raise AssertionError with the last one."""
    deadline = time.monotonic() + timeout_s
    value = probe()
    while not holds(value):
        if time.monotonic() >= deadline:
            raise AssertionError(f"condition not met within {timeout_s} s; last value {value!r}")
        time.sleep(interval_s)
        value = probe()
    return value
