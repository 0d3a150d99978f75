"""The Prometheus tier: a real Prometheus (``prometheus`` and ``promtool`` from the OS
packages, installed by scripts/test.sh) scraping a real gateway and emulators.

``observed``: one scenario run per session (tests/prometheus/scenario.py), Prometheus kept
up for the tests to query.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.prometheus.scenario import Run, observed_run


@pytest.fixture(scope="session")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    with observed_run(tmp_path_factory.mktemp("observed")) as run:
        yield run
