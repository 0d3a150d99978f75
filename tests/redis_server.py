"""A real ``redis-server`` on a free loopback port, for the fleet tests.

Each server has its own temporary directory and no persistence (no RDB snapshot, no AOF), so
a restart comes back empty, as a Redis without persistence does in production. The binary is
the OS package's (``scripts/test.sh`` installs it when missing); ``REDIS_SERVER`` names
another one.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time

from scripts.service_argv import redis_server
from tests.loopback_server import LoopbackServer

START_TIMEOUT_S = 10.0


def redis_binary() -> str | None:
    return os.environ.get("REDIS_SERVER") or shutil.which("redis-server")


class RedisServer(LoopbackServer):
    """``start``/``stop``; ``pause`` and ``resume`` (SIGSTOP/SIGCONT) to make it hang;
    ``restart`` to bring it back empty on the same port."""

    URL = "redis://127.0.0.1:{port}/0"

    def __init__(self, binary: str, port: int | None = None) -> None:
        super().__init__("redis", port)
        self.binary = binary

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    def start(self) -> RedisServer:
        argv = redis_server(self.binary, self.port, self._dir)
        self._proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        failure = self._poll_ready(self._proc, time.monotonic() + START_TIMEOUT_S, 0.02)
        if failure == "timeout":
            raise RuntimeError("redis-server did not answer PING")
        if failure:
            raise RuntimeError(f"redis-server {failure}")
        return self

    def ready(self) -> bool:
        """It answers PING."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """A paused server goes on; nothing to do once it is stopped."""
        if self._proc is not None:
            os.kill(self._proc.pid, signal.SIGCONT)

    def restart(self) -> None:
        """Killed and started again on the same port: it comes back with no data."""
        self._halt()
        self.start()

    def _end(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is not None:
            return
        os.kill(proc.pid, signal.SIGCONT)  # a paused server cannot act on SIGTERM
        proc.kill()
        proc.wait(10)
