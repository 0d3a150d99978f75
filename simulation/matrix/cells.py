"""The matrix's cells: workload x engine profile x load x backends, and the slice CI runs.

Each profile's cells run for ``DURATION_S`` simulated seconds of arrivals (the first
quarter unmeasured): long enough for hundreds of requests at 0.5x on each profile. The
``mi300x`` cells cost most of the whole matrix's time (docs/evaluate.md, "What a run of the
matrix costs").
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from simulation.matrix.workloads import WORKLOADS

PROFILES = ("cpu-tiny", "rx9070xt", "mi300x")
LOADS = (0.5, 1.0, 1.5, 2.0, 4.0)
BACKENDS = (1, 2)
DURATION_S = {"cpu-tiny": 60.0, "rx9070xt": 240.0, "mi300x": 240.0}
OVERLOAD = frozenset({1.5, 2.0})
"""Loads at which the Retry-After goal (>= 90 % admitted on the first return) holds."""


@dataclass(frozen=True, slots=True, order=True)
class Cell:
    workload: str
    profile: str
    load: float
    backends: int

    @property
    def key(self) -> str:
        return f"{self.workload}/{self.profile}/{self.load:g}x/{self.backends}b"

    @property
    def duration_s(self) -> float:
        return DURATION_S[self.profile]

    @property
    def warmup_s(self) -> float:
        return self.duration_s / 4


def full_matrix() -> list[Cell]:
    return [
        Cell(w, p, load, b)
        for w, p, load, b in itertools.product(WORKLOADS, PROFILES, LOADS, BACKENDS)
    ]


CI_SLICE = (
    Cell("noisy-1500-stream", "cpu-tiny", 2.0, 1),
    Cell("runs-short", "cpu-tiny", 2.0, 1),
    Cell("chat", "cpu-tiny", 1.0, 2),
    Cell("multi-turn", "rx9070xt", 1.5, 1),
)
"""A fixed slice for CI: a noisy cell, an agent-run cell at 2x, two backends, a growing
context on a second profile."""
