"""Fixtures of the tracing tier: emulators in this process, and the gateway's ``tracing:``
section pointed at the session's Phoenix (``tests/conftest.py``), its batch exported every
100 ms instead of the SDK's 5 s so that a test waits for Phoenix, not for the batch."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from emulator.embedded import EmbeddedEmulator, EmulatorSpec, start_emulator
from tests.phoenix_server import PhoenixServer

StartEmulator = Callable[..., EmbeddedEmulator]


@pytest.fixture
def emulators() -> Iterator[StartEmulator]:
    """``emulators(**spec)`` starts one (``EmulatorSpec`` fields), stopped at teardown."""
    started: list[EmbeddedEmulator] = []

    def start(**spec: Any) -> EmbeddedEmulator:
        emulator = start_emulator(EmulatorSpec(**{"model_name": "emulated", **spec}))
        started.append(emulator)
        return emulator

    yield start
    for emulator in started:
        emulator.stop()


@pytest.fixture
def tracing(phoenix: PhoenixServer, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The ``tracing:`` section that sends every call's spans to the session's Phoenix."""
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    return {"enabled": True, "sample_ratio": 1.0, "endpoint": phoenix.otlp_traces_url}
