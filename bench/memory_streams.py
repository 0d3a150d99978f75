"""Memory of open, idle streams through the gateway: RSS and bytes per stream (docs/performance.md).

    python bench/memory_streams.py [--streams 10000] [--batch 250]

The fake backend (``--hold``) sends each stream's head and first SSE event, then stays
silent until the client leaves, so every stream is open and idle on both sides of the
gateway. Streams are opened in batches; a stream counts as open once its first event has
come back through the gateway. The gateway's RSS (VmRSS, /proc) is read before the first
stream and after each checkpoint; bytes per stream is the growth divided by the streams
open. All streams are then closed and RSS read once more (CPython keeps freed memory in its
arenas, so this shows what is retained, not a leak by itself). Prints one line per
checkpoint; exits non-zero when a stream failed to open.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import resource
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.hotpath.procs import fake_backend, raise_nofile, wait_http
from bench.hotpath.setups import MODEL, TENANT_KEYS, Sluicegate
from scripts.vllm.serve import free_port

FIRST_EVENT = b"data: "


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def _request(key: str) -> bytes:
    body = (
        b'{"model":"' + MODEL.encode() + b'","stream":true,"max_tokens":64,'
        b'"messages":[{"role":"user","content":"hold"}]}'
    )
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {key}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def open_stream(port: int, key: str, timeout_s: float) -> asyncio.StreamWriter | str:
    """Open one stream and wait for its first event: the writer (which keeps it open), or
    why it failed."""
    writer = None
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port), timeout_s
        )
        writer.write(_request(key))
        seen = b""
        deadline = time.monotonic() + timeout_s
        while FIRST_EVENT not in seen.partition(b"\r\n\r\n")[2]:
            left = deadline - time.monotonic()
            chunk = await asyncio.wait_for(reader.read(65536), max(left, 0.001))
            seen += chunk
            if not chunk or (len(seen) > 12 and not seen.startswith(b"HTTP/1.1 200")):
                writer.close()
                return seen.split(b"\r\n", 1)[0].decode(errors="replace") or "closed"
        return writer
    except (OSError, TimeoutError) as exc:
        if writer is not None:
            writer.close()
        return type(exc).__name__


async def hold_streams(pid: int, port: int, args: argparse.Namespace) -> int:
    n = args.streams
    checkpoints = sorted({c for c in (1000, n // 2, n) if 0 < c <= n})
    base = rss_bytes(pid)
    print(f"gateway RSS before any stream: {base / 2**20:.1f} MiB")
    writers: list[asyncio.StreamWriter] = []
    failed = 0
    reasons: Counter[str] = Counter()
    while len(writers) < args.streams and failed <= args.max_failures:
        n = min(args.batch, args.streams - len(writers))
        opened = await asyncio.gather(
            *(open_stream(port, TENANT_KEYS[i % len(TENANT_KEYS)], args.timeout) for i in range(n))
        )
        writers += [w for w in opened if not isinstance(w, str)]
        reasons.update(w for w in opened if isinstance(w, str))
        failed = sum(reasons.values())
        if checkpoints and len(writers) >= checkpoints[0]:
            checkpoints.pop(0)
            await asyncio.sleep(1.0)  # let the gateway settle (no GC race in the reading)
            _report(pid, base, len(writers), failed)
    if checkpoints:
        _report(pid, base, len(writers), failed)
    if reasons:
        print("failures: " + ", ".join(f"{n} x {why}" for why, n in reasons.most_common()))
    for w in writers:
        w.close()
    await asyncio.sleep(3.0)
    print(f"after closing: gateway in flight {await in_flight(port)} (every slot must be released)")
    print(
        f"all closed: gateway RSS {rss_bytes(pid) / 2**20:.1f} MiB "
        f"(retained {(rss_bytes(pid) - base) / 2**20:.1f} MiB)"
    )
    return failed


async def in_flight(port: int) -> str:
    """``sluicegate_in_flight`` from the gateway's own /metrics."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    text = (await reader.read()).decode(errors="replace")
    writer.close()
    for line in text.splitlines():
        if line.startswith("sluicegate_in_flight "):
            return line.split()[1]
    return "?"


def _report(pid: int, base: int, open_streams: int, failed: int) -> None:
    rss = rss_bytes(pid)
    per = (rss - base) / open_streams if open_streams else 0.0
    print(
        f"{open_streams:>6} open idle streams: gateway RSS {rss / 2**20:7.1f} MiB, "
        f"+{(rss - base) / 2**20:6.1f} MiB, {per:,.0f} bytes per stream, "
        f"{failed} failed to open",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--streams", type=int, default=10_000)
    p.add_argument("--batch", type=int, default=250)
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to open one stream")
    p.add_argument("--max-failures", type=int, default=100)
    args = p.parse_args(argv)
    raise_nofile()
    fits = fd_bound_streams()
    if args.streams > fits:
        print(
            f"asked for {args.streams} streams; the open-file limit "
            f"({resource.getrlimit(resource.RLIMIT_NOFILE)[0]}, and this sandbox may not raise "
            f"it) lets the gateway hold {fits} (two sockets each): measuring {fits}"
        )
        args.streams = fits
    with tempfile.TemporaryDirectory(prefix="sluicegate-memory-") as tmp:
        workdir = Path(tmp)
        backend, port = fake_backend(workdir, "0", "--hold")
        gateway = Sluicegate("sluicegate", port, free_port(), workdir, "1")
        gateway.max_num_seqs = gateway.max_concurrent_per_tenant = 2 * args.streams
        try:
            backend.start()
            wait_http(backend, "127.0.0.1", port)
            gateway.start()
            pid = _server_pid(gateway.pids()[0])
            failed = asyncio.run(hold_streams(pid, gateway.port, args))
        finally:
            gateway.stop()
            backend.stop()
            with contextlib.suppress(OSError):
                log = gateway.procs[0].log.read_text(errors="replace").splitlines()
                notes = [ln for ln in log if not ln.startswith('{"event":"request"')]
                print("gateway log, other than request records:\n" + "\n".join(notes[-15:]))
    return 1 if failed else 0


def fd_bound_streams(spare: int = 300) -> int:
    """Streams one gateway process can hold: a client and an upstream socket each."""
    return (resource.getrlimit(resource.RLIMIT_NOFILE)[0] - spare) // 2


def _server_pid(leader: int) -> int:
    """The serving process (the group leader unless it forked a worker)."""
    children = Path(f"/proc/{leader}/task/{leader}/children")
    kids = children.read_text().split() if children.exists() else []
    return int(kids[-1]) if kids else leader


if __name__ == "__main__":
    raise SystemExit(main())
