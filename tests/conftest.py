"""Which decision core the suite imports: the compiled one (the compiled tier, see
scripts/test.sh) or plain Python. ``SLUICEGATE_EXPECT_CORE=compiled|interpreted`` makes a
mismatch stop the session before any test runs, so a tier never passes on the wrong core."""

from __future__ import annotations

import os

import pytest

from policies.build import compiled_modules, core


def pytest_report_header(config: pytest.Config) -> str:
    names = compiled_modules()
    return f"decision core: {core()} ({len(names)} compiled modules)"


def pytest_configure(config: pytest.Config) -> None:
    expected = os.environ.get("SLUICEGATE_EXPECT_CORE")
    if expected and core() != expected:
        raise pytest.UsageError(
            f"SLUICEGATE_EXPECT_CORE={expected}, but the decision core imported from "
            f"{os.path.dirname(__import__('policies').__file__)} is {core()}"
        )
