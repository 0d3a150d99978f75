"""Live against simulated: one cell's guard metrics side by side, their ratio, and whether
they agree within ``TOLERANCE`` (Must-have 7).

The metrics are the matrix's (``measure.Measured``): goodput, completed work per second,
each tenant's TTFT p99 (from the first attempt, refusals included) and, with several
tenants, each tenant's share of the tokens served; Retry-After accuracy where either side
saw returns. Where each side also ran a tenant alone (``against_alone``), its TTFT p99
against that value alone, the ratio the matrix's guard judges: a slowness both runs share
divides out of it (an added cost, such as the live HTTP hop, only in part). The simulated
value is the median over the simulator's seeds, and their lowest and highest are kept: one
live run is one draw, and a p99 or a small tenant's share moves between seeds by more than
15 %. The ratio is live / simulated median.
"""

from __future__ import annotations

import csv
import statistics
from dataclasses import dataclass
from pathlib import Path

from simulation.matrix.measure import Measured

TOLERANCE = 0.15


@dataclass(frozen=True, slots=True)
class Agreement:
    """One (cell, policy, metric): the live value and the simulated seeds' median, lowest
    and highest."""

    cell: str
    policy: str
    metric: str
    live: float | None
    simulated: float | None
    sim_low: float | None = None
    sim_high: float | None = None

    @property
    def ratio(self) -> float | None:
        if self.live is None or self.simulated is None:
            return None
        if self.simulated == 0.0:
            return 1.0 if self.live == 0.0 else None
        return self.live / self.simulated

    @property
    def agrees(self) -> bool | None:
        """Within ``TOLERANCE`` of the simulated value; None when there is no ratio."""
        r = self.ratio
        return None if r is None else abs(r - 1.0) <= TOLERANCE + 1e-12

    @property
    def in_seed_range(self) -> bool | None:
        """Between the lowest and the highest simulated seed; None without both sides."""
        if self.live is None or self.sim_low is None or self.sim_high is None:
            return None
        return self.sim_low <= self.live <= self.sim_high


def metric_values(m: Measured, tenants: list[str]) -> dict[str, float | None]:
    """The guard metrics of one run, by name, for ``tenants`` (None where it has none)."""
    out: dict[str, float | None] = {
        "goodput_tps": m.goodput_tps,
        "completed_per_s": m.completed_per_s,
    }
    for name in tenants:
        out[f"ttft_p99_s[{name}]"] = m.tenants[name][0] if name in m.tenants else None
    if len(tenants) > 1:
        total = sum(served for _, served in m.tenants.values())
        for name in tenants:
            served = m.tenants[name][1] if name in m.tenants else None
            out[f"share[{name}]"] = None if served is None or not total else served / total
    out["ra_accuracy"] = m.ra_admitted / m.ra_returns if m.ra_returns else None
    return out


def compare(cell: str, policy: str, live: Measured, simulated: list[Measured]) -> list[Agreement]:
    """Every guard metric of one cell under one policy, live against the simulated seeds.
    Retry-After accuracy is left out where no side saw a return."""
    tenants = sorted(set(live.tenants).union(*(s.tenants for s in simulated)))
    mine = metric_values(live, tenants)
    seeds = [metric_values(s, tenants) for s in simulated]
    rows = []
    for metric, value in mine.items():
        sims = [v for s in seeds if (v := s[metric]) is not None]
        if value is None and not sims:
            continue
        median = statistics.median(sims) if sims else None
        low, high = (min(sims), max(sims)) if sims else (None, None)
        rows.append(Agreement(cell, policy, metric, value, median, low, high))
    return rows


def against_alone(
    cell: str,
    policy: str,
    tenant: str,
    live: tuple[Measured, Measured],
    simulated: list[tuple[Measured, Measured]],
) -> Agreement | None:
    """``tenant``'s TTFT p99 in the cell against its value alone: ``live`` and each
    simulated seed as (the cell's run, the tenant's run alone); None where no side has it."""

    def ratio(run: Measured, alone: Measured) -> float | None:
        mine, solo = run.tenants.get(tenant), alone.tenants.get(tenant)
        if mine is None or solo is None or solo[0] <= 0:
            return None
        return mine[0] / solo[0]

    value = ratio(*live)
    sims = [r for pair in simulated if (r := ratio(*pair)) is not None]
    if value is None and not sims:
        return None
    median = statistics.median(sims) if sims else None
    low, high = (min(sims), max(sims)) if sims else (None, None)
    return Agreement(cell, policy, f"ttft_vs_alone[{tenant}]", value, median, low, high)


COLUMNS = (
    "cell",
    "policy",
    "metric",
    "live",
    "simulated",
    "ratio",
    "agrees",
    "sim_low",
    "sim_high",
    "in_seed_range",
)


def _fmt(x: float | None) -> str:
    return "" if x is None else f"{x:.4g}"


def _yes(x: bool | None) -> str:
    return "" if x is None else ("yes" if x else "NO")


def write_csv(rows: list[Agreement], path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as out:
        w = csv.writer(out)
        w.writerow(COLUMNS)
        for r in rows:
            row = [r.cell, r.policy, r.metric, _fmt(r.live), _fmt(r.simulated), _fmt(r.ratio)]
            seeds = [_fmt(r.sim_low), _fmt(r.sim_high), _yes(r.in_seed_range)]
            w.writerow([*row, _yes(r.agrees), *seeds])


def summary(rows: list[Agreement]) -> list[str]:
    """One line per metric, flagged ``OUTSIDE`` beyond the tolerance (and ``beyond seeds``
    when also outside the simulated seeds' range), and the counts."""
    head = f"{'cell':<34} {'policy':<10} {'metric':<22} {'live':>9} {'sim':>9} {'ratio':>6}"
    lines = [f"{head} {'sim seeds':>19}"]
    for r in rows:
        flag = {None: "n/a", True: "", False: "OUTSIDE"}[r.agrees]
        if r.agrees is False and r.in_seed_range is False:
            flag += ", beyond seeds"
        seeds = f"{_fmt(r.sim_low)}..{_fmt(r.sim_high)}"
        lines.append(
            f"{r.cell:<34} {r.policy:<10} {r.metric:<22} {_fmt(r.live):>9} "
            f"{_fmt(r.simulated):>9} {_fmt(r.ratio):>6} {seeds:>19} {flag}".rstrip()
        )
    judged = [r for r in rows if r.agrees is not None]
    inside = sum(1 for r in judged if r.agrees)
    ranged = sum(1 for r in judged if r.agrees or r.in_seed_range)
    lines.append(
        f"{inside} of {len(judged)} metrics within {TOLERANCE:.0%} of the simulator's median, "
        f"{ranged} within {TOLERANCE:.0%} or the seeds' range "
        f"({len(rows) - len(judged)} without a value on one side)"
    )
    return lines
