"""Ending a child process that tests and benchmarks started: one signal, a grace, then
SIGKILL."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, grace_s: float = 10.0) -> None:
    """``sig`` (SIGTERM by default) to a child still running, SIGKILL if it has not ended
    within ``grace_s``; then reaped. Safe to call on one that has ended."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(grace_s)


def passing(argv: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``argv`` run to its end with its output captured as text; an AssertionError holding
    that output unless it exited 0 (for checkers: ``promtool``, ``sluicegate check-config``)."""
    done = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done
