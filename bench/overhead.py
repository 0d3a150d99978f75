"""The gateway's added latency against a direct connection (docs/performance.md).

Starts a fast fake vLLM (a raw ASGI app on uvicorn, no model work) and the gateway in
front of it, each in its own process, then sends the same requests both ways and prints
p50/p99 of the end-to-end time (to the last byte), non-streaming and streaming, at
concurrency 1 and 64. The difference is what the gateway adds: parse, auth, estimate,
decide, forward, relay. Not a test; numbers depend on the machine (2 shared cores here).

    python bench/overhead.py [--requests 400] [--tokens 16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from scripts.service_argv import poll_ready, serve
from scripts.vllm.serve import free_port

BODY = {"model": "fake", "messages": [{"role": "user", "content": "hello " * 50}], "max_tokens": 16}


# -- the fake backend ----------------------------------------------------------------------


def fake_backend_app(tokens: int) -> Any:
    chunk = json.dumps(
        {
            "id": "c",
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"content": "tok"}}],
        }
    ).encode()
    usage = {"prompt_tokens": 60, "completion_tokens": tokens, "total_tokens": 60 + tokens}
    final = json.dumps({"id": "c", "choices": [], "usage": usage}).encode()
    whole = json.dumps(
        {
            "id": "c",
            "object": "chat.completion",
            "usage": usage,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "tok " * tokens},
                    "finish_reason": "length",
                }
            ],
        }
    )

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        if scope["path"] != "/v1/chat/completions":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        req = json.loads(body)
        if not req.get("stream"):
            headers = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": whole.encode()})
            return
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for _ in range(tokens):
            await send(
                {
                    "type": "http.response.body",
                    "body": b"data: " + chunk + b"\n\n",
                    "more_body": True,
                }
            )
        if (req.get("stream_options") or {}).get("include_usage"):
            await send(
                {
                    "type": "http.response.body",
                    "body": b"data: " + final + b"\n\n",
                    "more_body": True,
                }
            )
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})

    return app


def run_fake_backend(port: int, tokens: int) -> None:
    import uvicorn

    uvicorn.run(
        fake_backend_app(tokens),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        loop="uvloop",
        http="httptools",
        access_log=False,
    )


# -- orchestration -------------------------------------------------------------------------


def wait_healthy(url: str, timeout_s: float = 20.0) -> None:
    poll_ready(url, timeout_s, every_s=0.1, answer_s=0.5)


def gateway_config(backend_url: str, port: int, **sections: object) -> str:
    """The gateway's config as JSON: one anonymous tenant in front of the fake backend, with
    ``sections`` added. No scraping (the fake has no /metrics) and no max_num_seqs: nothing
    is held back, so the numbers are the gateway's own cost, not queueing."""
    return json.dumps(
        {
            "server": {"host": "127.0.0.1", "port": port, "log_records": False},
            "tenants": [{"name": "bench"}],
            "auth": {"anonymous_tenant": "bench"},
            "backends": [{"name": "fake", "url": backend_url, "models": ["fake"]}],
            "scrape": {"enabled": False},
            "reload": {"watch": False},
            **sections,
        }
    )


async def one(client: httpx.AsyncClient, url: str, stream: bool) -> float:
    body = {**BODY, "stream": stream}
    start = time.perf_counter()
    if stream:
        async with client.stream("POST", url, json=body) as r:
            async for _ in r.aiter_raw():
                pass
            assert r.status_code == 200, r.status_code
    else:
        r = await client.post(url, json=body)
        assert r.status_code == 200, r.text
    return time.perf_counter() - start


async def measure(base: str, stream: bool, concurrency: int, n: int) -> list[float]:
    url = base + "/v1/chat/completions"
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=30.0) as client:
        await asyncio.gather(*(one(client, url, stream) for _ in range(concurrency)))  # warm
        sem = asyncio.Semaphore(concurrency)

        async def bounded() -> float:
            async with sem:
                return await one(client, url, stream)

        return list(await asyncio.gather(*(bounded() for _ in range(n))))


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q * 100) - 1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--requests", type=int, default=400, help="requests per setting and path")
    p.add_argument("--tokens", type=int, default=16, help="SSE events per streamed response")
    p.add_argument("--fake-backend", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.fake_backend:
        run_fake_backend(args.fake_backend, args.tokens)
        return 0
    backend_port, gw_port = free_port(), free_port()
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "gw.yaml"
        cfg.write_text(gateway_config(f"http://127.0.0.1:{backend_port}", gw_port))
        try:
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        __file__,
                        "--fake-backend",
                        str(backend_port),
                        "--tokens",
                        str(args.tokens),
                    ]
                )
            )
            procs.append(
                subprocess.Popen(
                    serve(cfg, records=False),
                    env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
                )
            )
            wait_healthy(f"http://127.0.0.1:{backend_port}/health")
            wait_healthy(f"http://127.0.0.1:{gw_port}/readyz")
            report(f"http://127.0.0.1:{backend_port}", f"http://127.0.0.1:{gw_port}", args)
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(10)
    return 0


def report(direct: str, gateway: str, args: argparse.Namespace) -> None:
    print(
        f"{'mode':<7}{'C':>4}  {'direct p50/p99 ms':>18}  {'gateway p50/p99 ms':>19}  "
        f"{'added p50/p99 ms':>17}  {'ratio p50':>9}"
    )
    for stream in (False, True):
        for concurrency in (1, 64):
            d = asyncio.run(measure(direct, stream, concurrency, args.requests))
            g = asyncio.run(measure(gateway, stream, concurrency, args.requests))
            d50, d99, g50, g99 = (pct(d, 0.5), pct(d, 0.99), pct(g, 0.5), pct(g, 0.99))
            print(
                f"{'stream' if stream else 'json':<7}{concurrency:>4}  "
                f"{d50 * 1e3:>8.2f} / {d99 * 1e3:<7.2f}  {g50 * 1e3:>8.2f} / {g99 * 1e3:<8.2f}  "
                f"{(g50 - d50) * 1e3:>7.2f} / {(g99 - d99) * 1e3:<7.2f}  {g50 / d50:>9.2f}"
            )


if __name__ == "__main__":
    raise SystemExit(main())
