"""Idle starts and bursts: how many requests wait in the gateway while engines have room.

    PYTHONPATH=$PWD python3 bench/idle_start.py [--backends N] [--max-num-seqs]

Emulators (``rx9070xt`` profile, ``--speed 1``) behind the gateway (the integration
harness, in this process), scrapes at the default 0.5 s. The engines are first run full
(8 streams per backend), then left idle 3 s; then 4 streams at once (C=4 after idle), 3 s
idle, and a storm of 50 streams at once. Prints each phase's queue waits (the
``x-sluicegate-queue-wait-ms`` header; none = not queued) and the most in flight per
backend. ``--max-num-seqs`` states the engines' slots in the gateway's config.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics

import httpx

from emulator.embedded import EmulatorSpec, start_emulators
from tests.integration.harness import chat_body, gateway_config, serve_gateway


async def _one(client: httpx.AsyncClient, tokens: int) -> float:
    async with client.stream(
        "POST", "/v1/chat/completions", json=chat_body(tokens, stream=True)
    ) as r:
        async for _ in r.aiter_lines():
            pass
        return float(r.headers.get("x-sluicegate-queue-wait-ms", 0.0))


async def _burst(client: httpx.AsyncClient, n: int, tokens: int) -> list[float]:
    return sorted(await asyncio.gather(*(_one(client, tokens) for _ in range(n))))


async def main(backends: int, state_seqs: bool) -> None:
    specs = [EmulatorSpec("rx9070xt", "emulated", speed=1.0, seed=i) for i in range(backends)]
    with start_emulators(specs) as fleet:
        seqs = fleet.runners[0].profile.engine.max_num_seqs
        raw = gateway_config(fleet.urls, {}, max_num_seqs=seqs if state_seqs else None)
        raw.update(scrape={"interval_s": 0.5}, health={"interval_s": 2.0, "timeout_s": 1.0})
        async with serve_gateway(raw) as gw:
            client = gw.client()
            await _burst(client, seqs * backends, 32)  # the engines ran full once
            await asyncio.sleep(3.0)  # a quiet period
            waits = await _burst(client, 4, 32)
            print(f"C=4 after idle: queued {sum(w > 0 for w in waits)} of 4, waits ms {waits}")
            await asyncio.sleep(3.0)
            peak: dict[str, int] = {}

            async def watch() -> None:
                while True:
                    for name, n in gw.ctx.scheduler.stats().in_flight_by_backend.items():
                        peak[name] = max(peak.get(name, 0), n)
                    await asyncio.sleep(0.005)

            watcher = asyncio.ensure_future(watch())
            waits = await _burst(client, 50, 64)
            watcher.cancel()
            print(
                f"storm of 50: queued {sum(w > 0 for w in waits)}, wait p50 "
                f"{statistics.median(waits):.0f} ms, max {waits[-1]:.0f} ms; most in flight "
                f"per backend {peak} (engine slots {seqs} each)"
            )


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--backends", type=int, default=2)
    p.add_argument("--max-num-seqs", action="store_true", help="state the engines' slots")
    args = p.parse_args()
    asyncio.run(main(args.backends, args.max_num_seqs))
