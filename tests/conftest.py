"""Which decision core the suite imports: the compiled one (the compiled tier, see
scripts/test.sh) or plain Python. ``SLUICEGATE_EXPECT_CORE=compiled|interpreted`` makes a
mismatch stop the session before any test runs, so a tier never passes on the wrong core.
The ``redis_server`` fixture is a real, empty ``redis-server`` per test (fleet tests); the
``phoenix`` fixture one real Arize Phoenix for the whole session (the tracing tests of
tests/tracing and tests/vllm export to it and read their traces back)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from policies.build import compiled_modules, core
from tests.phoenix_server import PhoenixServer, install_phoenix
from tests.redis_server import RedisServer, redis_binary

PHOENIX_STARTS: list[float] = []
"""Seconds each Phoenix of this session took to answer (shown in the terminal summary)."""


def pytest_report_header(config: pytest.Config) -> str:
    names = compiled_modules()
    return f"decision core: {core()} ({len(names)} compiled modules)"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for seconds in PHOENIX_STARTS:
        terminalreporter.write_line(f"Phoenix became ready in {seconds:.1f} s")


def pytest_configure(config: pytest.Config) -> None:
    expected = os.environ.get("SLUICEGATE_EXPECT_CORE")
    if expected and core() != expected:
        raise pytest.UsageError(
            f"SLUICEGATE_EXPECT_CORE={expected}, but the decision core imported from "
            f"{os.path.dirname(__import__('policies').__file__)} is {core()}"
        )


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A real ``redis-server`` on a free loopback port, empty, stopped after the test."""
    binary = redis_binary()
    if binary is None:
        pytest.fail("redis-server is not installed (scripts/test.sh installs it)")
    server = RedisServer(binary).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def phoenix_launched() -> Iterator[PhoenixServer]:
    """One real Phoenix for the session (installed by scripts/phoenix/install.sh when its
    venv is missing), on free loopback ports, launched but maybe not ready yet: for a server
    that only needs its URL to export to; stopped at the end of the session."""
    install_phoenix()
    server = PhoenixServer().launch()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def phoenix(phoenix_launched: PhoenixServer) -> PhoenixServer:
    """The session's Phoenix, ready."""
    phoenix_launched.wait_ready()
    PHOENIX_STARTS.append(phoenix_launched.started_in_s)
    return phoenix_launched
