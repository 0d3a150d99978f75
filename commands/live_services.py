"""The processes of one live cell: an emulator per backend (``sluicegate emulate``), or
running engines given by URL (``Engines``: a real vLLM), and the gateway (``sluicegate
serve``) in front of them, on free loopback ports, each started process in its own process
group and stopped when the block ends (``cell_services``)."""

from __future__ import annotations

import contextlib
import copy
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from emulator.profile import load_profile
from gateway.request.auth import key_digest
from policies.params import Params
from policies.registry import build_policy
from scripts.service_argv import emulate, serve, start_group, stop_group, wait_ready
from scripts.vllm.serve import free_port
from simulation.matrix.live_cells import LiveCell
from simulation.matrix.loop import MODEL

SCRAPE_INTERVAL_S = 0.05
"""Wall seconds between the gateway's /metrics scrapes (the simulator's view is exact)."""
START_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class Engines:
    """Running OpenAI servers (a real vLLM) that a cell's gateway fronts instead of the
    emulators: what they serve is read from them (``Engines.read``), not typed in."""

    urls: tuple[str, ...]
    model: str
    """The model they serve (``/v1/models``)."""
    max_model_len: int
    """Their model length (``/v1/models``' ``max_model_len``)."""

    @classmethod
    def read(cls, urls: list[str]) -> Engines:
        """The served model and its length from each server's ``/v1/models``; every
        server must serve the same."""
        served = set()
        for url in urls:
            models = httpx.get(f"{url}/v1/models", timeout=10.0).raise_for_status().json()
            served |= {(m["id"], int(m["max_model_len"])) for m in models["data"]}
        if len(served) != 1:
            raise ValueError(f"the engines must serve one model alike, not {sorted(served)}")
        ((model, max_len),) = served
        return cls(tuple(urls), model, max_len)


def api_key(tenant: str) -> str:
    return f"sk-live-{tenant}"


def _is_rate(key: str) -> bool:
    return key.endswith(("_per_s", "_per_minute"))


def _is_time(key: str) -> bool:
    return key.endswith("_s") and not _is_rate(key)


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def scaled_policy(policy: Any, speed: float) -> Any:
    """``policy`` in wall time for an emulator ``speed`` times faster: every time parameter
    (a key ending in ``_s``) divided by ``speed``, every rate (``_per_s``,
    ``_per_minute``) multiplied by it, an integer rate rounded."""
    if isinstance(policy, dict):
        out: dict[str, Any] = {}
        for k, v in policy.items():
            if _is_time(k) and _number(v):
                out[k] = v / speed
            elif _is_rate(k) and _number(v):
                out[k] = round(v * speed) if isinstance(v, int) else v * speed
            else:
                out[k] = scaled_policy(v, speed)
        return out
    if isinstance(policy, list):
        return [scaled_policy(v, speed) for v in policy]
    return policy


def _timed(params: Params) -> dict[str, float]:
    """The time and rate parameters of ``params``, defaults included."""
    return {
        k: v for k, v in params.model_dump().items() if (_is_time(k) or _is_rate(k)) and _number(v)
    }


def _with_parameters(spec: Any, type_name: str, timed: dict[str, float]) -> dict[str, Any]:
    out: dict[str, Any] = dict(spec) if isinstance(spec, dict) else {"type": type_name}
    out["parameters"] = {**timed, **out.get("parameters", {})}
    return out


def with_time_defaults(policy: dict[str, Any]) -> dict[str, Any]:
    """``policy`` with every time and rate parameter its sections and plugins take by
    default written out, so that ``scaled_policy`` scales them too."""
    built = build_policy(policy)
    out = copy.deepcopy(policy)
    for key in ("queue", "retry_after", "headroom", "prefill_backlog", "runs"):
        if timed := _timed(getattr(built, key)):
            out[key] = {**timed, **out.get(key, {})}
    for role in ("limit", "fairness"):
        plugin = getattr(built, role)
        if timed := _timed(plugin.params):
            out[role] = _with_parameters(out.get(role), plugin.type_name, timed)
    if timed := _timed(built.discipline.params):
        queue = out.setdefault("queue", {})
        queue["discipline"] = _with_parameters(
            queue.get("discipline"), built.discipline.type_name, timed
        )
    for spec, named in zip(out.get("gates", []), built.gates, strict=True):
        spec["parameters"] = {**_timed(named.gate.params), **spec.get("parameters", {})}
    return out


def gateway_config(
    lc: LiveCell,
    policy: dict[str, Any],
    tenants: list[str],
    backends: list[str],
    *,
    anonymous: str | None = None,
    port: int,
    model: str = MODEL,
) -> dict[str, Any]:
    """The gateway of one live cell: one key per tenant (``api_key``), or ``anonymous``
    for clients that send none; every backend serves ``model`` and states the profile's
    slots, as the simulator's view does."""
    slots = load_profile(lc.cell.profile).engine.max_num_seqs
    raw: dict[str, Any] = {
        "server": {"host": "127.0.0.1", "port": port, "log_records": False},
        "tenants": [
            {"name": t, "api_key_sha256": [] if t == anonymous else [key_digest(api_key(t))]}
            for t in tenants
        ],
        "backends": [
            {"name": f"emu-{i}", "url": url, "models": [model], "max_num_seqs": slots}
            for i, url in enumerate(backends)
        ],
        "scrape": {"interval_s": SCRAPE_INTERVAL_S},
        "policy": scaled_policy(with_time_defaults(policy), lc.speed),
    }
    if anonymous is not None:
        raw["auth"] = {"anonymous_tenant": anonymous}
    return raw


@dataclass
class Service:
    popen: subprocess.Popen[bytes]
    url: str
    log: Path

    def stop(self) -> None:
        stop_group(self.popen)


def _start(argv: list[str], port: int, ready: str, services: list[Service]) -> Service:
    """Starts ``argv`` (appended to ``services`` at once, so it is stopped whatever
    happens next) and waits until ``ready`` answers 200."""
    log = Path(tempfile.mkstemp(prefix="sluicegate-live-", suffix=".log")[1])
    service = Service(start_group(argv, log), f"http://127.0.0.1:{port}", log)
    services.append(service)
    wait_ready(service.popen, service.url + ready, log, START_TIMEOUT_S, argv[3])
    return service


@contextlib.contextmanager
def cell_services(
    lc: LiveCell,
    policy: dict[str, Any],
    tenants: list[str],
    *,
    anonymous: str | None = None,
    engines: Engines | None = None,
) -> Iterator[str]:
    """The cell's emulators (none when ``engines`` are given) and gateway; yields the
    gateway's URL. Every process started is stopped in ``finally``; their logs are removed
    when they stopped cleanly."""
    services: list[Service] = []
    config = Path(tempfile.mkstemp(prefix="sluicegate-live-", suffix=".yaml")[1])
    try:
        urls = list(engines.urls) if engines is not None else []
        for i in range(lc.cell.backends if engines is None else 0):
            port = free_port()
            argv = emulate(
                port,
                MODEL,
                "--profile",
                lc.cell.profile,
                "--speed",
                f"{lc.speed:g}",
                "--seed",
                str(i),
            )
            urls.append(_start(argv, port, "/health", services).url)
        port = free_port()
        model = engines.model if engines is not None else MODEL
        raw = gateway_config(lc, policy, tenants, urls, anonymous=anonymous, port=port, model=model)
        config.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
        yield _start(serve(config, records=False), port, "/readyz", services).url
    finally:
        for service in reversed(services):
            service.stop()
            if service.popen.returncode in (0, -signal.SIGTERM):
                service.log.unlink(missing_ok=True)
        config.unlink(missing_ok=True)
