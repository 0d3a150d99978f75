"""What sharing limits through Redis costs a request (fleet mode, docs/fleet.md).

Two gateways side by side in front of one fast fake vLLM (``bench/overhead.py``'s), the same
config except ``state:``: one ``local``, one ``redis`` (a real ``redis-server`` on loopback,
no persistence). Both enforce a ``tenant_quota`` (a tenant without one costs no Redis call at
all), set high enough never to refuse. Prints, per concurrency: p50/p99 end-to-end of each and
the difference (what Redis adds), the gateway's CPU per request, and the Redis commands per
request from ``INFO commandstats`` before and after. Not a test; 2 shared cores here.

    python bench/fleet_state.py [--requests 600]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.overhead import gateway_config, measure, pct, wait_healthy
from scripts.service_argv import redis_server, serve
from scripts.vllm.serve import free_port

REPO = Path(__file__).resolve().parents[1]
QUOTA = {"tokens_per_minute": 10**9, "max_concurrent": 10**6}


def config(backend_url: str, port: int, state: dict[str, object]) -> str:
    gate = {"type": "tenant_quota", "parameters": {"default": QUOTA}}
    return gateway_config(backend_url, port, state=state, policy={"gates": [gate]})


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def commands(client: redis.Redis) -> tuple[int, int]:
    """(round trips: commands sent by clients, commands run inside scripts)."""
    stats = client.info("commandstats")
    calls = {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}
    sent = sum(c for k, c in calls.items() if k in _SENT)
    inner = sum(c for k, c in calls.items() if k not in _SENT and k not in ("info", "config"))
    return sent, inner


_SENT = {"evalsha", "eval", "script", "ping"}
"""What the gateway sends on the request path and heartbeats; TIME and the rest run inside
the scripts (commandstats counts those too)."""


def script_rtt_ms(client: redis.Redis, n: int = 1000) -> tuple[float, float]:
    """p50/p99 of one ADMIT call from a plain client: Redis's own share of the added time."""
    from gateway.replicas.scripts import ADMIT

    admit = client.register_script(ADMIT)
    times = []
    for i in range(n):
        start = time.perf_counter()
        admit(keys=["bench:lease:x", "bench:bucket:x"], args=[f"m{i}", 30000, 0, 0, 0, 1])
        times.append(time.perf_counter() - start)
    client.delete("bench:lease:x")
    return pct(times, 0.5) * 1e3, pct(times, 0.99) * 1e3


@contextmanager
def processes(argv_list: list[list[str]]) -> Iterator[list[subprocess.Popen[bytes]]]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen(argv, env=env) for argv in argv_list]
    try:
        yield procs
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(10)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--requests", type=int, default=600, help="requests per gateway and setting")
    args = p.parse_args(argv)
    redis_bin = shutil.which("redis-server") or "redis-server"
    ports = {k: free_port() for k in ("backend", "redis", "local", "shared")}
    url = f"redis://127.0.0.1:{ports['redis']}/0"
    with tempfile.TemporaryDirectory() as tmp:
        for name, state in (
            ("local", {"backend": "local"}),
            ("shared", {"backend": "redis", "url": url}),
        ):
            cfg = config(f"http://127.0.0.1:{ports['backend']}", ports[name], state)
            (Path(tmp) / f"{name}.yaml").write_text(cfg)
        argv_list = [
            redis_server(redis_bin, ports["redis"], tmp),
            [
                sys.executable,
                str(REPO / "bench" / "overhead.py"),
                "--fake-backend",
                str(ports["backend"]),
            ],
            serve(Path(tmp) / "local.yaml", records=False),
            serve(Path(tmp) / "shared.yaml", records=False),
        ]
        with processes(argv_list) as procs:
            wait_healthy(f"http://127.0.0.1:{ports['backend']}/health")
            for name in ("local", "shared"):
                wait_healthy(f"http://127.0.0.1:{ports[name]}/readyz")
            report(ports, procs, args.requests, redis.Redis.from_url(url))
    return 0


def report(
    ports: dict[str, int], procs: list[subprocess.Popen[bytes]], n: int, client: redis.Redis
) -> None:
    pids = {"local": procs[2].pid, "shared": procs[3].pid}
    rtt50, rtt99 = script_rtt_ms(client)
    print(
        f"one ADMIT script call from a plain client: p50 {rtt50:.3f} ms, p99 {rtt99:.3f} ms; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    print(
        f"{'C':>3}  {'local p50/p99 ms':>17}  {'redis p50/p99 ms':>17}  "
        f"{'added p50/p99 ms':>17}  {'CPU ms/req local/redis':>23}  {'round trips/req':>15}  "
        f"{'in-script cmds/req':>18}"
    )
    for concurrency in (1, 64):
        out: dict[str, list[float]] = {}
        cpu: dict[str, float] = {}
        sent = inner = 0
        for name in ("local", "shared", "local", "shared"):  # interleaved: side by side
            before_cpu, (sent0, inner0) = cpu_s(pids[name]), commands(client)
            base = f"http://127.0.0.1:{ports[name]}"
            out.setdefault(name, []).extend(asyncio.run(measure(base, False, concurrency, n)))
            cpu[name] = cpu.get(name, 0.0) + cpu_s(pids[name]) - before_cpu
            if name == "shared":
                sent1, inner1 = commands(client)
                sent, inner = sent + sent1 - sent0, inner + inner1 - inner0
        total = 2 * (n + concurrency)  # measured requests plus the warm-up ones
        l50, l99 = pct(out["local"], 0.5) * 1e3, pct(out["local"], 0.99) * 1e3
        r50, r99 = pct(out["shared"], 0.5) * 1e3, pct(out["shared"], 0.99) * 1e3
        print(
            f"{concurrency:>3}  {l50:>7.2f} / {l99:<7.2f}  {r50:>7.2f} / {r99:<7.2f}  "
            f"{r50 - l50:>7.2f} / {r99 - l99:<7.2f}  "
            f"{cpu['local'] / total * 1e3:>10.3f} / {cpu['shared'] / total * 1e3:<10.3f}  "
            f"{sent / total:>15.2f}  {inner / total:>18.2f}"
        )


if __name__ == "__main__":
    sys.exit(main())
