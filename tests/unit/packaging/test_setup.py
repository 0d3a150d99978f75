"""The build (setup.py): which installs compile the decision core, and the fallback to plain
Python where there is no C compiler. The compiled build itself is exercised by the compiled
tier of scripts/test.sh, which runs the unit and emulator tiers against the wheel."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from scripts.build_core import copy_sources

REPO = Path(__file__).resolve().parents[3]


def setup_module_with(argv: list[str], monkeypatch: pytest.MonkeyPatch, mode: str | None) -> Any:
    if mode is None:
        monkeypatch.delenv("SLUICEGATE_COMPILE", raising=False)
    else:
        monkeypatch.setenv("SLUICEGATE_COMPILE", mode)
    monkeypatch.setattr(sys, "argv", ["setup.py", *argv])
    return runpy.run_path(str(REPO / "setup.py"), run_name="setup")  # not __main__: no setup()


@pytest.mark.parametrize("mode", [None, "auto", "1", "0"])
def test_editable_installs_stay_plain_python(monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    setup = setup_module_with(["editable_wheel", "--dist-dir", "x"], monkeypatch, mode)
    assert setup["ext_modules"]() == []


@pytest.mark.parametrize("step", [["egg_info"], ["dist_info", "--output-dir", "x"], ["sdist"]])
def test_metadata_steps_do_not_compile(monkeypatch: pytest.MonkeyPatch, step: list[str]) -> None:
    assert setup_module_with(step, monkeypatch, "1")["ext_modules"]() == []


def test_compile_0_builds_plain_python(monkeypatch: pytest.MonkeyPatch) -> None:
    assert setup_module_with(["bdist_wheel"], monkeypatch, "0")["ext_modules"]() == []


def test_an_unknown_mode_stops_the_build(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SystemExit, match="expected auto, 0 or 1"):
        setup_module_with(["bdist_wheel"], monkeypatch, "yes")["ext_modules"]()


def test_the_compiled_modules_are_the_decision_core_but_its_python_only_parts() -> None:
    compiled = runpy.run_path(str(REPO / "setup.py"), run_name="setup")["compiled_modules"]()
    assert "policies/engine/scheduler.py" in compiled and "policies/types.py" in compiled
    stays = (
        "params",
        "registry",
        "plugins",
        "policy_set",
        "native/quick_init",
        "native/read_only",
        "build",
        "__init__",
        "engine/__init__",
        "gates/quota_params",
    )
    for name in stays:
        assert f"policies/{name}.py" not in compiled
    assert all(p.startswith("policies/") for p in compiled)


def _wheel(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    src = copy_sources(tmp_path / "src")
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "-v",
        "--no-deps",
        "--no-build-isolation",
        "-w",
        str(tmp_path / "out"),
        str(src),
    ]
    base = {k: v for k, v in os.environ.items() if k != "SLUICEGATE_COMPILE"}
    return subprocess.run(cmd, env={**base, **env}, capture_output=True, text=True, timeout=900)


def _members(tmp_path: Path) -> list[str]:
    (wheel,) = (tmp_path / "out").glob("*.whl")
    with zipfile.ZipFile(wheel) as z:
        return z.namelist()


def test_without_a_c_compiler_a_regular_install_is_plain_python(tmp_path: Path) -> None:
    done = _wheel(tmp_path, {"CC": "false"})  # a compiler that fails every file
    assert done.returncode == 0, done.stderr[-3000:]
    members = _members(tmp_path)
    assert "policies/engine/scheduler.py" in members
    assert not [m for m in members if m.endswith(".so")], "a half-compiled core was kept"
    assert "installing plain Python" in done.stdout + done.stderr
    assert [w.name.endswith("-py3-none-any.whl") for w in (tmp_path / "out").glob("*.whl")] == [
        True
    ]


def test_compile_1_fails_the_build_without_a_c_compiler(tmp_path: Path) -> None:
    done = _wheel(tmp_path, {"CC": "false", "SLUICEGATE_COMPILE": "1"})
    assert done.returncode != 0
    assert "Command '['false'," in done.stdout + done.stderr, done.stderr[-3000:]
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").glob("*.whl"))
