"""How much one engine's batch slows a short streamed turn: the victim beside k noisy
sequences, straight to the engine (no gateway), k = 0, 1, 2, ...

    python -m bench.noisy_neighbour.decode_share --url http://127.0.0.1:8000 --ks 0,1,2,4,8

For each k: k closed-loop noisy workers (long prompts, long outputs, not streamed) run
alone for a window, then with the victims for a window. Reports the noisy tenant's output
tok/s alone and beside the victims, and the victims' req/s, TTFT and decode (first token
to last). On an engine whose step cost grows with every sequence in the batch, the victim's
decode grows with k while the noisy tenant's throughput stops growing past a few sequences:
then only fewer noisy sequences in the batch help the victim's rate, not admission order.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

import httpx

from bench.noisy_neighbour.fleet import MODEL
from bench.noisy_neighbour.load import Sample, Tenant, Texts, calibrate, closed_loop
from bench.noisy_neighbour.variants import KEYS

SETTLE_S = 3.0
"""The noisy workers' first prefills end before a window opens."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.noisy_neighbour.decode_share")
    p.add_argument("--url", required=True)
    p.add_argument("--ks", default="0,1,2,4,8")
    p.add_argument("--window-s", type=float, default=15.0)
    p.add_argument("--noisy-prompt", type=int, default=1500)
    p.add_argument("--noisy-max-tokens", type=int, default=256)
    return p


async def _window(
    client: httpx.AsyncClient, tenants: list[Tenant], texts: Texts, seconds: float
) -> tuple[list[Sample], float, float]:
    samples: list[Sample] = []
    stop = asyncio.Event()
    tasks = [
        asyncio.create_task(closed_loop(client, t, MODEL, texts, stop, samples))
        for t in tenants
        for _ in range(t.workers)
    ]
    await asyncio.sleep(SETTLE_S)
    start = time.monotonic()
    await asyncio.sleep(seconds)
    end = time.monotonic()
    stop.set()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return samples, start, end


def _summary(samples: list[Sample], start: float, end: float) -> dict[str, float | None]:
    seconds = end - start
    done = [s for s in samples if s.status == 200 and start <= s.ended < end]
    noisy = [s for s in done if s.tenant == "noisy"]
    victim = [
        s
        for s in done
        if s.tenant == "victim"
        and s.started >= start
        and s.ttft_s is not None
        and s.e2e_s is not None
    ]
    out: dict[str, float | None] = {
        "noisy_tok_s": round(sum(s.completion_tokens for s in noisy) / seconds, 1)
    }
    if victim:
        out["victim_req_s"] = round(len(victim) / seconds, 2)
        out["victim_ttft_p50_ms"] = round(1000 * statistics.median(s.ttft_s or 0 for s in victim))
        out["victim_decode_p50_ms"] = round(
            1000 * statistics.median((s.e2e_s or 0) - (s.ttft_s or 0) for s in victim)
        )
    return out


async def run(args: argparse.Namespace) -> None:
    texts = Texts(chars_per_token=await calibrate(args.url, MODEL, "unused"))
    victim = Tenant("victim", KEYS["victim"], 2, 50, 32, True)
    limits = httpx.Limits(max_connections=64)
    async with httpx.AsyncClient(base_url=args.url, timeout=600.0, limits=limits) as client:
        for k in (int(x) for x in args.ks.split(",")):
            noisy = Tenant(
                "noisy", KEYS["noisy"], k, args.noisy_prompt, args.noisy_max_tokens, False
            )
            row: dict[str, object] = {"k": k}
            if k:
                row["alone"] = _summary(*await _window(client, [noisy], texts, args.window_s))
            both = [victim, noisy] if k else [victim]
            row["with_victim"] = _summary(*await _window(client, both, texts, args.window_s))
            print(json.dumps(row), flush=True)


def main(argv: list[str] | None = None) -> int:
    asyncio.run(run(_parser().parse_args(argv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
