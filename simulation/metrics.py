"""Per-turn records and the numbers of the reference table (docs/seed-table.md), computed
the same way for the
simulator and the live swarm.

Definitions (documented in ``docs/seed-table.md``):

- *submission*: every attempt an agent sends, first tries and resubmissions alike.
- *deferral*: a submission that did not get to decode: rejected at once (429/503) or
  dropped/expired later from the gateway's queue. ``deferral share`` = deferrals /
  submissions, both counted inside the measurement window.
- *queue wait* (the seed's): from the accepted attempt's submission to the start of its
  decoding (first output token), for turns whose decoding starts inside the window.
- *agent-felt wait*: from the turn's *first* submission to the start of its decoding,
  all deferrals and backoffs included.
- *goodput*: turns completed inside the window, per second of window.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(slots=True)
class TurnRecord:
    """One agent turn, across all of its attempts. Times are clock seconds."""

    agent: int
    output_tokens: int
    first_submit: float
    attempts: list[float] = field(default_factory=list)
    deferrals: list[float] = field(default_factory=list)
    accepted_submit: float | None = None
    decode_start: float | None = None
    finished: float | None = None

    @property
    def queue_wait_s(self) -> float | None:
        if self.decode_start is None or self.accepted_submit is None:
            return None
        return self.decode_start - self.accepted_submit

    @property
    def felt_wait_s(self) -> float | None:
        return None if self.decode_start is None else self.decode_start - self.first_submit


@dataclass(frozen=True, slots=True)
class Summary:
    """The seed table's numbers for one (policy, N) run. Seconds, turns/s, fractions."""

    goodput_tps: float
    p99_queue_wait_s: float
    deferral_share: float
    p99_felt_wait_s: float
    mean_felt_wait_s: float
    p50_queue_wait_s: float
    submissions: int
    turns_completed: int


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in [0, 100]); 0.0 for no values."""
    if not values:
        return 0.0
    return nearest_rank(sorted(values), q)


def nearest_rank(ordered: list[float], q: float) -> float:
    """``percentile`` of values already sorted (at least one)."""
    return ordered[max(1, math.ceil(q / 100.0 * len(ordered))) - 1]


Window = tuple[list[TurnRecord], float, float]
"""One run's records and its measurement window ``[start, end)`` in clock seconds."""


def summarise(records: list[TurnRecord], start: float, end: float) -> Summary:
    """Summarise the turns that touched the window ``[start, end)``."""
    return summarise_runs([(records, start, end)])


def summarise_runs(runs: list[Window]) -> Summary:
    """Pool several runs (e.g. seeds) of one setting: percentiles over all their turns."""
    submissions = deferrals = completed = 0
    waits: list[float] = []
    felt: list[float] = []
    seconds = 0.0
    for records, start, end in runs:
        seconds += end - start

        def inside(t: float | None, start: float = start, end: float = end) -> bool:
            return t is not None and start <= t < end

        submissions += sum(1 for r in records for t in r.attempts if inside(t))
        deferrals += sum(1 for r in records for t in r.deferrals if inside(t))
        completed += sum(1 for r in records if inside(r.finished))
        started = [r for r in records if inside(r.decode_start)]
        waits += [w for r in started if (w := r.queue_wait_s) is not None]
        felt += [w for r in started if (w := r.felt_wait_s) is not None]
    return Summary(
        goodput_tps=completed / seconds if seconds else 0.0,
        p99_queue_wait_s=percentile(waits, 99.0),
        deferral_share=deferrals / submissions if submissions else 0.0,
        p99_felt_wait_s=percentile(felt, 99.0),
        mean_felt_wait_s=sum(felt) / len(felt) if felt else 0.0,
        p50_queue_wait_s=percentile(waits, 50.0),
        submissions=submissions,
        turns_completed=completed,
    )
