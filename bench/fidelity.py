"""Fidelity of the emulator: the same workload on real vLLM-CPU (medium) and on ``cpu-medium``.

    python -m bench.fidelity                       # starts the real server, then the emulator
    python -m bench.fidelity --real-url http://127.0.0.1:8001 --real-model medium
    python -m bench.fidelity --skip-real           # emulator only

Workload: ``--requests`` (20) streamed completions sent at once to 8 slots, mixed lengths drawn
with a fixed seed: prompts of 32-1024 token ids, outputs of 16-256 tokens pinned with
``ignore_eos``. The client measures TTFT and end-to-end per request and the makespan; a 10 Hz
poller records the peak of ``vllm:num_requests_waiting``; queue time comes from the server's own
``vllm:request_queue_time_seconds`` histogram (the delta over the run, quantiles interpolated in
the buckets as Prometheus does; both sides have the same buckets). The table prints each
statistic for both and the ratio emulator / real. Goal: every ratio within 0.85-1.15.

The 2 cores are shared, so the real server's pace drifts with whatever else runs. With
``--calibrate`` the bench first runs ``scripts/vllm/measure.py``'s phases against the same real
server, refits the step time (``emulator.fit``) and also runs the emulator with that
in-session profile: the shipped profile shows drift, the calibrated one shows how well the
engine model reproduces queueing and batching once the pace is right.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import importlib
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from emulator.embedded import EmulatorSpec, start_emulators
from emulator.fit import fit_step_time
from emulator.profile import load_profile

REPO = Path(__file__).resolve().parents[1]
TOKEN_IDS = (16, 4000)  # inside the medium model's 4096 vocab, above its special tokens
QUEUE_HIST = "vllm:request_queue_time_seconds"


@dataclass(frozen=True)
class Job:
    prompt: list[int]
    max_tokens: int


@dataclass(frozen=True)
class RunStats:
    ttft: list[float]
    e2e: list[float]
    queue_p50: float
    queue_p90: float
    tokens_per_s: float
    peak_waiting: float


def workload(n: int, seed: int) -> list[Job]:
    rng = random.Random(seed)
    return [
        Job([rng.randint(*TOKEN_IDS) for _ in range(rng.randint(32, 1024))], rng.randint(16, 256))
        for _ in range(n)
    ]


async def one(client: httpx.AsyncClient, model: str, job: Job) -> tuple[float, float, int]:
    body = {"model": model, "prompt": job.prompt, "max_tokens": job.max_tokens}
    body |= {"ignore_eos": True, "stream": True, "temperature": 0.0}
    sent = time.perf_counter()
    first, tokens = 0.0, 0
    async with client.stream("POST", "/v1/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if line.startswith("data: {") and json.loads(line[6:]).get("choices"):
                tokens += 1
                first = first or time.perf_counter() - sent
    return first, time.perf_counter() - sent, tokens


def bucket_counts(metrics_text: str, family: str) -> dict[float, float]:
    for fam in text_string_to_metric_families(metrics_text):
        if fam.name == family:
            return {
                float(s.labels["le"]): s.value for s in fam.samples if s.name.endswith("_bucket")
            }
    return {}


def histogram_quantile(q: float, cumulative: dict[float, float]) -> float:
    """Prometheus' interpolation inside the bucket that holds the q-th observation."""
    bounds = sorted(cumulative)
    total = cumulative[bounds[-1]] if bounds else 0.0
    if total <= 0:
        return float("nan")
    rank, lower, below = q * total, 0.0, 0.0
    for bound in bounds:
        if cumulative[bound] >= rank:
            if bound == float("inf"):
                return lower
            inside = cumulative[bound] - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 0.0)
        lower, below = bound, cumulative[bound]
    return lower


async def poll_waiting(client: httpx.AsyncClient, stop: asyncio.Event) -> float:
    peak = 0.0
    while not stop.is_set():
        text = (await client.get("/metrics")).text
        for line in text.splitlines():
            if line.startswith("vllm:num_requests_waiting{"):
                peak = max(peak, float(line.rsplit(" ", 1)[1]))
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.1)
    return peak


async def run(url: str, model: str, jobs: list[Job]) -> RunStats:
    async with httpx.AsyncClient(base_url=url, timeout=600.0) as client:
        before = bucket_counts((await client.get("/metrics")).text, QUEUE_HIST)
        stop = asyncio.Event()
        poller = asyncio.create_task(poll_waiting(client, stop))
        began = time.perf_counter()
        results = await asyncio.gather(*(one(client, model, job) for job in jobs))
        makespan = time.perf_counter() - began
        stop.set()
        peak = await poller
        after = bucket_counts((await client.get("/metrics")).text, QUEUE_HIST)
    delta = {b: after[b] - before.get(b, 0.0) for b in after}
    return RunStats(
        ttft=[r[0] for r in results],
        e2e=[r[1] for r in results],
        queue_p50=histogram_quantile(0.5, delta),
        queue_p90=histogram_quantile(0.9, delta),
        tokens_per_s=sum(r[2] for r in results) / makespan,
        peak_waiting=peak,
    )


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q * 100) - 1]


def table(real: RunStats | None, emu: RunStats) -> str:
    rows: list[tuple[str, Callable[[RunStats], float]]] = [
        ("TTFT p50 (s)", lambda s: pct(s.ttft, 0.5)),
        ("TTFT p90 (s)", lambda s: pct(s.ttft, 0.9)),
        ("e2e p50 (s)", lambda s: pct(s.e2e, 0.5)),
        ("e2e p90 (s)", lambda s: pct(s.e2e, 0.9)),
        ("queue p50 (s)", lambda s: s.queue_p50),
        ("queue p90 (s)", lambda s: s.queue_p90),
        ("tokens/s", lambda s: s.tokens_per_s),
        ("peak waiting", lambda s: s.peak_waiting),
    ]
    lines = [f"{'statistic':<16}{'real vLLM':>12}{'emulator':>12}{'emu/real':>10}"]
    for name, get in rows:
        e = get(emu)
        if real is None:
            lines.append(f"{name:<16}{'-':>12}{e:>12.3f}{'-':>10}")
            continue
        r = get(real)
        ratio = e / r if r else float("nan")
        flag = "" if 0.85 <= ratio <= 1.15 else "  *"
        lines.append(f"{name:<16}{r:>12.3f}{e:>12.3f}{ratio:>10.2f}{flag}")
    return "\n".join(lines)


@contextlib.contextmanager
def real_server(args: argparse.Namespace) -> Iterator[tuple[str, str]]:
    if args.real_url:
        yield args.real_url, args.real_model
        return
    sys.path.insert(0, str(REPO))
    serve: Any = importlib.import_module("scripts.vllm.serve")  # a script folder, not a package
    server = serve.VllmServer.start(serve.model_cache() / "medium", served_name="medium")
    try:
        yield server.url, "medium"
    finally:
        server.stop()


def calibrated_profile(url: str, model: str, base_profile: str) -> Path:
    """Measure the running server now, refit the step time, write a profile YAML (temp file)."""
    measure: Any = importlib.import_module("scripts.vllm.measure")
    samples = [dataclasses.asdict(s) for s in asyncio.run(measure.measure(url, model))]
    profile = load_profile(base_profile)
    engine = profile.engine.model_copy(update={"step_time": fit_step_time(samples)})
    calibrated = profile.model_copy(update={"engine": engine, "name": f"{profile.name}-now"})
    out = Path(tempfile.mkstemp(prefix="fidelity-", suffix=".yaml")[1])
    out.write_text(yaml.safe_dump(calibrated.model_dump(mode="json")), encoding="utf-8")
    print(f"calibrated step time: {engine.step_time.model_dump()}", flush=True)
    return out


def run_emulator(profile: str, jobs: list[Job]) -> RunStats:
    with start_emulators([EmulatorSpec(profile=profile, model_name="medium", speed=1.0)]) as one:
        return asyncio.run(run(one.urls[0], "medium", jobs))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.fidelity", description=__doc__)
    p.add_argument("--requests", type=int, default=20)
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--profile", default="cpu-medium")
    p.add_argument("--real-url", default=None, help="use this running server instead")
    p.add_argument("--real-model", default="medium")
    p.add_argument("--skip-real", action="store_true")
    p.add_argument("--calibrate", action="store_true", help="also refit the pace in-session")
    args = p.parse_args(argv)
    jobs = workload(args.requests, args.seed)
    real, calibrated = None, None
    if not args.skip_real:
        with real_server(args) as (url, model):
            asyncio.run(run(url, model, jobs[:2]))  # warm-up, not measured
            if args.calibrate:
                calibrated = calibrated_profile(url, model, args.profile)
            real = asyncio.run(run(url, model, jobs))
    print(f"{args.requests} streams at once, seed {args.seed}, load avg {os.getloadavg()[0]:.1f}")
    print(f"\nprofile {args.profile} (shipped)")
    print(table(real, run_emulator(args.profile, jobs)), flush=True)
    if calibrated is not None:
        print("\nprofile fitted in this session (--calibrate)")
        print(table(real, run_emulator(str(calibrated), jobs)))
        calibrated.unlink()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
