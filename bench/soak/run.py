"""The soak's rounds: traffic, reloads and faults for a round, then a quiet point where the
books are checked and the gateway's footprint is sampled (at rest, so rounds compare).
Every sample (at rest and under load) can also be appended to a JSON-lines file as it is
taken (``Settings.samples``; ``python -m bench.soak.summary FILE`` reads it)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.soak.faults import inject
from bench.soak.fleet import Fleet, ProbeSettings, started, write_config
from bench.soak.footprint import Sample, Trend, at_rest, sample, trend, with_tasks
from bench.soak.ledger import Expected, Records, gateway_counts, problems, read_books
from bench.soak.probe import take
from bench.soak.schedule import Schedule, drained
from bench.soak.traffic import Tally, Traffic

REST_S = 6.0
"""Rest before the footprint is sampled at a quiet point: longer than uvicorn's keep-alive
timeout (5 s), so idle keep-alive connections (clients to the gateway, the gateway to the
emulators) are closed and the open descriptors compare exactly from one point to the next."""


@dataclass(frozen=True)
class Settings:
    duration_s: float
    """The soak's length in seconds, from its first sample at rest to its last: rounds of
    ``round_s`` of traffic, each followed by a quiet point, the last round shortened (or
    left out) so that even its longest drain and quiet point end in time
    (``bench/soak/schedule.py``)."""
    workdir: Path
    round_s: float = 60.0
    workers: int = 16
    think_s: float = 0.3
    reload_every_s: float = 10.0
    speed: float = 10.0
    seed: int = 1
    fault_every_s: float = 0.0
    """A backend fault every this many seconds (0: none), alternately a frozen emulator
    (SIGSTOP for a few seconds) and a killed one started again (``bench/soak/faults.py``)."""
    drain_s: float = 10.0
    """Once a round's traffic stops, the longest wait for the clients' open requests; those
    still open then are cancelled (the gateway sees their clients leave)."""
    settle_s: float = 30.0
    """Longest wait at a quiet point for the gateway to end what the clients left."""
    samples: Path | None = None
    """Append every sample to this JSON-lines file as it is taken."""
    probe: ProbeSettings | None = None
    """Run the gateway with the memory probe and read it at every quiet point."""


@dataclass
class Report:
    quiet: list[Sample] = field(default_factory=list)
    """The gateway's footprint at rest: before any traffic, then after every round."""
    loaded: list[Sample] = field(default_factory=list)
    """Sampled every few seconds under load."""
    problems: list[str] = field(default_factory=list)
    tally: Tally = field(default_factory=Tally)
    writes: list[int] = field(default_factory=lambda: [0, 0])
    """Config files written: [valid, invalid]."""
    faults: int = 0
    cut: int = 0
    """Clients whose open request the drain bound cancelled."""
    probes: list[dict[str, Any]] = field(default_factory=list)
    """The memory probe's numbers at each quiet point (``bench/soak/probe.py``)."""

    def steady(self) -> Trend:
        """The trend of the quiet points of the second half of the run (the first half is
        the warm-up: caches, the estimator's tables and the allocator's arenas fill)."""
        return trend(self.quiet[len(self.quiet) // 2 :])


async def soak(settings: Settings, say: Callable[[str], None] = print) -> Report:
    report = Report()
    with started(settings.workdir, settings.speed, settings.probe) as fleet:
        traffic = Traffic.open(fleet.port, settings.seed)
        report.tally = traffic.tally
        records = Records(fleet.records)
        t0 = time.monotonic()
        plan = Schedule(
            t0 + settings.duration_s,
            settings.round_s,
            settings.drain_s,
            settings.settle_s,
            tail_s=REST_S + 2.0,
        )
        try:
            report.quiet.append(await at_rest(fleet.gateway.pid, 0.0, _base(fleet)))
            await _probe(settings, fleet, report)
            _write(settings, report, "rest", report.quiet[-1])
            while (until := plan.next_round(time.monotonic())) is not None:
                await _round(settings, fleet, traffic, report, until, t0)
                seen = len(report.problems)
                settled_at = await _quiet_point(settings, fleet, traffic, records, report, t0)
                await _probe(settings, fleet, report)
                plan.quiet_point_tail(time.monotonic() - settled_at)
                _write(settings, report, "rest", report.quiet[-1])
                say(_progress(report, t0))
                for problem in report.problems[seen:]:
                    say(f"soak: problem {problem}")
        finally:
            await traffic.aclose()
    return report


async def _round(
    settings: Settings, fleet: Fleet, traffic: Traffic, report: Report, until: float, t0: float
) -> None:
    """Traffic until ``until``; reloads, faults and samples end before it by their own
    loops, the clients' open requests get ``drain_s`` more."""
    clients = [
        asyncio.create_task(traffic.worker(until, settings.think_s))
        for _ in range(settings.workers)
    ]
    jobs = [
        _reloads(fleet, report, until, settings.reload_every_s),
        _sample_under_load(settings, fleet, report, until, t0),
    ]
    if settings.fault_every_s > 0:
        jobs.append(_faults(fleet, report, until, settings.fault_every_s))
    try:
        await asyncio.gather(*jobs)
    finally:
        report.cut += await drained(clients, until + settings.drain_s, time.monotonic)


async def _faults(fleet: Fleet, report: Report, until: float, every_s: float) -> None:
    """One fault every ``every_s``, each over before the round ends."""
    while time.monotonic() + every_s < until:
        await asyncio.sleep(every_s / 2)
        await inject(fleet, report.faults)
        report.faults += 1
        await asyncio.sleep(every_s / 2)


async def _reloads(fleet: Fleet, report: Report, until: float, every_s: float) -> None:
    """Rewrite the config every ``every_s``: two valid variants, then an invalid file."""
    while time.monotonic() + every_s < until:
        await asyncio.sleep(every_s)
        n = sum(report.writes) + 1
        invalid = n % 3 == 0
        write_config(fleet, -1 if invalid else n)
        report.writes[invalid] += 1


async def _sample_under_load(
    settings: Settings, fleet: Fleet, report: Report, until: float, t0: float
) -> None:
    while time.monotonic() + 5.0 < until:
        await asyncio.sleep(5.0)
        now = sample(fleet.gateway.pid, time.monotonic() - t0)
        report.loaded.append(await with_tasks(now, _base(fleet)))
        _write(settings, report, "load", report.loaded[-1])


async def _probe(settings: Settings, fleet: Fleet, report: Report) -> None:
    """The memory probe's numbers, right after the footprint at rest (with tracemalloc, its
    full collection and its walk of every object come after the RSS was read)."""
    if settings.probe is None:
        return
    row = await take(fleet.gateway.pid, settings.probe.directory, len(report.probes))
    keep = ("gc_collected", "blocks", "traced_bytes")
    numbers = {k: row[k] for k in keep if k in row}
    numbers |= {f"malloc_{k}": v for k, v in row["malloc"].items()}
    numbers |= {f"obmalloc_{k}": v for k, v in row["obmalloc"].items()}
    numbers |= row.get("malloc_trim", {})
    report.probes.append(numbers)


def _base(fleet: Fleet) -> str:
    return f"http://127.0.0.1:{fleet.port}"


def _write(settings: Settings, report: Report, kind: str, s: Sample) -> None:
    """Append one sample (opened and closed each time: a reader sees it at once, and the
    file is whole up to the last sample if the soak is stopped)."""
    if settings.samples is None:
        return
    line = {
        "kind": kind,
        "t_s": round(s.t_s, 3),
        "rss_bytes": s.rss_bytes,
        "fds": s.fds,
        "tasks": s.tasks,
        "requests": report.tally.scheduled + report.tally.refused,
        "reloads": sum(report.writes),
        "faults": report.faults,
        "problems": len(report.problems),
    }
    if kind == "rest" and len(report.probes) == len(report.quiet):
        line |= report.probes[-1]
    with settings.samples.open("a") as f:
        f.write(json.dumps(line) + "\n")


async def _quiet_point(
    settings: Settings,
    fleet: Fleet,
    traffic: Traffic,
    records: Records,
    report: Report,
    t0: float,
) -> float:
    """Wait (at most ``settle_s``) until the gateway has ended what was sent and counted
    every reload; then check the books and sample the footprint. When the wait ended."""
    base = _base(fleet)
    want = Expected(traffic.tally.scheduled, traffic.tally.refused, *report.writes)
    deadline = time.monotonic() + settings.settle_s
    while time.monotonic() < deadline:
        outcomes, reloads, open_now = await gateway_counts(base)
        if outcomes >= want.scheduled and reloads >= sum(report.writes) and open_now == 0:
            break
        await asyncio.sleep(0.1)
    settled_at = time.monotonic()
    await asyncio.sleep(REST_S)
    report.quiet.append(await at_rest(fleet.gateway.pid, time.monotonic() - t0, base))
    books = await read_books(base, records)
    minute = (time.monotonic() - t0) / 60
    report.problems += [f"at {minute:.1f} min: {p}" for p in problems(books, want)]
    report.problems += [
        f"at {minute:.1f} min: client error {e} x{n}" for e, n in traffic.tally.errors.items()
    ]
    traffic.tally.errors.clear()
    return settled_at


def _progress(report: Report, t0: float) -> str:
    q = report.quiet[-1]
    return (
        f"soak: {(time.monotonic() - t0) / 60:5.1f} min, "
        f"{report.tally.scheduled + report.tally.refused} requests, "
        f"{sum(report.writes)} reloads, {report.faults} faults, gateway at rest: "
        f"RSS {q.rss_bytes / 2**20:.1f} MiB, {q.fds} fds, {q.tasks} tasks; "
        f"requests cut by the drain bound: {report.cut}; "
        f"problems so far: {len(report.problems)}"
    )
