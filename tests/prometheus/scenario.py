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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from emulator.profile import load_profile
from gateway.request.auth import key_digest
from tests.prometheus.api import PrometheusAPI, poll
from tests.prometheus.processes import (
    child,
    free_port,
    run_prometheus,
    sluicegate_argv,
    stop,
    wait_http,
)

PROFILE = "rx9070xt"
MODEL = "emulated"
SPEED = 4.0
INTERVAL_S = 1.0
FOR_OVERRIDE = "3s"
PHASE_TIMEOUT_S = 45.0
WAVES = 4
CHAT = "/v1/chat/completions"
TENANTS = ("alice", "bursty", "batchy")


def api_key(tenant: str) -> str:
    return f"sk-observed-{tenant}"


@dataclass
class Run:
    """What the scenario did and when (unix seconds), for the tests to query."""

    prometheus: PrometheusAPI
    started: float
    quiet_until: float = 0.0
    gateway_stopped: float = 0.0
    statuses: dict[int, int] = field(default_factory=dict)
    timeline: list[tuple[float, str]] = field(default_factory=list)

    def mark(self, what: str) -> None:
        self.timeline.append((time.time(), what))


def gateway_config(port: int, backends: list[str], policy_name: str) -> dict[str, Any]:
    slots = _slots()  # the engine's own number
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
            {"name": f"emu-{i}", "url": url, "models": [MODEL], "max_num_seqs": slots}
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


def chat(max_tokens: int) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": "write a function"}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
    }


async def _send(
    base: str, tenant: str, count: int, max_tokens: int, headers: dict[str, str] | None = None
) -> list[int]:
    auth = {"authorization": f"Bearer {api_key(tenant)}", **(headers or {})}
    limits = httpx.Limits(max_connections=None)
    async with httpx.AsyncClient(base_url=base, headers=auth, timeout=60.0, limits=limits) as c:
        replies = await asyncio.gather(*(c.post(CHAT, json=chat(max_tokens)) for _ in range(count)))
    return [r.status_code for r in replies]


def send(run: Run, base: str, *batches: tuple[Any, ...]) -> None:
    """Send every batch ``(tenant, count, max_tokens[, headers])`` at once; count statuses."""

    async def all_batches() -> list[list[int]]:
        return await asyncio.gather(*(_send(base, *batch) for batch in batches))

    for statuses in asyncio.run(all_batches()):
        for status in statuses:
            run.statuses[status] = run.statuses.get(status, 0) + 1


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
    for status in asyncio.run(_agent_calls(base, calls)):
        run.statuses[status] = run.statuses.get(status, 0) + 1


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
    for status in (no_key.status_code, bad.status_code):
        run.statuses[status] = run.statuses.get(status, 0) + 1


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
    run.mark("load sent")
    await_alert(run, "SluicegateShedRateHigh")


def hold_a_queue(run: Run, base: str) -> None:
    """More long requests than the fleet has slots, held until a scrape saw them queued."""

    async def until_seen() -> list[int]:
        load = asyncio.ensure_future(_send(base, "alice", 3 * _slots(), 400))
        try:
            await asyncio.to_thread(
                poll,
                lambda: bool(run.prometheus.instant("sluicegate_queue_depth > 0")),
                PHASE_TIMEOUT_S,
                "a queue seen by Prometheus",
            )
        finally:
            statuses = await load
        return statuses

    for status in asyncio.run(until_seen()):
        run.statuses[status] = run.statuses.get(status, 0) + 1


def _slots() -> int:
    return load_profile(PROFILE).engine.max_num_seqs


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


def kill_phase(run: Run, base: str, emulators: list[Any]) -> None:
    """SIGKILL one backend while requests run on it, then the other."""

    async def long_requests_then_kill() -> list[int]:
        load = asyncio.ensure_future(_send(base, "alice", _slots() + 2, 400))
        await _until_running(f"http://127.0.0.1:{emulators[1].port}")
        stop(emulators[1].proc, signal.SIGKILL)
        return await load

    for status in asyncio.run(long_requests_then_kill()):
        run.statuses[status] = run.statuses.get(status, 0) + 1
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


@dataclass
class Emulator:
    port: int
    proc: Any


@contextlib.contextmanager
def emulators(workdir: Path, count: int) -> Iterator[list[Emulator]]:
    with contextlib.ExitStack() as stack:
        out = []
        for i in range(count):
            port = free_port()
            argv = sluicegate_argv(
                "emulate",
                "--profile",
                PROFILE,
                "--model-name",
                MODEL,
                "--port",
                str(port),
                "--speed",
                str(SPEED),
                "--seed",
                str(i),
            )
            proc = stack.enter_context(child(argv, workdir / f"emu-{i}.log"))
            wait_http(proc, f"http://127.0.0.1:{port}/health")
            out.append(Emulator(port, proc))
        yield out


@contextlib.contextmanager
def observed_run(workdir: Path) -> Iterator[Run]:
    """Run every phase; yields the run with Prometheus still up for queries."""
    with emulators(workdir, 2) as emus:
        urls = [f"http://127.0.0.1:{e.port}" for e in emus]
        port = free_port()
        config = gateway_config(port, urls, "v1")
        config_path = workdir / "config.yaml"
        config_path.write_text(yaml.safe_dump(config))
        argv = sluicegate_argv("serve", "--config", str(config_path), "--log-level", "warning")
        targets = {"sluicegate": [f"127.0.0.1:{port}"], "vllm": [u[7:] for u in urls]}
        with (
            child(argv, workdir / "gateway.log") as gateway,
            run_prometheus(workdir, targets, f"{INTERVAL_S:g}s", FOR_OVERRIDE) as prom_url,
        ):
            base = f"http://127.0.0.1:{port}"
            wait_http(gateway, f"{base}/readyz")
            run = Run(PrometheusAPI(prom_url), started=time.time())
            poll(
                lambda: set(run.prometheus.targets_up().values()) == {1.0},
                PHASE_TIMEOUT_S,
                "every target scraped up",
            )
            # Before the first scrape `absent()` is true: with `for:` cut to seconds,
            # SluicegateAbsent fires at start-up (with the shipped 2m it would not).
            poll(lambda: not run.prometheus.alerts(), PHASE_TIMEOUT_S, "start-up alerts resolved")
            run.started = time.time()
            quiet_phase(run, base)
            load_phase(run, base)
            reload_phase(run, config_path, config)
            kill_phase(run, base, emus)
            stop(gateway)
            run.gateway_stopped = time.time()
            run.mark("gateway stopped")
            await_alert(run, "SluicegateAbsent")
            yield run
