"""``sluicegate serve``: the gateway on uvicorn with uvloop and httptools (its head size
limit and timeout added: ``gateway/front/http_guard.py``).

``--config FILE`` serves a config file (reloaded on SIGHUP and on change). Without it, two
embedded vLLM emulators are started on loopback ports and the gateway is put in front of
them with an anonymous tenant, so the command works on any machine.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import Iterator

import uvicorn

from commands.check_config import print_issues
from commands.embedded_config import DEMO_KEY, MODEL, embedded_config
from commands.gc_tuning import tune_gc
from gateway.app import create_app
from gateway.config.schema import (
    ConfigError,
    LoadedConfig,
    load_config,
)
from gateway.front.http_guard import guarded_http
from policies.build import compiled_modules, core

"""The key of the ``demo`` tenant when serving embedded emulators (requests without a key
are the anonymous tenant; an unknown key is still a 401)."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sluicegate serve", description=__doc__)
    p.add_argument("--config", help="YAML config file (see config.example.yaml)")
    p.add_argument("--host", help="override server.host")
    p.add_argument("--port", type=int, help="override server.port")
    logging_flags(p)
    return p


def logging_flags(p: argparse.ArgumentParser) -> None:
    """The log options of both server commands (``serve``, ``epp``); ``start_logging``."""
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.add_argument("--no-records", action="store_true", help="do not log decision records")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    start_logging(args)
    if args.config is None:
        with _embedded_emulators() as loaded:
            return _run(loaded, None, args)
    try:
        loaded = load_config(args.config)
    except ConfigError as exc:
        print_issues(exc.issues)
        return 2
    return _run(loaded, args.config, args)


def _run(loaded: LoadedConfig, path: str | None, args: argparse.Namespace) -> int:
    server_cfg = loaded.config.server
    try:
        app = create_app(loaded, config_path=path, batch_records=True)
    except ConfigError as exc:
        print_issues(exc.issues)
        return 2
    tune_gc()
    _report_core()
    uvicorn.run(
        app,
        host=args.host or server_cfg.host,
        port=args.port if args.port is not None else server_cfg.port,
        loop="uvloop",
        http=guarded_http(server_cfg, app.state.ctx.metrics.refused),  # head size limit, timeout
        proxy_headers=False,  # nothing reads the client address; 1 % of the CPU per request
        log_level=args.log_level,
        access_log=False,
        lifespan="on",
    )
    return 0


@contextlib.contextmanager
def _embedded_emulators() -> Iterator[LoadedConfig]:
    from emulator.embedded import EmulatorSpec, start_emulators  # only needed here

    specs = [EmulatorSpec(model_name=MODEL, speed=10.0, seed=i) for i in range(2)]
    with start_emulators(specs) as fleet:
        print(
            f"sluicegate: embedded emulators at {', '.join(fleet.urls)}; model {MODEL!r}; "
            f"API key {DEMO_KEY!r} (or none)",
            file=sys.stderr,
        )
        yield embedded_config(fleet.urls, "<embedded>")


def _report_core() -> None:
    """Which decision core this process runs (also ``sluicegate_build_info{core=...}``)."""
    log = logging.getLogger("sluicegate")
    which = core()
    if which == "compiled":
        log.info("sluicegate: decision core compiled with mypyc")
    elif which == "interpreted":
        log.info(
            "sluicegate: decision core in plain Python (an editable install, no C "
            "compiler at install time, or SLUICEGATE_COMPILE=0: docs/performance.md)"
        )
    else:
        log.warning(
            "sluicegate: decision core half compiled (%s); reinstall the package",
            ", ".join(compiled_modules()),
        )


def start_logging(args: argparse.Namespace) -> None:
    """Logging as ``logging_flags`` asked: the level, and the decision records or not."""
    level, records = args.log_level, not args.no_records
    # The format is the message alone: the LogRecord need not look up process and thread.
    # Decision records reach the handler once per event-loop turn (RecordSink batches them),
    # so the stream is written and flushed once per turn, not once per request.
    logging.logProcesses = logging.logThreads = logging.logMultiprocessing = False
    logging.basicConfig(level=level.upper(), format="%(message)s", stream=sys.stdout)
    logging.getLogger("sluicegate.records").setLevel(logging.INFO if records else logging.ERROR)
    # httpx logs one INFO line per request (every probe and scrape): noise, and CPU; so does
    # httpx2, the Kubernetes client's (every list and watch of discovery)
    quiet = max(logging.WARNING, logging.getLevelName(level.upper()))
    logging.getLogger("httpx").setLevel(quiet)
    logging.getLogger("httpx2").setLevel(quiet)
