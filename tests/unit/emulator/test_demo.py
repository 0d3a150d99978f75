"""The demo's live view line, from gateway metrics text and live emulator engines."""

from __future__ import annotations

from commands.demo import demo_config, live_line
from commands.embedded_config import DEMO_KEY
from emulator.embedded import EmulatorFleet
from gateway.request.auth import key_digest
from tests.integration.conftest import StartEmulator

GATEWAY_METRICS = """\
# TYPE sluicegate_decisions_total counter
sluicegate_decisions_total{decision="admit",reason="capacity_available",tenant="a"} 3.0
sluicegate_decisions_total{decision="admit",reason="capacity_available",tenant="b"} 2.0
sluicegate_decisions_total{decision="reject",reason="queue_full",tenant="a"} 4.0
# TYPE sluicegate_queue_depth gauge
sluicegate_queue_depth 7.0
"""


def test_live_line_sums_decisions_and_shows_each_backend(start_emulator: StartEmulator) -> None:
    emu = start_emulator(model_name="emulated")
    emu.runner.engine.add("r", prompt_tokens=4, output_tokens=2, now=0.0)
    line = live_line(GATEWAY_METRICS, EmulatorFleet([emu]))
    assert "admit=5" in line
    assert "reject=4" in line
    assert "delay=0" in line
    assert "queue 7" in line
    assert "b0 run=0 wait=1" in line


def test_demo_config_puts_every_emulator_behind_the_gateway() -> None:
    urls = ["http://127.0.0.1:1", "http://127.0.0.1:2"]
    loaded = demo_config(urls)
    assert [b.url for b in loaded.config.backends] == urls
    assert loaded.config.auth.anonymous_tenant == "anonymous"
    demo = loaded.config.tenant("demo")
    assert demo is not None
    assert demo.api_key_sha256 == [key_digest(DEMO_KEY)]
