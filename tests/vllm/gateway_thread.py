"""Run a real Sluicegate gateway (``create_app`` + uvicorn) on loopback in a thread.

The gateway is the code under test: it gets a YAML config file written like an operator
would, listens on a free 127.0.0.1 port and talks to the real vLLM servers over HTTP.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn
import yaml

from gateway.app import create_app
from gateway.config import load_config
from scripts.vllm.serve import free_port
from tests.vllm.waiting import wait_until

START_TIMEOUT_S = 30.0


def key_digest(api_key: str) -> str:
    return hashlib.sha256(api_key.encode()).hexdigest()


@dataclass
class GatewayThread:
    server: uvicorn.Server
    thread: threading.Thread
    url: str

    @classmethod
    def start(cls, config: Mapping[str, Any], config_dir: Path) -> GatewayThread:
        """Write ``config`` as YAML (port filled in), start the gateway, wait until it serves."""
        port = free_port()
        full = {**config, "server": {**config.get("server", {}), "port": port}}
        path = config_dir / f"gateway-{port}.yaml"
        path.write_text(yaml.safe_dump(full, sort_keys=False))
        app = create_app(load_config(path))
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
        )
        thread = threading.Thread(target=server.run, name=f"gateway-{port}", daemon=True)
        thread.start()
        running = cls(server, thread, f"http://127.0.0.1:{port}")

        def up_or_dead() -> bool:
            return bool(server.started) or not thread.is_alive()

        try:
            wait_until(up_or_dead, bool, timeout_s=START_TIMEOUT_S)
            if not server.started:
                raise RuntimeError("the gateway thread died while starting (see the log above)")
        except BaseException:
            running.stop()
            raise
        return running

    def stop(self) -> None:
        """Ask uvicorn to exit (lifespan shutdown runs) and join the thread; idempotent."""
        self.server.should_exit = True
        self.thread.join(timeout=START_TIMEOUT_S)
