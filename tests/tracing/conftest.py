"""Fixtures of the tracing tier: emulators in this process (``start_emulator``, the
integration tier's), and the gateway's ``tracing:`` section pointed at the session's Phoenix
(``tests/conftest.py``), its batch exported every 100 ms instead of the SDK's 5 s so that a
test waits for Phoenix, not for the batch."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.conftest import start_emulator
from tests.phoenix_server import PhoenixServer

__all__ = ["start_emulator", "tracing"]


@pytest.fixture
def tracing(phoenix: PhoenixServer, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The ``tracing:`` section that sends every call's spans to the session's Phoenix."""
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    return {"enabled": True, "sample_ratio": 1.0, "endpoint": phoenix.otlp_traces_url}
