"""Drive one benchmark cell with wrk (C, one thread, pinned) and read its verdict.

wrk is the load generator because it is C, keeps ``C`` keep-alive connections busy from one
thread, and its Lua hooks can check each answer (``wrk/openai.lua``). For streams, its
``response()`` hook gets the de-chunked body, so counting the token markers there gives the
relayed chunks per second without a Python client in the measurement.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from bench.hotpath.payloads import NON_STREAM_TOKENS, STREAM_TOKENS

LUA = Path(__file__).resolve().parent / "wrk" / "openai.lua"
_MARK = "BENCH_RESULT "


@dataclass(frozen=True)
class CellResult:
    """One wrk run. Latencies in milliseconds, rates per second."""

    requests: int
    good: int
    bad: int
    errors: int
    """Socket errors and timeouts (connect, read, write, timeout) plus non-200 answers."""
    tokens: int
    duration_s: float
    p50_ms: float
    p99_ms: float

    @property
    def failed(self) -> int:
        return self.bad + self.errors

    @property
    def rate(self) -> float:
        """Good answers per second (requests or whole streams)."""
        return self.good / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.duration_s if self.duration_s > 0 else 0.0


def run_wrk(
    url: str,
    *,
    conns: int,
    duration_s: float,
    stream: bool,
    keys: tuple[str, ...],
    model: str,
    cpus: str = "0",
    timeout_s: float = 30.0,
) -> CellResult:
    """Run wrk for ``duration_s`` with ``conns`` connections; raise if it printed no verdict."""
    env = {
        **os.environ,
        "BENCH_STREAM": "1" if stream else "0",
        "BENCH_TOKENS": str(STREAM_TOKENS if stream else NON_STREAM_TOKENS),
        "BENCH_MODEL": model,
        "BENCH_KEYS": ",".join(keys),
    }
    argv = [
        "taskset",
        "-c",
        cpus,
        "wrk",
        "-t1",
        f"-c{conns}",
        f"-d{duration_s:g}s",
        f"--timeout={timeout_s:g}s",
        "-s",
        str(LUA),
        url,
    ]
    try:
        done = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=duration_s + timeout_s + 30
        )
    except subprocess.TimeoutExpired:
        # wrk itself hung (seen once at C=256 on a saturated machine): a failed cell, not a
        # crashed run, so the table still shows it and the run still fails
        return CellResult(0, 0, 0, 1, 0, duration_s, 0.0, 0.0)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith(_MARK)), None)
    if line is None:
        raise RuntimeError(
            f"wrk gave no verdict (rc={done.returncode}):\n{done.stdout}\n{done.stderr}"
        )
    raw = json.loads(line[len(_MARK) :])
    sock_errors = sum(raw[k] for k in ("connect", "read", "write", "timeout"))
    return CellResult(
        requests=raw["requests"],
        good=raw["good"],
        bad=raw["bad"],
        errors=sock_errors,
        tokens=raw["tokens"],
        duration_s=raw["duration_us"] / 1e6,
        p50_ms=raw["p50_us"] / 1e3,
        p99_ms=raw["p99_us"] / 1e3,
    )
