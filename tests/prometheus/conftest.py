"""The Prometheus tier: a real Prometheus (``prometheus`` and ``promtool`` from the OS
packages, installed by scripts/test.sh) scraping a real gateway and emulators.

``observed``: the scenario that makes every event happen (tests/prometheus/scenario.py);
``ordinary``: an ordinary day (tests/prometheus/ordinary.py). Each runs once per session,
its Prometheus kept up for the tests to query.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.prometheus.fleet import Run
from tests.prometheus.ordinary import ordinary_run
from tests.prometheus.processes import REPO
from tests.prometheus.scenario import observed_run

DASHBOARD = REPO / "deploy" / "grafana" / "sluicegate.json"


@pytest.fixture(scope="session")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    with observed_run(tmp_path_factory.mktemp("observed")) as run:
        yield run


@pytest.fixture(scope="session")
def ordinary(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    with ordinary_run(tmp_path_factory.mktemp("ordinary")) as run:
        yield run


@pytest.fixture(scope="session")
def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data
