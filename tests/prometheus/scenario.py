"""One run of a small fleet watched by a real Prometheus, phase by phase:

1. quiet: a few requests, every backend up; the rules are evaluated on that data;
2. load: admits, queueing (delays), a degrade (a batch tenant's output capped), 429s (a
   tenant over its concurrency), async handoffs (202) of some of those and a handoff
   refused (its tenant's async queue full), expiries, deadlines, client retries, refused
   requests, agent runs (one open across the waves, then completed; per wave one completed
   and one cancelled after a call: its tokens wasted);
   then ``SluicegateShedRateHigh`` is awaited firing;
3. a bad config file: ``SluicegateConfigReloadFailing`` awaited firing; then a good one;
4. one backend killed (SIGKILL) with requests on it, then the other:
   ``SluicegateAllBackendsDown`` awaited firing, requests answered 503;
5. the gateway stopped: ``SluicegateAbsent`` awaited firing.

Each phase ends when Prometheus's API shows what it waits for (polled with a deadline).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml

from gateway.request.auth import key_digest
from scripts.child_process import stop
from tests.prometheus.api import POLL_S, poll
from tests.prometheus.fleet import (
    CHAT,
    INTERVAL_S,
    MODEL,
    PHASE_TIMEOUT_S,
    Emulator,
    Run,
    api_key,
    chat,
    post_chats,
    send,
    slots,
    watched_fleet,
)

WAVES = 4
TENANTS = ("alice", "bursty", "batchy")


def gateway_config(port: int, backends: list[str], policy_name: str) -> dict[str, Any]:
    engine_slots = slots()  # the engine's own number
    return {
        "server": {"host": "127.0.0.1", "port": port, "log_records": False},
        "workload_classes": ["interactive", "batch"],
        "default_workload_class": "interactive",
        "tenants": [
            {"name": "alice", "api_key_sha256": [key_digest(api_key("alice"))]},
            {"name": "bursty", "api_key_sha256": [key_digest(api_key("bursty"))]},
            {
                "name": "batchy",
                "api_key_sha256": [key_digest(api_key("batchy"))],
                "workload_classes": ["batch"],
                "default_class": "batch",
            },
        ],
        "backends": [
            {"name": f"emu-{i}", "url": url, "models": [MODEL], "max_num_seqs": engine_slots}
            for i, url in enumerate(backends)
        ],
        "health": {"interval_s": 0.5, "timeout_s": 1.0, "failures_to_down": 2},
        "scrape": {"enabled": True, "interval_s": 0.2},
        "reload": {"watch": True, "interval_s": 0.3},
        # bursty's calls refused for its concurrency may be handed off (one job at a time);
        # nobody polls, so each result is let go unread after its TTL
        "async_jobs": {
            "enabled": True,
            "workload_class": "batch",
            "max_pending_per_tenant": 1,
            "result_ttl_s": 4.0,
            "retry_interval_s": 0.2,
        },
        "policy": {
            "name": policy_name,
            "queue": {"max_wait_s": 2.0},
            "runs": {"enabled": True},
            "gates": [
                {
                    "name": "quota",
                    "type": "tenant_quota",
                    "parameters": {"tenants": {"bursty": {"max_concurrent": 1}}},
                },
            ],
            "ladder": {
                "steps": [
                    # on from saturation 0: every batch request asking for more is capped
                    {
                        "name": "cap-batch",
                        "at": 0.0,
                        "action": "cap_max_tokens",
                        "classes": ["batch"],
                        "max_tokens": 16,
                    },
                ]
            },
        },
    }


async def _agent_calls(base: str, calls: list[tuple[str, str]]) -> list[int]:
    """``(run id, what)`` in order, as alice: ``call`` one chat call of the run, ``complete``
    or ``delete`` its end."""
    auth = {"authorization": f"Bearer {api_key('alice')}"}
    statuses = []
    async with httpx.AsyncClient(base_url=base, headers=auth, timeout=60.0) as c:
        for run_id, what in calls:
            if what == "call":
                reply = await c.post(CHAT, json=chat(8), headers={"x-agent-run-id": run_id})
                statuses.append(reply.status_code)
            elif what == "complete":
                await c.post(f"/v1/runs/{run_id}/complete")
            else:
                await c.delete(f"/v1/runs/{run_id}")
    return statuses


def agent_runs(run: Run, base: str, calls: list[tuple[str, str]]) -> None:
    run.count(asyncio.run(_agent_calls(base, calls)))


def _run_seen_open(run: Run) -> bool:
    return any(float(r["value"][1]) > 0 for r in run.prometheus.instant("sluicegate_runs_open"))


def refused_requests(run: Run, base: str) -> None:
    """A request without a known key (401) and one with a bad body (400)."""
    no_key = httpx.post(f"{base}{CHAT}", json=chat(4), headers={"authorization": "Bearer no"})
    bad = httpx.post(
        f"{base}{CHAT}",
        json={"model": MODEL},
        headers={"authorization": f"Bearer {api_key('alice')}"},
    )
    run.count((no_key.status_code, bad.status_code))


def await_alert(run: Run, name: str) -> None:
    poll(lambda: run.prometheus.alert_state(name) == "firing", PHASE_TIMEOUT_S, f"{name} firing")
    run.mark(f"{name} firing")


def quiet_phase(run: Run, base: str) -> None:
    send(run, base, ("alice", 3, 8))
    settled = time.time() + 3 * INTERVAL_S  # scraped, and evaluated a few times on it
    poll(
        lambda: time.time() > settled and run.prometheus.rules_evaluated_after(settled),
        PHASE_TIMEOUT_S,
        "rules evaluated on the quiet data",
    )
    run.quiet_until = time.time()
    run.mark("quiet run over")


def load_phase(run: Run, base: str) -> None:
    """Waves over several scrapes: ``rate()`` does not count the increments a counter series
    already had when Prometheus first saw it, so one burst inside a scrape would be lost."""
    # an agent run open across the waves (seen open by Prometheus, then completed); per wave
    # one completed (a latency in every wave: rate() needs increments) and one cancelled after
    # its first call (what it spent counts as wasted)
    agent_runs(run, base, [("long", "call")])
    for wave in range(WAVES):
        agent_runs(
            run,
            base,
            [
                (f"done-{wave}", "call"),
                (f"done-{wave}", "complete"),
                (f"cut-{wave}", "call"),
                (f"cut-{wave}", "delete"),
            ],
        )
        send(
            run,
            base,
            ("alice", 12, 48),
            ("alice", 2, 24, {"x-request-deadline-ms": "20000"}),
            ("alice", 1, 24, {"x-stainless-retry-count": "1"}),
            ("alice", 2, 24, {"x-request-deadline-ms": "1"}),
            ("bursty", 6, 48),
            ("bursty", 2, 48, {"prefer": "respond-async"}),
            ("batchy", 1, 64),
        )
        refused_requests(run, base)
    poll(lambda: _run_seen_open(run), PHASE_TIMEOUT_S, "an agent run scraped open")
    agent_runs(run, base, [("long", "call"), ("long", "complete")])
    hold_a_queue(run, base)
    hold_an_async_job(run, base)
    run.mark("load sent")
    await_alert(run, "SluicegateShedRateHigh")


def hold_until_scraped(run: Run, base: str, batches: list[tuple[Any, ...]], expr: str) -> None:
    """Send ``batches`` (as ``send`` does) again and again until a scrape has caught what they
    hold (``expr`` non-empty at Prometheus): a moment shorter than a scrape may fall between
    two, and a panel drawn from a gauge would then show only zeros."""

    async def one_round() -> tuple[list[int], bool]:
        load = asyncio.gather(*(post_chats(base, *batch) for batch in batches))
        seen = False
        while not load.done() and not seen:
            seen = bool(await asyncio.to_thread(run.prometheus.instant, expr))
            await asyncio.wait([load], timeout=POLL_S)
        statuses = [s for batch in await load for s in batch]
        return statuses, seen or bool(run.prometheus.instant(expr))

    deadline = time.monotonic() + PHASE_TIMEOUT_S
    while True:
        statuses, seen = asyncio.run(one_round())
        run.count(statuses)
        if seen:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{expr}: not seen by Prometheus within {PHASE_TIMEOUT_S} s")


def hold_a_queue(run: Run, base: str) -> None:
    """More long requests than the fleet has slots, held until a scrape saw them queued."""
    hold_until_scraped(run, base, [("alice", 3 * slots(), 400)], "sluicegate_queue_depth > 0")


def hold_an_async_job(run: Run, base: str) -> None:
    """A handoff waiting for its tenant's one concurrent slot, held by a long call, until a
    scrape saw it pending."""
    hold_until_scraped(
        run,
        base,
        [("bursty", 1, 400), ("bursty", 2, 48, {"prefer": "respond-async"})],
        "sluicegate_async_jobs_pending > 0",
    )


def reload_phase(run: Run, config_path: Path, good: dict[str, Any]) -> None:
    config_path.write_text("policy: [this is not a config\n")
    await_alert(run, "SluicegateConfigReloadFailing")
    config_path.write_text(yaml.safe_dump({**good, "policy": {**good["policy"], "name": "v2"}}))
    poll(
        lambda: (
            bool(run.prometheus.instant('sluicegate_config_info{version=~".*"}'))
            and _reloaded_ok(run)
        ),
        PHASE_TIMEOUT_S,
        "a good reload counted",
    )
    run.mark("config reloaded")


def _reloaded_ok(run: Run) -> bool:
    return bool(run.prometheus.instant('sluicegate_config_reloads_total{result="ok"} > 0'))


def kill_phase(run: Run, base: str, emulators: list[Emulator]) -> None:
    """SIGKILL one backend while requests run on it, then the other."""

    async def long_requests_then_kill() -> list[int]:
        load = asyncio.ensure_future(post_chats(base, "alice", slots() + 2, 400))
        await _until_running(f"http://127.0.0.1:{emulators[1].port}")
        stop(emulators[1].proc, signal.SIGKILL)
        return await load

    run.count(asyncio.run(long_requests_then_kill()))
    run.mark("emu-1 killed")
    stop(emulators[0].proc, signal.SIGKILL)
    run.mark("emu-0 killed")
    await_alert(run, "SluicegateAllBackendsDown")
    send(run, base, ("alice", 3, 8))


async def _until_running(url: str) -> None:
    deadline = time.monotonic() + PHASE_TIMEOUT_S
    async with httpx.AsyncClient(base_url=url) as c:
        while time.monotonic() < deadline:
            text = (await c.get("/metrics")).text
            running = [
                line for line in text.splitlines() if line.startswith("vllm:num_requests_running")
            ]
            if running and float(running[0].rsplit(" ", 1)[1]) > 0:
                return
            await asyncio.sleep(0.05)
    raise AssertionError(f"no request running on {url}")


@contextlib.contextmanager
def observed_run(workdir: Path) -> Iterator[Run]:
    """Run every phase; yields the run with Prometheus still up for queries."""
    with watched_fleet(workdir, lambda port, urls: gateway_config(port, urls, "v1")) as fleet:
        run, base = fleet.run, fleet.base
        quiet_phase(run, base)
        load_phase(run, base)
        reload_phase(run, fleet.config_path, fleet.config)
        kill_phase(run, base, fleet.emulators)
        stop(fleet.gateway)
        run.gateway_stopped = run.ended = time.time()
        run.mark("gateway stopped")
        await_alert(run, "SluicegateAbsent")
        yield run
