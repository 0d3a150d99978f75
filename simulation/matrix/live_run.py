"""One live cell's clients against a running gateway, measured as the simulator measures.

A request-level cell's tenants are ``live_traffic.LiveRequests``; an agent-run cell's runs
are ``sluicegate swarm-runs``'s (``run_swarm.swarm_runs``) with the very plans the
simulator draws (same workload, rate and seed). Every completion request sent is counted
at the transport; once the clients are done the gateway must settle (nothing queued or
in flight) with exactly one terminal outcome counted per request sent.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

from emulator.profile import load_profile
from simulation.agent_runs import arrivals
from simulation.matrix.live_cells import LiveCell
from simulation.matrix.live_traffic import LiveClock, LiveRequests
from simulation.matrix.loop import MODEL
from simulation.matrix.measure import (
    Measured,
    cell_tenants,
    measure_requests,
    measure_runs,
    run_rate,
    run_workload,
    window,
)
from simulation.matrix.workloads import Capacity
from simulation.run_core import TENANT
from simulation.run_swarm import swarm_runs

SETTLE_TIMEOUT_S = 30.0
REQUEST_TIMEOUT_S = 600.0


@dataclass(frozen=True, slots=True)
class LiveResult:
    measured: Measured
    sent: int
    """Completion requests the clients sent to the gateway."""
    outcomes: int
    """Terminal outcomes the gateway counted (``sluicegate_outcomes_total``)."""
    failures: int
    """Attempts that were neither served nor refused (transport errors, other statuses)."""
    cut: int
    """Requests still open when the drain ended."""
    wall_s: float


class CountingTransport(httpx.AsyncBaseTransport):
    """Counts the completion requests that go out (``/v1/chat/completions``)."""

    def __init__(self) -> None:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=128)
        self._inner = httpx.AsyncHTTPTransport(limits=limits)
        self.sent = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path.endswith("/completions"):
            self.sent += 1
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def tenant_names(lc: LiveCell, cap: Capacity) -> tuple[list[str], str | None]:
    """The cell's tenants, and the one that sends no key (agent runs), if any."""
    if run_workload(lc.cell) is not None:
        return [TENANT], TENANT
    return [t.name for t in cell_tenants(lc.cell, cap)], None


async def drive(
    lc: LiveCell,
    cap: Capacity,
    url: str,
    keys: dict[str, str],
    *,
    seed: int = 1,
    model: str = MODEL,
    max_len: int | None = None,
    only: str | None = None,
) -> LiveResult:
    """The cell's clients against the gateway at ``url`` until every request ended.
    ``model``: the name the backends serve; ``max_len``: their model length (the cell's
    profile's when None); ``only``: that tenant's clients alone (a request-level cell)."""
    started = time.monotonic()
    transport = CountingTransport()
    cut = failures = 0
    start, end = window(lc.duration_s)
    if (runs := run_workload(lc.cell)) is not None:
        plans = arrivals(runs, run_rate(lc.cell, cap, runs), lc.duration_s, seed)
        args = argparse.Namespace(
            url=url, model=model, speed=lc.speed, request_timeout=REQUEST_TIMEOUT_S
        )
        swarm = await swarm_runs(args, runs, plans, transport=transport)
        measured = measure_runs(swarm.records, swarm.call_ttft, start, end)
        failures = swarm.failures
    else:
        async with httpx.AsyncClient(
            base_url=url, transport=transport, timeout=REQUEST_TIMEOUT_S
        ) as client:
            clients = LiveRequests(
                client,
                cell_tenants(lc.cell, cap, only),
                keys,
                model=model,
                max_len=max_len or load_profile(lc.cell.profile).engine.max_model_len,
                duration_s=lc.duration_s,
                clock=LiveClock(lc.speed),
                seed=seed,
            )
            out = await clients.run(drain_s=lc.duration_s if lc.drain_s is None else lc.drain_s)
            measured = measure_requests(out, start, end)
            cut, failures = clients.cut, clients.failures
    outcomes = await settled_outcomes(url, transport.sent)
    return LiveResult(measured, transport.sent, outcomes, failures, cut, time.monotonic() - started)


async def settled_outcomes(url: str, sent: int) -> int:
    """The gateway's count of terminal outcomes once it holds nothing queued or in flight
    and has counted ``sent`` (or ``SETTLE_TIMEOUT_S`` passed: the count as it stands)."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    async with httpx.AsyncClient(base_url=url, timeout=10.0) as c:
        while True:
            stats = (await c.get("/admin/scheduler")).json()
            outcomes = _outcomes((await c.get("/metrics")).text)
            idle = stats["queued"] == 0 and stats["in_flight"] == 0
            if (idle and outcomes == sent) or time.monotonic() > deadline:
                return outcomes
            await asyncio.sleep(0.1)  # polling another process's counters


def _outcomes(exposition: str) -> int:
    return round(
        sum(
            s.value
            for family in text_string_to_metric_families(exposition)
            for s in family.samples
            if s.name == "sluicegate_outcomes_total"
        )
    )
