"""The server speaks, the gateway listens: decisions that change because real vLLM said so.

* vLLM reports ``num_requests_waiting > 0`` (more long requests sent to it directly than it
  has batch slots): the gateway holds a request in its own queue, although its own count of
  what it sent is far below ``max_num_seqs``, and dispatches it once the server's queue drains.
* vLLM's own queue cap (``--max-num-queued-reqs``) answers 503 "engine busy": the gateway
  treats that as saturation, not as a dead backend.

Load is held open by ``HeldStreams`` and cancelled before each test ends (vLLM aborts it).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from policies.limit_signals import ServerSignalsParams
from scripts.vllm.serve import MAX_NUM_SEQS, VllmServer
from tests.vllm.conftest import ENGINE_QUEUE_CAP
from tests.vllm.gateway_process import GatewayProcess
from tests.vllm.held_streams import HeldStreams
from tests.vllm.support import AGENTS_KEY, metric_value
from tests.vllm.waiting import wait_until

pytestmark = pytest.mark.vllm

LONG_OUTPUT = 1900  # near max_model_len: long enough to still run while the test acts
LOAD_TIMEOUT_S = 90.0
AUTH = {"authorization": f"Bearer {AGENTS_KEY}"}
MAX_WAITING = ServerSignalsParams().max_waiting
"""What the default ``server_signals`` limit tolerates in the engine's queue."""


def long_stream(model: str) -> dict[str, Any]:
    return {"model": model, "prompt": "x", "max_tokens": LONG_OUTPUT, "stream": True,
            "ignore_eos": True}  # fmt: skip


def short_request(model: str) -> dict[str, Any]:
    return {"model": model, "prompt": "x", "max_tokens": 4, "ignore_eos": True}


def scheduler(gateway: GatewayProcess) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{gateway.url}/admin/scheduler", timeout=5.0).json()
    return body


def backend_entry(gateway: GatewayProcess, name: str) -> dict[str, Any]:
    body = httpx.get(f"{gateway.url}/admin/backends", timeout=5.0).json()
    entry: dict[str, Any] = next(b for b in body["backends"] if b["name"] == name)
    return entry


def test_a_request_waits_while_vllm_reports_waiting_and_goes_when_it_drains(
    gateway: GatewayProcess, tiny_vllm: VllmServer
) -> None:
    name = tiny_vllm.served_name

    def vllm_waiting() -> float:
        return metric_value(tiny_vllm.url, "vllm:num_requests_waiting")

    def ours_in_flight() -> int:
        return int(scheduler(gateway)["in_flight_by_backend"].get(name, 0))

    direct = HeldStreams(f"{tiny_vllm.url}/v1/completions", long_stream(name), 3 * MAX_NUM_SEQS)
    with direct:
        wait_until(vllm_waiting, lambda n: n > MAX_WAITING, timeout_s=LOAD_TIMEOUT_S)
        wait_until(lambda: backend_entry(gateway, name)["signals"]["waiting"],
                   lambda n: n is not None and n > MAX_WAITING)  # fmt: skip
        # the first one goes anyway (liveness floor: nothing of ours was in flight) ...
        first_url = f"{gateway.url}/v1/completions"
        with HeldStreams(first_url, long_stream(name), 1, AUTH) as first:
            wait_until(ours_in_flight, lambda n: n == 1)
            with ThreadPoolExecutor(1) as pool:
                second = pool.submit(httpx.post, first_url, json=short_request(name),
                                     headers=AUTH, timeout=LOAD_TIMEOUT_S)  # fmt: skip
                # ... the second is held: one of ours in flight, far below max_num_seqs, so
                # only the server's reported queue can be what holds it
                held = wait_until(lambda: scheduler(gateway), lambda s: s["queued"] >= 1)
                assert held["in_flight_by_backend"][name] == 1 < MAX_NUM_SEQS
                assert vllm_waiting() > MAX_WAITING
                assert not second.done()

                direct.stop()  # the server's queue drains (vLLM aborts the direct load)

                reply = second.result(timeout=LOAD_TIMEOUT_S)
            assert first.open == 1  # still streaming: our count never changed
            assert ours_in_flight() == 1
        assert first.errors == []
    assert direct.errors == []
    assert reply.status_code == 200, reply.text
    assert reply.json()["usage"]["completion_tokens"] == 4
    assert reply.headers["x-sluicegate-decision"] in {"admit", "degrade"}
    assert "x-sluicegate-queue-position" in reply.headers  # it waited in the gateway's queue
    assert "x-sluicegate-queue-wait-ms" in reply.headers
    wait_until(ours_in_flight, lambda n: n == 0)


def test_vllm_engine_busy_503_is_saturation_not_a_dead_backend(
    doomed_gateway: GatewayProcess, doomed_vllm: VllmServer
) -> None:
    name, url = doomed_vllm.served_name, doomed_gateway.url

    def rejected_by_vllm() -> float:
        return metric_value(
            doomed_vllm.url, "vllm:admission_rejections_total", reason="max_num_queued_reqs"
        )

    def busy_seen() -> float:
        return metric_value(url, "sluicegate_upstream_errors_total", backend=name, kind="busy")

    rejected_before, busy_before = rejected_by_vllm(), busy_seen()
    load = HeldStreams(f"{doomed_vllm.url}/v1/completions", long_stream(name), ENGINE_QUEUE_CAP)
    with load:
        wait_until(lambda: metric_value(doomed_vllm.url, "vllm:num_requests_running"),
                   lambda n: n == ENGINE_QUEUE_CAP, timeout_s=LOAD_TIMEOUT_S)  # fmt: skip
        direct = httpx.post(f"{doomed_vllm.url}/v1/completions", json=short_request(name))
        assert direct.status_code == 503  # the premise: vLLM's own cap is full

        reply = httpx.post(f"{url}/v1/completions", json=short_request(name), headers=AUTH,
                           timeout=LOAD_TIMEOUT_S)  # fmt: skip

        # the gateway's attempt reached vLLM and was refused by it
        assert rejected_by_vllm() - rejected_before >= 2
        assert busy_seen() > busy_before
        assert reply.status_code in {200, 429}, reply.text
        if reply.status_code == 429:
            assert reply.json()["error"]["code"] == "overloaded"
            assert reply.headers["x-sluicegate-reason"] == "overloaded"
            assert int(reply.headers["retry-after"]) >= 1
            assert float(reply.headers["retry-after-ms"]) > 0
        # busy is not down: still ready, health untouched
        assert httpx.get(f"{url}/readyz", timeout=5.0).status_code == 200
        assert backend_entry(doomed_gateway, name)["health"] != "down"
    assert load.errors == []
    wait_until(lambda: metric_value(url, "sluicegate_in_flight"), lambda n: n == 0)
