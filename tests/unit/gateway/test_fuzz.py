"""The short fuzz campaign of the unit tier: generated requests (body, headers, path)
against the real app in-process, and generated config files; no 5xx, no exception, no
error logged, nothing left in flight. ``SLUICEGATE_FUZZ_EXAMPLES`` raises the count; the
long campaign is ``python -m tests.fuzz --examples 100000`` (tests/fuzz)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.fuzz.campaign import run_configs, run_requests
from tests.fuzz.harness import ConfigChecker, GatewayDriver

EXAMPLES = int(os.environ.get("SLUICEGATE_FUZZ_EXAMPLES", "300"))


@pytest.fixture
def driver() -> Iterator[GatewayDriver]:
    d = GatewayDriver()
    yield d
    d.close()


def test_generated_requests_get_no_5xx_and_leave_nothing_behind(driver: GatewayDriver) -> None:
    run_requests(driver, EXAMPLES)
    assert driver.exchanges >= EXAMPLES
    assert driver.upstream.requests > 0  # some were valid enough to be served


def test_generated_config_files_are_accepted_or_refused_with_locations() -> None:
    checker = ConfigChecker()
    try:
        run_configs(checker, EXAMPLES // 4)  # a file costs ~5 YAML parses: slower
    finally:
        checker.close()
    assert checker.checked >= EXAMPLES // 4
