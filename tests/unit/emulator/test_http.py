"""The emulator over real loopback HTTP: OpenAI shapes, exact lengths, errors, disconnects."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from emulator.embedded import EmbeddedEmulator
from emulator.engine import Engine
from emulator.profile import load_profile
from tests.integration.conftest import StartEmulator

WAIT_S = 10.0


def wait_for(condition: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
    """Poll a condition that another thread makes true; fail after a bounded time."""
    deadline = time.monotonic() + timeout_s
    tick = threading.Event()
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        tick.wait(0.01)


def metric(url: str, name: str, **labels: str) -> float:
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise KeyError(name)


def chat(emulator: EmbeddedEmulator, **body: Any) -> httpx.Response:
    payload = {"model": "emulated", "messages": [{"role": "user", "content": "hi"}], **body}
    return httpx.post(f"{emulator.url}/v1/chat/completions", json=payload, timeout=WAIT_S)


def sse_payloads(response: httpx.Response) -> list[Any]:
    lines = [ln[6:] for ln in response.iter_lines() if ln.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(ln) for ln in lines[:-1]]


def test_non_streaming_chat_with_ignore_eos_has_the_exact_length(
    emulator: EmbeddedEmulator,
) -> None:
    response = chat(emulator, max_tokens=17, ignore_eos=True)
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "chat.completion"
    assert body["usage"]["completion_tokens"] == 17
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"] + 17


def test_streaming_completion_with_include_usage_ends_with_a_usage_chunk(
    emulator: EmbeddedEmulator,
) -> None:
    payload = {
        "model": "emulated",
        "prompt": "x" * 40,
        "max_tokens": 9,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with httpx.stream("POST", f"{emulator.url}/v1/completions", json=payload) as response:
        assert response.status_code == 200
        chunks = sse_payloads(response)
    *token_chunks, usage_chunk = chunks
    assert len(token_chunks) == 9
    finishes = [c["choices"][0]["finish_reason"] for c in token_chunks]
    assert finishes == [None] * 8 + ["length"]
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"]["completion_tokens"] == 9
    assert usage_chunk["usage"]["prompt_tokens"] == 10  # 40 chars at 4 chars per token


def test_streaming_chat_without_usage_option_sends_no_usage(emulator: EmbeddedEmulator) -> None:
    payload: dict[str, Any] = {"model": "emulated", "messages": [{"role": "user", "content": "hi"}]}
    payload |= {"max_tokens": 3, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", f"{emulator.url}/v1/chat/completions", json=payload) as response:
        chunks = sse_payloads(response)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all("usage" not in c for c in chunks)
    assert sum(1 for c in chunks if c["choices"][0]["delta"].get("content")) == 3


def test_drawn_lengths_are_capped_seeded_and_end_in_stop_or_length(
    start_emulator: StartEmulator,
) -> None:
    def lengths(seed: int) -> list[tuple[int, str]]:
        emu = start_emulator(model_name="emulated", speed=200.0, seed=seed)
        out = []
        for _ in range(6):
            body = chat(emu, max_tokens=300).json()
            out.append((body["usage"]["completion_tokens"], body["choices"][0]["finish_reason"]))
        return out

    first, again = lengths(seed=1), lengths(seed=1)
    assert first == again
    assert all(n <= 300 for n, _ in first)
    assert all((reason == "length") == (n == 300) for n, reason in first)
    assert len({n for n, _ in first}) > 1


@pytest.mark.parametrize(
    ("body", "status", "err_type"),
    [
        ({"model": "other", "messages": [{"role": "user", "content": "x"}]}, 404, "NotFoundError"),
        ({"model": "emulated", "messages": []}, 400, "BadRequestError"),
        (
            {"model": "emulated", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0},
            400,
            "BadRequestError",
        ),
        (
            {
                "model": "emulated",
                "messages": [{"role": "user", "content": "x"}],
                "max_tokens": 10**7,
            },
            400,
            "BadRequestError",
        ),
    ],
)
def test_bad_requests_get_vllm_error_bodies(
    emulator: EmbeddedEmulator, body: dict[str, Any], status: int, err_type: str
) -> None:
    response = httpx.post(f"{emulator.url}/v1/chat/completions", json=body)
    assert response.status_code == status
    error = response.json()["error"]
    assert error["type"] == err_type
    assert error["code"] == status
    assert error["message"]


def test_models_health_and_version(emulator: EmbeddedEmulator) -> None:
    models = httpx.get(f"{emulator.url}/v1/models").json()["data"]
    assert [m["id"] for m in models] == ["emulated"]
    assert models[0]["max_model_len"] == emulator.runner.profile.engine.max_model_len
    assert httpx.get(f"{emulator.url}/health").status_code == 200
    assert httpx.get(f"{emulator.url}/version").json()["version"].startswith("0.32")


def test_engine_busy_is_a_503_and_counted(start_emulator: StartEmulator) -> None:
    emu = start_emulator(model_name="emulated", speed=1.0, max_num_queued_reqs=1)
    payload = {"model": "emulated", "prompt": "x", "max_tokens": 2000, "ignore_eos": True}
    with httpx.stream("POST", f"{emu.url}/v1/completions", json=payload | {"stream": True}) as held:
        lines = held.iter_lines()  # keep it: a dropped httpx iterator closes the connection
        next(lines)  # the first token: the request holds the only place
        busy = httpx.post(f"{emu.url}/v1/completions", json=payload)
        assert busy.status_code == 503
        assert busy.json()["error"]["type"] == "Service Unavailable"
        assert "busy" in busy.json()["error"]["message"]
        counted = metric(emu.url, "vllm:admission_rejections_total", reason="max_num_queued_reqs")
        assert counted == 1


def test_stream_disconnect_aborts_and_frees_the_slot(start_emulator: StartEmulator) -> None:
    emu = start_emulator(model_name="emulated", speed=1.0)
    payload = {"model": "emulated", "prompt": "x", "max_tokens": 5000, "ignore_eos": True}
    with httpx.stream("POST", f"{emu.url}/v1/completions", json=payload | {"stream": True}) as r:
        lines = r.iter_lines()  # keep it: a dropped httpx iterator closes the connection
        next(lines)
        assert metric(emu.url, "vllm:num_requests_running") == 1
    wait_for(lambda: metric(emu.url, "vllm:num_requests_running") == 0)
    assert metric(emu.url, "vllm:kv_cache_usage_perc") == 0.0
    assert metric(emu.url, "vllm:request_success_total", finished_reason="length") == 0


def test_non_stream_disconnect_aborts_too(start_emulator: StartEmulator) -> None:
    emu = start_emulator(model_name="emulated", speed=1.0)
    payload = {"model": "emulated", "prompt": "x", "max_tokens": 5000, "ignore_eos": True}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{emu.url}/v1/completions", json=payload, timeout=httpx.Timeout(5, read=0.3))
    wait_for(lambda: metric(emu.url, "vllm:num_requests_running") == 0)
    assert not emu.runner.engine.has_work


def test_reported_durations_are_wall_time_at_any_speed(start_emulator: StartEmulator) -> None:
    """At ``--speed K`` the emulator is a card K times faster, so it reports its durations in
    the wall seconds everything else observes it in (a prefill rate learnt from them holds)."""
    profile = load_profile("rx9070xt")
    engine = Engine(profile.engine)  # the same request on the pure engine, on a virtual clock
    engine.add("r", prompt_tokens=2, output_tokens=40, now=0.0)
    now, expected = 0.0, 0.0
    while engine.has_work:
        step = engine.step(now)
        now = step.ended_at
        expected = max(expected, *(f.e2e_s for f in step.finished), 0.0)
    for speed in (5.0, 50.0):
        emu = start_emulator(model_name="emulated", speed=speed)
        payload = {"model": "emulated", "prompt": "abcd" * 2, "max_tokens": 40, "ignore_eos": True}
        assert httpx.post(f"{emu.url}/v1/completions", json=payload).status_code == 200
        reported = metric(emu.url, "vllm:e2e_request_latency_seconds_sum")
        assert reported == pytest.approx(expected / speed, rel=1e-6)


def test_a_queued_chat_stream_opens_with_its_first_token(start_emulator: StartEmulator) -> None:
    """Like vLLM, the role chunk comes with the first output, not while the request waits."""
    emu = start_emulator(model_name="emulated", speed=1.0)
    slots = emu.runner.profile.engine.max_num_seqs
    holders = [
        threading.Thread(target=chat, args=(emu,), kwargs={"max_tokens": 30, "ignore_eos": True})
        for _ in range(slots)
    ]
    for t in holders:
        t.start()
    wait_for(lambda: metric(emu.url, "vllm:num_requests_running") == slots)
    payload = {
        "model": "emulated",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 3,
        "ignore_eos": True,
        "stream": True,
    }
    with httpx.stream("POST", f"{emu.url}/v1/chat/completions", json=payload) as r:
        first = next(ln for ln in r.iter_lines() if ln.startswith("data: "))
        # the queued request got a slot only when a holder finished
        assert metric(emu.url, "vllm:request_success_total", finished_reason="length") >= 1
        assert json.loads(first[6:])["choices"][0]["delta"]["role"] == "assistant"
    for t in holders:
        t.join(WAIT_S)
