"""``sluicegate epp --config FILE``: the gateway's decisions served to Envoy as an Endpoint
Picker (ext_proc gRPC, ``docs/epp.md``).

Envoy carries the bytes; this process decides (admit, delay, degrade, reject) and picks
the endpoint, with the scheduler, pool, probes, scrapes and reloads of ``sluicegate
serve``, on the same event loop (uvloop; ``--loop asyncio`` for the stdlib's). The gRPC
server listens on ``epp.host:epp.port``; ``server.host:server.port``
serves ``/metrics``, ``/admin/*`` and the health endpoints over HTTP.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
from typing import Any

import uvicorn
import uvloop

from commands.check_config import print_issues
from commands.gc_tuning import tune_gc
from commands.serve import logging_flags, start_logging
from gateway.app import Gateway, build_gateway, http_app
from gateway.config.schema import ConfigError, LoadedConfig, load_config

log = logging.getLogger("sluicegate.epp")
EPP_PACKAGES = ("grpc", "grpc_health", "envoy", "google", "udpa", "xds", "validate")
"""The top-level modules of the ``epp`` extra (grpcio, grpcio-health-checking, xds-protos
and what they bring)."""
MISSING_EXTRA = "install the epp extra: pip install 'sluicegate[epp]'"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sluicegate epp", description=__doc__)
    p.add_argument("--config", required=True, help="YAML config file (see config.example.yaml)")
    p.add_argument("--host", help="override epp.host (the gRPC address)")
    p.add_argument("--port", type=int, help="override epp.port (the gRPC port; 0: any free)")
    p.add_argument("--http-port", type=int, help="override server.port (metrics and admin)")
    logging_flags(p)
    p.add_argument(
        "--loop",
        choices=("uvloop", "asyncio"),
        default="uvloop",
        help="the event loop (uvloop as `serve`; asyncio: the stdlib's)",
    )
    return p


def picker() -> Any:
    """``start_picker``; without the ``epp`` extra, an exit with one line naming it."""
    try:
        from gateway.epp.server import start_picker
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".", 1)[0] not in EPP_PACKAGES:
            raise
        raise SystemExit(f"sluicegate epp: {exc.name} is missing; {MISSING_EXTRA}") from None
    return start_picker


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    start_picker = picker()
    start_logging(args)
    try:
        loaded = load_config(args.config)
        gateway = build_gateway(loaded, config_path=args.config, batch_records=True)
    except ConfigError as exc:
        print_issues(exc.issues)
        return 2
    tune_gc()
    factory = uvloop.new_event_loop if args.loop == "uvloop" else None
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(_serve(gateway, loaded, args, start_picker))
    return 0


async def _serve(
    gateway: Gateway, loaded: LoadedConfig, args: argparse.Namespace, start_picker: Any
) -> None:
    """The HTTP side first (``/metrics``, ``/admin/*``, health; its startup runs the
    gateway's dispatcher, first probes and scrapes), then the gRPC server over the same
    gateway: Envoy's first request finds the picker ready."""
    cfg = loaded.config
    http = uvicorn.Server(
        uvicorn.Config(
            http_app(gateway),
            host=cfg.server.host,
            port=args.http_port if args.http_port is not None else cfg.server.port,
            log_level=args.log_level,
            access_log=False,
            lifespan="on",
        )
    )
    serving = asyncio.ensure_future(http.serve())
    while not http.started and not serving.done():
        await asyncio.sleep(0.05)
    if serving.done():
        await serving
        return
    host = args.host or cfg.epp.host
    port = args.port if args.port is not None else cfg.epp.port
    server, bound, health = await start_picker(gateway.ctx, host, port, cfg.epp.tls)
    over = "TLS" if cfg.epp.tls is not None else "cleartext"
    print(f"sluicegate epp: ext_proc on {host}:{bound} ({over})", file=sys.stderr, flush=True)
    ready = asyncio.ensure_future(health.run())
    try:
        await serving
    finally:
        ready.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ready
        await server.stop(grace=2.0)
