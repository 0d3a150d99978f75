"""The OpenAI SDK through a real Envoy whose ext_proc filter asks ``sluicegate epp``, in
front of emulators: every outcome of a decision, and every way a request can end."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import openai
import pytest

from tests.envoy.conftest import StackFactory
from tests.envoy.stack import Epp, picker_healthy, stop
from tests.integration.harness import MODEL, emulator_process, metric_sums

pytestmark = pytest.mark.envoy

MESSAGES: Any = [{"role": "user", "content": "write a function"}]
PIN = {"ignore_eos": True}
SETTLE_S = 20.0


def eventually(check: Any, what: str, timeout_s: float = SETTLE_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout_s} s")
        time.sleep(0.02)


def assert_nothing_lost(epp: Epp, sent: int) -> None:
    eventually(epp.settled, "picker settled (nothing queued or in flight)")
    stats = epp.scheduler()
    assert stats["charged_tokens"] == stats["released_tokens"]
    eventually(lambda: sum(epp.outcomes().values()) == sent, f"{sent} terminal outcomes")


def engine_running(url: str) -> float:
    return metric_sums(httpx.get(f"{url}/metrics").text).get("vllm:num_requests_running", 0.0)


@pytest.mark.parametrize("request_body_mode", ["FULL_DUPLEX_STREAMED", "BUFFERED"])
def test_chat_and_completions_streamed_and_not(stack: StackFactory, request_body_mode: str) -> None:
    s = stack(envoy={"request_body_mode": request_body_mode})
    sdk = s.sdk()
    raw = sdk.chat.completions.with_raw_response.create(
        model=MODEL, messages=MESSAGES, max_tokens=7, extra_body=PIN
    )
    assert raw.headers["x-sluicegate-decision"] == "admit"
    chat = raw.parse()
    assert chat.usage is not None and chat.usage.completion_tokens == 7
    chunks = list(
        sdk.chat.completions.create(
            model=MODEL, messages=MESSAGES, max_tokens=5, stream=True, extra_body=PIN
        )
    )
    assert all(c.usage is None for c in chunks)  # the usage chunk asked upstream is not shown
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) == 5
    with_usage = list(
        sdk.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            max_tokens=4,
            stream=True,
            extra_body=PIN,
            stream_options={"include_usage": True},
        )
    )
    assert with_usage[-1].usage is not None and with_usage[-1].usage.completion_tokens == 4
    done = sdk.completions.create(model=MODEL, prompt="def f(", max_tokens=6, extra_body=PIN)
    assert done.usage is not None and done.usage.completion_tokens == 6
    streamed = list(
        sdk.completions.create(
            model=MODEL, prompt="def f(", max_tokens=3, stream=True, extra_body=PIN
        )
    )
    assert "".join(c.choices[0].text for c in streamed if c.choices)
    assert_nothing_lost(s.epp, sent=5)
    assert s.epp.outcomes() == {"completed": 5.0}


def test_response_headers_skipped_the_usage_is_still_learned(stack: StackFactory) -> None:
    """Envoy skipping the response headers (three ext_proc messages each way for a request
    not streamed): the status and upstream come as attributes of the first body piece, and
    the usage is learned from the answer, streamed or not."""
    s = stack(envoy={"request_body_mode": "BUFFERED", "response_header_mode": "SKIP"})
    sdk = s.sdk()
    chat = sdk.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=7, extra_body=PIN)
    assert chat.usage is not None and chat.usage.completion_tokens == 7
    chunks = list(
        sdk.chat.completions.create(
            model=MODEL, messages=MESSAGES, max_tokens=5, stream=True, extra_body=PIN
        )
    )
    assert all(c.usage is None for c in chunks)
    assert_nothing_lost(s.epp, sent=2)
    assert s.epp.outcomes() == {"completed": 2.0}
    learned = metric_sums(httpx.get(f"{s.epp.admin_url}/metrics").text)
    assert learned["sluicegate_actual_tokens_total{kind=output}"] == 7 + 5


def test_a_queued_request_waits_in_the_picker_then_runs(stack: StackFactory) -> None:
    s = stack({"limit": {"type": "fixed", "parameters": {"max_in_flight": 1}}}, speed=5.0)
    sdk = s.sdk()
    first = sdk.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=40, stream=True, extra_body=PIN
    )
    next(iter(first))  # the first holds the one slot
    answers: list[Any] = []
    second = threading.Thread(
        target=lambda: answers.append(
            sdk.chat.completions.with_raw_response.create(
                model=MODEL, messages=MESSAGES, max_tokens=3, extra_body=PIN
            )
        )
    )
    second.start()
    eventually(lambda: s.epp.scheduler()["queued"] == 1, "the second request queued")
    assert list(first)  # the rest of the first stream
    second.join(SETTLE_S)
    assert answers and answers[0].headers["x-sluicegate-queue-position"] == "1"
    assert int(answers[0].headers["x-sluicegate-queue-wait-ms"]) > 0
    assert answers[0].parse().usage.completion_tokens == 3
    assert_nothing_lost(s.epp, sent=2)


def test_a_client_leaving_while_queued_leaves_the_queue_at_once(stack: StackFactory) -> None:
    s = stack({"limit": {"type": "fixed", "parameters": {"max_in_flight": 1}}}, speed=1.0)
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 3}
    headers = {"authorization": f"Bearer {s.sdk().api_key}"}
    with s.sdk().chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=2000, stream=True, extra_body=PIN
    ) as first:
        next(iter(first))  # the first holds the only slot for the whole test
        client = httpx.Client(base_url=s.envoy.url, headers=headers)
        with client, pytest.raises(httpx.ReadTimeout):
            client.post("/v1/chat/completions", json=body, timeout=httpx.Timeout(10.0, read=1.0))
        eventually(lambda: s.epp.scheduler()["queued"] == 0, "the queued request gone")
        assert s.epp.scheduler()["in_flight"] == 1
    assert_nothing_lost(s.epp, sent=2)
    assert s.epp.outcomes() == {"cancelled": 2.0}


def test_429_with_retry_after_is_honoured_by_the_sdk_retry(stack: StackFactory) -> None:
    policy = {
        "gates": [{"type": "tenant_quota", "parameters": {"default": {"max_concurrent": 1}}}],
        "retry_after": {"min_s": 0.3, "max_s": 2.0},
    }
    s = stack(policy, speed=1.0)
    holder = s.sdk().chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=2000, stream=True, extra_body=PIN
    )
    next(iter(holder))  # holds the tenant's one slot until the releaser closes it
    refused = httpx.post(
        f"{s.envoy.url}/v1/chat/completions",
        json={"model": MODEL, "messages": MESSAGES, "max_tokens": 3},
        headers={"authorization": f"Bearer {s.sdk().api_key}"},
    )
    assert refused.status_code == 429
    assert int(refused.headers["retry-after"]) >= 1 and int(refused.headers["retry-after-ms"]) > 0
    assert refused.json()["error"]["code"] == "tenant_concurrency_exceeded"

    def release_when_refused_again() -> None:
        eventually(lambda: s.epp.outcomes().get("rejected", 0) >= 2, "the SDK's first try")
        holder.close()

    releaser = threading.Thread(target=release_when_refused_again)
    releaser.start()
    retried = s.sdk(retries=3).chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=3, extra_body=PIN
    )
    releaser.join(SETTLE_S)
    assert retried.usage is not None and retried.usage.completion_tokens == 3
    assert_nothing_lost(s.epp, sent=int(sum(s.epp.outcomes().values())))


def test_a_degrade_caps_the_output_and_says_so(stack: StackFactory) -> None:
    ladder = {"steps": [{"name": "cap", "at": 0.0, "action": "cap_max_tokens", "max_tokens": 4}]}
    s = stack({"ladder": ladder})
    raw = s.sdk().chat.completions.with_raw_response.create(
        model=MODEL, messages=MESSAGES, max_tokens=50, extra_body=PIN
    )
    assert raw.headers["x-sluicegate-decision"] == "degrade"
    assert raw.headers["x-sluicegate-degraded"] == "cap"
    assert raw.parse().usage.completion_tokens == 4
    assert_nothing_lost(s.epp, sent=1)


def test_a_client_leaving_mid_stream_frees_the_engine_slot_and_the_ticket(
    stack: StackFactory,
) -> None:
    s = stack(speed=1.0)
    url = s.emulators[0].url
    with s.sdk().chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=2000, stream=True, extra_body=PIN
    ) as stream:
        iterator = iter(stream)
        next(iterator), next(iterator)
        assert engine_running(url) == 1
        assert s.epp.scheduler()["in_flight"] == 1
    eventually(lambda: engine_running(url) == 0, "the engine's slot freed")
    assert_nothing_lost(s.epp, sent=1)
    assert s.epp.outcomes() == {"cancelled": 1.0}


def test_an_endpoint_killed_mid_stream_releases_the_ticket(stack: StackFactory) -> None:
    with emulator_process(speed=1.0) as (proc, url):
        eventually(lambda: _answers(url), "the emulator up")
        s = stack(urls=[url])
        stream = s.sdk().chat.completions.create(
            model=MODEL, messages=MESSAGES, max_tokens=2000, stream=True, extra_body=PIN
        )
        iterator = iter(stream)
        next(iterator)
        proc.kill()
        with pytest.raises((openai.APIError, httpx.HTTPError)):
            for _ in iterator:
                pass
        stream.close()
    assert_nothing_lost(s.epp, sent=1)


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.parametrize(
    ("request_body_mode", "failure_mode_allow", "status"),
    [
        ("FULL_DUPLEX_STREAMED", False, {500}),
        ("FULL_DUPLEX_STREAMED", True, {500, 503}),
        ("BUFFERED", False, {500}),
        ("BUFFERED", True, {503}),
    ],
)
def test_the_picker_killed_fails_as_envoy_is_configured(
    stack: StackFactory, request_body_mode: str, failure_mode_allow: bool, status: set[int]
) -> None:
    """Fail closed: Envoy answers 500 itself. Fail open: the request goes on without a
    destination, and the ORIGINAL_DST cluster has no host for it (Envoy's 503 "no healthy
    upstream"); with a full-duplex request body Envoy may already have streamed body data to
    the dead call and then fails closed (500), so either answer is Envoy's. Neither reaches
    a backend without a decision."""
    envoy = {"request_body_mode": request_body_mode, "failure_mode_allow": failure_mode_allow}
    s = stack(envoy=envoy)
    eventually(lambda: picker_healthy(s.envoy), "Envoy sees the picker healthy")
    ok = s.sdk().chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=2, extra_body=PIN
    )
    assert ok.usage is not None
    url = s.emulators[0].url
    prompts_before = metric_sums(httpx.get(f"{url}/metrics").text)["vllm:prompt_tokens_total"]
    stop(s.epp.process)
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 2}
    answer = httpx.post(f"{s.envoy.url}/v1/chat/completions", json=body, timeout=30.0)
    assert answer.status_code in status, answer.text
    assert "x-sluicegate-decision" not in answer.headers
    prompts_after = metric_sums(httpx.get(f"{url}/metrics").text)["vllm:prompt_tokens_total"]
    assert prompts_after == prompts_before  # nothing reached the backend undecided
