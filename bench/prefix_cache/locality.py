"""Multi-turn agent conversations on two emulated engines: cache-blind placement against the
cache-aware cost and locality routing, and the cached-token estimate's error.

    python -m bench.prefix_cache.locality [--duration 60] [--agents 16] [--kv-blocks 256]

Two emulators (``cpu-tiny``, prefix cache on, ``--enable-prompt-tokens-details``, each with
``--kv-blocks`` KV blocks of 128 tokens: a cache that holds about half the agents' contexts,
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
absolute difference between ``est_cached_prompt_tokens`` and the engine's ``cached_tokens``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

import yaml

from bench.noisy_neighbour.fleet import Process, start_gateway
from bench.prefix_cache.gateway import MODEL, REPO, _key, gateway_config, start_emulator
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
        policy = yaml.safe_load((REPO / "presets" / "fair-share.yaml").read_text())["policy"]
    return {**policy, **extra, "cache": CACHE[variant]}


def profile_file(kv_blocks: int, directory: Path) -> Path:
    data = load_profile("cpu-tiny").model_dump(mode="json")
    data["engine"]["num_gpu_blocks"] = kv_blocks
    path = directory / "cpu-tiny-small-kv.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def estimate_errors(log: Path) -> tuple[int, float | None, float | None]:
    """(turns, mean |estimated - cached| tokens, mean cached tokens) from the records."""
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
        return 0, None, None
    mae = sum(abs(e - c) for e, c in pairs) / len(pairs)
    return len(pairs), mae, sum(c for _, c in pairs) / len(pairs)


def run_variant(
    variant: str, args: argparse.Namespace, shape: ConversationShape, profile: Path
) -> tuple[TrafficResult, tuple[int, float | None, float | None]]:
    engines = [start_emulator(args.speed, str(profile)) for _ in range(2)]
    gateway: Process | None = None
    try:
        urls = [e.url for e in engines]
        headers = lambda tenant: {"authorization": f"Bearer {_key(tenant)}"}  # noqa: E731
        if variant == "direct":
            result = asyncio.run(
                drive(urls[0], MODEL, shape, duration_s=args.duration, spread=urls, engines=urls)
            )
            return result, (0, None, None)
        config = gateway_config(policy_of(variant, args.base, json.loads(args.policy)), urls, shape)
        gateway = start_gateway(config, log_level="info")
        result = asyncio.run(
            drive(
                gateway.url,
                MODEL,
                shape,
                duration_s=args.duration,
                headers_of=headers,
                sessions=False,
                engines=urls,
            )
        )
        gateway.stop()
        return result, estimate_errors(gateway.log)
    finally:
        if gateway is not None:
            gateway.stop()
        for e in engines:
            e.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.prefix_cache.locality", description=__doc__)
    p.add_argument("--duration", type=float, default=60.0)
    p.add_argument("--speed", type=float, default=1.0)
    p.add_argument("--agents", type=int, default=16)
    p.add_argument("--think", type=float, default=0.2, help="mean think time, seconds")
    p.add_argument("--kv-blocks", type=int, default=256, help="each engine's KV blocks")
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
    print(f"{'variant':<22} {HEADER} {'est MAE':>7} {'cached':>7}", flush=True)
    blind = None
    with tempfile.TemporaryDirectory() as tmp:
        profile = profile_file(args.kv_blocks, Path(tmp))
        for variant in args.variants.split(","):
            r, (_, mae, cached) = run_variant(variant, args, shape, profile)
            rate = len(r.ok) / r.elapsed_s
            if variant == "cache-blind":
                blind = rate
            ratio = f"   ({rate / blind:.2f}x cache-blind)" if blind else ""
            mae_s = f"{mae:7.1f}" if mae is not None else "      -"
            cached_s = f"{cached:7.1f}" if cached is not None else "      -"
            print(f"{variant:<22} {columns(r)} {mae_s} {cached_s}{ratio}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
