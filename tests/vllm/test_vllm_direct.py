"""The tier's own footing, with no gateway in between: the launched server speaks the
OpenAI API as the notes say, and its live /metrics match the gateway's metric table."""

from __future__ import annotations

import os

import httpx
import pytest

from gateway.backends.scrape.engines import VLLM_0_32
from gateway.backends.scrape.parse import parse_narrow, parse_reference, wanted_names
from scripts.vllm.engine_affinity import ENGINE_CORE, WORKER, group_processes
from scripts.vllm.serve import VllmServer
from tests.vllm.support import OpenSdk, text_stream_with_logprobs, tokens_per_text_chunk

pytestmark = pytest.mark.vllm


def test_chat_length_is_exact_with_ignore_eos(tiny_vllm: VllmServer, open_sdk: OpenSdk) -> None:
    reply = open_sdk(tiny_vllm).chat.completions.create(
        model=tiny_vllm.served_name,
        messages=[{"role": "user", "content": "hello"}],
        max_tokens=12,
        extra_body={"ignore_eos": True},
    )
    assert reply.usage is not None
    assert reply.usage.completion_tokens == 12
    assert reply.choices[0].finish_reason == "length"


def test_stream_with_include_usage_ends_in_a_usage_chunk(
    tiny_vllm: VllmServer, open_sdk: OpenSdk
) -> None:
    stream = text_stream_with_logprobs(open_sdk(tiny_vllm), tiny_vllm.served_name, "def main():", 6)
    chunks = list(stream)
    tokens = tokens_per_text_chunk(chunks)
    assert all(tokens) and sum(tokens) == 6
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 6


def test_live_metrics_carry_every_family_of_the_engine_table(tiny_vllm: VllmServer) -> None:
    text = httpx.get(f"{tiny_vllm.url}/metrics", timeout=30.0).text
    kinds = dict(line.split()[2:4] for line in text.splitlines() if line.startswith("# TYPE "))
    # a table entry is a family, or one of a histogram's own series (the step count is
    # vllm:iteration_tokens_total's _count)
    carried = set(kinds) | {
        f"{name}{part}"
        for name, kind in kinds.items()
        if kind == "histogram"
        for part in ("_count", "_sum", "_bucket")
    }
    table = set(VLLM_0_32.gauges()) | set(VLLM_0_32.counters()) | set(VLLM_0_32.histograms())
    assert table - carried == set()


def test_narrow_parser_agrees_with_reference_on_live_metrics(
    tiny_vllm: VllmServer, open_sdk: OpenSdk
) -> None:
    open_sdk(tiny_vllm).completions.create(
        model=tiny_vllm.served_name, prompt="x", max_tokens=2, extra_body={"ignore_eos": True}
    )  # so histograms and counters have observations
    text = httpx.get(f"{tiny_vllm.url}/metrics", timeout=30.0).text
    wanted = wanted_names(VLLM_0_32)
    narrow, reference = parse_narrow(text, wanted), parse_reference(text, wanted)
    assert narrow.bad_lines == 0
    assert narrow.series == reference.series
    assert VLLM_0_32.running in narrow.series


def test_the_engine_core_runs_on_its_workers_cores(tiny_vllm: VllmServer) -> None:
    """Its spin-wait would otherwise starve the API server on a 2-core machine (see
    scripts/vllm/engine_affinity.py)."""
    processes = group_processes(tiny_vllm.process.pid)
    [worker] = [pid for pid, comm in processes.items() if comm.startswith(WORKER)]
    [engine] = [pid for pid, comm in processes.items() if comm.startswith(ENGINE_CORE)]
    allowed = os.sched_getaffinity(worker)
    for thread in os.listdir(f"/proc/{engine}/task"):
        assert os.sched_getaffinity(int(thread)) <= allowed
