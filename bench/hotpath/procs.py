"""Start, pin, wait for and stop the benchmark's server processes.

Every process runs in its own session so that stopping it ends its children too (nginx's
worker, LiteLLM's uvicorn), and only those: nothing here kills by name.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from scripts.service_argv import start_group
from scripts.vllm.serve import free_port

REPO = Path(__file__).resolve().parents[2]
NOFILE = 65536
"""Open-file limit asked for every child: 10,000 idle streams need 20,000+ sockets."""


def raise_nofile() -> None:
    """Raise RLIMIT_NOFILE as far as the process may (root may raise the hard limit)."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    for want in (NOFILE, hard):
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, max(want, hard)))
            return


@dataclass
class Proc:
    """A child pinned to ``cpus`` (a taskset list such as ``"1"``), logging to ``log``."""

    name: str
    argv: Sequence[str]
    cpus: str
    log: Path
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: Path = REPO
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        # The caller's PYTHONPATH first (e.g. an installed, compiled core), then the checkout.
        path = [p for p in (os.environ.get("PYTHONPATH", ""), str(REPO)) if p]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(path), **self.env}
        self.log.parent.mkdir(parents=True, exist_ok=True)
        argv = ["taskset", "-c", self.cpus, *self.argv]
        self.popen = start_group(
            argv, self.log, append=True, cwd=self.cwd, env=env, preexec_fn=raise_nofile
        )

    @property
    def pid(self) -> int:
        assert self.popen is not None, f"{self.name} was not started"
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, grace_s: float = 5.0) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(grace_s)

    def interrupt(self, grace_s: float = 30.0) -> None:
        """Ctrl-C to the process group, and wait up to ``grace_s`` for it to end."""
        if self.popen is None or self.popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(grace_s)

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def wait_http(
    proc: Proc, host: str, port: int, path: str = "/health", timeout_s: float = 60.0
) -> None:
    """Wait until ``GET path`` answers (any status) or fail with the process's log tail."""
    deadline = time.monotonic() + timeout_s
    request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(f"{proc.name} exited:\n{proc.tail()}")
        try:
            with socket.create_connection((host, port), timeout=1.0) as sock:
                sock.sendall(request)
                if sock.recv(16).startswith(b"HTTP/1."):
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{proc.name} not answering on {host}:{port}:\n{proc.tail()}")


def fake_backend(out: Path, cpus: str = "0", *options: str) -> tuple[Proc, int]:
    """The hot path's fake backend (``bench/hotpath/fake_backend.py``, with ``options``) on a
    free port, pinned to ``cpus``, logging to ``out/backend.log`` (not started yet)."""
    port = free_port()
    argv = [sys.executable, "-m", "bench.hotpath.fake_backend", "--port", str(port), *options]
    return Proc("fake-backend", argv, cpus, out / "backend.log"), port
