"""Run the real gateway, ``sluicegate serve --config FILE``, as a process on loopback.

The gateway is the code under test: it gets a YAML config file written like an operator
would, listens on a free 127.0.0.1 port and talks to the real vLLM servers over HTTP. A
process of its own, not a thread of the test run: the test's client and whatever earlier
tests left behind in this interpreter never share a GIL with the relay being measured.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from scripts.service_argv import serve
from scripts.vllm.serve import free_port
from tests.vllm.waiting import wait_until

START_TIMEOUT_S = 60.0
STOP_GRACE_S = 15.0


@dataclass
class GatewayProcess:
    process: subprocess.Popen[bytes]
    url: str
    log_path: Path

    @classmethod
    def start(cls, config: Mapping[str, Any], config_dir: Path) -> GatewayProcess:
        """Write ``config`` as YAML (port filled in), start the gateway, wait for /healthz."""
        port = free_port()
        full = {**config, "server": {**config.get("server", {}), "port": port}}
        path = config_dir / f"gateway-{port}.yaml"
        path.write_text(yaml.safe_dump(full, sort_keys=False))
        log_path = Path(tempfile.mkstemp(prefix=f"sluicegate-{port}-", suffix=".log")[1])
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                serve(path),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        running = cls(process, f"http://127.0.0.1:{port}", log_path)
        try:
            wait_until(running.serving_or_dead, bool, timeout_s=START_TIMEOUT_S, interval_s=0.1)
            if process.poll() is not None:
                raise RuntimeError(f"the gateway exited ({process.returncode}):\n{running.log()}")
        except BaseException:
            running.stop()
            raise
        return running

    def serving_or_dead(self) -> bool:
        if self.process.poll() is not None:
            return True
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{self.url}/healthz", timeout=1.0).status_code == 200
        return False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        """SIGTERM (uvicorn runs the lifespan shutdown), SIGKILL after a grace; idempotent."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=STOP_GRACE_S)
