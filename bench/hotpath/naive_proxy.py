"""The naive pass-through of the reference table (docs/performance.md): FastAPI and one
httpx.AsyncClient.

Not a setup of the default run; ``--setups direct,naive,...`` adds it, as a calibration
point between "no proxy" and "a gateway that decides".
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

import httpx
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from gateway.forward.connection_pool import UpstreamPool

UPSTREAM = os.environ.get("NAIVE_UPSTREAM", "http://127.0.0.1:18000")
FAST = os.environ.get("NAIVE_CLIENT") == "pool"
"""``pool``: the gateway's upstream pool instead of httpx, same app otherwise."""
client = httpx.AsyncClient(base_url=UPSTREAM, timeout=600.0)
pool = UpstreamPool(UPSTREAM, connect_timeout_s=3.0, read_timeout_s=600.0)
app = FastAPI()


@app.get("/health")
async def health() -> Response:
    return Response(b"")


@app.post("/v1/chat/completions")
async def chat(request: Request) -> Response:
    body = await request.body()
    upstream: Any
    if FAST:
        upstream = await pool.send(
            "POST", "/v1/chat/completions", body, {"content-type": "application/json"}
        )
    else:
        upstream_request = client.build_request(
            "POST",
            "/v1/chat/completions",
            content=body,
            headers={"content-type": "application/json"},
        )
        upstream = await client.send(upstream_request, stream=True)
    if upstream.headers.get("content-type", "").startswith("text/event-stream"):

        async def relay() -> AsyncIterator[bytes]:
            try:
                async for chunk in upstream.aiter_raw():
                    yield chunk
            finally:
                await upstream.aclose()

        return StreamingResponse(relay(), media_type="text/event-stream")
    data = await upstream.aread()
    await upstream.aclose()
    return Response(data, status_code=upstream.status_code, media_type="application/json")
