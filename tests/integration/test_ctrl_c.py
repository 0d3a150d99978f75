"""Ctrl-C (SIGINT) on ``sluicegate serve`` and ``sluicegate demo``, as processes: a request is
served, then the process ends on its own with exit code 0 and no traceback, as uvicorn's
own command does (uvicorn re-raises the signal after its shutdown; ``demo`` printed it as a
KeyboardInterrupt traceback)."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml

from commands.embedded_config import DEMO_KEY
from emulator.embedded import EmbeddedEmulator
from scripts.vllm.serve import free_port
from tests.integration.harness import (
    api_key,
    chat_body,
    cli_process,
    gateway_config,
    preset_policy,
    wait_for,
)

pytestmark = pytest.mark.emulator

EXIT_TIMEOUT_S = 30.0


async def _served_one_request(base: str, proc: subprocess.Popen[bytes], key: str) -> bool:
    assert proc.poll() is None, "the process exited before serving"
    try:
        async with httpx.AsyncClient(base_url=base, timeout=5.0) as client:
            r = await client.post(
                "/v1/chat/completions",
                json=chat_body(2),
                headers={"authorization": f"Bearer {key}"},
            )
    except httpx.HTTPError:
        return False  # not listening yet
    assert r.status_code == 200, r.text
    return True


async def _serve_one_then_ctrl_c(argv: list[str], port: int, key: str) -> None:
    """Start ``sluicegate ARGV`` on ``port``, wait until it answers one completion, send
    SIGINT: it must exit by itself with 0 and no traceback on stderr."""
    with cli_process(*argv, stderr=subprocess.PIPE) as proc:
        base = f"http://127.0.0.1:{port}"
        await wait_for(
            lambda: _served_one_request(base, proc, key), timeout_s=60.0, what="answered"
        )
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=EXIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"still running {EXIT_TIMEOUT_S} s after SIGINT") from None
        stderr = err.decode(errors="replace")
        assert proc.returncode == 0, stderr[-2000:]
        assert "Traceback" not in stderr, stderr[-2000:]


async def test_ctrl_c_ends_serve_with_0_and_no_traceback(
    emulator: EmbeddedEmulator, tmp_path: Path
) -> None:
    port = free_port()
    raw = gateway_config([emulator.url], preset_policy("fixed-cap"))
    raw["server"].update({"port": port})
    path = tmp_path / "sluicegate.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    argv = ["serve", "--config", str(path), "--log-level", "warning", "--no-records"]
    await _serve_one_then_ctrl_c(argv, port, api_key("alice"))


async def test_ctrl_c_ends_demo_with_0_and_no_traceback() -> None:
    port = free_port()
    await _serve_one_then_ctrl_c(["demo", "--port", str(port), "--no-live"], port, DEMO_KEY)
