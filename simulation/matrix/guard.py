"""The matrix's judgement: do-no-harm against the default, and the goals per cell.

Do no harm (Must-have 2), for every preset in every cell: goodput and completed work at
least 0.95x the default's; each tenant's TTFT p99 at most 1.1x the default's for that
tenant. Goals: in noisy cells the victim's TTFT p99 at most 3x its value alone (Must-have
3); in agent-run cells at 2x load the ``agent-runs`` preset completes at least 1.5x the
default's runs/s (Must-have 3); at 1.5x and 2x load at least 90 % of the clients that
come back when Retry-After says are admitted, and no two of the probe's simultaneous
refusals share a value (Must-have 6).

The frontier (``frontier.py``) sorts a missed victim goal: ``victim`` where some policy
could have met it, ``victim-outside-frontier`` where none can (excused). The goal is
reachable in a noisy cell when, on the profile's step time model, some mix of batches keeps
the victim's turn time, and the wait its TTFT p99 spends behind the noisy tenant's prefill
steps, within ``VICTIM_CEILING`` x its value alone while the noisy tenant keeps
``THROUGHPUT_FLOOR`` of what it gets at that load with nobody limiting it (the do-no-harm
floor on goodput, which the noisy tenant's tokens dominate).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from emulator.profile import Profile, load_profile
from simulation.matrix import frontier
from simulation.matrix.cells import OVERLOAD, Cell
from simulation.matrix.workloads import WORKLOADS, Capacity

THROUGHPUT_FLOOR = 0.95
TTFT_CEILING = 1.1
VICTIM_CEILING = 3.0
RUNS_GOAL = 1.5
RA_GOAL = 0.9
FRONTIER_GAP = 0.1
"""A preset's (victim share, noisy share) point must lie within this of the frontier."""
OUTSIDE_FRONTIER = "victim-outside-frontier"
EXCUSED = frozenset({OUTSIDE_FRONTIER})
"""Goals missed where no policy can reach them: reported, not held against a preset."""


@dataclass(frozen=True, slots=True)
class TenantRow:
    ttft_p99_s: float
    alone_p99_s: float
    share: float
    fair_share: float
    served_tps: float = 0.0
    """Tokens served per second of window; ``alone_tps`` is its value alone."""
    alone_tps: float = 0.0
    clients: int = 0
    """A closed-loop tenant's concurrency in this cell (0: open loop)."""


@dataclass(frozen=True, slots=True)
class CellRow:
    """One (cell, policy) as measured, with what the judgement needs."""

    workload: str
    profile: str
    load: float
    backends: int
    policy: str
    goodput_tps: float
    completed_per_s: float
    tenants: dict[str, TenantRow] = field(default_factory=dict)
    noisy: bool = False
    runs: bool = False
    ra_returns: int = 0
    ra_admitted: int = 0
    probe_refused: int = 0
    probe_distinct: int = 0

    @property
    def cell(self) -> str:
        return Cell(self.workload, self.profile, self.load, self.backends).key

    @property
    def ra_accuracy(self) -> float | None:
        return self.ra_admitted / self.ra_returns if self.ra_returns else None


def _ratio(value: float, reference: float) -> float:
    if reference <= 0.0:
        return 1.0 if value <= 0.0 else float("inf")
    return value / reference


def goodput_ratio(row: CellRow, default: CellRow) -> float:
    return _ratio(row.goodput_tps, default.goodput_tps)


def completed_ratio(row: CellRow, default: CellRow) -> float:
    return _ratio(row.completed_per_s, default.completed_per_s)


def ttft_ratio(row: CellRow, default: CellRow) -> float:
    """The worst tenant's TTFT p99 over the default's for that same tenant."""
    ratios = [
        _ratio(t.ttft_p99_s, default.tenants[name].ttft_p99_s)
        for name, t in row.tenants.items()
        if name in default.tenants
    ]
    return max(ratios, default=1.0)


def score(row: CellRow, default: CellRow) -> float:
    """One number for the picture: the worst guard ratio, as "x the default" (< 1 worse)."""
    return min(
        goodput_ratio(row, default),
        completed_ratio(row, default),
        1.0 / max(ttft_ratio(row, default), 1e-9),
    )


def harms(row: CellRow, default: CellRow) -> list[str]:
    """The do-no-harm checks ``row`` misses against ``default`` in the same cell."""
    missed = []
    if goodput_ratio(row, default) < THROUGHPUT_FLOOR:
        missed.append("goodput")
    if completed_ratio(row, default) < THROUGHPUT_FLOOR:
        missed.append("completed")
    if ttft_ratio(row, default) > TTFT_CEILING:
        missed.append("ttft")
    return missed


def beaten_by(default: CellRow, presets: list[CellRow]) -> list[str]:
    """The presets that beat ``default`` in its cell past the do-no-harm margin, read the
    other way round (Must-have 5: the default is never worse than 0.95x the best preset
    on any guard metric)."""
    return [p.policy for p in presets if harms(default, p)]


def goals_missed(row: CellRow, default: CellRow) -> list[str]:
    """The goals of Must-haves 3 and 6 that ``row`` misses in its cell."""
    missed = []
    if row.noisy and not _victim_goal_met(row):
        # the default meeting it in this cell shows it reachable, whatever the model says
        shown = _victim_goal_met(default) or victim_reachable(row) is not False
        missed.append("victim" if shown else OUTSIDE_FRONTIER)
    runs_goal = row.runs and row.load == 2.0 and row.policy == "agent-runs"
    if runs_goal and completed_ratio(row, default) < RUNS_GOAL:
        missed.append("runs")
    if row.load in OVERLOAD and (acc := row.ra_accuracy) is not None and acc < RA_GOAL:
        missed.append("retry-after")
    if row.probe_distinct < row.probe_refused:
        missed.append("synchronised")
    return missed


def _victim_goal_met(row: CellRow) -> bool:
    """The victim's TTFT p99 within ``VICTIM_CEILING`` x its value alone (True: no victim)."""
    victim = row.tenants.get("victim")
    return victim is None or _ratio(victim.ttft_p99_s, victim.alone_p99_s) <= VICTIM_CEILING


def victim_frontier(row: CellRow) -> list[frontier.Row] | None:
    """The frontier of a noisy cell at the noisy tenant's concurrency (None: not a noisy
    cell, or its concurrency unknown)."""
    noisy = row.tenants.get("noisy")
    if not row.noisy or noisy is None or noisy.clients <= 0:
        return None
    return _frontier(row.workload, row.profile, row.backends, noisy.clients)


@functools.lru_cache(maxsize=512)
def _frontier(workload: str, profile: str, backends: int, clients: int) -> list[frontier.Row]:
    p, shape = _shape(workload, profile)
    return frontier.rows(p, shape, clients=clients, backends=backends)


@functools.lru_cache(maxsize=64)
def _shape(workload: str, profile: str) -> tuple[Profile, frontier.Shape]:
    tenants = WORKLOADS[workload].tenants
    assert tenants is not None
    p = load_profile(profile)
    by_name = {t.name: t for t in tenants(p, 1.0, Capacity(1.0, 1.0))}  # only the shapes
    victim, noisy = by_name["victim"], by_name["noisy"]
    shape = frontier.Shape(
        victims=victim.clients,
        victim_prompt=victim.shape.prompt_tokens,
        victim_output=round(victim.shape.lengths.mean),
        noisy_prompt=noisy.shape.prompt_tokens,
        noisy_output=round(noisy.shape.lengths.mean),
    )
    return p, shape


def victim_reach(row: CellRow) -> float | None:
    """The best victim share any policy reaches in this cell while the noisy tenant keeps
    ``THROUGHPUT_FLOOR`` of its unlimited throughput (None: not a noisy cell)."""
    table = victim_frontier(row)
    if table is None:
        return None
    noisy, victim = row.tenants["noisy"], row.tenants["victim"]
    free = frontier.unlimited(table, clients=noisy.clients, backends=row.backends)
    p, shape = _shape(row.workload, row.profile)
    tail = frontier.tail_limited(table, p, shape, victim.alone_p99_s)
    return frontier.best_share(tail, THROUGHPUT_FLOOR * free.noisy_share) or 0.0


def victim_reachable(row: CellRow) -> bool | None:
    """Can any policy hold the victim's TTFT p99 within ``VICTIM_CEILING`` x alone here?"""
    best = victim_reach(row)
    return None if best is None else best >= 1.0 / VICTIM_CEILING


def frontier_gap(row: CellRow) -> float | None:
    """How far below the frontier the row's measured (victim share, noisy share) lies:
    shares are each tenant's tokens served against its value alone in the cell."""
    table = victim_frontier(row)
    victim, noisy = row.tenants.get("victim"), row.tenants.get("noisy")
    if table is None or victim is None or noisy is None:
        return None
    if victim.alone_tps <= 0.0 or noisy.alone_tps <= 0.0:
        return None
    v = victim.served_tps / victim.alone_tps
    n = noisy.served_tps / noisy.alone_tps
    return frontier.gap(table, v, n)


def fair_shares(
    demands: dict[str, float], weights: dict[str, float], capacity: float
) -> dict[str, float]:
    """Weighted max-min fair shares of ``capacity`` (fractions of it): a tenant that asks
    for less than its weighted part gets what it asks (its demand: what it is served
    alone); the rest is split among the others by weight."""
    shares: dict[str, float] = {}
    left, open_ = capacity, set(demands)
    while open_ and left > 1e-12:
        total_w = sum(weights[n] for n in open_)
        sated = {n for n in open_ if demands[n] <= left * weights[n] / total_w}
        if not sated:
            for n in open_:
                shares[n] = left * weights[n] / total_w
            break
        for n in sated:
            shares[n] = demands[n]
            left -= demands[n]
        open_ -= sated
    return {n: shares.get(n, 0.0) / capacity if capacity > 0 else 0.0 for n in demands}
