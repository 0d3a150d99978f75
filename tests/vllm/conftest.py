"""Session fixtures of the real-vLLM tier: the venv, the tiny model, live servers.

Nothing here skips. When vLLM cannot be installed or a server does not come up, the fixtures
raise and the tests *error*; deselect the tier explicitly with ``-m "not vllm"``.

Two cores are shared by everything, so the tier keeps one long-lived tiny server for the whole
session; a test that must kill a backend starts its own (``doomed_vllm``). vLLM's own queue
cap (``--max-num-queued-reqs``, documented as approximate) is tested against the emulator's
exact one in ``tests/integration/test_engine_busy.py``. Every server is stopped in the
fixture's ``finally``, on failure and on SIGTERM as well.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import openai
import pytest

from scripts.vllm.serve import VllmServer, tracing_args, vllm_venv
from tests.phoenix_server import PhoenixServer
from tests.vllm.gateway_process import GatewayProcess
from tests.vllm.support import OpenSdk, gateway_config, sdk

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts" / "vllm"
TINY_NAME = "tiny"


def _run_setup_step(argv: list[str], what: str) -> str:
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        pytest.fail(
            f"real-vLLM tier cannot run: {what} failed ({done.returncode}).\n"
            f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}\n"
            'Deselect the tier with -m "not vllm" if this machine cannot host vLLM.',
            pytrace=False,
        )
    return done.stdout


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")  # pytest then runs fixture teardown


START_TIMES: list[tuple[str, float]] = []
"""(served name, seconds until healthy) of every server this session started."""


def started(
    config: pytest.Config,
    model_dir: Path,
    served_name: str,
    extra_args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> VllmServer:
    """A server, with a line on the terminal when it starts and when it is healthy: a
    boot takes about a minute on 2 cores, and pytest's own line does not move meanwhile.
    ``env`` is added to the server's environment."""
    session_s = time.monotonic() - SESSION_STARTED
    say(config, f"real vLLM server {served_name!r}: starting ({session_s:.0f} s into the session)")
    server = VllmServer.start(
        model_dir,
        served_name=served_name,
        extra_args=extra_args,
        on_wait=lambda s: say(config, f"real vLLM server {served_name!r}: starting, {s:.0f} s"),
        env=env,
    )
    START_TIMES.append((served_name, server.started_in_s))
    say(config, f"real vLLM server {served_name!r}: healthy after {server.started_in_s:.1f} s")
    return server


SESSION_STARTED = time.monotonic()


def say(config: pytest.Config, line: str) -> None:
    """``line`` on the terminal now, past pytest's output capture."""
    reporter = config.pluginmanager.getplugin("terminalreporter")
    capture = config.pluginmanager.getplugin("capturemanager")
    if reporter is None:
        return
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        reporter.write_line(line)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for name, seconds in START_TIMES:
        terminalreporter.write_line(f"real vLLM server {name!r} became healthy in {seconds:.1f} s")


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """Install the vLLM venv if needed (cached), then build or reuse the tiny model."""
    _run_setup_step(["bash", str(SCRIPTS / "install.sh")], "scripts/vllm/install.sh")
    python = str(vllm_venv() / "bin" / "python")
    out = _run_setup_step([python, str(SCRIPTS / "build_model.py"), "tiny"], "build_model.py")
    return Path(out.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def tiny_vllm(
    tiny_model_dir: Path, phoenix_launched: PhoenixServer, pytestconfig: pytest.Config
) -> Iterator[VllmServer]:
    """One real vLLM-CPU server with the tiny model, shared by the whole session; it exports
    its engine spans to the session's Phoenix (which comes up while vLLM boots)."""
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        flag, env = tracing_args(phoenix_launched.otlp_traces_url)
        server = started(pytestconfig, tiny_model_dir, TINY_NAME, flag, env)
        try:
            yield server
        finally:
            server.stop()
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.fixture
def doomed_vllm(tiny_model_dir: Path, pytestconfig: pytest.Config) -> Iterator[VllmServer]:
    """A second tiny server, served as ``tiny-doomed``, that the test may kill."""
    server = started(pytestconfig, tiny_model_dir, "tiny-doomed")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def gateway(
    tiny_vllm: VllmServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    """The gateway in front of the session's tiny server, shared by the session."""
    running = GatewayProcess.start(gateway_config([tiny_vllm]), tmp_path_factory.mktemp("gw"))
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def doomed_gateway(doomed_vllm: VllmServer, tmp_path: Path) -> Iterator[GatewayProcess]:
    """A gateway of its own in front of the server a test kills."""
    running = GatewayProcess.start(gateway_config([doomed_vllm]), tmp_path)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def open_sdk() -> Iterator[OpenSdk]:
    """``open_sdk(server_or_gateway, api_key=..., retries=..., **client_kwargs)``: an SDK
    client; every one opened is closed at teardown, so no socket is left to the GC."""
    opened: list[openai.OpenAI] = []

    def open_(target: GatewayProcess | VllmServer, *args: Any, **kwargs: Any) -> openai.OpenAI:
        client = sdk(target.url, *args, **kwargs)
        opened.append(client)
        return client

    yield open_
    for client in opened:
        client.close()
