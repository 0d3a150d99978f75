"""Serve the gateway under uvicorn for experiments that ``sluicegate serve`` cannot express.

``uvicorn --factory bench.hotpath.sluicegate_app:build`` with ``SLUICEGATE_CONFIG`` set:
the same ``create_app`` the CLI wires. With ``SLUICEGATE_UPSTREAM=pool`` the hot path's
``open_upstream`` is swapped at run time for one on ``forward_pool_draft.UpstreamPool``,
and httpx's per-request INFO log line is silenced: a measurement of a proposed change
made before the gateway's files could be edited (setup ``sluicegate-pool``).
"""

from __future__ import annotations

import logging
import os

import httpx
from fastapi import FastAPI

import gateway.proxy
from bench.hotpath.forward_pool_draft import UpstreamPool, UpstreamResponse
from gateway.app import create_app
from gateway.config import load_config
from gateway.forward import BackendBusy

_POOLS: dict[str, UpstreamPool] = {}
_HEADERS = {"content-type": "application/json", "accept-encoding": "identity"}


async def open_upstream_pooled(
    client: httpx.AsyncClient, path: str, body: bytes, request_id: str
) -> UpstreamResponse:
    base = str(client.base_url).rstrip("/")
    pool = _POOLS.get(base)
    if pool is None:
        timeout = client.timeout
        pool = _POOLS[base] = UpstreamPool(
            base, connect_timeout_s=timeout.connect or 3.0, read_timeout_s=timeout.read or 600.0
        )
    response = await pool.send("POST", path, body, {**_HEADERS, "x-request-id": request_id})
    if response.status_code == 503:
        await response.aclose()
        raise BackendBusy(503)
    return response


def build() -> FastAPI:
    path = os.environ["SLUICEGATE_CONFIG"]
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if os.environ.get("SLUICEGATE_UPSTREAM") == "pool":
        logging.getLogger("httpx").setLevel(logging.WARNING)
        setattr(gateway.proxy, "open_upstream", open_upstream_pooled)  # noqa: B010 (run-time swap)
    return create_app(load_config(path), config_path=path)
