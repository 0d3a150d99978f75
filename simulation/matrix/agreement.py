"""Live against simulated: one cell's guard metrics side by side, their ratio, and whether
they agree within ``TOLERANCE`` (Must-have 7).

The metrics are the matrix's (``measure.Measured``): goodput, completed work per second,
each tenant's TTFT p99 (from the first attempt, refusals included) and, with several
tenants, each tenant's share of the tokens served; Retry-After accuracy where either side
saw returns. The ratio is live / simulated.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from simulation.matrix.measure import Measured

TOLERANCE = 0.15


@dataclass(frozen=True, slots=True)
class Agreement:
    """One (cell, policy, metric): the live and the simulated value."""

    cell: str
    policy: str
    metric: str
    live: float | None
    simulated: float | None

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


def _shares(m: Measured) -> dict[str, float]:
    total = sum(served for _, served in m.tenants.values())
    return {name: served / total if total else 0.0 for name, (_, served) in m.tenants.items()}


def _ra(m: Measured) -> float | None:
    return m.ra_admitted / m.ra_returns if m.ra_returns else None


def compare(cell: str, policy: str, live: Measured, simulated: Measured) -> list[Agreement]:
    """Every guard metric of one cell under one policy, live against simulated."""
    rows = [
        Agreement(cell, policy, "goodput_tps", live.goodput_tps, simulated.goodput_tps),
        Agreement(cell, policy, "completed_per_s", live.completed_per_s, simulated.completed_per_s),
    ]
    names = sorted(set(live.tenants) | set(simulated.tenants))
    for name in names:
        lt, st = live.tenants.get(name), simulated.tenants.get(name)
        rows.append(
            Agreement(
                cell,
                policy,
                f"ttft_p99_s[{name}]",
                None if lt is None else lt[0],
                None if st is None else st[0],
            )
        )
    if len(names) > 1:
        ls, ss = _shares(live), _shares(simulated)
        rows += [Agreement(cell, policy, f"share[{n}]", ls.get(n), ss.get(n)) for n in names]
    if live.ra_returns or simulated.ra_returns:
        rows.append(Agreement(cell, policy, "ra_accuracy", _ra(live), _ra(simulated)))
    return rows


COLUMNS = ("cell", "policy", "metric", "live", "simulated", "ratio", "agrees")


def _fmt(x: float | None) -> str:
    return "" if x is None else f"{x:.4g}"


def write_csv(rows: list[Agreement], path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as out:
        w = csv.writer(out)
        w.writerow(COLUMNS)
        for r in rows:
            agrees = "" if r.agrees is None else ("yes" if r.agrees else "NO")
            row = [r.cell, r.policy, r.metric, _fmt(r.live), _fmt(r.simulated), _fmt(r.ratio)]
            w.writerow([*row, agrees])


def summary(rows: list[Agreement]) -> list[str]:
    """One line per metric, flagged ``OUTSIDE`` beyond the tolerance, and a count."""
    lines = [f"{'cell':<34} {'policy':<10} {'metric':<26} {'live':>10} {'sim':>10} {'ratio':>7}"]
    for r in rows:
        flag = {None: "n/a", True: "", False: "OUTSIDE"}[r.agrees]
        lines.append(
            f"{r.cell:<34} {r.policy:<10} {r.metric:<26} {_fmt(r.live):>10} "
            f"{_fmt(r.simulated):>10} {_fmt(r.ratio):>7} {flag}".rstrip()
        )
    judged = [r for r in rows if r.agrees is not None]
    inside = sum(1 for r in judged if r.agrees)
    lines.append(
        f"{inside} of {len(judged)} metrics within {TOLERANCE:.0%} of the simulator "
        f"({len(rows) - len(judged)} without a value on one side)"
    )
    return lines
