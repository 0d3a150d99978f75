"""The server speaks, the gateway listens: decisions that change because real vLLM said so.

* vLLM reports ``num_requests_waiting > 0`` (more long requests sent to it directly than it
  has batch slots): the gateway holds a request in its own queue, although its own count of
  what it sent is far below ``max_num_seqs``, and dispatches it once the server's queue drains.
* (``test_engine_busy.py``) vLLM's own queue cap answers 503: saturation, not a dead backend.

Load is held open by ``HeldStreams`` and cancelled before the test ends (vLLM aborts it).
The file sorts after ``test_gateway_*``: the session gateway also scrapes this server, and
the saturation this load leaves in its 30 s window would make its degradation ladder cap
the long streams those tests rely on.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from policies.limit_signals import ServerSignalsParams
from scripts.vllm.serve import MAX_NUM_SEQS, VllmServer
from tests.vllm.gateway_process import GatewayProcess
from tests.vllm.held_streams import HeldStreams
from tests.vllm.support import AGENTS_KEY, gateway_config, metric_value
from tests.vllm.waiting import wait_until

pytestmark = pytest.mark.vllm

LONG_OUTPUT = 1900  # near max_model_len: as long as vLLM can run one request
LOAD_TIMEOUT_S = 90.0
AUTH = {"authorization": f"Bearer {AGENTS_KEY}"}
MAX_WAITING = ServerSignalsParams().max_waiting
"""What the default ``server_signals`` limit tolerates in the engine's queue."""


def long_request(model: str, *, stream: bool = False) -> dict[str, Any]:
    """Near max_model_len; non-streaming by default, which costs vLLM's API server (starved
    on two loaded cores) far less than streaming every token."""
    return {"model": model, "prompt": "x", "max_tokens": LONG_OUTPUT, "stream": stream,
            "ignore_eos": True}  # fmt: skip


def short_request(model: str) -> dict[str, Any]:
    return {"model": model, "prompt": "x", "max_tokens": 4, "ignore_eos": True}


def scheduler(gateway: GatewayProcess) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{gateway.url}/admin/scheduler", timeout=30.0).json()
    return body


def backend_entry(gateway: GatewayProcess, name: str) -> dict[str, Any]:
    body = httpx.get(f"{gateway.url}/admin/backends", timeout=30.0).json()
    entry: dict[str, Any] = next(b for b in body["backends"] if b["name"] == name)
    return entry


@pytest.fixture
def signals_gateway(tiny_vllm: VllmServer, tmp_path: Path) -> Iterator[GatewayProcess]:
    """A gateway of its own with the default policy minus the degradation ladder, so the
    first request keeps its full length (the ladder would cap it while vLLM is saturated)."""
    config = gateway_config([tiny_vllm])
    config["policy"]["ladder"] = {"steps": []}
    running = GatewayProcess.start(config, tmp_path)
    try:
        yield running
    finally:
        running.stop()


def test_a_request_waits_while_vllm_reports_waiting_and_goes_when_it_drains(
    signals_gateway: GatewayProcess, tiny_vllm: VllmServer
) -> None:
    """Direct load keeps vLLM's batch nearly full (``steady``) and its queue non-empty
    (``excess``). One request of ours goes (liveness floor), the next is held by the gateway
    although only one of ours is in flight. When only the excess is cancelled, vLLM's queue
    drains while its batch stays busy, and the held request is dispatched while the first
    is still in flight: the server's queue, not our count, decided."""
    gateway, name = signals_gateway, tiny_vllm.served_name
    target, through_gateway = f"{tiny_vllm.url}/v1/completions", f"{gateway.url}/v1/completions"

    def gateway_sees_waiting() -> dict[str, Any]:
        signals: dict[str, Any] = backend_entry(gateway, name)["signals"]
        return signals

    steady = HeldStreams(target, long_request(name), MAX_NUM_SEQS - 1, repeat=True)
    excess = HeldStreams(target, long_request(name), MAX_NUM_SEQS, repeat=True)
    with steady, excess:

        def vllm_waiting() -> tuple[float, list[str]]:
            """vLLM's own gauge, with any load failure so a timeout shows it."""
            waiting = metric_value(tiny_vllm.url, "vllm:num_requests_waiting")
            return waiting, steady.errors + excess.errors

        wait_until(vllm_waiting, lambda w: w[0] > MAX_WAITING, timeout_s=LOAD_TIMEOUT_S)
        wait_until(gateway_sees_waiting, lambda s: (s["waiting"] or 0) > MAX_WAITING,
                   timeout_s=LOAD_TIMEOUT_S)  # fmt: skip
        with HeldStreams(through_gateway, long_request(name), 1, AUTH) as first:
            wait_until(lambda: scheduler(gateway)["in_flight"], lambda n: n == 1)
            with ThreadPoolExecutor(1) as pool:
                second = pool.submit(httpx.post, through_gateway, json=short_request(name),
                                     headers=AUTH, timeout=LOAD_TIMEOUT_S)  # fmt: skip
                held = wait_until(lambda: scheduler(gateway), lambda s: s["queued"] >= 1)
                # one of ours in flight, far below max_num_seqs: the count is not what holds it
                assert held["in_flight_by_backend"][name] == 1 < MAX_NUM_SEQS
                assert not second.done()
                first_tokens = held["in_flight_tokens"]  # the first one's charge

                excess.stop()  # vLLM aborts the excess: its queue drains, its batch stays busy

                left = wait_until(lambda: scheduler(gateway), lambda s: s["queued"] == 0,
                                  timeout_s=LOAD_TIMEOUT_S)  # fmt: skip
                # the first one's charge is still held: it was in flight when the second left
                # the queue, so the liveness floor (nothing of ours in flight) did not let it go
                assert left["in_flight_tokens"] >= first_tokens, (held, left)
                reply = second.result(timeout=LOAD_TIMEOUT_S)
        assert first.errors == []
    assert steady.errors == [] and excess.errors == []
    assert reply.status_code == 200, reply.text
    assert reply.json()["usage"]["completion_tokens"] == 4
    assert reply.headers["x-sluicegate-decision"] in {"admit", "degrade"}
    assert "x-sluicegate-queue-position" in reply.headers  # it waited in the gateway's queue
    assert "x-sluicegate-queue-wait-ms" in reply.headers
    wait_until(lambda: scheduler(gateway)["in_flight"], lambda n: n == 0)
