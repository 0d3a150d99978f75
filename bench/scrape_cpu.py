"""CPU cost of scraping /metrics, on the gateway side and (with --url) on the backend side.

    python bench/scrape_cpu.py [--backends 4] [--interval 0.25] [--duration 15]
    python bench/scrape_cpu.py --url http://127.0.0.1:8001 --interval 0.25 --duration 15

Without --url, a separate process serves the real vLLM dump on loopback for every backend,
so only the scraper's own work (HTTP client + parse + derive) counts on this side.
With --url, the backend side is measured too: the growth of vLLM's own
``process_cpu_seconds_total`` (its API server, which renders /metrics) while scraped,
minus the growth over an equally long idle stretch just before.
Prints cores used (CPU seconds per wall second).
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from pathlib import Path

import httpx

from gateway.backends.scrape.scraper import MetricsScraper, ScrapeSettings, ScrapeTarget
from scripts.vllm.serve import free_port

DUMP = Path(__file__).parent.parent / "tests/fixtures/vllm-0.32-metrics-under-load.txt"
SERVER = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
body = open(sys.argv[2], "rb").read()
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as uvicorn in front of vLLM does
    def do_GET(self):
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


async def scrape_for(targets: list[ScrapeTarget], interval_s: float, duration_s: float) -> float:
    """Cores used by this process while scraping ``targets`` for ``duration_s``."""
    limits = httpx.Limits(max_connections=len(targets) * 2)
    async with httpx.AsyncClient(limits=limits) as client:
        scraper = MetricsScraper(
            client, targets, clock=time.monotonic, settings=ScrapeSettings(interval_s=interval_s)
        )
        cpu0, wall0 = time.process_time(), time.monotonic()
        task = asyncio.create_task(scraper.run())
        await asyncio.sleep(duration_s)
        scraper.stop()
        await task
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    failures = sum(s.failures_total for n in scraper.names if (s := scraper.state(n)))
    if failures:
        print(f"  warning: {failures} failed scrapes", file=sys.stderr)
    return cpu / wall


def wait_until_serving(url: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1.0)
            return
        except httpx.TransportError:
            time.sleep(0.05)
    raise SystemExit(f"static server did not start at {url}")


async def backend_cpu_seconds(url: str) -> float:
    async with httpx.AsyncClient() as client:
        text = (await client.get(url)).text
    for line in text.splitlines():
        if line.startswith("process_cpu_seconds_total "):
            return float(line.split()[1])
    raise SystemExit("backend exports no process_cpu_seconds_total")


async def measure_backend(url: str, interval_s: float, duration_s: float) -> None:
    metrics = url.rstrip("/") + "/metrics"
    idle0 = await backend_cpu_seconds(metrics)
    await asyncio.sleep(duration_s)
    idle = await backend_cpu_seconds(metrics) - idle0
    targets = [ScrapeTarget("b0", metrics)]
    busy0 = await backend_cpu_seconds(metrics)
    gateway = await scrape_for(targets, interval_s, duration_s)
    busy = await backend_cpu_seconds(metrics) - busy0
    print(f"interval {interval_s} s, 1 backend at {url}, {duration_s:g} s:")
    print(f"  gateway side: {gateway * 100:.2f}% of a core")
    print(
        f"  backend side: {(busy - idle) / duration_s * 100:.2f}% of a core "
        f"(scraped {busy:.2f} s CPU vs idle {idle:.2f} s; 0.01 s resolution)"
    )


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--backends", type=int, default=4)
    p.add_argument("--interval", type=float, default=0.25)
    p.add_argument("--duration", type=float, default=15.0)
    p.add_argument("--url", default=None)
    args = p.parse_args(argv)
    if args.url:
        asyncio.run(measure_backend(args.url, args.interval, args.duration))
        return 0
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(port), str(DUMP)])
    try:
        base = f"http://127.0.0.1:{port}"
        wait_until_serving(base + "/metrics")
        targets = [ScrapeTarget(f"b{i}", f"{base}/metrics?b={i}") for i in range(args.backends)]
        cores = asyncio.run(scrape_for(targets, args.interval, args.duration))
        per_scrape_ms = cores * args.interval / args.backends * 1000
        print(
            f"interval {args.interval} s, {args.backends} backends, {args.duration:g} s: "
            f"gateway {cores * 100:.2f}% of a core ({per_scrape_ms:.2f} ms CPU per scrape)"
        )
    finally:
        server.terminate()
        server.wait(timeout=10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
