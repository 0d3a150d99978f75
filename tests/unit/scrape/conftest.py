from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).parents[2] / "fixtures"


@pytest.fixture(scope="session")
def under_load() -> str:
    """20 requests on 8 slots of a tiny model: running 8, waiting 12 (read from the file)."""
    return (FIXTURES / "vllm-0.32-metrics-under-load.txt").read_text()


@pytest.fixture(scope="session")
def preemption() -> str:
    """16 KV blocks of 128 tokens, 8 long requests: 11 preemptions (read from the file)."""
    return (FIXTURES / "vllm-0.32-metrics-preemption.txt").read_text()
