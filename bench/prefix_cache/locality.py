"""Multi-turn agent conversations on two engines: cache-blind placement against the
cache-aware cost and locality routing, and the cached-token estimate's error.

    python -m bench.prefix_cache.locality [--duration 60] [--agents 16] [--kv-blocks 256]
    python -m bench.prefix_cache.locality --engine vllm --kv-blocks 100 [--vllm-url A,B] ...

``--engine vllm``: two real vLLM-CPU servers with the tiny model, each with ``--kv-blocks``
KV blocks (``--num-gpu-blocks-override``), started once for all variants and their prefix
caches emptied between them (``bench/prefix_cache/engines.py``). Else two emulators
(``cpu-tiny``, prefix cache on, ``--enable-prompt-tokens-details``, each with ``--kv-blocks`` KV
blocks of 128 tokens: a cache that holds about half the agents' contexts,
as a real agent's 30-100k-token contexts fill a GPU's), the conversations of
``simulation.conversations`` (``--agents`` closed-loop agents in 2 tenants, each tenant its
own API key, no session header: nothing but the prompt tells which turns belong together).
Variants, side by side:

- ``direct``: no gateway, agent ``i`` pinned to engine ``i % 2`` (a static client split);
- ``cache-blind``: the gateway, ``cache: {estimate: hit_rate}``, least-loaded placement;
- ``cache-aware-cost``: ``cache: {estimate: prefix_model, fairness_counts: computed_tokens}``;
- ``cache-aware+locality``: the same and ``locality_weight: 4``.

``--base fair-share`` puts the ``cache:`` settings on the fair-share preset instead of the
default policy. The estimate's error is read from the gateway's decision records: the mean
absolute difference between ``est_cached_prompt_tokens`` and the engine's ``cached_tokens``
(``est MAE``), and the estimated cached tokens in all over the hits the engines counted
(``vllm:prefix_cache_hits_total``: ``est/ctr``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

import yaml

from bench.noisy_neighbour.fleet import start_gateway
from bench.noisy_neighbour.variants import preset_policy
from bench.prefix_cache.engines import (
    MODEL,
    EngineSet,
    add_engine_arguments,
    engine_set,
    start_emulator,
)
from bench.prefix_cache.gateway import gateway_config, tenant_headers
from bench.prefix_cache.traffic import HEADER, TrafficResult, columns, drive
from emulator.profile import load_profile
from simulation.conversations import ConversationShape

CACHE = {
    "cache-blind": {"estimate": "hit_rate"},
    "cache-aware-cost": {"estimate": "prefix_model", "fairness_counts": "computed_tokens"},
    "cache-aware+locality": {
        "estimate": "prefix_model",
        "fairness_counts": "computed_tokens",
        "locality_weight": 4.0,
    },
}


def policy_of(variant: str, base: str, extra: dict[str, Any]) -> dict[str, Any]:
    policy: dict[str, Any] = {}
    if base == "fair-share":
        policy = preset_policy("fair-share")
    return {**policy, **extra, "cache": CACHE[variant]}


def profile_file(kv_blocks: int, directory: Path) -> Path:
    data = load_profile("cpu-tiny").model_dump(mode="json")
    data["engine"]["num_gpu_blocks"] = kv_blocks
    path = directory / "cpu-tiny-small-kv.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def estimate_errors(log: Path) -> tuple[int, float | None, float | None, float]:
    """(turns, mean |estimated - cached| tokens, mean cached tokens, estimated cached tokens
    in all) from the records."""
    pairs: list[tuple[int, int]] = []
    for line in log.read_text(errors="replace").splitlines():
        start = line.find('{"event":"request"')
        if start < 0:
            continue
        rec = json.loads(line[start:])
        est, cached = rec.get("est_cached_prompt_tokens"), rec.get("cached_tokens")
        if est is not None and cached is not None:
            pairs.append((est, cached))
    if not pairs:
        return 0, None, None, 0.0
    mae = sum(abs(e - c) for e, c in pairs) / len(pairs)
    estimated = float(sum(e for e, _ in pairs))
    return len(pairs), mae, sum(c for _, c in pairs) / len(pairs), estimated


def run_variant(
    variant: str, args: argparse.Namespace, shape: ConversationShape, engines: EngineSet
) -> tuple[TrafficResult, tuple[int, float | None, float | None, float | None]]:
    """The traffic's result and, through a gateway, (turns recorded, est MAE, mean cached
    tokens, estimated cached tokens over the engines' counted hits)."""
    with engines.variant() as urls:
        if variant == "direct":
            result = asyncio.run(
                drive(urls[0], MODEL, shape, duration_s=args.duration, spread=urls, engines=urls)
            )
            return result, (0, None, None, None)
        policy = policy_of(variant, args.base, json.loads(args.policy))
        with start_gateway(gateway_config(policy, urls, shape), log_level="info") as gateway:
            result = asyncio.run(
                drive(
                    gateway.url,
                    MODEL,
                    shape,
                    duration_s=args.duration,
                    headers_of=tenant_headers,
                    sessions=False,
                    engines=urls,
                )
            )
        turns, mae, cached, estimated = estimate_errors(gateway.log)
        counted = estimated / result.hits if result.hits else None
        return result, (turns, mae, cached, counted)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.prefix_cache.locality", description=__doc__)
    p.add_argument("--duration", type=float, default=60.0)
    p.add_argument("--speed", type=float, default=1.0)
    p.add_argument("--agents", type=int, default=16)
    p.add_argument("--think", type=float, default=0.2, help="mean think time, seconds")
    add_engine_arguments(p, kv_blocks=256)
    p.add_argument("--system-words", type=int, default=450)
    p.add_argument("--turn-words", type=int, default=70)
    p.add_argument("--output-tokens", type=int, default=48)
    p.add_argument("--base", choices=("default", "fair-share"), default="default")
    p.add_argument("--variants", default="direct," + ",".join(CACHE))
    p.add_argument("--policy", default="{}", help="JSON merged into every variant's policy")
    args = p.parse_args(argv)
    shape = ConversationShape(
        agents=args.agents,
        think_mean_s=args.think,
        system_words=args.system_words,
        turn_words=args.turn_words,
        output_tokens=args.output_tokens,
    )
    with tempfile.TemporaryDirectory() as tmp:
        emulator = lambda: start_emulator(  # noqa: E731
            args.speed, str(profile_file(args.kv_blocks, Path(tmp)))
        )
        engines = engine_set(args, count=2, emulator=emulator)
        with engines.running():
            print(f"engines: {engines.describe()}", flush=True)
            print(f"{'variant':<22} {HEADER} {'est MAE':>7} {'cached':>7} {'est/ctr':>7}")
            blind = None
            for variant in args.variants.split(","):
                r, (_, mae, cached, counted) = run_variant(variant, args, shape, engines)
                rate = len(r.ok) / r.elapsed_s
                if variant == "cache-blind":
                    blind = rate
                ratio = f"   ({rate / blind:.2f}x cache-blind)" if blind else ""
                print(
                    f"{variant:<22} {columns(r)} {_num(mae)} {_num(cached)} {_num(counted, 3)}"
                    f"{ratio}",
                    flush=True,
                )
                print(f"{'':<22} {r.tail()}", flush=True)
    return 0


def _num(value: float | None, digits: int = 1) -> str:
    return f"{value:7.{digits}f}" if value is not None else "      -"


if __name__ == "__main__":
    raise SystemExit(main())
