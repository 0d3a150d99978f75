"""How soon a frozen backend's requests end, and whether a slow one is left alone.

    PYTHONPATH=$PWD python3 bench/frozen_backend.py

Emulator processes at ``--speed 1`` behind the gateway (the integration harness, in this
process), health at its defaults (2 s interval, 1 s timeout, down after 2 failures), scrapes
every 0.5 s. After warm-up streams (the measured bounds), a stream is frozen (SIGSTOP) after
5 events, with the default ``stall:`` settings, without the health cut, and with the silence
bounds out of reach; then, with two backends, a stream is sent to a backend frozen before
its first byte, with health at its defaults and with health probing no more. Last, a slow
backend that keeps progressing: 40 short streams, then a prompt of 3,000 tokens prefilled
at 10 ms a token in chunks of 256 (about 30 s to its first token). Prints the time from
SIGSTOP (or from the request) to the end of each and the measurements and bounds
(docs/robustness.md). The same file runs against any checkout: put it on PYTHONPATH.
"""

from __future__ import annotations

import asyncio
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from emulator.embedded import EmulatorSpec, start_emulator
from tests.integration.faults import read_events, stream_answer
from tests.integration.harness import (
    MODEL,
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


def _measured(gw: Any, backend: str) -> str:
    found = gw.ctx.stalls.measured(backend) if gw.ctx.stalls else {}
    return ", ".join(f"{k} {v:.3f}" if v is not None else f"{k} -" for k, v in found.items())


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
                measured = _measured(gw, "emu-0")
                start = time.monotonic()
                proc.send_signal(signal.SIGSTOP)
                answer = await read_events(lines)
                took = time.monotonic() - start
            print(
                f"mid-stream, {mode}: ended after {took:.2f} s (error event: "
                f"{answer.error_event}; backend {gw.ctx.pool.health('emu-0').value}); "
                f"{measured}"
            )
            proc.send_signal(signal.SIGCONT)


async def before_first_byte(health: str) -> None:
    with emulator_process(speed=1.0) as (proc0, url0), emulator_process(speed=1.0) as (_, url1):
        for url in (url0, url1):
            await wait_for(lambda u=url: healthy(u), 30.0)
        raw = _config([url0, url1], {})
        if health == "probing no more":
            raw["health"] = {"interval_s": 3600.0, "timeout_s": 2.0}
            raw["scrape"]["max_age_s"] = 3600.0  # the frozen one is still chosen
        async with serve_gateway(raw) as gw:
            client = gw.client()
            await asyncio.gather(
                *(stream_answer(client, chat_body(32, stream=True)) for _ in "abcd")
            )
            measured = _measured(gw, "emu-0")
            start = time.monotonic()
            proc0.send_signal(signal.SIGSTOP)
            answer = await stream_answer(client, chat_body(8, stream=True))
            took = time.monotonic() - start
            stalls = (await gw.metrics()).get(
                "sluicegate_upstream_errors_total{backend=emu-0,kind=stall}", 0.0
            )
            print(
                f"before the first byte, health {health}: answered after {took:.2f} s "
                f"(last event {answer.last[:40]!r}; failed over {stalls:.0f}; backend "
                f"{gw.ctx.pool.health('emu-0').value}); {measured}"
            )
            proc0.send_signal(signal.SIGCONT)


SLOW_CARD = {
    "name": "slow-prefill",
    "engine": {
        "max_num_seqs": 8,
        "max_num_batched_tokens": 256,
        "num_gpu_blocks": 2048,
        "max_model_len": 8192,
        "step_time": {"base_s": 0.005, "per_decode_seq_s": 0.0005, "per_prefill_token_s": 0.01},
    },
    "output_lengths": {"components": [{"weight": 1, "min_tokens": 8, "max_tokens": 8}]},
}


async def slow_but_progressing() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        card = Path(tmp) / "slow.yaml"
        card.write_text(yaml.safe_dump(SLOW_CARD))
        emu = start_emulator(EmulatorSpec(str(card), MODEL, speed=1.0))
        try:
            async with serve_gateway(_config([emu.url], {})) as gw:
                client = gw.client()
                await asyncio.gather(
                    *(stream_answer(client, chat_body(8, stream=True)) for _ in range(40))
                )
                measured = _measured(gw, "emu-0")
                start = time.monotonic()
                answer = await stream_answer(
                    client, chat_body(8, stream=True, content="abcd" * 3000)
                )
                took = time.monotonic() - start
            print(
                f"slow but progressing (3,000-token prefill, 40 streams before): status "
                f"{answer.status}, last {answer.last[:60]!r} after {took:.2f} s; {measured}"
            )
        finally:
            emu.stop()


async def main() -> None:
    for mode in MODES:
        await mid_stream(mode)
    for health in ("at its defaults", "probing no more"):
        await before_first_byte(health)
    await slow_but_progressing()


if __name__ == "__main__":
    asyncio.run(main())
