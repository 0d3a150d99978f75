"""Keep vLLM-CPU's engine-core process on the cores of its model worker.

vLLM-CPU binds its model worker's OpenMP threads to a core (core 0 on a 2-core machine) and
leaves the rest for the API server. Its engine-core process, though, is not bound: while the
worker computes a step it waits on a shared-memory queue by spinning (``sched_yield``), so it
takes a whole core of its own. On two cores that leaves the API server, the gateway and the
test client fighting over one core with a spinner, and the API server then answers nothing,
not even ``/metrics``, for 4-10 s at a time mid-stream (measured: first ``/metrics`` probe
during a 4 x 1,900-token stream took 4.0, 9.7 and 6.8 s; with the engine core moved beside
the worker: 0.07-0.13 s, stream duration unchanged).

Moving the spinner onto the worker's cores costs the worker nothing measurable (a yielding
spinner gives way to the runnable worker on the same run queue) and gives the other cores
back to the processes that serve HTTP. Linux only; elsewhere it does nothing.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

PROC = Path("/proc")
ENGINE_CORE = "VLLM::EngineCor"  # comm names are cut at 15 characters
WORKER = "VLLM::Worker"


def group_processes(pgid: int, proc: Path = PROC) -> dict[int, str]:
    """pid -> comm of every live process in process group ``pgid``."""
    found: dict[int, str] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (entry / "stat").read_text()
            # pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[2]) == pgid:
                found[int(entry.name)] = (entry / "comm").read_text().strip()
    return found


def pin_engine_core_beside_worker(pgid: int, proc: Path = PROC) -> set[int] | None:
    """Give every thread of the group's engine-core process its worker's CPU set.

    Returns that CPU set, or None when there is nothing to do (no /proc, no worker or engine
    core found, or the worker already may run everywhere the engine core may).
    """
    if not hasattr(os, "sched_setaffinity") or not proc.is_dir():
        return None
    processes = group_processes(pgid, proc)
    workers = [pid for pid, comm in processes.items() if comm.startswith(WORKER)]
    engines = [pid for pid, comm in processes.items() if comm.startswith(ENGINE_CORE)]
    if not workers or not engines:
        return None
    cpus: set[int] = set()
    for worker in workers:
        with contextlib.suppress(OSError):
            cpus |= os.sched_getaffinity(worker)
    if not cpus:
        return None
    for engine in engines:
        with contextlib.suppress(OSError):
            if os.sched_getaffinity(engine) <= cpus:
                continue
            for thread in (proc / str(engine) / "task").iterdir():
                with contextlib.suppress(OSError, ValueError):
                    os.sched_setaffinity(int(thread.name), cpus)
    return cpus
