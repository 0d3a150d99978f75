"""How the global limits' error grows with the number of gateway replicas (fleet mode).

For N = 1, 2, 4: N ``sluicegate serve`` subprocesses sharing one real ``redis-server``
(``state: redis``), and the same N with ``state: local`` (each replica counts alone), side by
side in one run, in front of one fake vLLM that holds each request ``--hold-ms`` and counts
what it serves. The load generator sends round robin over the replicas (a balancer's job):

- ``max_concurrent``: one tenant limited to ``--cap`` in flight, flooded by 64 clients; the
  most the backend held at once ÷ the limit.
- ``tokens_per_minute``: another tenant (``--tpm``, burst ``--burst``) flooded by 16
  clients for ``--seconds``; the tokens the backend served ÷ (burst + refill over the run).

Also the CPU per request: the replicas' (all N summed) and Redis's, from /proc, over the
requests the replicas answered (served and refused). Not a test; 2 shared cores here.

    python bench/fleet_scaling.py [--replicas 1,2,4] [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.fleet_state import cpu_s, processes
from bench.overhead import wait_healthy
from gateway.request.auth import key_digest
from scripts.service_argv import redis_server, serve
from scripts.vllm.serve import free_port

USAGE = {"prompt_tokens": 60, "completion_tokens": 16, "total_tokens": 76}
BODY = {"model": "fake", "messages": [{"role": "user", "content": "hello " * 50}], "max_tokens": 16}


def fake_backend(port: int, hold_s: float) -> None:
    """Answers every completion after ``hold_s``; GET /stats: the most held at once and the
    tokens served since the last POST /reset."""
    import uvicorn

    stats = {"held": 0, "max": 0, "tokens": 0, "served": 0}
    answer = json.dumps(
        {
            "id": "c",
            "object": "chat.completion",
            "usage": USAGE,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "tok " * 16},
                    "finish_reason": "length",
                }
            ],
        }
    ).encode()

    async def send_json(send: Any, body: bytes) -> None:
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        path = scope["path"]
        if path == "/v1/chat/completions":
            stats["held"] += 1
            stats["max"] = max(stats["max"], stats["held"])
            try:
                await asyncio.sleep(hold_s)
            finally:
                stats["held"] -= 1
            stats["tokens"] += USAGE["total_tokens"]
            stats["served"] += 1
            await send_json(send, answer)
        elif path == "/reset":
            stats.update(max=stats["held"], tokens=0, served=0)
            await send_json(send, b"{}")
        else:
            await send_json(send, json.dumps(stats).encode())

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def config(backend: str, port: int, state: dict[str, Any], args: argparse.Namespace) -> str:
    limits = {
        "conc": {"max_concurrent": args.cap},
        "tpm": {"tokens_per_minute": args.tpm, "burst_tokens": args.burst},
    }
    gate = {"type": "tenant_quota", "parameters": {"default": {}, "tenants": limits}}
    return json.dumps(
        {
            "server": {"host": "127.0.0.1", "port": port, "log_records": False},
            "tenants": [{"name": t, "api_key_sha256": [key_digest(f"sk-{t}")]} for t in limits],
            "backends": [{"name": "fake", "url": backend, "models": ["fake"]}],
            "scrape": {"enabled": False},
            "reload": {"watch": False},
            "state": state,
            "policy": {"gates": [gate], "retry_after": {"min_s": 0.01, "max_s": 60, "jitter": 0.0}},
        }
    )


async def flood(urls: list[str], tenant: str, clients: int, seconds: float) -> int:
    """Round robin over ``urls`` until ``seconds`` pass; the requests answered."""
    answered = 0
    turn = 0
    headers = {"authorization": f"Bearer sk-{tenant}"}
    limits = httpx.Limits(max_connections=None)
    async with httpx.AsyncClient(timeout=60.0, headers=headers, limits=limits) as client:
        end = time.monotonic() + seconds

        async def one_client() -> None:
            nonlocal answered, turn
            while time.monotonic() < end:
                url, turn = urls[turn % len(urls)], turn + 1
                r = await client.post(url + "/v1/chat/completions", json=BODY)
                answered += 1
                if r.status_code != 200:
                    assert r.status_code == 429, r.text
                    await asyncio.sleep(0.02)  # the load generator's pacing

        await asyncio.gather(*(one_client() for _ in range(clients)))
    return answered


def run_fleet(
    mode: str,
    n: int,
    args: argparse.Namespace,
    backend: str,
    redis_url: str,
    tmp: Path,
    redis_pid: int,
) -> dict[str, float]:
    state = (
        {"backend": "local"}
        if mode == "local"
        else {
            "backend": "redis",
            "url": redis_url,
            "key_prefix": f"{mode}{n}-",
            "command_timeout_ms": args.command_timeout_ms,
        }
    )
    ports = [free_port() for _ in range(n)]
    argv = []
    for port in ports:
        path = tmp / f"{mode}-{n}-{port}.yaml"
        path.write_text(config(backend, port, state, args))
        argv.append(serve(path, records=False))
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    with processes(argv) as procs:
        for url in urls:
            wait_healthy(url + "/readyz", 60.0)
        out: dict[str, float] = {}
        for tenant, clients in (("conc", 64), ("tpm", 16)):
            httpx.post(backend + "/reset")
            cpu0 = sum(cpu_s(p.pid) for p in procs)
            redis0 = cpu_s(redis_pid)
            started = time.monotonic()
            answered = asyncio.run(flood(urls, tenant, clients, args.seconds))
            elapsed = time.monotonic() - started
            stats = httpx.get(backend + "/stats").json()
            cpu = sum(cpu_s(p.pid) for p in procs) - cpu0
            out[f"{tenant}_gw_ms"] = cpu / answered * 1e3
            out[f"{tenant}_redis_ms"] = (cpu_s(redis_pid) - redis0) / answered * 1e3
            out[f"{tenant}_rps"] = answered / elapsed
            if tenant == "conc":
                out["conc_ratio"] = stats["max"] / args.cap
            else:
                out["tpm_ratio"] = stats["tokens"] / (args.burst + args.tpm / 60 * elapsed)
        out["failures"] = sum(failures(url) for url in urls)
    return out


def failures(url: str) -> float:
    """The replica's Redis calls that failed or timed out (then it ran on its local share)."""
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith("sluicegate_shared_state_failures_total"):
            return float(line.split()[-1])
    return 0.0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--replicas", default="1,2,4")
    p.add_argument("--seconds", type=float, default=10.0, help="per flood")
    p.add_argument("--cap", type=int, default=8, help="max_concurrent of tenant conc")
    p.add_argument("--tpm", type=int, default=6000, help="tokens_per_minute of tenant tpm")
    p.add_argument("--burst", type=int, default=300)
    p.add_argument("--hold-ms", type=float, default=200.0, help="the fake backend's latency")
    p.add_argument(
        "--command-timeout-ms",
        type=int,
        default=1000,
        help="state.command_timeout_ms: generous, so that a loaded machine measures "
        "the shared limits rather than their fallback",
    )
    p.add_argument("--fake-backend", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.fake_backend:
        fake_backend(args.fake_backend, args.hold_ms / 1000)
        return 0
    redis_bin = shutil.which("redis-server") or "redis-server"
    rport, bport = free_port(), free_port()
    backend = f"http://127.0.0.1:{bport}"
    with tempfile.TemporaryDirectory() as tmp:
        support = [
            redis_server(redis_bin, rport, tmp),
            [
                sys.executable,
                __file__,
                "--fake-backend",
                str(bport),
                "--hold-ms",
                str(args.hold_ms),
            ],
        ]
        with processes(support) as procs:
            wait_healthy(backend + "/stats")
            print(
                f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; "
                f"max_concurrent {args.cap}, tokens_per_minute {args.tpm} burst {args.burst}, "
                f"{args.seconds:.0f} s per flood, backend latency {args.hold_ms:.0f} ms"
            )
            print(
                f"{'N':>2}  {'state':<6} {'max held ÷ cap':>14}  {'tokens ÷ allowed':>16}  "
                f"{'gw CPU ms/req (cap, tpm)':>24}  {'redis CPU ms/req':>16}  "
                f"{'req/s (cap, tpm)':>16}  {'Redis failures':>14}"
            )
            for n in (int(x) for x in args.replicas.split(",")):
                for mode in ("redis", "local"):  # side by side, per N
                    r = run_fleet(
                        mode,
                        n,
                        args,
                        backend,
                        f"redis://127.0.0.1:{rport}/0",
                        Path(tmp),
                        procs[0].pid,
                    )
                    print(
                        f"{n:>2}  {mode:<6} {r['conc_ratio']:>14.2f}  {r['tpm_ratio']:>16.3f}  "
                        f"{r['conc_gw_ms']:>11.2f}, {r['tpm_gw_ms']:<11.2f}  "
                        f"{(r['conc_redis_ms'] + r['tpm_redis_ms']) / 2:>16.3f}  "
                        f"{r['conc_rps']:>7.0f}, {r['tpm_rps']:<7.0f}  {r['failures']:>14.0f}",
                        flush=True,
                    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
