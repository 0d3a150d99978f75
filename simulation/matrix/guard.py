"""The matrix's judgement: do-no-harm against the default, and the goals per cell.

Do no harm (Must-have 2), for every preset in every cell: goodput and completed work at
least 0.95x the default's; each tenant's TTFT p99 at most 1.1x the default's for that
tenant. Goals: in noisy cells the victim's TTFT p99 at most 3x its value alone (Must-have
3); in agent-run cells at 2x load the ``agent-runs`` preset completes at least 1.5x the
default's runs/s (Must-have 3); at 1.5x and 2x load at least 90 % of the clients that
come back when Retry-After says are admitted, and no two of the probe's simultaneous
refusals share a value (Must-have 6).
"""

from __future__ import annotations

from dataclasses import dataclass, field

THROUGHPUT_FLOOR = 0.95
TTFT_CEILING = 1.1
VICTIM_CEILING = 3.0
RUNS_GOAL = 1.5
RA_GOAL = 0.9
OVERLOAD = frozenset({1.5, 2.0})


@dataclass(frozen=True, slots=True)
class TenantRow:
    ttft_p99_s: float
    alone_p99_s: float
    share: float
    fair_share: float


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
        return f"{self.workload}/{self.profile}/{self.load:g}x/{self.backends}b"

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


def goals_missed(row: CellRow, default: CellRow) -> list[str]:
    """The goals of Must-haves 3 and 6 that ``row`` misses in its cell."""
    missed = []
    victim = row.tenants.get("victim")
    if row.noisy and victim and _ratio(victim.ttft_p99_s, victim.alone_p99_s) > VICTIM_CEILING:
        missed.append("victim")
    runs_goal = row.runs and row.load == 2.0 and row.policy == "agent-runs"
    if runs_goal and completed_ratio(row, default) < RUNS_GOAL:
        missed.append("runs")
    if row.load in OVERLOAD and (acc := row.ra_accuracy) is not None and acc < RA_GOAL:
        missed.append("retry-after")
    if row.probe_distinct < row.probe_refused:
        missed.append("synchronised")
    return missed


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
