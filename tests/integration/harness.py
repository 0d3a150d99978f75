"""The real gateway on loopback uvicorn (in this event loop, with the server protocol
``sluicegate serve`` uses) in front of real emulators.

``serve_gateway(raw_config)`` starts it with background jobs on (health probes, /metrics
scraping over real HTTP) and, when the test body ends without error, checks that nothing
was lost: the scheduler holds nothing queued or in flight and the gateway counted exactly
one terminal outcome per completion request the test sent (counted by an httpx hook on
every client the harness hands out, including the OpenAI SDK's).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import uvicorn
import yaml
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families

from gateway.app import create_app
from gateway.config.schema import GatewayConfig
from gateway.context import GatewayContext
from gateway.front.http_guard import guarded_http
from gateway.request.auth import key_digest
from scripts.child_process import stop
from scripts.service_argv import sluicegate
from scripts.vllm.serve import free_port

REPO = Path(__file__).resolve().parents[2]
PRESETS = REPO / "presets"
MODEL = "emulated"
COMPLETION_PATHS = ("/v1/chat/completions", "/v1/completions")
SETTLE_TIMEOUT_S = 20.0
NO_LADDER: dict[str, Any] = {"ladder": {"steps": []}}
"""The policy's ladder switched off: requests are not degraded on the way."""


def api_key(tenant: str) -> str:
    return f"sk-test-{tenant}"


def preset_policy(name: str) -> dict[str, Any]:
    """The ``policy:`` section of ``presets/NAME.yaml``, as shipped."""
    data = yaml.safe_load((PRESETS / f"{name}.yaml").read_text())
    policy: dict[str, Any] = data["policy"]
    return policy


def gateway_config(
    backends: list[str],
    policy: dict[str, Any],
    *,
    tenants: tuple[str, ...] = ("alice",),
    max_num_seqs: int | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A config dict: one backend per emulator URL serving ``MODEL``, one key per tenant.
    ``max_num_seqs`` is the engine's own number (pass the emulator profile's)."""
    raw: dict[str, Any] = {
        "server": {"log_records": False},
        "tenants": [{"name": t, "api_key_sha256": [key_digest(api_key(t))]} for t in tenants],
        "backends": [
            {
                "name": f"emu-{i}",
                "url": url,
                "models": [MODEL],
                **({"max_num_seqs": max_num_seqs} if max_num_seqs else {}),
            }
            for i, url in enumerate(backends)
        ],
        "health": {"interval_s": 0.5, "timeout_s": 2.0},
        "scrape": {"interval_s": 0.1},
        "policy": policy,
    }
    raw.update(extra)
    return raw


def chat_body(
    max_tokens: int, *, content: str = "write a function", **extra: Any
) -> dict[str, Any]:
    """A chat request whose output length is exactly ``max_tokens`` (``ignore_eos``)."""
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
        **extra,
    }


CHARS_PER_TOKEN = 4
"""The emulator's prompt count (its profiles' ``chars_per_token``)."""


def prompt_body(tokens: int, max_tokens: int, stream: bool) -> dict[str, Any]:
    """A chat request whose prompt the emulator counts as ``tokens`` and whose output is
    exactly ``max_tokens`` (``ignore_eos``)."""
    text = ("lorem ipsum " * tokens)[: tokens * CHARS_PER_TOKEN]
    return chat_body(max_tokens, content=text, stream=stream)


def chat_head(port: int, length: int, **headers: str) -> bytes:
    """The raw HTTP/1.1 head of a chat completion POST as ``alice`` to 127.0.0.1:``port``,
    declaring ``length`` body bytes, with ``headers`` after the standard ones."""
    lines = [
        "POST /v1/chat/completions HTTP/1.1",
        f"host: 127.0.0.1:{port}",
        f"authorization: Bearer {api_key('alice')}",
        "content-type: application/json",
        f"content-length: {length}",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def metric_sums(text: str) -> dict[str, float]:
    """Prometheus exposition -> {sample name: sum over label sets}, plus labelled keys
    ``name{k=v,...}`` for each sample."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[s.name] = out.get(s.name, 0.0) + s.value
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}"] = s.value
    return out


async def wait_for(
    check: Callable[[], Awaitable[bool]] | Callable[[], bool],
    timeout_s: float = SETTLE_TIMEOUT_S,
    what: str = "condition",
) -> None:
    """Poll ``check`` (sync or async) until true; AssertionError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout_s} s")
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def sampling(sample: Callable[[], None], period_s: float = 0.0) -> AsyncIterator[None]:
    """Calls ``sample`` every ``period_s`` (0: at every event-loop turn) while the block
    runs, beside it in the same loop."""
    done = asyncio.Event()

    async def loop() -> None:
        while not done.is_set():
            sample()
            await asyncio.sleep(period_s)  # a sampling period, not a wait for a condition

    task = asyncio.ensure_future(loop())
    try:
        yield
    finally:
        done.set()
        await task


@dataclass
class Gateway:
    app: FastAPI
    ctx: GatewayContext
    base_url: str
    sent: int = 0
    _clients: list[httpx.AsyncClient] = field(default_factory=list)

    async def _count(self, request: httpx.Request) -> None:
        if request.method == "POST" and request.url.path in COMPLETION_PATHS:
            self.sent += 1

    def client(self, tenant: str = "alice", **kw: Any) -> httpx.AsyncClient:
        """An httpx client authenticated as ``tenant``; every completion it sends is counted."""
        headers = {"authorization": f"Bearer {api_key(tenant)}", **kw.pop("headers", {})}
        client = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            timeout=kw.pop("timeout", 60.0),
            event_hooks={"request": [self._count]},
            limits=httpx.Limits(max_connections=None),
            **kw,
        )
        self._clients.append(client)
        return client

    def openai(self, tenant: str = "alice") -> openai.AsyncOpenAI:
        http = httpx.AsyncClient(timeout=60.0, event_hooks={"request": [self._count]})
        self._clients.append(http)
        return openai.AsyncOpenAI(
            base_url=f"{self.base_url}/v1",
            api_key=api_key(tenant),
            http_client=http,  # type: ignore[arg-type]  # the SDK types its own httpx alias
            max_retries=0,
        )

    async def scheduler(self) -> dict[str, Any]:
        async with httpx.AsyncClient(base_url=self.base_url) as c:
            data: dict[str, Any] = (await c.get("/admin/scheduler")).json()
            return data

    async def metrics(self) -> dict[str, float]:
        async with httpx.AsyncClient(base_url=self.base_url) as c:
            return metric_sums((await c.get("/metrics")).text)

    async def settled(self) -> bool:
        stats = await self.scheduler()
        outcomes = (await self.metrics()).get("sluicegate_outcomes_total", 0.0)
        return stats["queued"] == 0 and stats["in_flight"] == 0 and outcomes == self.sent

    async def assert_nothing_lost(self) -> None:
        try:
            await wait_for(self.settled, what="settled")
        except AssertionError:
            stats, m = await self.scheduler(), await self.metrics()
            raise AssertionError(
                f"not settled: queued={stats['queued']} in_flight={stats['in_flight']} "
                f"outcomes={m.get('sluicegate_outcomes_total')} sent={self.sent}"
            ) from None
        stats = await self.scheduler()
        assert stats["charged_tokens"] == stats["released_tokens"]


def _fresh(ctx: GatewayContext) -> bool:
    """Every backend healthy with a fresh scrape (before it, stale counts as saturated)."""
    views = ctx.pool.snapshot().backends
    return all(v.health.value == "healthy" and not v.stale and v.waiting is not None for v in views)


@contextlib.contextmanager
def cli_process(*argv: str, stderr: int = subprocess.DEVNULL) -> Iterator[subprocess.Popen[bytes]]:
    """``sluicegate ARGV`` as a child process (``stderr``: DEVNULL, or PIPE to read it). At
    exit, one still running gets SIGTERM, then SIGKILL after 10 s; a piped stderr is closed."""
    proc = subprocess.Popen(sluicegate(*argv), stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        yield proc
    finally:
        stop(proc)
        if proc.stderr is not None:
            proc.stderr.close()


@contextlib.asynccontextmanager
async def serve_gateway(
    raw: dict[str, Any], *, check_lost: bool = True, config_path: Path | None = None
) -> AsyncIterator[Gateway]:
    """The gateway on uvicorn on 127.0.0.1 (a socket bound first: no port race). With
    ``config_path``, ``raw`` is written there as YAML and the gateway reloads that file."""
    cfg = GatewayConfig.model_validate(raw)
    if config_path is not None:
        config_path.write_text(yaml.safe_dump(raw, sort_keys=False))
    app = create_app(cfg, config_path=config_path)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            log_level="warning",
            lifespan="on",
            access_log=False,
            http=guarded_http(cfg.server, app.state.ctx.metrics.refused),
        )
    )
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    gw = Gateway(app, app.state.ctx, f"http://127.0.0.1:{port}")
    try:
        await wait_for(lambda: server.started or task.done(), 10.0, "gateway started")
        assert server.started, "the gateway did not start"
        await wait_for(lambda: _fresh(gw.ctx), 10.0, "every backend up with fresh signals")
        yield gw
        if check_lost:
            await gw.assert_nothing_lost()
    finally:
        for client in gw._clients:
            await client.aclose()
        server.should_exit = True
        await asyncio.wait_for(task, 10.0)
        sock.close()


async def engine_gauge(url: str, name: str) -> float:
    """One of the emulator's own vLLM gauges, read over HTTP from its /metrics."""
    async with httpx.AsyncClient(base_url=url) as c:
        return metric_sums((await c.get("/metrics")).text).get(name, 0.0)


async def engine_running(url: str) -> float:
    """The requests an emulator is running now (its own ``vllm:num_requests_running``)."""
    return await engine_gauge(url, "vllm:num_requests_running")


def engine_slots(emulator: Any) -> int:
    """An emulator's own number of slots: its profile's ``max_num_seqs``."""
    slots: int = emulator.runner.profile.engine.max_num_seqs
    return slots


@contextlib.asynccontextmanager
async def direct_load(url: str, count: int, max_tokens: int) -> AsyncIterator[list[Any]]:
    """``count`` requests straight to an emulator (not through the gateway), held open for
    the block and awaited at its end; yields the list their responses land in."""
    results: list[Any] = []
    async with httpx.AsyncClient(
        base_url=url, timeout=120.0, limits=httpx.Limits(max_connections=None)
    ) as c:

        async def one() -> None:
            results.append(await c.post("/v1/chat/completions", json=chat_body(max_tokens)))

        tasks = [asyncio.ensure_future(one()) for _ in range(count)]
        try:
            yield results
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


@contextlib.contextmanager
def emulator_process(speed: float) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``sluicegate emulate`` as a child process (it can be killed or stopped); its URL."""
    port = free_port()
    argv = ("emulate", "--port", str(port), "--model-name", MODEL, "--speed", str(speed))
    with cli_process(*argv) as proc:
        yield proc, f"http://127.0.0.1:{port}"


async def healthy(url: str) -> bool:
    try:
        async with httpx.AsyncClient() as c:
            return (await c.get(f"{url}/health", timeout=1.0)).status_code == 200
    except httpx.HTTPError:
        return False


def decode_seconds(emulator: Any, tokens: int) -> float:
    """Wall seconds an emulator needs at least to decode ``tokens`` for one sequence alone:
    its profile's step time divided by its speed (it may run slower, never faster)."""
    step = emulator.runner.profile.engine.step_time
    per_step: float = step.base_s + step.per_decode_seq_s
    return tokens * per_step / float(emulator.runner.speed)
