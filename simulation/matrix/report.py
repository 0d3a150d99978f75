"""The matrix's CSV, its heat map (preset x cell, coloured by the ratio to the default,
marked where a check is missed) and its summary per preset."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

from simulation.csv_records import write_records
from simulation.matrix.cells import Cell
from simulation.matrix.guard import (
    EXCUSED,
    FRONTIER_GAP,
    CellRow,
    beaten_by,
    completed_ratio,
    frontier_gap,
    goals_missed,
    goodput_ratio,
    harms,
    score,
    ttft_ratio,
    victim_reachable,
)

COLUMNS = (
    "workload",
    "profile",
    "load",
    "backends",
    "policy",
    "goodput_tps",
    "completed_per_s",
    "goodput_vs_default",
    "completed_vs_default",
    "ttft_vs_default",
    "worst_ttft_vs_alone",
    "victim_ttft_vs_alone",
    "victim_goal_reachable",
    "frontier_gap",
    "min_share_vs_fair",
    "ra_returns",
    "ra_accuracy",
    "probe_refused",
    "probe_distinct",
    "harm",
    "goals_missed",
    "tenants",
)


def defaults(rows: list[CellRow]) -> dict[str, CellRow]:
    return {r.cell: r for r in rows if r.policy == "default"}


def _fmt(x: float | None) -> str:
    return "" if x is None else f"{x:.4g}"


def _vs(value: float, reference: float) -> float | None:
    return value / reference if reference > 0 else None


def csv_row(row: CellRow, default: CellRow) -> dict[str, str]:
    alone = [v for t in row.tenants.values() if (v := _vs(t.ttft_p99_s, t.alone_p99_s))]
    shares = [v for t in row.tenants.values() if (v := _vs(t.share, t.fair_share))]
    victim = row.tenants.get("victim") if row.noisy else None
    tenants = ";".join(
        f"{n}:ttft={t.ttft_p99_s:.4g}/alone={t.alone_p99_s:.4g}"
        f"/share={t.share:.3f}/fair={t.fair_share:.3f}"
        for n, t in sorted(row.tenants.items())
    )
    return {
        "workload": row.workload,
        "profile": row.profile,
        "load": f"{row.load:g}",
        "backends": str(row.backends),
        "policy": row.policy,
        "goodput_tps": _fmt(row.goodput_tps),
        "completed_per_s": _fmt(row.completed_per_s),
        "goodput_vs_default": _fmt(goodput_ratio(row, default)),
        "completed_vs_default": _fmt(completed_ratio(row, default)),
        "ttft_vs_default": _fmt(ttft_ratio(row, default)),
        "worst_ttft_vs_alone": _fmt(max(alone, default=None)),  # type: ignore[type-var]
        "victim_ttft_vs_alone": _fmt(
            _vs(victim.ttft_p99_s, victim.alone_p99_s) if victim else None
        ),
        "victim_goal_reachable": _yes_no(victim_reachable(row)),
        "frontier_gap": _fmt(frontier_gap(row)),
        "min_share_vs_fair": _fmt(min(shares, default=None)),  # type: ignore[type-var]
        "ra_returns": str(row.ra_returns),
        "ra_accuracy": _fmt(row.ra_accuracy),
        "probe_refused": str(row.probe_refused),
        "probe_distinct": str(row.probe_distinct),
        "harm": "|".join(harms(row, default)) if row.policy != "default" else "",
        "goals_missed": "|".join(goals_missed(row, default)),
        "tenants": tenants,
    }


def _yes_no(x: bool | None) -> str:
    return "" if x is None else ("yes" if x else "no")


def write_csv(rows: list[CellRow], path: Path) -> None:
    base = defaults(rows)
    write_records(path, COLUMNS, (csv_row(row, base[row.cell]) for row in rows))


def summary(rows: list[CellRow]) -> list[str]:
    """Per preset: cells passing do-no-harm, the worst cell per guard metric, goals missed."""
    base = defaults(rows)
    lines = []
    by_policy: dict[str, list[CellRow]] = defaultdict(list)
    for r in rows:
        by_policy[r.policy].append(r)
    for policy, mine in by_policy.items():
        goals: dict[str, int] = defaultdict(int)
        for r in mine:
            for g in goals_missed(r, base[r.cell]):
                goals[g] += 1
        near = _frontier_line(mine)
        if policy == "default":
            lines.append(f"default: goals missed {dict(goals) or 'none'}{near}")
            continue
        passed = sum(1 for r in mine if not harms(r, base[r.cell]))
        worst_g = min(mine, key=lambda r: goodput_ratio(r, base[r.cell]))
        worst_c = min(mine, key=lambda r: completed_ratio(r, base[r.cell]))
        worst_t = max(mine, key=lambda r: ttft_ratio(r, base[r.cell]))
        lines.append(
            f"{policy}: do-no-harm {passed}/{len(mine)} cells; worst goodput "
            f"{goodput_ratio(worst_g, base[worst_g.cell]):.2f}x ({worst_g.cell}), completed "
            f"{completed_ratio(worst_c, base[worst_c.cell]):.2f}x ({worst_c.cell}), TTFT p99 "
            f"{ttft_ratio(worst_t, base[worst_t.cell]):.2f}x ({worst_t.cell}); "
            f"goals missed {dict(goals) or 'none'}{near}"
        )
    lines.append(_best_line(rows, base))
    return lines


def _best_line(rows: list[CellRow], base: dict[str, CellRow]) -> str:
    """The default against the best preset, cell by cell: where some preset beats it past
    the do-no-harm margin, counted by workload and by preset."""
    presets: dict[str, list[CellRow]] = defaultdict(list)
    for r in rows:
        if r.policy != "default":
            presets[r.cell].append(r)
    by_workload: dict[str, int] = defaultdict(int)
    by_preset: dict[str, int] = defaultdict(int)
    for cell, default in base.items():
        winners = beaten_by(default, presets[cell])
        if winners:
            by_workload[default.workload] += 1
        for name in winners:
            by_preset[name] += 1
    beaten = sum(by_workload.values())
    return (
        f"default against the best preset: within the margin in {len(base) - beaten}/"
        f"{len(base)} cells; beaten in {beaten}, by workload {dict(by_workload) or 'none'}, "
        f"by preset {dict(by_preset) or 'none'}"
    )


def _frontier_line(rows: list[CellRow]) -> str:
    """Noisy cells whose measured point lies within ``FRONTIER_GAP`` of the frontier."""
    gaps = [(g, r.cell) for r in rows if (g := frontier_gap(r)) is not None]
    if not gaps:
        return ""
    near = sum(1 for g, _ in gaps if g <= FRONTIER_GAP)
    worst, cell = max(gaps)
    return (
        f"; frontier within {FRONTIER_GAP:g}: {near}/{len(gaps)} noisy cells, "
        f"worst gap {worst:.2f} ({cell})"
    )


def draw(rows: list[CellRow], path: Path) -> None:
    """One panel per (profile, backends): presets down, workload x load across."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import TwoSlopeNorm

    base = defaults(rows)
    policies = [*sorted({r.policy for r in rows} - {"default"}), "default"]
    panels = sorted({(r.profile, r.backends) for r in rows})
    columns = sorted({(r.workload, r.load) for r in rows})
    index = {(r.cell, r.policy): r for r in rows}
    size = (max(8.0, 0.22 * len(columns) + 3), 2.2 + 0.5 * len(policies) * len(panels))
    fig, axes = plt.subplots(len(panels), 1, squeeze=False, figsize=size, constrained_layout=True)
    norm = TwoSlopeNorm(vmin=-1.0, vcenter=0.0, vmax=1.0)
    image = None
    for ax, (profile, backends) in zip(axes[:, 0], panels, strict=True):
        grid = [[math.nan] * len(columns) for _ in policies]
        for i, policy in enumerate(policies):
            for j, (workload, load) in enumerate(columns):
                key = Cell(workload, profile, load, backends).key
                row = index.get((key, policy))
                if row is None:
                    continue
                grid[i][j] = math.log2(max(1e-3, score(row, base[key])))
                mark = _mark(row, base[key])
                if mark:
                    ax.text(j, i, mark, ha="center", va="center", fontsize=6)
        image = ax.imshow(grid, cmap="RdYlGn", norm=norm, aspect="auto")
        ax.set_title(f"{profile}, {backends} backend{'s' if backends > 1 else ''}", fontsize=9)
        ax.set_yticks(range(len(policies)), policies, fontsize=7)
        ax.set_xticks(
            range(len(columns)), [f"{w} {x:g}x" for w, x in columns], rotation=90, fontsize=5
        )
    if image is not None:
        bar = fig.colorbar(image, ax=axes[:, 0].tolist(), shrink=0.6)
        bar.set_label("log2(worst guard ratio to default)")
    fig.suptitle(
        "sluicegate evaluate: x = do-no-harm missed, o = goal missed (outside the frontier: "
        "not marked)",
        fontsize=10,
    )
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def _mark(row: CellRow, default: CellRow) -> str:
    harm = row.policy != "default" and bool(harms(row, default))
    goal = any(g not in EXCUSED for g in goals_missed(row, default))
    return ("x" if harm else "") + ("o" if goal else "")
