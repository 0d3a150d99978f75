"""Python function calls per request through ``sluicegate serve``, this checkout against
another: a count the machine's load does not move, beside the hot-path table's CPU time,
which it does.

    python -m bench.hotpath.calls [--requests 2000] [--stream] [--picker] [--baseline DIR]

Each tree serves the hot-path benchmark's config (``sluicegate.yaml.tmpl``) under cProfile,
which counts every call, builtins included, in front of the same fake backend. The client
sends ``--requests`` completions one after another, rotating the tenants' keys; the gateway
stops gracefully and writes its profile. Calls per request take in the start-up and the
background work (probes, scrapes) too, alike in both trees; use enough requests that they
do not matter (at 2,000, start-up is under 3 % of the count). Fewer calls is not always
less CPU (a C call can cost more than ten Python ones), so read it with the CPU column of
``bench.hotpath.run`` on a quiet machine. ``--picker`` counts ``sluicegate epp``'s calls
behind Envoy instead (the Endpoint Picker; read it with ``bench.epp.run``'s CPU column).
"""

from __future__ import annotations

import argparse
import os
import pstats
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx

from bench.epp.setups import EnvoyEpp
from bench.hotpath.procs import REPO, fake_backend, wait_http
from bench.hotpath.setups import MODEL, TENANT_KEYS, Sluicegate
from scripts.vllm.serve import free_port

_PROFILED = (
    "import cProfile, runpy, sys\n"
    "out, module = sys.argv[1], sys.argv[2]\n"
    "sys.argv = ['sluicegate', *sys.argv[3:]]\n"
    "profile = cProfile.Profile()\n"
    "try:\n"
    "    profile.enable()\n"
    "    runpy.run_module(module, run_name='__main__')\n"
    "finally:\n"
    "    profile.disable()\n"
    "    profile.dump_stats(out)\n"
)


def _profiled(tree: Path, profile: Path, *args: str) -> tuple[list[str], dict[str, str]]:
    """``sluicegate ARGS`` from the checkout at ``tree`` under cProfile, written to
    ``profile`` when it ends."""
    module = "commands.cli" if (tree / "commands" / "cli.py").exists() else "gateway.cli"
    argv = [sys.executable, "-P", "-c", _PROFILED, str(profile), module, *args]
    return argv, {"PYTHONPATH": str(tree)}


class Profiled(Sluicegate):
    """``sluicegate serve`` from the checkout at ``tree`` under cProfile, with no records on
    stdout (the log would only measure the pipe)."""

    tree: Path = REPO

    @property
    def profile_path(self) -> Path:
        return self.workdir / f"{self.name}.prof"

    def command(self, config: Path) -> tuple[list[str], dict[str, str]]:
        return _profiled(
            self.tree, self.profile_path, "serve", "--config", str(config), "--no-records"
        )


class ProfiledPicker(EnvoyEpp):
    """Envoy asking ``sluicegate epp`` from the checkout at ``tree``, the picker under
    cProfile (the same config as ``Profiled``, its records on as ``bench.epp`` runs it)."""

    tree: Path = REPO

    @property
    def profile_path(self) -> Path:
        return self.workdir / f"{self.name}.prof"

    def picker_command(self, config: Path) -> tuple[list[str], dict[str, str]]:
        return _profiled(self.tree, self.profile_path, "epp", "--config", str(config))


def print_pair(
    counts: dict[str, float], args: argparse.Namespace, shown: Callable[[float], str]
) -> int:
    """One line per tree (``shown``: its count as printed), then this tree over the
    baseline when both ran; the command's exit code."""
    mode = ("stream" if args.stream else "non-stream") + (", picker" if args.picker else "")
    for name, count in counts.items():
        print(f"{name:<20} {mode:<10} {shown(count)}")
    if len(counts) == 2:
        print(f"ratio this / baseline: {counts['sluicegate'] / counts['sluicegate-baseline']:.3f}")
    return 0


def calls_per_request(tree: Path, name: str, args: argparse.Namespace) -> float:
    """Start the fake backend and ``tree``'s gateway, send the requests, stop both; the
    gateway's calls divided by the requests."""
    port = free_port()
    backend, backend_port = fake_backend(args.out)
    setup = (ProfiledPicker if args.picker else Profiled)(name, backend_port, port, args.out)
    setup.tree = tree
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 16}
    body["stream"] = args.stream
    try:
        backend.start()
        wait_http(backend, "127.0.0.1", backend_port)
        setup.start()
        with httpx.Client(timeout=30.0) as client:
            for i in range(args.requests):
                key = TENANT_KEYS[i % len(TENANT_KEYS)]
                answer = client.post(
                    setup.url, json=body, headers={"authorization": f"Bearer {key}"}
                )
                if answer.status_code != 200:
                    raise SystemExit(f"{name}: request {i} answered {answer.status_code}")
    finally:
        for proc in setup.procs:  # SIGINT: uvicorn ends with KeyboardInterrupt, the profile is
            proc.interrupt()  # written; SIGTERM it re-raises, which ends the process at once
        setup.stop()
        backend.stop()
    return pstats.Stats(str(setup.profile_path)).total_calls / args.requests


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--stream", action="store_true")
    p.add_argument("--picker", action="store_true", help="sluicegate epp behind Envoy instead")
    p.add_argument("--baseline", type=Path, default=os.environ.get("SLUICEGATE_BASELINE"))
    p.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "hotpath-calls")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    trees = [("sluicegate", REPO)]
    if args.baseline:
        trees.append(("sluicegate-baseline", Path(args.baseline).resolve()))
    counts = {name: calls_per_request(tree, name, args) for name, tree in trees}
    return print_pair(counts, args, lambda count: f"{count:8.1f} Python calls per request")


if __name__ == "__main__":
    raise SystemExit(main())
