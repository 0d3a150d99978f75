"""The walk of one request through the gateway's code: the functions (stops) a non-stream
chat completion passes through, and the folders (rooms) they live in, this checkout
against another.

    python -m bench.walk [--baseline DIR] [--list]

Each tree builds its gateway in process (``gateway.app.create_app``, no background work:
no probes, no scrapes) in front of the hot-path benchmark's fake backend on loopback, and
serves one tenant through its HTTP front (an ASGI client, no socket on the client side).
After three warm-up requests, one more is sent under ``sys.setprofile``: every Python
function of the tree's own packages (``gateway/``, ``policies/``, ``commands/``) that runs
from the moment the front receives the request until its answer is whole counts once, as
a stop; its folder (``gateway/request``, ``policies/engine``, ...) is its room. Calls
counts every entry, coroutine resumptions included. The numbers do not depend on the
machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("gateway", "policies", "commands")
KEY = "sk-walk"
MODEL = "fake"


def _config(backend_port: int) -> dict[str, Any]:
    import hashlib

    digest = hashlib.sha256(KEY.encode()).hexdigest()
    return {
        "server": {"log_records": False},
        "tenants": [{"name": "walker", "api_key_sha256": [digest]}],
        "backends": [
            {
                "name": "fake-0",
                "url": f"http://127.0.0.1:{backend_port}",
                "models": [MODEL],
                "max_num_seqs": 8,
            }
        ],
        "scrape": {"enabled": False},
        "reload": {"watch": False},
    }


class _Recorder:
    """``sys.setprofile``'s hook: the tree's functions in the order they first ran."""

    def __init__(self, tree: Path) -> None:
        self.prefixes = tuple(str(tree / p) + os.sep for p in PACKAGES)
        self.root = str(tree) + os.sep
        self.stops: dict[tuple[str, str], None] = {}
        self.calls = 0

    def __call__(self, frame: FrameType, event: str, _arg: object) -> None:
        if event != "call":
            return
        path = frame.f_code.co_filename
        if not path.startswith(self.prefixes):
            return
        self.calls += 1
        module = path[len(self.root) :]
        self.stops.setdefault((module, frame.f_code.co_qualname), None)


async def _walk(tree: Path, backend_port: int) -> dict[str, Any]:
    import httpx

    from gateway.app import create_app
    from gateway.config.schema import GatewayConfig

    app = create_app(GatewayConfig.model_validate(_config(backend_port)), background=False)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 16}
    headers = {"authorization": f"Bearer {KEY}"}
    recorder = _Recorder(tree)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            for _ in range(3):
                answer = await client.post("/v1/chat/completions", json=body, headers=headers)
                assert answer.status_code == 200, answer.text
            sys.setprofile(recorder)
            try:
                answer = await client.post("/v1/chat/completions", json=body, headers=headers)
            finally:
                sys.setprofile(None)
            assert answer.status_code == 200, answer.text
    stops = [f"{module}:{name}" for module, name in recorder.stops]
    return {"stops": stops, "calls": recorder.calls}


def _rooms(stops: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(os.path.dirname(s.split(":")[0]) for s in stops))


def walk(tree: Path, backend_port: int) -> dict[str, Any]:
    """One tree's walk, in a child process whose imports come from ``tree``."""
    argv = [sys.executable, "-P", str(Path(__file__).resolve()), "--child", str(tree)]
    argv += ["--backend-port", str(backend_port)]
    done = subprocess.run(
        argv, env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"{tree}: the walk failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", type=Path, default=os.environ.get("SLUICEGATE_BASELINE"))
    p.add_argument("--list", action="store_true", help="every stop, in the order it ran")
    p.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--backend-port", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child is not None:
        print(json.dumps(asyncio.run(_walk(args.child.resolve(), args.backend_port))))
        return 0

    sys.path.insert(0, str(REPO))
    from bench.hotpath.procs import fake_backend, wait_http

    trees = [("this checkout", REPO)]
    if args.baseline:
        trees.append(("baseline", args.baseline.resolve()))
    with tempfile.TemporaryDirectory(prefix="sluicegate-walk-") as tmp:
        backend, port = fake_backend(Path(tmp))
        try:
            backend.start()
            wait_http(backend, "127.0.0.1", port)
            walks = {name: walk(tree, port) for name, tree in trees}
        finally:
            backend.stop()
    for name, got in walks.items():
        rooms = _rooms(got["stops"])
        modules = len({s.split(":")[0] for s in got["stops"]})
        print(
            f"{name}: {len(got['stops'])} stops in {modules} modules and {len(rooms)} rooms, "
            f"{got['calls']} calls"
        )
        print("  rooms: " + ", ".join(rooms))
        if args.list:
            for stop in got["stops"]:
                print(f"    {stop}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
