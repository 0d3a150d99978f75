"""How soon a frozen backend's requests end: SIGSTOP of an emulator process.

    PYTHONPATH=$PWD python3 bench/frozen_backend.py

Emulator processes at ``--speed 1`` behind the gateway (the integration harness, in this
process), health at its defaults (2 s interval, 1 s timeout, down after 2 failures). After
warm-up streams (the measured bounds), a stream is frozen after 5 events, with the default
``stall:`` settings, without the health cut, and with the silence bounds out of reach; then,
with two backends, a stream is sent to a backend frozen before its first byte. Prints the
time from SIGSTOP to the end of each and the measured p99s and bounds (docs/robustness.md).
"""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Any

from tests.integration.faults import read_events, stream_answer
from tests.integration.harness import (
    chat_body,
    emulator_process,
    gateway_config,
    healthy,
    serve_gateway,
    wait_for,
)

DEFAULT_HEALTH = {"interval_s": 2.0, "timeout_s": 1.0, "failures_to_down": 2}
MODES: dict[str, dict[str, Any]] = {
    "defaults": {},
    "no health cut": {"cut_when_down": False},
    "silence bounds out of reach": {"inter_token_s": 600.0, "first_token_s": 600.0},
}


def _config(urls: list[str], stall: dict[str, Any]) -> dict[str, Any]:
    raw = gateway_config(urls, {"ladder": {"steps": []}})
    raw.update(health=DEFAULT_HEALTH, scrape={"interval_s": 0.5}, stall=stall)
    return raw


async def mid_stream(mode: str) -> None:
    with emulator_process(speed=1.0) as (proc, url):
        await wait_for(lambda: healthy(url), 30.0)
        async with serve_gateway(_config([url], MODES[mode])) as gw:
            client = gw.client()
            await asyncio.gather(
                *(stream_answer(client, chat_body(64, stream=True)) for _ in "abcd")
            )
            body = chat_body(4000, stream=True)
            async with client.stream("POST", "/v1/chat/completions", json=body) as r:
                lines, seen = r.aiter_lines(), 0
                while seen < 5:
                    seen += (await anext(lines)).startswith("data: ")
                m = gw.ctx.stalls.measured("emu-0") if gw.ctx.stalls else {}
                start = time.monotonic()
                proc.send_signal(signal.SIGSTOP)
                answer = await read_events(lines)
                took = time.monotonic() - start
            print(f"mid-stream, {mode}: ended after {took:.2f} s (error event: "
                  f"{answer.error_event}; backend {gw.ctx.pool.health('emu-0').value}); "
                  f"p99 TTFT {m['first_token_p99_s']:.3f} s, gap {m['inter_token_p99_s']:.4f} s; "
                  f"bounds {m['first_token_bound_s']:.1f} s, "
                  f"{m['inter_token_bound_s']:.1f} s")  # fmt: skip
            proc.send_signal(signal.SIGCONT)


async def before_first_byte() -> None:
    with emulator_process(speed=1.0) as (proc0, url0), emulator_process(speed=1.0) as (_, url1):
        for url in (url0, url1):
            await wait_for(lambda u=url: healthy(u), 30.0)
        async with serve_gateway(_config([url0, url1], {})) as gw:
            client = gw.client()
            await asyncio.gather(
                *(stream_answer(client, chat_body(32, stream=True)) for _ in "abcd")
            )
            start = time.monotonic()
            proc0.send_signal(signal.SIGSTOP)
            answer = await stream_answer(client, chat_body(8, stream=True))
            took = time.monotonic() - start
            stalls = (await gw.metrics()).get(
                "sluicegate_upstream_errors_total{backend=emu-0,kind=stall}", 0.0
            )
            print(f"before the first byte, defaults: answered after {took:.2f} s "
                  f"(last event {answer.last!r}; failed over {stalls:.0f}; backend "
                  f"{gw.ctx.pool.health('emu-0').value})")  # fmt: skip
            proc0.send_signal(signal.SIGCONT)


async def main() -> None:
    for mode in MODES:
        await mid_stream(mode)
    await before_first_byte()


if __name__ == "__main__":
    asyncio.run(main())
