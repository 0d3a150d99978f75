"""Drive the real ASGI app in-process, one generated request at a time, and judge each
exchange; load generated config files the way the gateway and ``check-config`` do.

A finding is any of: an exception out of the app, a 5xx (the fake upstream never fails),
an error logged, a 4xx without the OpenAI error shape, a request left in flight or queued
after its answer, an answer that does not come within ``TIMEOUT_S``. For a config file:
any exception other than ``ConfigError``, or an issue without a usable location.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from commands.check_config import check_file
from gateway.app import create_app
from gateway.config.reload import build_loaded_policy
from gateway.config.schema import ConfigError, GatewayConfig, load_config_bytes
from gateway.request.auth import Authenticator
from policies.engine.scheduler import Scheduler
from tests.fuzz.strategies import CHAT, COMPLETIONS, base_config
from tests.fuzz.upstream import FuzzUpstream

TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Finding:
    kind: str
    detail: str
    example: str

    @property
    def signature(self) -> str:
        return f"{self.kind}: {self.detail.splitlines()[0][:160] if self.detail else ''}"


class _Errors(logging.Handler):
    """Every record at ERROR or above, from any logger, while the campaign runs."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append(f"{record.name}: {record.getMessage()}")


class _Records(logging.Handler):
    """Formats every decision record, as a log handler would (the encoding is exercised)."""

    def emit(self, record: logging.LogRecord) -> None:
        record.getMessage()


class GatewayDriver:
    """The gateway app, its lifespan entered once, on a private event loop."""

    def __init__(self, config: GatewayConfig | None = None) -> None:
        self.upstream = FuzzUpstream()
        self.config = config or GatewayConfig.model_validate(base_config())
        self.loop = asyncio.new_event_loop()
        self.app = create_app(self.config, transport=self.upstream.transport, background=False)
        self._lifespan = self.app.router.lifespan_context(self.app)
        self.loop.run_until_complete(self._lifespan.__aenter__())
        transport = httpx.ASGITransport(app=self.app)
        self.client = httpx.AsyncClient(transport=transport, base_url="http://gw")
        self.errors = _Errors()
        self._records = _Records()
        logging.getLogger().addHandler(self.errors)
        records = logging.getLogger("sluicegate.records")
        records.addHandler(self._records)
        self._records_level = records.level
        records.setLevel(logging.INFO)
        self.exchanges = 0

    def close(self) -> None:
        logging.getLogger().removeHandler(self.errors)
        records = logging.getLogger("sluicegate.records")
        records.removeHandler(self._records)
        records.setLevel(self._records_level)
        self.loop.run_until_complete(self.client.aclose())
        self.loop.run_until_complete(self._lifespan.__aexit__(None, None, None))
        self.loop.close()

    def exchange(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> Finding | None:
        self.exchanges += 1
        self.errors.seen.clear()
        example = f"{method} {path} headers={headers!r} body={body[:300]!r}"
        raw_headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
        send = self.client.request(method, path, headers=raw_headers, content=body)
        try:
            resp = self.loop.run_until_complete(asyncio.wait_for(send, TIMEOUT_S))
        except TimeoutError:
            return Finding("hang", f"no answer in {TIMEOUT_S} s", example)
        except Exception as exc:
            return Finding("exception", _exception(exc), example)
        problem = self._judge(path, resp)
        return None if problem is None else Finding(problem[0], problem[1], example)

    def _judge(self, path: str, resp: httpx.Response) -> tuple[str, str] | None:
        if resp.status_code >= 500:
            return "5xx", f"{resp.status_code} {resp.text[:200]}"
        if self.errors.seen:
            return "logged error", self.errors.seen[0]
        if 400 <= resp.status_code < 500 and path in (CHAT, COMPLETIONS):
            shape = _error_shape(resp)
            if shape is not None:
                return "error shape", shape
        stats = self.app.state.ctx.scheduler.stats()
        if stats.in_flight or stats.queued:
            return "left behind", f"in flight {stats.in_flight}, queued {stats.queued}"
        return None


def _error_shape(resp: httpx.Response) -> str | None:
    try:
        body: Any = resp.json()
        error = body["error"]
        assert set(body) == {"error"} and isinstance(error["message"], str) and error["message"]
        assert set(error) == {"message", "type", "param", "code"}
    except Exception as exc:
        return f"{resp.status_code}: {type(exc).__name__} {resp.text[:200]}"
    return None


def _exception(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "/gateway/" in f.filename or "/policies/" in f.filename]
    where = ours[-1] if ours else (frames[-1] if frames else None)
    at = f" at {Path(where.filename).name}:{where.lineno} ({where.name})" if where else ""
    return f"{type(exc).__name__}: {exc}{at}"


class ConfigChecker:
    """Loads config bytes as ``serve`` does (then builds the policy, the authenticator and
    a scheduler) and as ``check-config`` does (from a file)."""

    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="sluicegate-fuzz-")
        self._file = Path(self._dir.name) / "config.yaml"
        self.checked = 0

    def close(self) -> None:
        self._dir.cleanup()

    def check(self, raw: bytes) -> Finding | None:
        self.checked += 1
        example = f"config={raw[:600]!r}"
        try:
            self._load(raw)
            self._file.write_bytes(raw)
            _loaded, issues = check_file(self._file)
            for issue in issues:
                _located(issue)
        except Exception as exc:
            return Finding("config exception", _exception(exc), example)
        return None

    def _load(self, raw: bytes) -> None:
        try:
            loaded = load_config_bytes(raw, "fuzz.yaml")
            policy = build_loaded_policy(loaded)
        except ConfigError as err:
            for issue in err.issues:
                _located(issue)
            str(err)
            return
        Authenticator(loaded.config)
        Scheduler(policy, clock=lambda: 0.0)


def _located(issue: Any) -> None:
    if not (isinstance(issue.line, int) and issue.line >= 0 and issue.message):
        raise AssertionError(f"issue without a usable location: {issue!r}")
    str(issue)
