"""A real Arize Phoenix on free loopback ports: the OTLP receiver the tracing tests export to
and read traces back from (``tests/phoenix_spans.py``).

Phoenix lives in a venv of its own (``SLUICEGATE_PHOENIX_VENV``, default
``$HOME/.cache/sluicegate/phoenix-venv``), which ``scripts/phoenix/install.sh`` makes when it
is missing and reuses when cached. Each server has its own working directory (its SQLite
database) in a temporary folder, removed on ``stop``. It takes OTLP/HTTP at
``{url}/v1/traces`` on its HTTP port; its OTLP/gRPC collector cannot be turned off, so it gets
a free port too. No telemetry of its own, no external resources in its UI.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from pathlib import Path

import httpx

from scripts.cache_dirs import cache_dir
from scripts.service_argv import start_group, stop_group
from scripts.vllm.serve import free_port
from tests.loopback_server import LoopbackServer

REPO = Path(__file__).resolve().parents[1]
INSTALL = REPO / "scripts" / "phoenix" / "install.sh"
START_TIMEOUT_S = 120.0
STOP_GRACE_S = 10.0


def phoenix_venv() -> Path:
    return cache_dir("SLUICEGATE_PHOENIX_VENV", "phoenix-venv")


def install_phoenix() -> None:
    """``scripts/phoenix/install.sh``: milliseconds when the venv is cached."""
    done = subprocess.run(
        ["bash", str(INSTALL)], capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    if done.returncode != 0:
        raise RuntimeError(f"{INSTALL} failed ({done.returncode}):\n{done.stderr[-3000:]}")


class PhoenixServer(LoopbackServer):
    """``start``/``stop``; ``url`` is its HTTP API and UI, ``otlp_traces_url`` its OTLP/HTTP
    trace endpoint; ``started_in_s`` how long it took to answer ``/healthz``."""

    def __init__(self) -> None:
        super().__init__("phoenix")
        self.grpc_port = free_port()
        self.started_in_s = 0.0
        self._launched_at = 0.0
        self._failure = ""
        self._watch = threading.Thread()
        self.log_path = self._dir / "phoenix.log"

    @property
    def otlp_traces_url(self) -> str:
        return f"{self.url}/v1/traces"

    def start(self) -> PhoenixServer:
        """Launched and ready."""
        self.launch()
        self.wait_ready()
        return self

    def launch(self) -> PhoenixServer:
        """Launched; ``wait_ready`` waits for it. Its URLs are known at once, so a server
        that exports to it (vLLM, which boots for a minute) can start meanwhile."""
        env = {
            **os.environ,
            "PHOENIX_HOST": "127.0.0.1",
            "PHOENIX_PORT": str(self.port),
            "PHOENIX_GRPC_PORT": str(self.grpc_port),
            "PHOENIX_WORKING_DIR": str(self._dir),
            "PHOENIX_TELEMETRY_ENABLED": "false",
            "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
        }
        self._launched_at = time.monotonic()
        argv = [str(phoenix_venv() / "bin" / "phoenix"), "serve"]
        self._proc = start_group(argv, self.log_path, cwd=self._dir, env=env)
        self._watch = threading.Thread(target=self._watch_healthz, args=(self._proc,), daemon=True)
        self._watch.start()
        return self

    def wait_ready(self) -> None:
        """Until ``/healthz`` answered; stopped and RuntimeError when it exited or timed out."""
        self._watch.join(START_TIMEOUT_S + 5.0)
        if not self.started_in_s:
            self.stop()
            raise RuntimeError(f"Phoenix did not become ready ({self._failure}):\n{self.log()}")

    def _watch_healthz(self, proc: subprocess.Popen[bytes]) -> None:
        """From launch until ready, exited or past the deadline: ``started_in_s`` is when
        ``/healthz`` first answered, whenever a test first waits for it."""
        failure = self._poll_ready(proc, self._launched_at + START_TIMEOUT_S, 0.2)
        if failure == "timeout":
            self._failure = f"no answer within {START_TIMEOUT_S} s"
        elif failure:
            self._failure = failure
        else:
            self.started_in_s = time.monotonic() - self._launched_at

    def ready(self) -> bool:
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{self.url}/healthz", timeout=1.0).status_code == 200
        return False

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-3000:]
        except OSError:
            return "(no log)"

    def _end(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGTERM to its process group, SIGKILL after a grace."""
        stop_group(proc, STOP_GRACE_S)
