"""Run the matrix: capacities first, then every (cell, policy) and every tenant alone, on
a pool of worker processes; rows come back as ``guard.CellRow``."""

from __future__ import annotations

import multiprocessing
import re
from collections.abc import Callable, Iterable
from typing import Any

from simulation.matrix.cells import Cell
from simulation.matrix.guard import CellRow, TenantRow, fair_shares
from simulation.matrix.measure import Measured, capacity_of, run_cell
from simulation.matrix.workloads import WORKLOADS, Capacity
from simulation.run_cli import PRESET_DIRS, resolve_policy, shipped_preset_names

DEFAULT = "default"
ALONE_POLICY: dict[str, Any] = {"name": DEFAULT}
"""A tenant's value alone is measured under the default policy."""

Policies = list[tuple[str, dict[str, Any]]]


def shipped_policies() -> Policies:
    """The default and every shipped preset, by name."""
    names = [DEFAULT, *shipped_preset_names()]
    return [resolve_policy(n) for n in names]


def chosen_policies(names: set[str] | None) -> Policies:
    """The default, then the shipped presets ``names`` names (all of them for None), then
    each other name as a YAML file's path: a candidate judged beside them. Raises
    ``ValueError`` for a name that is neither, two policies of one name, or no names where
    no shipped preset is found (the default judged against nothing)."""
    shipped = shipped_policies()
    if names is None:
        if len(shipped) == 1:
            looked = " or ".join(str(d) for d in PRESET_DIRS)
            raise ValueError(
                f"no shipped presets in {looked}: run from a checkout, or name the policies' "
                "YAML files with --policies"
            )
        return shipped
    known = {n for n, _ in shipped}
    policies = [(n, p) for n, p in shipped if n in names or n == DEFAULT]
    policies += [resolve_policy(n) for n in sorted(names - known)]
    labels = [n for n, _ in policies]
    if len(set(labels)) != len(labels):
        raise ValueError(f"two policies share a name: {sorted(labels)}")
    return policies


def _kind(tenant: str) -> str:
    """Tenants that differ only by an index (chat-0, chat-1) share one value alone."""
    return re.sub(r"-\d+$", "", tenant)


def _capacity_job(cell: Cell) -> tuple[tuple[str, str, int], Capacity]:
    return (cell.workload, cell.profile, cell.backends), capacity_of(cell)


def _cell_job(job: tuple[Cell, str, dict[str, Any], Capacity, str | None]) -> tuple[Any, Measured]:
    cell, label, policy, cap, only = job
    return (cell, label, only), run_cell(cell, policy, cap, only=only)


def _map(fn: Callable[[Any], Any], jobs: list[Any], workers: int) -> Iterable[Any]:
    if workers <= 1:
        return map(fn, jobs)
    pool = multiprocessing.get_context("spawn").Pool(workers)
    return _closing(pool, pool.imap_unordered(fn, jobs))


def _closing(pool: Any, results: Iterable[Any]) -> Iterable[Any]:
    try:
        yield from results
    finally:
        pool.close()
        pool.join()


def alone_tenants(cell: Cell) -> list[str]:
    """One tenant of each kind; a single-tenant cell's value alone is its default run."""
    from emulator.profile import load_profile

    workload = WORKLOADS[cell.workload]
    if workload.tenants is None:
        return []
    cap = Capacity(1.0, 1.0)  # only the names matter here
    names = [t.name for t in workload.tenants(load_profile(cell.profile), cell.load, cap)]
    if len(names) < 2:
        return []
    kinds: dict[str, str] = {}
    for n in names:
        kinds.setdefault(_kind(n), n)
    return list(kinds.values())


def evaluate(
    cells: list[Cell],
    policies: Policies,
    *,
    workers: int = 2,
    progress: Callable[[str], None] | None = None,
) -> list[CellRow]:
    say = progress or (lambda _: None)
    firsts = {(c.workload, c.profile, c.backends): c for c in cells}
    caps = dict(_map(_capacity_job, list(firsts.values()), workers))
    say(f"measured {len(caps)} capacities")
    jobs: list[tuple[Cell, str, dict[str, Any], Capacity, str | None]] = []
    for cell in cells:
        cap = caps[(cell.workload, cell.profile, cell.backends)]
        jobs += [(cell, label, policy, cap, None) for label, policy in policies]
        jobs += [(cell, DEFAULT, ALONE_POLICY, cap, name) for name in alone_tenants(cell)]
    jobs.sort(key=lambda j: (j[0].profile != "mi300x", -j[0].load))  # longest first
    results: dict[tuple[Cell, str, str | None], Measured] = {}
    for i, (key, measured) in enumerate(_map(_cell_job, jobs, workers), 1):
        results[key] = measured
        if i % 50 == 0 or i == len(jobs):
            say(f"{i}/{len(jobs)} runs")
    return [
        _row(cell, label, results, caps[(cell.workload, cell.profile, cell.backends)])
        for cell in cells
        for label, _ in policies
    ]


def _clients(cell: Cell, cap: Capacity) -> dict[str, int]:
    from emulator.profile import load_profile

    workload = WORKLOADS[cell.workload]
    if workload.tenants is None:
        return {}
    return {t.name: t.clients for t in workload.tenants(load_profile(cell.profile), cell.load, cap)}


def _row(
    cell: Cell,
    label: str,
    results: dict[tuple[Cell, str, str | None], Measured],
    cap: Capacity,
) -> CellRow:
    m = results[(cell, label, None)]
    default = results[(cell, DEFAULT, None)]
    alone: dict[str, float] = {}
    demand: dict[str, float] = {}
    for name in m.tenants:
        solo = results.get((cell, DEFAULT, _alone_name(results, cell, name)))
        source = solo if solo is not None else default
        ttft, served = source.tenants.get(name, next(iter(source.tenants.values())))
        alone[name], demand[name] = ttft, served
    served_total = sum(s for _, s in m.tenants.values())
    fair = fair_shares(demand, dict.fromkeys(demand, 1.0), served_total)
    workload = WORKLOADS[cell.workload]
    clients = _clients(cell, cap)
    tenants = {
        name: TenantRow(
            ttft,
            alone[name],
            served / served_total if served_total else 0.0,
            fair[name],
            served_tps=served,
            alone_tps=demand[name],
            clients=clients.get(name, 0),
        )
        for name, (ttft, served) in m.tenants.items()
    }
    return CellRow(
        cell.workload,
        cell.profile,
        cell.load,
        cell.backends,
        label,
        m.goodput_tps,
        m.completed_per_s,
        tenants,
        noisy=workload.noisy,
        runs=workload.runs is not None,
        ra_returns=m.ra_returns,
        ra_admitted=m.ra_admitted,
        probe_refused=m.probe_refused,
        probe_distinct=m.probe_distinct,
    )


def _alone_name(
    results: dict[tuple[Cell, str, str | None], Measured], cell: Cell, name: str
) -> str | None:
    """The tenant whose alone run stands for ``name`` (same kind), if one was run."""
    for _, _, only in (k for k in results if k[0] == cell and k[2] is not None):
        if only is not None and _kind(only) == _kind(name):
            return only
    return None
