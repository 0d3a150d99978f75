"""The agent-run workload (docs/runs.md, "The measured case"): runs arrive as a Poisson
stream; each run is a plan call, then tool turns, some of which fan out into parallel
branches that join before the next turn, with think (tool) time between steps and a run
deadline counted from the run's arrival.

Everything a run will do is drawn when it arrives, from its own seeded stream, so every
admission policy compared at one load serves the very same runs (common random numbers).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from emulator.profile import LengthMixture, Profile
from simulation.engine_adapter import service_rate_bound_tps
from simulation.workload import BackoffPolicy

RUN_HINTS = ("calls", "tokens", "branches", "deadline")
"""Hints a client may send with its run (``X-Agent-Run-*``)."""

RUN_BACKOFF = BackoffPolicy(base_s=1.0, growth=2.0, cap_s=30.0)
"""A refused call waits max(Retry-After, 1 s x 2^k), at most 30 s, without jitter."""


@dataclass(frozen=True, slots=True)
class RunPlan:
    """One run, drawn at its arrival. ``steps[i]`` holds the output tokens of step ``i``'s
    calls (one call, or several parallel branches that join); ``think_s[i]`` is the think
    time before step ``i + 1``."""

    index: int
    arrival: float
    steps: tuple[tuple[int, ...], ...]
    think_s: tuple[float, ...]

    @property
    def calls(self) -> int:
        return sum(len(step) for step in self.steps)

    @property
    def branches(self) -> int:
        return max(len(step) for step in self.steps)

    def tokens(self, prompt_tokens: int) -> int:
        return sum(prompt_tokens + out for step in self.steps for out in step)


@dataclass(frozen=True, slots=True)
class RunWorkload:
    """What every run does. A run has one plan call and ``turns_min..turns_max`` tool turns
    (uniform); each turn fans out into ``branches`` parallel calls with probability
    ``branch_prob``. ``hints``: what the client tells the gateway (``RUN_HINTS``)."""

    lengths: LengthMixture
    turns_min: int = 2
    turns_max: int = 4
    branch_prob: float = 0.3
    branches: int = 3
    think_mean_s: float = 2.0
    deadline_s: float = 120.0
    patience_s: float | None = 30.0
    """A run whose first call is still refused this long after its arrival is dropped by
    its client (it never started: nothing spent). None: retry until the deadline."""
    prompt_tokens: int = 64
    hints: tuple[str, ...] = RUN_HINTS
    backoff: BackoffPolicy = RUN_BACKOFF

    def __post_init__(self) -> None:
        if not 1 <= self.turns_min <= self.turns_max:
            raise ValueError("need 1 <= turns_min <= turns_max")
        if not 0.0 <= self.branch_prob <= 1.0 or self.branches < 1:
            raise ValueError("need 0 <= branch_prob <= 1 and branches >= 1")
        if unknown := set(self.hints) - set(RUN_HINTS):
            raise ValueError(f"unknown run hints {sorted(unknown)}; known: {RUN_HINTS}")

    def retry_until(self, arrival: float, started: bool) -> float:
        """The last moment a refused call of a run that arrived at ``arrival`` is retried."""
        deadline = arrival + self.deadline_s
        if started or self.patience_s is None:
            return deadline
        return min(deadline, arrival + self.patience_s)

    @property
    def mean_calls(self) -> float:
        turns = (self.turns_min + self.turns_max) / 2.0
        return 1.0 + turns * (1.0 + self.branch_prob * (self.branches - 1))

    def draw(self, index: int, arrival: float, rng: random.Random) -> RunPlan:
        """One run's plan: its steps' call lengths and its think times."""
        turns = rng.randint(self.turns_min, self.turns_max)
        steps: list[tuple[int, ...]] = [(self._length(rng),)]
        for _ in range(turns):
            width = self.branches if rng.random() < self.branch_prob else 1
            steps.append(tuple(self._length(rng) for _ in range(width)))
        think = tuple(rng.expovariate(1.0 / self.think_mean_s) for _ in range(turns))
        return RunPlan(index, arrival, tuple(steps), think)

    def _length(self, rng: random.Random) -> int:
        comps = self.lengths.components
        pick = rng.choices(comps, weights=[c.weight for c in comps])[0]
        return rng.randint(pick.min_tokens, pick.max_tokens)


def capacity_runs_per_s(profile: Profile, workload: RunWorkload) -> float:
    """The fleet's capacity in runs/s: its decode-token bound (every slot decoding at the
    cheapest step, ``service_rate_bound_tps``) over a mean run's output tokens. An upper
    bound, so "1x" is at or just above what the engine can really serve."""
    tokens_per_s = service_rate_bound_tps(profile) * profile.output_lengths.mean
    return tokens_per_s / (workload.mean_calls * workload.lengths.mean)


def arrivals(workload: RunWorkload, rate: float, duration_s: float, seed: int) -> list[RunPlan]:
    """Poisson arrivals at ``rate`` runs/s over ``[0, duration_s)``, each with its plan."""
    times = random.Random(seed)
    plans: list[RunPlan] = []
    now = times.expovariate(rate)
    while now < duration_s:
        shape = random.Random(f"{seed}-{len(plans)}")  # the run's own stream
        plans.append(workload.draw(len(plans), now, shape))
        now += times.expovariate(rate)
    return plans
