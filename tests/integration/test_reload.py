"""Hot reload through the file: ``sluicegate serve --config FILE`` as a process, the file
changed to another preset, to an invalid file, and SIGHUP."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from emulator.embedded import EmbeddedEmulator
from gateway.config.schema import load_config_bytes
from scripts.vllm.serve import free_port
from tests.integration.harness import (
    api_key,
    chat_body,
    cli_process,
    gateway_config,
    metric_sums,
    preset_policy,
    wait_for,
)

pytestmark = pytest.mark.emulator


def write_atomically(path: Path, raw: bytes) -> str:
    """Replace the file in one step; returns the version the gateway must report."""
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(raw)
    os.replace(tmp, path)
    return load_config_bytes(raw).version


def config_bytes(emulator_url: str, port: int, preset: str) -> bytes:
    raw: dict[str, Any] = gateway_config([emulator_url], preset_policy(preset))
    raw["server"].update({"port": port})
    raw["reload"] = {"watch": True, "interval_s": 0.1}
    return yaml.safe_dump(raw, sort_keys=False).encode()


class Probe:
    def __init__(self, base: str) -> None:
        self.client = httpx.AsyncClient(
            base_url=base, timeout=30.0, headers={"authorization": f"Bearer {api_key('alice')}"}
        )
        self.sent = 0

    async def version(self) -> str:
        self.sent += 1
        r = await self.client.post("/v1/chat/completions", json=chat_body(4))
        assert r.status_code == 200
        return r.headers["x-sluicegate-policy-version"]

    async def reloads(self, result: str) -> float:
        text = (await self.client.get("/metrics")).text
        return metric_sums(text)[f"sluicegate_config_reloads_total{{result={result}}}"]


async def test_reload_by_file_change_invalid_file_and_sighup(
    emulator: EmbeddedEmulator, tmp_path: Path
) -> None:
    port = free_port()
    path = tmp_path / "sluicegate.yaml"
    v1 = write_atomically(path, config_bytes(emulator.url, port, "fixed-cap"))
    serve = ("serve", "--config", str(path), "--log-level", "warning", "--no-records")
    with cli_process(*serve) as proc:
        base = f"http://127.0.0.1:{port}"
        await wait_for(lambda: _healthy_gateway(base, proc), timeout_s=30.0, what="gateway up")
        probe = Probe(base)
        try:
            await _scenario(probe, proc, path, emulator.url, port, v1)
        finally:
            await probe.client.aclose()


async def _healthy_gateway(base: str, proc: subprocess.Popen[bytes]) -> bool:
    assert proc.poll() is None, "sluicegate serve exited"
    try:
        async with httpx.AsyncClient() as c:
            return (await c.get(f"{base}/readyz", timeout=1.0)).status_code == 200
    except httpx.HTTPError:
        return False


async def _scenario(
    probe: Probe, proc: subprocess.Popen[bytes], path: Path, url: str, port: int, v1: str
) -> None:
    assert await probe.version() == v1
    ok0, err0 = await probe.reloads("ok"), await probe.reloads("error")

    v2 = write_atomically(path, config_bytes(url, port, "codel"))
    await wait_for(lambda: _count_at_least(probe, "ok", ok0 + 1), what="reload ok counted")
    assert await probe.version() == v2 != v1
    scheduler = (await probe.client.get("/admin/scheduler")).json()
    assert scheduler["policy_version"] == v2

    broken = yaml.safe_load(config_bytes(url, port, "codel"))
    broken["policy"]["limit"]["type"] = "no-such-limit"
    write_atomically(path, yaml.safe_dump(broken).encode())
    await wait_for(lambda: _count_at_least(probe, "error", err0 + 1), what="error counted")
    assert await probe.version() == v2, "an invalid file replaced the running config"

    proc.send_signal(signal.SIGHUP)  # the file is still invalid: counted again, v2 stays
    await wait_for(lambda: _count_at_least(probe, "error", err0 + 2), what="SIGHUP reload")
    assert await probe.version() == v2

    v3 = write_atomically(path, config_bytes(url, port, "fair-share"))
    await wait_for(lambda: _count_at_least(probe, "ok", ok0 + 2), what="recovered")
    assert await probe.version() == v3
    proc.send_signal(signal.SIGHUP)  # valid and unchanged: an ok reload, same version
    await wait_for(lambda: _count_at_least(probe, "ok", ok0 + 3), what="SIGHUP ok")
    assert await probe.version() == v3
    assert await probe.reloads("error") == err0 + 2
    stats = (await probe.client.get("/admin/scheduler")).json()
    assert stats["queued"] == stats["in_flight"] == 0
    outcomes = metric_sums((await probe.client.get("/metrics")).text)
    assert outcomes["sluicegate_outcomes_total"] == probe.sent


async def _count_at_least(probe: Probe, result: str, n: float) -> bool:
    return await probe.reloads(result) >= n
