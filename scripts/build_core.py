"""The wheel a regular ``pip install .`` builds (the decision core compiled with mypyc),
built from a clean copy of this checkout and installed into a scratch directory.

    python scripts/build_core.py DIR      # prints DIR/site, the directory for PYTHONPATH

``SLUICEGATE_COMPILE=1``: the build compiles or fails (see setup.py). An earlier copy and
build in ``DIR`` are replaced, so a kept directory never holds stale code. Used by the
compiled tier of ``scripts/test.sh``, by ``bench/compiled_core.py`` and, for the copy, by
``tests/unit/packaging``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = (
    "pyproject.toml",
    "setup.py",
    "README.md",
    "gateway",
    "policies",
    "emulator",
    "simulation",
)


def copy_sources(dest: Path) -> Path:
    """What a wheel is built from (no caches, no compiled leftovers), copied into ``dest``."""
    dest.mkdir(parents=True)
    for name in SOURCES:
        if (ROOT / name).is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.so")
            shutil.copytree(ROOT / name, dest / name, ignore=ignore)
        else:
            shutil.copy2(ROOT / name, dest / name)
    return dest


def build(scratch: Path) -> Path:
    """The compiled package, installed into ``scratch/site`` from a fresh copy of the
    sources. Returns the directory to put on ``PYTHONPATH``."""
    for part in ("src", "wheel", "site"):
        shutil.rmtree(scratch / part, ignore_errors=True)
    src = copy_sources(scratch / "src")
    print(f"building the compiled wheel in {scratch} ...", file=sys.stderr, flush=True)
    env = {**os.environ, "SLUICEGATE_COMPILE": "1"}
    pip = [sys.executable, "-m", "pip"]
    _run([*pip, "wheel", "-q", "--no-deps", "-w", str(scratch / "wheel"), str(src)], env)
    (wheel,) = (scratch / "wheel").glob("*.whl")
    _run(
        [
            *pip,
            "install",
            "-q",
            "--no-deps",
            "--root-user-action=ignore",
            "--target",
            str(scratch / "site"),
            str(wheel),
        ],
        env,
    )
    return scratch / "site"


def _run(cmd: list[str], env: dict[str, str]) -> None:
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd[:4])} failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        sys.exit(f"usage: {sys.argv[0]} DIR  (prints DIR/site, the directory for PYTHONPATH)")
    print(build(Path(sys.argv[1]).resolve()))
