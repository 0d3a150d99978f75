"""Start emulators inside this process, each on its own loopback port and thread.

Used by ``sluicegate demo``, ``sluicegate serve`` without ``--config`` and the integration
tests::

    with start_emulators([EmulatorSpec("rx9070xt", "coder", speed=20.0)] * 2) as fleet:
        fleet.urls        # ["http://127.0.0.1:PORT", ...], each already answering /health
        fleet.runners[0]  # the EngineRunner, for looking at engine state in tests

Each emulator runs uvicorn on a socket bound before start (no port race), in a daemon thread
with its own event loop. ``stop()`` asks every server to exit and joins the threads.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import uvicorn
from fastapi import FastAPI

from emulator.profile import load_profile
from emulator.runner import EngineRunner
from emulator.server import create_app

DEFAULT_START_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class EmulatorSpec:
    """One emulator: shipped profile name (or YAML path), served model name, time scale."""

    profile: str = "rx9070xt"
    model_name: str = "emulated"
    speed: float = 1.0
    seed: int = 0
    max_num_queued_reqs: int | None = None
    enable_prompt_tokens_details: bool = False
    enable_prefix_caching: bool | None = None
    """None: the profile's choice (vLLM's default, on)."""


@dataclass(slots=True)
class EmbeddedEmulator:
    spec: EmulatorSpec
    url: str
    runner: EngineRunner
    server: uvicorn.Server
    thread: threading.Thread

    def stop(self, timeout_s: float = DEFAULT_START_TIMEOUT_S) -> None:
        self.server.should_exit = True
        self.thread.join(timeout_s)


@dataclass(slots=True)
class EmulatorFleet:
    emulators: list[EmbeddedEmulator] = field(default_factory=list)

    @property
    def urls(self) -> list[str]:
        return [e.url for e in self.emulators]

    @property
    def runners(self) -> list[EngineRunner]:
        return [e.runner for e in self.emulators]

    def stop(self, timeout_s: float = DEFAULT_START_TIMEOUT_S) -> None:
        for emulator in self.emulators:
            emulator.server.should_exit = True
        for emulator in self.emulators:
            emulator.stop(timeout_s)
        self.emulators.clear()


def build_runner(spec: EmulatorSpec) -> EngineRunner:
    profile = load_profile(spec.profile)
    update: dict[str, object] = {}
    if spec.max_num_queued_reqs is not None:
        update["max_num_queued_reqs"] = spec.max_num_queued_reqs
    if spec.enable_prefix_caching is not None:
        update["enable_prefix_caching"] = spec.enable_prefix_caching
    if update:
        engine = profile.engine.model_copy(update=update)
        profile = profile.model_copy(update={"engine": engine})
    return EngineRunner(profile, spec.model_name, speed=spec.speed)


def build_app(spec: EmulatorSpec, runner: EngineRunner) -> FastAPI:
    return create_app(
        runner,
        spec.model_name,
        seed=spec.seed,
        enable_prompt_tokens_details=spec.enable_prompt_tokens_details,
    )


def start_emulator(
    spec: EmulatorSpec,
    host: str = "127.0.0.1",
    timeout_s: float = DEFAULT_START_TIMEOUT_S,
    port: int = 0,
) -> EmbeddedEmulator:
    """Start one emulator and return once it accepts connections (raises on timeout).
    ``port`` 0 takes a free one; a given port lets emulators on different loopback addresses
    share it, as the pods of a Kubernetes pool share their target port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    port = sock.getsockname()[1]
    runner = build_runner(spec)
    app = build_app(spec, runner)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=lambda: asyncio.run(server.serve(sockets=[sock])),
        name=f"emulator-{spec.model_name}-{port}",
        daemon=True,
    )
    thread.start()
    started = threading.Event()
    for _ in range(int(timeout_s / 0.01)):
        if server.started or not thread.is_alive():
            break
        started.wait(0.01)
    if not server.started:
        server.should_exit = True
        raise RuntimeError(f"emulator on port {port} did not start within {timeout_s} s")
    return EmbeddedEmulator(spec, f"http://{host}:{port}", runner, server, thread)


@contextmanager
def start_emulators(specs: Sequence[EmulatorSpec]) -> Iterator[EmulatorFleet]:
    """Start every emulator; stop them all on exit, also on error."""
    fleet = EmulatorFleet()
    try:
        for spec in specs:
            fleet.emulators.append(start_emulator(spec))
        yield fleet
    finally:
        fleet.stop()
