"""A small fleet watched by a real Prometheus: two emulators, the gateway with a given config
and Prometheus with the shipped scrape config and alerts, each a child process on a loopback
port; and the traffic the scenarios send through the gateway.

``watched_fleet`` starts them, waits until every target is scraped up and the start-up
alerts have resolved, and yields the fleet with its ``Run`` (what was sent, and when) for
a scenario to drive.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from emulator.profile import load_profile
from scripts.service_argv import sluicegate as sluicegate_argv
from tests.prometheus.api import PrometheusAPI, poll
from tests.prometheus.processes import (
    child,
    free_port,
    run_prometheus,
    wait_http,
)

PROFILE = "rx9070xt"
MODEL = "emulated"
SPEED = 4.0
INTERVAL_S = 1.0
RATE_INTERVAL = f"{4 * INTERVAL_S:g}s"
"""``$__rate_interval`` as Grafana sets it: 4 x the data source's scrape interval."""
FOR_OVERRIDE = "3s"
PHASE_TIMEOUT_S = 45.0
CHAT = "/v1/chat/completions"


def api_key(tenant: str) -> str:
    return f"sk-observed-{tenant}"


@dataclass
class Run:
    """What a scenario did and when (unix seconds), for the tests to query."""

    prometheus: PrometheusAPI
    started: float
    quiet_until: float = 0.0
    ended: float = 0.0
    """The end of the span the tests query."""
    gateway_stopped: float = 0.0
    statuses: dict[int, int] = field(default_factory=dict)
    timeline: list[tuple[float, str]] = field(default_factory=list)

    def mark(self, what: str) -> None:
        self.timeline.append((time.time(), what))

    def count(self, statuses: Iterable[int]) -> None:
        for status in statuses:
            self.statuses[status] = self.statuses.get(status, 0) + 1


def chat(max_tokens: int, *, stream: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "write a function"}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
    }
    if stream:
        body["stream"] = True
    return body


async def post_chats(
    base: str,
    tenant: str,
    count: int,
    max_tokens: int,
    headers: dict[str, str] | None = None,
    stream: bool = False,
) -> list[int]:
    auth = {"authorization": f"Bearer {api_key(tenant)}", **(headers or {})}
    limits = httpx.Limits(max_connections=None)
    body = chat(max_tokens, stream=stream)
    async with httpx.AsyncClient(base_url=base, headers=auth, timeout=60.0, limits=limits) as c:
        replies = await asyncio.gather(*(c.post(CHAT, json=body) for _ in range(count)))
    return [r.status_code for r in replies]


def send(run: Run, base: str, *batches: tuple[Any, ...]) -> None:
    """Send every batch ``(tenant, count, max_tokens[, headers[, stream]])`` at once (a
    streamed reply is read to its end); count the statuses."""

    async def all_batches() -> list[list[int]]:
        return await asyncio.gather(*(post_chats(base, *batch) for batch in batches))

    for statuses in asyncio.run(all_batches()):
        run.count(statuses)


def slots() -> int:
    """The emulated engine's own number of sequences it runs at once."""
    return load_profile(PROFILE).engine.max_num_seqs


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


@dataclass
class Fleet:
    base: str
    """The gateway's base URL."""
    run: Run
    emulators: list[Emulator]
    gateway: Any
    config_path: Path
    config: dict[str, Any]


GatewayConfigFor = Callable[[int, list[str]], dict[str, Any]]
"""The gateway's config for its port and the emulators' base URLs."""


@contextlib.contextmanager
def watched_fleet(workdir: Path, config_for: GatewayConfigFor) -> Iterator[Fleet]:
    """Two emulators, the gateway and Prometheus, up and quiet: every target scraped up and
    no alert pending or firing. ``run.started`` is that moment."""
    with emulators(workdir, 2) as emus:
        urls = [f"http://127.0.0.1:{e.port}" for e in emus]
        port = free_port()
        config = config_for(port, urls)
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
            # The ALERTS series keeps a resolved alert's last sample until the next evaluation
            # writes its end: the quiet run starts once one has, with nothing pending.
            resolved = time.time()
            poll(
                lambda: (
                    run.prometheus.rules_evaluated_after(resolved)
                    and not run.prometheus.alerts()
                    and not run.prometheus.instant("ALERTS")
                ),
                PHASE_TIMEOUT_S,
                "start-up alerts ended in the ALERTS series",
            )
            run.started = time.time()
            yield Fleet(base, run, emus, gateway, config_path, config)
