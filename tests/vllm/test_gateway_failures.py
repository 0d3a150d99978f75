"""The hard paths through the gateway, against real vLLM: a 429 the SDK backs off from, a
client that hangs up mid-stream, a backend that dies mid-stream, one that freezes mid-stream
(faults of the fault tier, ``tests/integration/test_faults.py``, here on the real engine).

Each waits on observable state (the gateway's and vLLM's own /metrics) with a bounded
timeout; nothing sleeps to make a test pass and no duration is asserted, except that the
SDK waited *at least* the Retry-After it was given, which is the behaviour under test.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import httpx2
import openai
import pytest

from scripts.vllm.serve import VllmServer
from tests.vllm.gateway_process import GatewayProcess
from tests.vllm.support import EXACT, METERED_KEY, PROMPT, OpenSdk, metric_value
from tests.vllm.waiting import wait_until

pytestmark = pytest.mark.vllm

LONG_OUTPUT = 1900  # near max_model_len: the stream is still running when the test acts


METERED_MAX_TOKENS = 400
"""Each metered request costs far more than the bucket holds, so after one is admitted the
Retry-After is seconds long, not a sliver a slow test step could outlast."""


class Exchanges:
    """What the SDK's HTTP client sent and received, with monotonic timestamps."""

    def __init__(self) -> None:
        self.sent: list[tuple[float, str | None]] = []
        self.received: list[tuple[float, int, str | None]] = []

    def on_request(self, request: httpx2.Request) -> None:
        self.sent.append((time.monotonic(), request.headers.get("x-stainless-retry-count")))

    def on_response(self, response: httpx2.Response) -> None:
        retry_ms = response.headers.get("retry-after-ms")
        self.received.append((time.monotonic(), response.status_code, retry_ms))

    def hooks(self) -> dict[str, list[Any]]:
        return {"request": [self.on_request], "response": [self.on_response]}


def test_quota_429_has_retry_after_and_the_sdk_waits_that_long_before_retrying(
    gateway: GatewayProcess, tiny_vllm: VllmServer, open_sdk: OpenSdk
) -> None:
    def metered_request(client: openai.OpenAI) -> openai.types.chat.ChatCompletion:
        return client.chat.completions.create(
            model=tiny_vllm.served_name,
            messages=PROMPT,
            max_tokens=METERED_MAX_TOKENS,
            extra_body=EXACT,
        )

    no_retry = open_sdk(gateway, METERED_KEY)
    metered_request(no_retry)  # admitted on the full bucket; drains it
    with pytest.raises(openai.RateLimitError) as refused:
        metered_request(no_retry)
    headers = refused.value.response.headers
    assert int(headers["retry-after"]) >= 1  # integer seconds, RFC 9110
    assert float(headers["retry-after-ms"]) > 0
    assert isinstance(refused.value.body, dict)
    assert refused.value.body.get("type") == "rate_limit_exceeded"

    retried_before = metric_value(gateway.url, "sluicegate_retries_total", tenant="metered")
    seen = Exchanges()
    client = open_sdk(
        gateway,
        METERED_KEY,
        retries=4,
        http_client=openai.DefaultHttpx2Client(event_hooks=seen.hooks()),
    )
    reply = metered_request(client)

    assert reply.usage is not None and reply.usage.completion_tokens == METERED_MAX_TOKENS
    statuses = [status for _, status, _ in seen.received]
    assert statuses[0] == 429 and statuses[-1] == 200 and len(statuses) == len(seen.sent)
    for (got_at, status, retry_ms), (next_sent_at, _) in zip(
        seen.received, seen.sent[1:], strict=False
    ):
        assert status == 429 and retry_ms is not None
        assert next_sent_at - got_at >= float(retry_ms) / 1000.0
    assert [count for _, count in seen.sent[1:]] == [str(i) for i in range(1, len(seen.sent))]
    retried = metric_value(gateway.url, "sluicegate_retries_total", tenant="metered")
    assert retried - retried_before == len(seen.sent) - 1  # the gateway recognised each retry


def test_client_disconnect_mid_stream_frees_the_slot_at_backend_and_gateway(
    gateway: GatewayProcess, tiny_vllm: VllmServer, open_sdk: OpenSdk
) -> None:
    """On 2 busy cores the tiny model can finish a whole stream before a /metrics probe
    answers; such an attempt proves nothing either way, so it is drained and tried again
    (at most ``ATTEMPTS``). A conclusive attempt must show the abort and the release."""
    for _ in range(ATTEMPTS):
        if _disconnect_attempt(gateway, tiny_vllm, open_sdk):
            return
    raise AssertionError(f"vLLM never reported the stream running in {ATTEMPTS} attempts")


ATTEMPTS = 4
PARALLEL_SAMPLES = 4


def _disconnect_attempt(gateway: GatewayProcess, tiny_vllm: VllmServer, open_sdk: OpenSdk) -> bool:
    def running() -> float:
        return metric_value(tiny_vllm.url, "vllm:num_requests_running")

    def in_flight() -> float:
        return metric_value(gateway.url, "sluicegate_in_flight")

    finished_before = metric_value(tiny_vllm.url, "vllm:request_success_total")
    cancelled_before = metric_value(gateway.url, "sluicegate_outcomes_total", outcome="cancelled")
    # n parallel samples: a longer stream for vLLM and for the relay, so it is still running
    # when the test acts (one 1,900-token sample takes the tiny model ~3 s)
    stream = open_sdk(gateway).completions.create(
        model=tiny_vllm.served_name,
        prompt="x",
        max_tokens=LONG_OUTPUT,
        stream=True,
        extra_body=EXACT,
        n=PARALLEL_SAMPLES,
    )
    chunks = iter(stream)
    for _ in range(3):
        next(chunks)
    try:
        wait_until(in_flight, lambda n: n >= 1, timeout_s=1.0)
        wait_until(running, lambda n: n >= 1, timeout_s=5.0)
    except AssertionError:  # inconclusive: the stream was already done before we looked
        for _ in chunks:
            pass
        wait_until(in_flight, lambda n: n == 0)
        return False

    stream.close()  # the client hangs up mid-stream

    wait_until(running, lambda n: n == 0)
    wait_until(in_flight, lambda n: n == 0)
    cancelled = metric_value(gateway.url, "sluicegate_outcomes_total", outcome="cancelled")
    assert cancelled - cancelled_before == 1
    # aborted, not run to completion: vLLM counts no finished request for it
    assert metric_value(tiny_vllm.url, "vllm:request_success_total") == finished_before
    return True


def _long_stream_begun(client: openai.OpenAI, model: str) -> Iterator[Any]:
    """A streamed chat completion far longer than the test, once its first chunk came."""
    stream = client.chat.completions.create(
        model=model, messages=PROMPT, max_tokens=LONG_OUTPUT, stream=True, extra_body=EXACT
    )
    chunks = iter(stream)
    next(chunks)
    return chunks


def test_backend_killed_mid_stream_ends_in_an_sse_error_and_leaks_nothing(
    doomed_gateway: GatewayProcess, doomed_vllm: VllmServer, open_sdk: OpenSdk
) -> None:
    url = doomed_gateway.url
    failed_before = metric_value(url, "sluicegate_outcomes_total", outcome="failed")
    chunks = _long_stream_begun(open_sdk(doomed_gateway), doomed_vllm.served_name)

    doomed_vllm.kill()

    with pytest.raises(openai.APIError) as caught:
        for _ in chunks:
            pass
    # an error event the gateway sent, not a torn connection
    assert not isinstance(caught.value, openai.APIConnectionError)
    assert isinstance(caught.value.body, dict) and caught.value.body.get("message")
    wait_until(lambda: metric_value(url, "sluicegate_in_flight"), lambda n: n == 0)
    failed = metric_value(url, "sluicegate_outcomes_total", outcome="failed")
    assert failed - failed_before == 1

    # once the probes notice, the next request is a prompt 503 with Retry-After, not a hang
    wait_until(lambda: httpx.get(f"{url}/readyz", timeout=2.0).status_code, lambda s: s == 503)
    with pytest.raises(openai.APIStatusError) as refused:
        open_sdk(doomed_gateway).chat.completions.create(
            model=doomed_vllm.served_name, messages=PROMPT, max_tokens=4
        )
    assert refused.value.status_code == 503
    assert "retry-after" in refused.value.response.headers


def test_backend_frozen_mid_stream_ends_in_an_sse_error_while_still_frozen(
    doomed_gateway: GatewayProcess, doomed_vllm: VllmServer, open_sdk: OpenSdk
) -> None:
    """SIGSTOP of the whole server group (API process and engine core). The stream ends
    with the gateway's SSE error event while vLLM is still stopped (by the silence bound
    measured on the warm-up stream, or health marking it down: whichever comes first),
    not at ``read_timeout_s`` (600 s); the SDK's own timeout would be a connection error.
    After SIGCONT, vLLM aborts the request: nothing running, nothing in flight or queued."""
    url, name = doomed_gateway.url, doomed_vllm.served_name
    client = open_sdk(doomed_gateway, timeout=120.0)
    warm = client.chat.completions.create(
        model=name, messages=PROMPT, max_tokens=64, stream=True, extra_body=EXACT
    )
    assert sum(1 for _ in warm) > 1  # the backend's gaps, measured
    failed_before = metric_value(url, "sluicegate_outcomes_total", outcome="failed")
    chunks = _long_stream_begun(client, name)
    doomed_vllm.pause()
    try:
        with pytest.raises(openai.APIError) as caught:
            for _ in chunks:
                pass
        assert not isinstance(caught.value, openai.APIConnectionError)
        assert isinstance(caught.value.body, dict) and caught.value.body.get("message")
        assert doomed_vllm.process.poll() is None  # still there, still stopped
    finally:
        doomed_vllm.resume()
    wait_until(lambda: metric_value(url, "sluicegate_in_flight"), lambda n: n == 0)
    wait_until(lambda: metric_value(url, "sluicegate_queue_depth"), lambda n: n == 0)
    wait_until(
        lambda: metric_value(doomed_vllm.url, "vllm:num_requests_running"),
        lambda n: n == 0,
        timeout_s=60.0,
    )
    failed = metric_value(url, "sluicegate_outcomes_total", outcome="failed")
    assert failed - failed_before == 1
