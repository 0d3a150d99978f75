"""The processes of the soak (two emulators and the gateway, each its own process so the
gateway's footprint is its own) and the config file the reloads rewrite."""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bench.hotpath.procs import Proc, wait_http
from bench.soak.traffic import MODEL, TENANTS, api_key
from scripts.service_argv import emulate
from scripts.vllm.serve import free_port

CPUS = "0-1"
RUN_IDLE_S = 3.0
"""An agent run left idle ends this soon, so it has ended by the next quiet point."""


@dataclass
class Fleet:
    gateway: Proc
    port: int
    config: Path
    backends: list[str]
    records: Path
    """The gateway's stdout: its decision records, one JSON line per request."""
    emulators: list[Proc]
    """The two emulators, in the order of ``backends`` (the faults stop and restart them)."""


def config(backends: list[str], port: int, variant: int) -> dict[str, Any]:
    """The soak's config; ``variant`` changes hot settings only (queue bound, quota), and
    a negative variant is invalid (a reload the gateway must refuse, keeping the last)."""
    digest = {t: hashlib.sha256(api_key(t).encode()).hexdigest() for t in TENANTS}
    quota = {"tokens_per_minute": 3000 + 1000 * (variant % 2), "burst_tokens": 300}
    return {
        "server": {"port": port},
        "tenants": [{"name": t, "api_key_sha256": [d]} for t, d in digest.items()],
        "backends": [
            {"name": f"emu-{i}", "url": u, "models": [MODEL]} for i, u in enumerate(backends)
        ],
        "health": {"interval_s": 0.5},
        "scrape": {"interval_s": 0.25},
        "reload": {"watch": True, "interval_s": 0.2},
        "policy": {
            "runs": {"enabled": True, "idle_timeout_s": RUN_IDLE_S},
            "queue": {"max_wait_s": 20 + 5 * (variant % 2) if variant >= 0 else -1},
            "gates": [{"type": "tenant_quota", "parameters": {"tenants": {"greedy": quota}}}],
        },
    }


def write_config(fleet: Fleet, variant: int) -> None:
    """Replace the file in one rename (as an editor or a ConfigMap update does)."""
    tmp = fleet.config.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(config(fleet.backends, fleet.port, variant)))
    tmp.replace(fleet.config)


@dataclass(frozen=True)
class ProbeSettings:
    """The gateway run under ``bench/soak/probe.py``: a memory probe on SIGUSR1, written
    into ``directory``; with ``tracemalloc_frames`` > 0, tracemalloc on from the start."""

    directory: Path
    tracemalloc_frames: int = 0
    malloc_trim: bool = False
    """glibc's ``malloc_trim(0)`` at every probe (the RSS before and after it recorded)."""


@contextmanager
def started(workdir: Path, speed: float, probe: ProbeSettings | None = None) -> Iterator[Fleet]:
    """Two emulators (the second answers vLLM's 503 "engine busy" past a few queued
    requests) and the gateway in front of them; all stopped at exit."""
    procs: list[Proc] = []
    try:
        backends = [_emulator(workdir, i, speed, procs) for i in range(2)]
        port = free_port()
        path = workdir / "soak.yaml"
        emulators = list(procs)
        gateway = _gateway(workdir, path, procs, probe)
        fleet = Fleet(gateway, port, path, backends, workdir / "gateway.log", emulators)
        write_config(fleet, 0)
        fleet.gateway.start()
        wait_http(fleet.gateway, "127.0.0.1", port, "/readyz", timeout_s=60)
        yield fleet
    finally:
        for proc in reversed(procs):
            proc.stop()


def _emulator(workdir: Path, i: int, speed: float, procs: list[Proc]) -> str:
    port = free_port()
    argv = emulate(port, MODEL, "--speed", str(speed), "--seed", str(i))
    if i == 1:
        argv += ["--max-num-queued-reqs", "12"]
    proc = Proc(f"emulator-{i}", argv, CPUS, workdir / f"emulator-{i}.log")
    procs.append(proc)
    proc.start()
    wait_http(proc, "127.0.0.1", port, "/health", timeout_s=60)
    return f"http://127.0.0.1:{port}"


def _gateway(workdir: Path, path: Path, procs: list[Proc], probe: ProbeSettings | None) -> Proc:
    entry = ["commands.cli"] if probe is None else ["bench.soak.probe"]
    argv = [sys.executable, "-m", *entry, "serve", "--config", str(path)]
    env = {}
    if probe is not None:
        env = {
            "SOAK_PROBE_DIR": str(probe.directory),
            "SOAK_TRACEMALLOC": str(probe.tracemalloc_frames),
            "SOAK_MALLOC_TRIM": "1" if probe.malloc_trim else "0",
        }
    proc = Proc("gateway", argv, CPUS, workdir / "gateway.log", env)
    procs.append(proc)
    return proc
