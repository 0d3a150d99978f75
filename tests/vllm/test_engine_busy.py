"""vLLM's own admission (``--max-num-queued-reqs``) answers 503 "engine busy" when its
queue cap is full. The gateway must take that as saturation, not as a dead backend: still
ready, health untouched, and the client gets a later success or a 429 ``overloaded`` with a
computed Retry-After, never a 5xx."""

from __future__ import annotations

import httpx
import pytest

from scripts.vllm.serve import VllmServer
from tests.vllm.conftest import ENGINE_QUEUE_CAP
from tests.vllm.gateway_process import GatewayProcess
from tests.vllm.held_streams import HeldStreams
from tests.vllm.support import metric_value
from tests.vllm.test_server_feedback import (
    AUTH,
    LOAD_TIMEOUT_S,
    backend_entry,
    long_request,
    short_request,
)
from tests.vllm.waiting import wait_until

pytestmark = pytest.mark.vllm


def test_vllm_engine_busy_503_is_saturation_not_a_dead_backend(
    capped_gateway: GatewayProcess, capped_vllm: VllmServer
) -> None:
    name, url = capped_vllm.served_name, capped_gateway.url

    def rejected_by_vllm() -> float:
        return metric_value(
            capped_vllm.url, "vllm:admission_rejections_total", reason="max_num_queued_reqs"
        )

    def busy_seen() -> float:
        return metric_value(url, "sluicegate_upstream_errors_total", backend=name, kind="busy")

    rejected_before, busy_before = rejected_by_vllm(), busy_seen()
    target = f"{capped_vllm.url}/v1/completions"
    load = HeldStreams(target, long_request(name), ENGINE_QUEUE_CAP, repeat=True)
    with load:
        wait_until(lambda: metric_value(capped_vllm.url, "vllm:num_requests_running"),
                   lambda n: n == ENGINE_QUEUE_CAP, timeout_s=LOAD_TIMEOUT_S)  # fmt: skip

        def direct_status() -> int:
            direct = httpx.post(target, json=short_request(name), timeout=LOAD_TIMEOUT_S)
            return direct.status_code

        # the premise: vLLM's own cap is full (a request may slip in while one is resent)
        wait_until(direct_status, lambda s: s == 503, timeout_s=LOAD_TIMEOUT_S, interval_s=0.2)

        replies: list[httpx.Response] = []

        def through_gateway() -> float:
            replies.append(httpx.post(f"{url}/v1/completions", json=short_request(name),
                                      headers=AUTH, timeout=LOAD_TIMEOUT_S))  # fmt: skip
            return busy_seen()

        # until one of the gateway's attempts reached vLLM and was refused by it
        wait_until(through_gateway, lambda n: n > busy_before, timeout_s=LOAD_TIMEOUT_S,
                   interval_s=0.2)  # fmt: skip
        assert rejected_by_vllm() - rejected_before >= 2
        for reply in replies:
            assert reply.status_code in {200, 429}, reply.text
            if reply.status_code == 429:
                assert reply.json()["error"]["code"] == "overloaded"
                assert reply.headers["x-sluicegate-reason"] == "overloaded"
                assert int(reply.headers["retry-after"]) >= 1
                assert float(reply.headers["retry-after-ms"]) > 0
        # busy is not down: still ready, health untouched
        assert httpx.get(f"{url}/readyz", timeout=5.0).status_code == 200
        assert backend_entry(capped_gateway, name)["health"] != "down"
    assert load.errors == []
    wait_until(lambda: metric_value(url, "sluicegate_in_flight"), lambda n: n == 0)
