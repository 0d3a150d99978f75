"""The command lines of the services that tests and benchmarks start on loopback:
``sluicegate``'s own commands from this checkout, and a throwaway ``redis-server``; and
how one is started in its own session (``start_group``), waited for (``wait_ready``) and
stopped (``stop_group``)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import httpx


def sluicegate(*args: str) -> list[str]:
    """``sluicegate ARGS`` run from this checkout (PYTHONPATH is inherited)."""
    return [sys.executable, "-m", "commands.cli", *args]


def serve(
    config: Path | str, *options: str, records: bool = True, log_level: str = "warning"
) -> list[str]:
    """``sluicegate serve --config CONFIG OPTIONS`` logging at ``log_level`` (warnings and
    errors by default); ``records=False`` leaves the per-request decision records out too."""
    argv = sluicegate("serve", "--config", str(config), *options, "--log-level", log_level)
    return argv if records else [*argv, "--no-records"]


def emulate(port: int, model: str, *options: str) -> list[str]:
    """``sluicegate emulate`` serving ``model`` on ``port`` (the emulator's OPTIONS after)."""
    return sluicegate("emulate", "--model-name", model, "--port", str(port), *options)


def redis_server(binary: str, port: int, directory: Path | str) -> list[str]:
    """``redis-server`` on loopback ``port`` without persistence (no RDB snapshot, no AOF:
    a restart comes back empty), in the foreground, logging warnings to stdout."""
    return [
        binary,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--dir",
        str(directory),
        "--save",
        "",
        "--appendonly",
        "no",
        "--daemonize",
        "no",
        "--loglevel",
        "warning",
        "--logfile",
        "",
    ]


def start_group(
    argv: Sequence[str],
    log: Path,
    *,
    append: bool = False,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    preexec_fn: Callable[[], object] | None = None,
) -> subprocess.Popen[bytes]:
    """``argv`` in its own session (so that ``stop_group`` ends it and its children), stdin
    closed, stdout and stderr into ``log`` (appended to with ``append``)."""
    with log.open("ab" if append else "wb") as out:
        return subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=preexec_fn,
        )


class NotReady(RuntimeError):
    """A URL polled by ``poll_ready`` did not answer 200: its process exited first
    (``exited``: the exit code), or the time ran out (``exited`` None)."""

    def __init__(self, message: str, exited: int | None) -> None:
        super().__init__(message)
        self.exited = exited


def poll_ready(
    url: str,
    timeout_s: float,
    popen: subprocess.Popen[bytes] | None = None,
    every_s: float = 0.2,
    answer_s: float = 1.0,
) -> None:
    """Until ``url`` answers 200, asked every ``every_s`` (each GET given ``answer_s``);
    ``NotReady`` at once when ``popen`` exits, or after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if popen is not None and popen.poll() is not None:
            exited = popen.returncode
            raise NotReady(f"exited with {exited} before {url} answered", exited)
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=answer_s).status_code == 200:
                return
        time.sleep(every_s)  # polling a starting process: there is no event to wait on
    raise NotReady(f"{url} did not answer 200 within {timeout_s} s", None)


def wait_ready(
    popen: subprocess.Popen[bytes], url: str, log: Path, timeout_s: float, name: str
) -> None:
    """Until ``url`` answers 200; ``RuntimeError`` when the process exits first,
    ``TimeoutError`` after ``timeout_s``, each with the tail of its ``log``."""
    try:
        poll_ready(url, timeout_s, popen)
    except NotReady as not_ready:
        tail = log.read_text()[-3000:]
        if not_ready.exited is not None:
            raise RuntimeError(f"{name} exited early:\n{tail}") from None
        raise TimeoutError(f"{name} not ready at {url}:\n{tail}") from None


def stop_group(popen: subprocess.Popen[bytes], grace_s: float = 15.0) -> None:
    """SIGTERM to the process group of ``popen`` (started with ``start_new_session``),
    SIGKILL after ``grace_s``; nothing when it has already exited."""
    if popen.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(popen.pid, signal.SIGTERM)
    try:
        popen.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(popen.pid, signal.SIGKILL)
        popen.wait(timeout=grace_s)
