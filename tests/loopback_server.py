"""What the test servers (``tests/redis_server.py``, ``tests/phoenix_server.py``) share: one
process on a free loopback port, with a temporary working directory of its own that ``stop``
removes, and the wait until it answers."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from scripts.vllm.serve import free_port


class LoopbackServer:
    """``url`` from ``URL``; a subclass starts ``_proc`` and says how it is ``ready`` and how
    it is ended (``_end``)."""

    URL = "http://127.0.0.1:{port}"

    def __init__(self, name: str, port: int | None = None) -> None:
        self.port = port or free_port()
        self._dir = Path(tempfile.mkdtemp(prefix=f"sluicegate-{name}-"))
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return self.URL.format(port=self.port)

    def ready(self) -> bool:
        raise NotImplementedError

    def _poll_ready(self, proc: subprocess.Popen[bytes], deadline: float, every_s: float) -> str:
        """Until ``ready``: "" once it answers; else "exited with N", or "timeout" past
        ``deadline`` (``time.monotonic``)."""
        while not self.ready():
            if proc.poll() is not None:
                return f"exited with {proc.returncode}"
            if time.monotonic() > deadline:
                return "timeout"
            time.sleep(every_s)  # polling a starting server; there is no event to wait on
        return ""

    def _end(self, proc: subprocess.Popen[bytes]) -> None:
        raise NotImplementedError

    def _halt(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            self._end(proc)

    def stop(self) -> None:
        """The process ended, its directory removed; idempotent."""
        self._halt()
        shutil.rmtree(self._dir, ignore_errors=True)
