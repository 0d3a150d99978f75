"""The signals the gateway derives from a live vLLM /metrics, checked against the server's
own numbers read independently in the test: ``sluicegate diagnose`` and ``/admin/backends``.

Capacity is never typed in: KV-cache tokens come from the live ``vllm:cache_config_info``,
the p90 prompt from the live prompt-token histogram, ``max_num_seqs`` from the flag the
launcher started the server with.
"""

from __future__ import annotations

import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from commands import diagnose
from scripts.vllm.serve import MAX_NUM_SEQS, VllmServer
from tests.vllm.gateway_process import GatewayProcess
from tests.vllm.live_metrics import bucket_counts, bucket_holding, kv_cache_tokens, occupied_range
from tests.vllm.support import EXACT, OpenSdk, metric_value
from tests.vllm.waiting import wait_until

pytestmark = pytest.mark.vllm

PROMPT_TEXT = "def main():\n    return sorted(queue, key=len)\n"
PROMPT_HISTOGRAM = "vllm:request_prompt_tokens"
CAPACITY_LINE = re.compile(r"Capacity: ([\d.]+) concurrent requests, limited by")
DERIVATION = re.compile(
    r"= min\(KV-cache tokens / p90 prompt tokens, max_num_seqs\) = "
    r"min\(([\d.]+) / ([\d.]+) = ([\d.]+), (\d+)\)"
)


def test_diagnose_live_reports_phases_and_capacity_from_the_live_cache_config(
    tiny_vllm: VllmServer, open_sdk: OpenSdk, capsys: pytest.CaptureFixture[str]
) -> None:
    client = open_sdk(tiny_vllm)
    stop = threading.Event()
    prompt_lengths: set[int] = set()

    def traffic() -> int:
        """One request after another for the whole sampling window."""
        sent = 0
        while not stop.is_set():
            reply = client.completions.create(
                model=tiny_vllm.served_name, prompt=PROMPT_TEXT, max_tokens=8, extra_body=EXACT
            )
            assert reply.usage is not None
            prompt_lengths.add(reply.usage.prompt_tokens)
            sent += 1
        return sent

    with ThreadPoolExecutor(1) as pool:
        sent = pool.submit(traffic)
        try:
            status = diagnose.main(
                [
                    "--url",
                    tiny_vllm.url,
                    "--window",
                    "3",
                    "--interval",
                    "0.5",
                    "--max-num-seqs",
                    str(MAX_NUM_SEQS),
                ]
            )
        finally:
            stop.set()
        assert sent.result(timeout=60) >= 1
    out = capsys.readouterr().out

    assert status == 0, out
    for phase in ("Queue", "Prefill", "Decode", "End to end"):
        assert re.search(rf"^\| {phase} +\| +[\d.]+ s \|", out, re.MULTILINE), out
    capacity, derivation = CAPACITY_LINE.search(out), DERIVATION.search(out)
    assert capacity is not None and derivation is not None, out
    kv, p90, kv_bound, seqs = (float(g) for g in derivation.groups())
    live_kv = kv_cache_tokens(tiny_vllm.url)
    assert kv == live_kv
    assert seqs == MAX_NUM_SEQS
    # every prompt of the window had the same length: its p90 lies in that length's bucket
    (length,) = prompt_lengths
    lower, upper = bucket_holding(bucket_counts(tiny_vllm.url, PROMPT_HISTOGRAM), length)
    assert lower <= p90 <= upper
    assert kv_bound == pytest.approx(live_kv / p90, abs=0.06)
    assert float(capacity.group(1)) == pytest.approx(min(live_kv / p90, MAX_NUM_SEQS), abs=0.06)


def backend_entry(gateway: GatewayProcess, name: str) -> tuple[dict[str, Any], float]:
    body = httpx.get(f"{gateway.url}/admin/backends", timeout=30.0).json()
    entry: dict[str, Any] = next(b for b in body["backends"] if b["name"] == name)
    return entry, float(body["stale_after_s"])


def test_admin_backends_shows_fresh_signals_and_the_live_capacity_derivation(
    gateway: GatewayProcess, tiny_vllm: VllmServer, open_sdk: OpenSdk
) -> None:
    name = tiny_vllm.served_name
    client = open_sdk(gateway)
    for _ in range(3):
        client.completions.create(model=name, prompt=PROMPT_TEXT, max_tokens=4, extra_body=EXACT)
    traffic_done = time.monotonic()

    def probe() -> tuple[dict[str, Any], float, float]:
        asked = time.monotonic()
        return (*backend_entry(gateway, name), asked - traffic_done)

    def fresh_after_traffic(found: tuple[dict[str, Any], float, float]) -> bool:
        """A non-stale scrape taken after the traffic (so of an idle server) whose window saw
        our prompts arrive. Its age was computed when the gateway answered, after ``asked``."""
        entry, _, since_traffic = found
        signals = entry["signals"]
        prompt_rate = (entry.get("rates_per_s") or {}).get("prompt_tokens_per_s") or 0
        fresh = signals["capacity_estimate"] is not None and not signals["stale"]
        age = signals["signal_age_s"]
        return fresh and prompt_rate > 0 and age is not None and age < since_traffic

    entry, stale_after_s, _ = wait_until(probe, fresh_after_traffic)
    signals = entry["signals"]
    assert signals["stale"] is False
    assert signals["signal_age_s"] is not None and signals["signal_age_s"] <= stale_after_s
    for key in ("kv_cache_usage", "running", "waiting"):
        assert signals[key] is not None, key
    assert 0.0 <= signals["kv_cache_usage"] <= 1.0
    # idle now: the gauges the gateway shows are the server's own
    assert signals["running"] == metric_value(tiny_vllm.url, "vllm:num_requests_running")
    assert signals["waiting"] == metric_value(tiny_vllm.url, "vllm:num_requests_waiting")

    derivation = entry["capacity"]
    live_kv = kv_cache_tokens(tiny_vllm.url)
    assert derivation["kv_cache_tokens"] == live_kv
    assert derivation["max_num_seqs"] == MAX_NUM_SEQS
    p90 = derivation["p90_prompt_tokens"]
    lower, upper = occupied_range(bucket_counts(tiny_vllm.url, PROMPT_HISTOGRAM))
    assert p90 is not None and lower <= p90 <= upper
    expected = min(live_kv / p90, MAX_NUM_SEQS)
    assert signals["capacity_estimate"] == pytest.approx(expected)
    assert derivation["value"] == pytest.approx(expected)
