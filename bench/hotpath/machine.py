"""What the numbers were measured on: CPU, kernel, load, and every component's version."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
from collections.abc import Mapping
from datetime import UTC, datetime

_PY_PACKAGES = ("uvicorn", "uvloop", "httptools", "httpx", "httpcore", "fastapi", "starlette")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def _wrk_version() -> str:
    out = subprocess.run(["wrk", "-v"], capture_output=True, text=True)
    first = (out.stdout or out.stderr).strip().splitlines()
    return first[0] if first else "?"


def _cpu_pressure() -> str:
    try:
        with open("/proc/pressure/cpu") as f:
            return f.readline().strip()
    except OSError:
        return "n/a"


def describe(versions: Mapping[str, str]) -> list[str]:
    """Markdown bullet lines."""
    py = ", ".join(f"{p} {_version(p)}" for p in _PY_PACKAGES)
    lines = [
        f"- date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        f"- CPU: {_cpu_model()}, {os.cpu_count()} cores; kernel {platform.release()}",
        f"- load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
        f"CPU pressure: {_cpu_pressure()}",
        f"- Python {platform.python_version()}; {py}",
        f"- load generator: {_wrk_version()}",
    ]
    lines += [f"- {name}: {version}" for name, version in versions.items()]
    return lines


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "absent"
