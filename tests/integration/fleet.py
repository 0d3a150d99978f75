"""Three gateway replicas (``sluicegate serve`` subprocesses) sharing one real Redis, behind a
real round-robin load balancer (HAProxy from the OS packages), in front of emulators."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from scripts.child_process import stop
from scripts.service_argv import poll_ready, serve
from scripts.vllm.serve import free_port

START_TIMEOUT_S = 30.0

HAPROXY = """\
global
  maxconn 4096
defaults
  mode http
  timeout connect 2s
  timeout client 120s
  timeout server 120s
  option http-server-close
  option httpchk GET /healthz
  timeout check 5s
frontend sluicegate
  bind 127.0.0.1:{port}
  default_backend replicas
backend replicas
  balance roundrobin
{servers}
"""


@dataclass
class Replica:
    port: int
    proc: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)


@dataclass
class Fleet:
    url: str
    """The load balancer's address: what clients use."""
    replicas: list[Replica]

    def admin(self, replica: int, path: str) -> Any:
        return httpx.get(self.replicas[replica].url + path, timeout=10.0).json()


def _wait_ready(url: str, proc: subprocess.Popen[bytes] | None = None) -> None:
    poll_ready(url + "/readyz", START_TIMEOUT_S, proc, every_s=0.05)


def _start_replica(config: Path, port: int) -> Replica:
    argv = serve(config, "--port", str(port), records=False)
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return Replica(port, proc)


@contextlib.contextmanager
def fleet(raw_config: dict[str, Any], replicas: int = 3) -> Iterator[Fleet]:
    """``replicas`` gateways serving ``raw_config`` (its ``state:`` says whether they share
    Redis) behind HAProxy; all stopped at exit."""
    haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
    work = Path(tempfile.mkdtemp(prefix="sluicegate-fleet-"))
    config = work / "gateway.yaml"
    # patient probes: on a busy machine a slow /health must not mark an emulator down
    health = {"interval_s": 0.5, "timeout_s": 5.0, "failures_to_down": 3}
    config.write_text(yaml.safe_dump({**raw_config, "reload": {"watch": False}, "health": health}))
    started: list[Replica] = []
    lb: subprocess.Popen[bytes] | None = None
    try:
        for _ in range(replicas):
            started.append(_start_replica(config, free_port()))
        for replica in started:
            _wait_ready(replica.url, replica.proc)
        port = free_port()
        servers = "\n".join(
            f"  server g{i} 127.0.0.1:{r.port} check inter 300ms fall 2"
            for i, r in enumerate(started)
        )
        (work / "haproxy.cfg").write_text(HAPROXY.format(port=port, servers=servers))
        lb = subprocess.Popen(
            [haproxy, "-f", str(work / "haproxy.cfg"), "-db"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait_ready(f"http://127.0.0.1:{port}", lb)
        yield Fleet(f"http://127.0.0.1:{port}", started)
    finally:
        if lb is not None:
            stop(lb)
        for replica in started:
            stop(replica.proc)
        shutil.rmtree(work, ignore_errors=True)
