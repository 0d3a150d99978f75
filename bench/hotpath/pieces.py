"""Per-request pieces of the gateway, old way vs new way, timed side by side in one run.

    python -m bench.hotpath.pieces [--rounds 7]

Each line prints the median time per call of both ways (interleaved rounds, same process)
and their ratio; the ratio is what to read, the machine's speed swings between runs.
The "old" ways are the ones the request path used before the hot-path work (docs/performance.md):
prometheus_client metrics updated per request, a Task listening for the disconnect,
``json.loads`` of the decoded body.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from gateway.forward.streaming_response import wait_disconnect
from gateway.front.disconnect import DisconnectWatch
from gateway.metrics.exporter import QUEUE_WAIT_BUCKETS
from gateway.metrics.tally import CounterTally, HistogramTally
from gateway.request.inbound import loads_as_json

BODY = b'{"model":"fake","messages":[{"role":"user","content":"hello bench"}],"max_tokens":16}'
LABELS = ("admit", "capacity_available", "acme", "interactive")


def _metrics_pair() -> tuple[Callable[[], None], Callable[[], None]]:
    """One request's updates: a decision, a queue wait, an outcome, four token counts."""
    r = CollectorRegistry()
    decisions = Counter("d", "d", ["decision", "reason", "tenant", "class"], registry=r)
    outcomes = Counter("o", "o", ["outcome", "tenant", "class"], registry=r)
    waited = Histogram("w", "w", ["tenant", "class"], buckets=QUEUE_WAIT_BUCKETS, registry=r)
    tokens = Counter("t", "t", ["kind"], registry=r)
    cache: dict[tuple[Any, tuple[str, ...]], Any] = {}

    def child(metric: Any, *values: str) -> Any:  # round 1's cached ``labels()``
        key = (metric, values)
        found = cache.get(key)
        if found is None:
            found = cache[key] = metric.labels(*values)
        return found

    def old() -> None:
        child(decisions, *LABELS).inc()
        child(waited, "acme", "interactive").observe(0.0)
        for kind in ("prompt", "output", "prompt", "output"):
            child(tokens, kind).inc(12)
        child(outcomes, "completed", "acme", "interactive").inc()

    d = CounterTally("d", "d", ["decision", "reason", "tenant", "class"])
    o = CounterTally("o", "o", ["outcome", "tenant", "class"])
    w = HistogramTally("w", "w", ["tenant", "class"], QUEUE_WAIT_BUCKETS)
    t = CounterTally("t", "t", ["kind"])
    prompt, output = ("prompt",), ("output",)

    def new() -> None:
        d.inc(LABELS)
        w.observe(("acme", "interactive"), 0.0)
        for kind in (prompt, output, prompt, output):
            t.inc(kind, 12)
        o.inc(("completed", "acme", "interactive"))

    return old, new


async def _watch_pair(n: int) -> tuple[float, float]:
    """Seconds for ``n`` disconnect listeners started and stopped: Task vs DisconnectWatch."""
    event = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await event.wait()
        return {"type": "http.disconnect"}

    t0 = time.perf_counter()
    for _ in range(n):
        task = asyncio.ensure_future(wait_disconnect(receive))
        await asyncio.sleep(0)  # the task starts listening
        task.cancel()
        await asyncio.sleep(0)  # the cancellation runs
    t1 = time.perf_counter()
    for _ in range(n):
        watch = DisconnectWatch(receive)
        await asyncio.sleep(0)
        watch.close()
        await asyncio.sleep(0)
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1


def _per_call(fn: Callable[[], object], n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


def _line(name: str, old: list[float], new: list[float]) -> str:
    o, n = statistics.median(old), statistics.median(new)
    return f"| {name} | {o * 1e6:.2f} | {n * 1e6:.2f} | {n / o:.2f} |"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=20000)
    args = p.parse_args(argv)
    rows: dict[str, tuple[list[float], list[float]]] = {}
    m_old, m_new = _metrics_pair()
    decode_old: Callable[[], object] = lambda: json.loads(BODY.decode("utf-8"))  # noqa: E731
    decode_new: Callable[[], object] = lambda: loads_as_json(BODY)  # noqa: E731
    loop = asyncio.new_event_loop()
    for _ in range(args.rounds):
        for name, old, new in (
            ("metrics per request", m_old, m_new),
            ("request body decode", decode_old, decode_new),
        ):
            pair = rows.setdefault(name, ([], []))
            pair[0].append(_per_call(old, args.calls))
            pair[1].append(_per_call(new, args.calls))
        told, tnew = loop.run_until_complete(_watch_pair(args.calls // 4))
        pair = rows.setdefault("disconnect listener (with 2 loop turns)", ([], []))
        pair[0].append(told / (args.calls // 4))
        pair[1].append(tnew / (args.calls // 4))
    loop.close()
    print("| piece | old µs | new µs | new/old |\n|---|---:|---:|---:|")
    for name, (old_times, new_times) in rows.items():
        print(_line(name, old_times, new_times))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
