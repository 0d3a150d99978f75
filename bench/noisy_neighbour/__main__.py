"""Run the noisy-neighbour benchmark and print one table per engine.

    python -m bench.noisy_neighbour --engine vllm --repeat 3
    python -m bench.noisy_neighbour --engine emulator --noisy 32 --noisy-prompt 3000

Per repeat, every variant runs its two phases (victim alone, then victim beside the flood)
against the same engines, one variant after the other, the engines drained in between.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

import httpx

from bench.noisy_neighbour import stats
from bench.noisy_neighbour.fleet import (
    MODEL,
    Engine,
    Process,
    read_metrics,
    start_engine,
    start_gateway,
    wait_idle,
)
from bench.noisy_neighbour.load import Sample, Tenant, Texts, calibrate, closed_loop
from bench.noisy_neighbour.variants import KEYS, VARIANTS, gateway_config

GRACE_S = 60.0
"""How long victims still in flight at the end of the flood may finish (the flood goes on)."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.noisy_neighbour", description=__doc__)
    p.add_argument("--engine", choices=("vllm", "emulator"), default="vllm")
    p.add_argument("--profile", default="cpu-tiny", help="emulator profile")
    p.add_argument("--backends", type=int, default=1)
    p.add_argument("--variants", default=",".join(VARIANTS[:4]))
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--alone-s", type=float, default=20.0)
    p.add_argument("--flood-s", type=float, default=20.0)
    p.add_argument("--victims", type=int, default=2)
    p.add_argument("--victim-prompt", type=int, default=50)
    p.add_argument("--victim-max-tokens", type=int, default=32)
    p.add_argument("--noisy", type=int, default=16)
    p.add_argument("--noisy-prompt", type=int, default=1500)
    p.add_argument("--noisy-max-tokens", type=int, default=256)
    p.add_argument("--noisy-stream", action="store_true")
    p.add_argument("--url", action="append", help="use this running engine (repeatable)")
    p.add_argument("--json", type=Path, help="write every run's numbers here")
    return p


def _tenants(args: argparse.Namespace) -> tuple[Tenant, Tenant]:
    victim = Tenant(
        "victim", KEYS["victim"], args.victims, args.victim_prompt, args.victim_max_tokens, True
    )
    noisy = Tenant(
        "noisy",
        KEYS["noisy"],
        args.noisy,
        args.noisy_prompt,
        args.noisy_max_tokens,
        args.noisy_stream,
    )
    return victim, noisy


async def _phases(
    args: argparse.Namespace, targets: list[str], texts: Texts
) -> tuple[list[Sample], stats.Window, stats.Window, list[Any]]:
    victim, noisy = _tenants(args)
    samples: list[Sample] = []
    stop_victim, stop_noisy = asyncio.Event(), asyncio.Event()
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
    clients = [httpx.AsyncClient(base_url=t, timeout=600.0, limits=limits) for t in targets]

    def workers(tenant: Tenant, stop: asyncio.Event) -> list[asyncio.Task[None]]:
        """``tenant``'s closed-loop clients, spread over the targets, until ``stop``."""
        return [
            asyncio.create_task(
                closed_loop(clients[i % len(clients)], tenant, MODEL, texts, stop, samples)
            )
            for i in range(tenant.workers)
        ]

    try:
        t0 = time.monotonic()
        vt = workers(victim, stop_victim)
        await asyncio.sleep(args.alone_s)
        t1 = time.monotonic()
        snaps: list[Any] = [await asyncio.to_thread(_metrics, args.engine_urls)]
        nt = workers(noisy, stop_noisy)
        await asyncio.sleep(args.flood_s)
        t2 = time.monotonic()
        snaps.append(await asyncio.to_thread(_metrics, args.engine_urls))
        stop_victim.set()
        await asyncio.wait(vt, timeout=GRACE_S)
        stop_noisy.set()
        for task in [*vt, *nt]:
            task.cancel()
        await asyncio.gather(*vt, *nt, return_exceptions=True)
        args.cutoff = time.monotonic()
        return samples, stats.Window(t0, t1), stats.Window(t1, t2), snaps
    finally:
        for c in clients:
            await c.aclose()


def _metrics(urls: list[str]) -> list[Any]:
    return [read_metrics(u) for u in urls]


def run_variant(args: argparse.Namespace, variant: str, texts: Texts) -> dict[str, Any]:
    gateway: Process | None = None
    if variant != "direct":
        gateway = start_gateway(gateway_config(variant, args.engine_urls))
    targets = args.engine_urls if gateway is None else [gateway.url]
    try:
        samples, alone, flood, snaps = asyncio.run(_phases(args, targets, texts))
    finally:
        if gateway is not None:
            gateway.stop()
        wait_idle(args.engine_urls)
    return _summary(variant, samples, alone, flood, snaps, gateway, args.cutoff)


def _summary(
    variant: str,
    samples: list[Sample],
    alone: stats.Window,
    flood: stats.Window,
    snaps: list[Any],
    gateway: Process | None,
    cutoff: float,
) -> dict[str, Any]:
    a, f = stats.victim_phase(samples, alone, cutoff), stats.victim_phase(samples, flood, cutoff)
    log = None if gateway is None else gateway.log
    return {
        "variant": variant,
        "alone": a,
        "flood": f,
        "p99_ratio": _ratio(f["ttft_p99_ms"], a["ttft_p99_ms"]),
        "req_s_share": _ratio(f["req_s"], a["req_s"]),
        "noisy_tok_s": stats.noisy_tokens_per_s(snaps[0], snaps[1], samples, flood),
        "noisy_429": stats.rejections(samples, "noisy", flood),
        "victim_429": stats.rejections(samples, "victim", flood),
        "breakdown": {
            **stats.gateway_queue(log, samples, flood),
            **stats.engine_phases(snaps[0], snaps[1]),
        },
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    max_len = max(2048, 1 << (args.noisy_prompt + args.noisy_max_tokens + 64).bit_length())
    engines: list[Engine] = []
    runs: list[dict[str, Any]] = []
    try:
        if not args.url:
            for i in range(args.backends):
                engines.append(start_engine(args.engine, args.profile, max_len, i))
        args.engine_urls = args.url or [e.url for e in engines]
        args.backends = len(args.engine_urls)
        cpt = asyncio.run(calibrate(args.engine_urls[0], MODEL, "unused"))
        print(f"# {args.engine}: {cpt:.2f} prompt characters per token", flush=True)
        for rep in range(args.repeat):
            for variant in variants:
                result = run_variant(args, variant, Texts(chars_per_token=cpt))
                result["repeat"] = rep
                runs.append(result)
                print(json.dumps(result), flush=True)
    finally:
        for e in engines:
            e.stop()
    print_table(args, variants, runs)
    if args.json:
        args.json.write_text(json.dumps({"args": _args_json(args), "runs": runs}, indent=1))
    return 0


def _args_json(args: argparse.Namespace) -> dict[str, Any]:
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}


COLUMNS = (
    ("p99 alone ms", lambda r: r["alone"]["ttft_p99_ms"]),
    ("p99 flood ms", lambda r: r["flood"]["ttft_p99_ms"]),
    ("p99 ratio", lambda r: r["p99_ratio"]),
    ("p50 flood ms", lambda r: r["flood"]["ttft_p50_ms"]),
    ("e2e p50 alone ms", lambda r: r["alone"]["e2e_p50_ms"]),
    ("e2e p50 flood ms", lambda r: r["flood"]["e2e_p50_ms"]),
    ("decode p50 alone ms", lambda r: r["alone"].get("decode_p50_ms")),
    ("decode p50 flood ms", lambda r: r["flood"].get("decode_p50_ms")),
    ("req/s alone", lambda r: r["alone"]["req_s"]),
    ("req/s flood", lambda r: r["flood"]["req_s"]),
    ("req/s share", lambda r: r["req_s_share"]),
    ("noisy tok/s", lambda r: r["noisy_tok_s"]),
    ("noisy 429", lambda r: r["noisy_429"]["429"]),
    ("victim 429", lambda r: r["victim_429"]["429"]),
    ("gw queue p99 ms", lambda r: r["breakdown"].get("victim_gateway_queue_p99_ms")),
    ("after queue p99 ms", lambda r: r["breakdown"].get("victim_after_queue_p99_ms")),
    ("eng queue ms", lambda r: r["breakdown"].get("engine_queue_time_mean_ms")),
    ("eng prefill ms", lambda r: r["breakdown"].get("engine_prefill_time_mean_ms")),
    ("eng decode ms", lambda r: r["breakdown"].get("engine_decode_time_mean_ms")),
)


def print_table(args: argparse.Namespace, variants: list[str], runs: list[dict[str, Any]]) -> None:
    """Medians over repeats, with the spread (min-max) when there are several."""
    print(f"\n## {args.engine}, {args.backends} backend(s), medians of {args.repeat} repeat(s)")
    print("| variant | " + " | ".join(c for c, _ in COLUMNS) + " |")
    print("|---" * (len(COLUMNS) + 1) + "|")
    for variant in variants:
        mine = [r for r in runs if r["variant"] == variant]
        cells = [_cell([get(r) for r in mine]) for _, get in COLUMNS]
        print(f"| {variant} | " + " | ".join(cells) + " |")


def _cell(values: list[Any]) -> str:
    found = [float(v) for v in values if v is not None]
    if not found:
        return "-"
    mid = statistics.median(found)
    text = f"{mid:.2f}" if mid < 10 else f"{mid:.0f}"
    if len(found) > 1:
        text += f" ({min(found):.3g}-{max(found):.3g})"
    return text


if __name__ == "__main__":
    raise SystemExit(main())
