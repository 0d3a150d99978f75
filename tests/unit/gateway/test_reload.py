"""Hot reload builds to the side and swaps; a bad file keeps the last good config;
queued and in-flight requests survive."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.config.schema import load_config
from gateway.request.auth import key_digest
from tests.unit.gateway.conftest import (
    CHAT,
    Harness,
    auth,
    chat_body,
    in_process,
    over_loopback,
    wait_until,
)
from tests.unit.gateway.fakes import API_KEY, FakeFleet

NEW_KEY = "sk-added-later"


def _raw(**policy: Any) -> dict[str, Any]:
    return {
        "tenants": [{"name": "acme", "api_key_sha256": [key_digest(API_KEY)]}],
        "backends": [{"name": "a", "url": "http://a.test", "models": ["tiny"], "max_num_seqs": 1}],
        "scrape": {"enabled": False},
        "policy": policy,
    }


def _write(path: Path, raw: dict[str, Any]) -> None:
    path.write_text(yaml.safe_dump(raw))


@contextlib.asynccontextmanager
async def _watching(tmp_path: Path, fleet: FakeFleet) -> AsyncIterator[tuple[Harness, Path]]:
    """The gateway in process, started from ``_raw()`` written to a file in ``tmp_path``,
    which it reloads; and that file's path."""
    path = tmp_path / "gw.yaml"
    _write(path, _raw())
    async with in_process(load_config(path), fleet, config_path=path) as h:
        yield h, path


async def test_bad_file_keeps_old_config_and_is_counted(tmp_path: Path, fleet) -> None:
    async with _watching(tmp_path, fleet) as (h, path):
        before = h.ctx.runtime.version
        path.write_text("backends: [\n")
        assert h.ctx.reloader.reload() is False
        raw = _raw(limit={"type": "fixed", "max_in_flight": 0})
        _write(path, raw)
        assert h.ctx.reloader.reload() is False
        assert h.ctx.runtime.version == before
        r = await h.client.post(CHAT, headers=auth(), json=chat_body())
        assert r.status_code == 200
        assert r.headers["x-sluicegate-policy-version"] == before
        text = h.ctx.metrics.exposition().decode()
        assert 'sluicegate_config_reloads_total{result="error"} 2.0' in text


async def test_good_file_swaps_keys_and_policy_version(tmp_path: Path, fleet) -> None:
    async with _watching(tmp_path, fleet) as (h, path):
        r = await h.client.post(CHAT, headers=auth(NEW_KEY), json=chat_body())
        assert r.status_code == 401
        raw = _raw()
        raw["tenants"][0]["api_key_sha256"].append(key_digest(NEW_KEY))
        _write(path, raw)
        assert h.ctx.reloader.reload() is True
        r = await h.client.post(CHAT, headers=auth(NEW_KEY), json=chat_body())
        assert r.status_code == 200
        assert r.headers["x-sluicegate-policy-version"] == load_config(path).version


async def test_queued_and_in_flight_survive_a_reload(tmp_path: Path, fleet: FakeFleet) -> None:
    path = tmp_path / "gw.yaml"
    _write(path, _raw())
    async with over_loopback(load_config(path), fleet, config_path=path) as h:
        gate = fleet.backends["a"].gates[1] = asyncio.Event()
        async with h.client.stream("POST", CHAT, headers=auth(), json=chat_body(True)) as holder:
            await wait_until(lambda: fleet.backends["a"].sent == [0])
            waiting = asyncio.ensure_future(h.client.post(CHAT, headers=auth(), json=chat_body()))
            await wait_until(lambda: h.ctx.scheduler.stats().queued == 1)
            _write(path, _raw(queue={"max_wait_s": 20.0}))
            assert h.ctx.reloader.reload() is True
            stats = h.ctx.scheduler.stats()
            assert stats.queued == 1 and stats.in_flight == 1
            gate.set()
            assert "[DONE]" in (await holder.aread()).decode()
        r = await asyncio.wait_for(waiting, 3.0)
        assert r.status_code == 200
        assert r.headers["x-sluicegate-policy-version"] == load_config(path).version


async def test_file_change_and_sighup_trigger_reload(tmp_path: Path, fleet) -> None:
    async with _watching(tmp_path, fleet) as (h, path):
        reloader = h.ctx.reloader
        watcher = asyncio.ensure_future(reloader.watch(0.01))
        try:
            _write(path, _raw(queue={"max_wait_s": 7.0}))
            await wait_until(lambda: h.ctx.runtime.version == load_config(path).version)
        finally:
            watcher.cancel()
        loop = asyncio.get_running_loop()
        assert reloader.install_sighup(loop)
        try:
            _write(path, _raw(queue={"max_wait_s": 9.0}))
            os.kill(os.getpid(), signal.SIGHUP)
            await wait_until(lambda: h.ctx.runtime.version == load_config(path).version)
        finally:
            loop.remove_signal_handler(signal.SIGHUP)


async def _metrics_version(h: Any) -> str:
    text = (await h.client.get("/metrics")).text
    lines = [ln for ln in text.splitlines() if ln.startswith("sluicegate_config_info{")]
    assert len(lines) == 1, lines
    return lines[0].split('version="')[1].split('"')[0]


async def test_a_restart_only_change_is_reported_and_not_advertised(
    tmp_path: Path, fleet: FakeFleet, caplog: pytest.LogCaptureFixture
) -> None:
    async with _watching(tmp_path, fleet) as (h, path):
        started = h.ctx.runtime.version
        _write(path, {**_raw(), "server": {"port": 9191}})
        with caplog.at_level(logging.INFO, "sluicegate.reload"):
            assert h.ctx.reloader.reload() is True
        assert "server.port: 8080 in force, 9191 in the file" in caplog.text
        assert "next restart" in caplog.text
        r = await h.client.post(CHAT, headers=auth(), json=chat_body())
        assert r.headers["x-sluicegate-policy-version"] == started
        assert await _metrics_version(h) == started
        assert h.ctx.runtime.loaded.config.server.port == 8080


async def test_putting_restart_only_settings_back_is_not_a_change(
    tmp_path: Path, fleet: FakeFleet, caplog: pytest.LogCaptureFixture
) -> None:
    async with _watching(tmp_path, fleet) as (h, path):
        started = h.ctx.runtime.version
        moved = _raw()
        moved["backends"][0]["url"] = "http://elsewhere.test"
        with caplog.at_level(logging.INFO, "sluicegate.reload"):
            _write(path, moved)
            assert h.ctx.reloader.reload() is True
            assert h.ctx.reloader.reload() is True  # the same file again: said once
            assert caplog.text.count("next restart") == 1
            assert "backends.a.url" in caplog.text
            caplog.clear()
            _write(path, _raw())
            assert h.ctx.reloader.reload() is True
        assert "in force again" in caplog.text
        assert "reloaded" not in caplog.text and "changed" not in caplog.text
        assert h.ctx.runtime.version == started


async def test_the_version_is_that_of_the_settings_in_force(
    tmp_path: Path, fleet: FakeFleet
) -> None:
    async with _watching(tmp_path, fleet) as (h, path):
        raw = _raw(queue={"max_wait_s": 11.0})
        raw["health"] = {"interval_s": 0.25}
        _write(path, raw)
        assert h.ctx.reloader.reload() is True
        _write(path, _raw(queue={"max_wait_s": 11.0}))  # the file as it is in force
        in_force = load_config(path).version
        r = await h.client.post(CHAT, headers=auth(), json=chat_body())
        assert r.headers["x-sluicegate-policy-version"] == in_force
        assert await _metrics_version(h) == in_force
        assert h.ctx.scheduler.policy.queue.max_wait_s == 11.0
