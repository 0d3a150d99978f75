"""Runs each mutant of a module against the unit tests that cover it: pytest subprocesses,
one per listed path in order, each stopped at the first failure (-x) and after a timeout
scaled from the unmutated run. A mutant is killed when pytest does not pass (a failure, an
error, or the timeout); it survives when every listed path passes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import zlib
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from scripts.mutation.inject import KEY_ENV, MODULE_ENV
from scripts.mutation.operators import Mutant

_PYTEST = ["-m", "pytest", "-x", "-q", "--no-header", "-p", "no:cacheprovider"]
_MIN_TIMEOUT_S = 30.0
_TIMEOUT_FACTOR = 5.0
_MARK = {"killed": ".", "timeout": "T", "survived": "S"}


@dataclass
class Outcome:
    mutant: Mutant
    status: str  # killed | timeout | survived | equivalent
    note: str = ""  # the reason of an equivalent mutant


@dataclass
class ModuleResult:
    module: str
    outcomes: list[Outcome] = field(default_factory=list)
    error: str = ""  # the unmutated tests did not pass: nothing can be judged

    def count(self, *statuses: str) -> int:
        return sum(o.status in statuses for o in self.outcomes)

    @property
    def score(self) -> float | None:
        judged = self.count("killed", "timeout", "survived")
        return None if judged == 0 else 100.0 * self.count("killed", "timeout") / judged


def in_slice(mutant: Mutant, every: int) -> bool:
    return every <= 1 or zlib.crc32(mutant.key.encode()) % every == 0


def run_module(
    root: Path,
    module: str,
    tests: list[str],
    mutants: Iterable[Mutant],
    equivalents: dict[tuple[str, str], str],
    jobs: int,
    plugins: list[str],
) -> ModuleResult:
    result = ModuleResult(module)
    stages = _stages(tests)
    timeouts: list[float] = []
    for stage in stages:
        started = time.monotonic()
        rc, tail = _pytest(root, plugins, stage, None, None)
        if rc != 0:
            result.error = f"the unmutated tests fail (exit {rc}): {tail}"
            return result
        timeouts.append(max(_MIN_TIMEOUT_S, _TIMEOUT_FACTOR * (time.monotonic() - started)))
    todo: list[Mutant] = []
    for m in mutants:
        reason = equivalents.get((module, m.key))
        if reason is None:
            todo.append(m)
        else:
            result.outcomes.append(Outcome(m, "equivalent", reason))
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        judged = pool.map(lambda m: _judge(root, plugins, stages, timeouts, m), todo)
        result.outcomes.extend(judged)
    return result


def _stages(tests: list[str]) -> list[list[str]]:
    """One pytest run per listed path, in order, each leaving out the files run before it:
    a mutant the first (most telling) file kills never pays for collecting the rest."""
    return [
        [path, *(f"--ignore={t}" for t in tests[:i] if t.endswith(".py"))]
        for i, path in enumerate(tests)
    ]


def _judge(
    root: Path, plugins: list[str], stages: list[list[str]], timeouts: list[float], mutant: Mutant
) -> Outcome:
    outcome = Outcome(mutant, "survived")
    for stage, timeout in zip(stages, timeouts, strict=True):
        rc, _ = _pytest(root, plugins, stage, mutant, timeout)
        if rc is None or rc != 0:
            outcome = Outcome(mutant, "timeout" if rc is None else "killed")
            break
    print(_MARK[outcome.status], end="", flush=True)  # progress, as pytest's dots
    return outcome


def _pytest(
    root: Path, plugins: list[str], tests: list[str], mutant: Mutant | None, timeout: float | None
) -> tuple[int | None, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH")) if p)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # hypothesis and respx load in seconds; see plugins
    args = [sys.executable, *_PYTEST]
    for plugin in plugins:
        args += ["-p", plugin]
    if mutant is not None:
        env[MODULE_ENV], env[KEY_ENV] = mutant.module, mutant.key
        args += ["-p", "scripts.mutation.inject"]
    proc = subprocess.Popen(
        [*args, *tests],
        cwd=root,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # its own session: the tests' children go too
        proc.communicate()
        return None, ""
    return proc.returncode, out[-2000:]
