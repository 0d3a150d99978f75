"""``sluicegate demo``: the gateway in front of embedded vLLM emulators, with a live view.

No GPU, no config file: two ``rx9070xt`` emulators (8 slots each, run ``--speed`` times faster
than a real card) start on free loopback ports, the gateway listens on ``--port`` with an
anonymous tenant, and one line per second shows decisions by kind, the gateway queue and each
backend's running / waiting / KV use. ``--load N`` adds N built-in agents (request, think about
a second, repeat) so there is something to watch. Ctrl-C stops everything (``--duration``
stops by itself).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sys
import threading
from collections import Counter
from typing import TextIO

import httpx
import uvicorn
from prometheus_client.parser import text_string_to_metric_families

from commands.embedded_config import DEMO_KEY, MODEL, embedded_config
from emulator.embedded import EmulatorFleet, EmulatorSpec, start_emulators
from gateway.app import create_app
from gateway.config.schema import LoadedConfig
from policies.build import core


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sluicegate demo", description=__doc__)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080, help="gateway port")
    p.add_argument("--backends", type=int, default=2, help="number of embedded emulators")
    p.add_argument("--profile", default="rx9070xt", help="emulator profile")
    p.add_argument("--speed", type=float, default=10.0, help="emulators run K times faster")
    p.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    p.add_argument("--no-live", action="store_true", help="no live view")
    p.add_argument(
        "--load", type=int, default=0, help="also run N built-in agents (request, think ~1 s)"
    )
    return p


def demo_config(urls: list[str]) -> LoadedConfig:
    return embedded_config(urls, "<demo>")


def examples(base: str) -> str:
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hello"}]})
    return f"""
Sluicegate demo: gateway on {base}, model {MODEL!r}, API key {DEMO_KEY!r} (or none)

  curl -si {base}/v1/chat/completions -H 'content-type: application/json' \\
       -d '{body}' | grep -i -e '^x-sluicegate' -e '^HTTP'

  python - <<'EOF'
  from openai import OpenAI
  client = OpenAI(base_url="{base}/v1", api_key="{DEMO_KEY}")
  raw = client.chat.completions.with_raw_response.create(
      model="{MODEL}", messages=[{{"role": "user", "content": "hello"}}], max_tokens=64)
  print(raw.headers.get("x-sluicegate-decision"), raw.headers.get("x-sluicegate-reason"))
  print(raw.parse().choices[0].message.content)
  EOF
"""


def live_line(gateway_metrics: str, fleet: EmulatorFleet) -> str:
    """One status line: decisions by kind, gateway queue, per-backend engine load."""
    decisions: Counter[str] = Counter()
    queued = 0.0
    for family in text_string_to_metric_families(gateway_metrics):
        for sample in family.samples:
            if sample.name == "sluicegate_decisions_total":
                decisions[sample.labels.get("decision", "?")] += int(sample.value)
            elif sample.name == "sluicegate_queue_depth":
                queued = sample.value
    kinds = " ".join(f"{k}={decisions.get(k, 0)}" for k in ("admit", "delay", "degrade", "reject"))
    backends = "  ".join(
        f"b{i} run={r.engine.num_running} wait={r.engine.num_waiting} "
        f"kv={r.engine.kv_cache_usage:.0%}"
        for i, r in enumerate(fleet.runners)
    )
    return f"decisions {kinds} | queue {queued:.0f} | {backends}"


def _live_view(base: str, fleet: EmulatorFleet, stop: threading.Event, out: TextIO) -> None:
    with httpx.Client(timeout=1.0) as client:
        while not stop.wait(1.0):
            try:
                text = client.get(f"{base}/metrics").text
            except httpx.HTTPError:
                continue  # the gateway is starting or stopping
            print(live_line(text, fleet), file=out, flush=True)


async def _agent(
    client: httpx.AsyncClient, base: str, rng: random.Random, stop: threading.Event
) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "write a function"}]}
    while not stop.is_set():
        with contextlib.suppress(httpx.HTTPError):
            await client.post(f"{base}/v1/chat/completions", json=body | {"max_tokens": 512})
        await asyncio.sleep(rng.expovariate(1.0))  # think time, seconds of wall clock


def _load(base: str, agents: int, stop: threading.Event) -> None:
    """A small closed loop of agents so the live view has something to show."""

    async def run() -> None:
        async with httpx.AsyncClient(timeout=600.0) as client:
            workers = [_agent(client, base, random.Random(i), stop) for i in range(agents)]
            await asyncio.gather(*workers)

    asyncio.run(run())


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    specs = [
        EmulatorSpec(profile=args.profile, model_name=MODEL, speed=args.speed, seed=i)
        for i in range(args.backends)
    ]
    with start_emulators(specs) as fleet:
        app = create_app(demo_config(fleet.urls))
        config = uvicorn.Config(
            app, host=args.host, port=args.port, log_level="warning", access_log=False
        )
        server = uvicorn.Server(config)
        base = f"http://{args.host}:{args.port}"
        print(examples(base), flush=True)
        print(f"decision core: {core()} (docs/performance.md)", flush=True)
        stop = threading.Event()
        threads = []
        if not args.no_live:
            threads.append(
                threading.Thread(target=_live_view, args=(base, fleet, stop, sys.stdout))
            )
        if args.load > 0:
            threads.append(threading.Thread(target=_load, args=(base, args.load, stop)))
        if args.duration is not None:
            threads.append(
                threading.Timer(args.duration, lambda: setattr(server, "should_exit", True))
            )
        for thread in threads:
            thread.daemon = True
            thread.start()
        try:
            server.run()
        except KeyboardInterrupt:
            # Ctrl-C: uvicorn drains and shuts down (every slot released), then raises the
            # signal again, which asyncio turns into KeyboardInterrupt. uvicorn.run, which
            # `sluicegate serve` uses, swallows it the same way: exit 0, no traceback.
            pass
        finally:
            stop.set()
    return 0
