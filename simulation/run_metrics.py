"""Per-run records and the measured case's numbers (docs/runs.md), computed the same way
for the simulator and the live swarm.

- *completed run*: every call of the run finished before its deadline.
- *completed runs/s*: completed runs that arrived inside the window, per second of window.
- *run latency*: a completed run's arrival to the end of its last call (p50, p99).
- *wasted tokens*: prompt + generated tokens of the calls of runs that arrived inside the
  window and never completed (abandoned at their deadline or given up); a call cut in
  flight counts what it generated until the cut. *Wasted share*: wasted / all tokens
  served to runs that arrived inside the window.
- *first-call wait*: from a run's arrival to its first call's first output token, every
  refusal and backoff included, for runs whose first call started.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulation.metrics import percentile


@dataclass(slots=True)
class RunRecord:
    """One agent run as its client saw it. Times are clock seconds."""

    index: int
    arrival: float
    calls: int
    first_token: float | None = None
    ended: float | None = None
    completed: bool = False
    spent_tokens: int = 0
    refusals: int = 0
    started: bool = False
    """A call of the run was admitted (dispatched)."""

    @property
    def latency_s(self) -> float | None:
        return self.ended - self.arrival if self.completed and self.ended is not None else None

    @property
    def first_call_wait_s(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.arrival


@dataclass(frozen=True, slots=True)
class RunSummary:
    """The measured case's numbers for one (policy, load) run. Seconds, runs/s, tokens."""

    arrived: int
    completed: int
    completed_rps: float
    p50_latency_s: float
    p99_latency_s: float
    wasted_tokens: int
    wasted_share: float
    p99_first_call_wait_s: float
    never_started: int
    refusals: int


def summarise_run_records(records: list[RunRecord], start: float, end: float) -> RunSummary:
    """The runs that arrived inside ``[start, end)``; every one of them has ended."""
    inside = [r for r in records if start <= r.arrival < end]
    done = [r for r in inside if r.completed]
    latencies = [x for r in done if (x := r.latency_s) is not None]
    waits = [x for r in inside if (x := r.first_call_wait_s) is not None]
    spent = sum(r.spent_tokens for r in inside)
    wasted = sum(r.spent_tokens for r in inside if not r.completed)
    seconds = end - start
    return RunSummary(
        arrived=len(inside),
        completed=len(done),
        completed_rps=len(done) / seconds if seconds > 0 else 0.0,
        p50_latency_s=percentile(latencies, 50.0),
        p99_latency_s=percentile(latencies, 99.0),
        wasted_tokens=wasted,
        wasted_share=wasted / spent if spent else 0.0,
        p99_first_call_wait_s=percentile(waits, 99.0),
        never_started=sum(1 for r in inside if r.first_token is None),
        refusals=sum(r.refusals for r in inside),
    )
