"""Machine instructions the proxy executes per request, this checkout against another: a
count the machine's load does not move, where the hot-path table's CPU time does.

    python -m bench.hotpath.instructions [--requests 150] [--stream] [--picker] [--baseline DIR]

Each tree serves the hot-path benchmark's config (``sluicegate.yaml.tmpl``) under valgrind's
callgrind, which counts every instruction the process executes (the interpreter, its C
extensions, the kernel calls' user side), with instrumentation off until the measurement
starts (``--instr-atstart=no``). The client warms the gateway with ``--warmup`` requests,
waits for a scrape of the backend to land, switches instrumentation on (``callgrind_control
-i on``), sends ``--requests`` completions one after another, rotating the tenants' keys,
and dumps the count; then it waits as long again with no request and dumps the count of
that idle span, which is subtracted: what remains is the requests' own work.

Three things keep the count from following the machine's speed:

- the health and scrape intervals are lengthened to 60 s, and counting starts just after a
  scrape, so that neither runs in the counted spans (both spans together must stay under
  a minute: 150 requests take some 30 s under callgrind; a longer run is reported);
- the client waits ``--gap-s`` between requests, longer than the backends' snapshot may
  age (``SNAPSHOT_MAX_AGE_S``), so every request rebuilds it: how many requests share one
  rebuild otherwise depends on how fast the loaded machine runs them (one rebuild is tens
  of k instructions). The count is then that of requests arriving a little apart, each
  with a fresh view of the backends;
- the idle span subtracts what runs on timers alone.

Unlike ``bench.hotpath.calls`` (Python calls, where a C call costing as much as ten Python
ones counts one), this counts the work itself; unlike the CPU column of
``bench.hotpath.run``, it does not change with what else the machine runs.

``--picker`` counts ``sluicegate epp`` behind Envoy instead (``bench.epp``'s ``EnvoyEpp``,
the same config with the ``epp`` section): the picker runs under callgrind, Envoy and the
backend natively, and the scrape is read off the picker's own HTTP port.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx

from bench.epp.setups import EnvoyEpp, EnvoyEppBaseline
from bench.hotpath.calls import print_pair
from bench.hotpath.procs import fake_backend, wait_http
from bench.hotpath.setups import MODEL, TENANT_KEYS, Setup, Sluicegate, SluicegateBaseline
from gateway.backends.pool import SNAPSHOT_MAX_AGE_S
from scripts.vllm.serve import free_port

SCRAPE_INTERVAL_S = 60
_SLOW_BACKGROUND = {"interval_s: 0.5": "interval_s: 60", "interval_s: 2.0": "interval_s: 60"}
"""The template's scrape and health intervals, lengthened (to the scrape's longest) so
that neither runs in the counted spans."""


def _under_callgrind(
    setup: Setup, config: Path, command: Callable[[Path], tuple[list[str], dict[str, str]]]
) -> tuple[list[str], dict[str, str]]:
    """``command(config)`` (argv and environment) under callgrind, instrumentation off,
    with the config's background work slowed."""
    text = config.read_text()
    for old, new in _SLOW_BACKGROUND.items():
        text = text.replace(old, new)
    config.write_text(text)
    argv, env = command(config)
    out = setup.workdir / f"{setup.name}.cg"
    cg = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]
    return [*cg, *argv], env


def _counted(setup: type[Sluicegate]) -> type[Sluicegate]:
    """``setup``'s gateway started under callgrind."""

    class Counted(setup):  # type: ignore[valid-type,misc]
        def command(self, config: Path) -> tuple[list[str], dict[str, str]]:
            return _under_callgrind(self, config, super().command)

    return Counted


def _counted_picker(setup: type[EnvoyEpp]) -> type[EnvoyEpp]:
    """``setup``'s picker started under callgrind (Envoy runs natively)."""

    class CountedPicker(setup):  # type: ignore[valid-type,misc]
        def picker_command(self, config: Path) -> tuple[list[str], dict[str, str]]:
            return _under_callgrind(self, config, super().picker_command)

    return CountedPicker


def _after_a_scrape(client: httpx.Client, base: str) -> None:
    """Return as soon as the gateway's newest scrape of the backend is under a second old
    (``/admin/backends``), so that the next one, a scrape interval later, falls after the
    counted spans (a scrape landing in one span but not the other moved the count by tens
    of k per request)."""
    deadline = time.monotonic() + 2 * SCRAPE_INTERVAL_S
    while time.monotonic() < deadline:
        backends = client.get(base + "/admin/backends").json()["backends"]
        age = backends[0]["signals"].get("signal_age_s")
        if age is not None and age < 1.0:
            return
        time.sleep(0.2)
    raise SystemExit("no scrape seen in two scrape intervals")


def _dump(pid: int, trigger: str) -> None:
    subprocess.run(["callgrind_control", "-d", trigger, str(pid)], check=True, capture_output=True)


def _totals(workdir: Path, name: str) -> dict[str, int]:
    """Instructions in each dump of ``name``'s callgrind run, by the dump's trigger."""
    totals: dict[str, int] = {}
    for path in workdir.glob(f"{name}.cg.*"):
        trigger, total = "", 0
        for line in path.read_text().splitlines():
            if line.startswith("desc: Trigger:"):
                trigger = line.split(":", 2)[2].strip()
            elif line.startswith(("totals:", "summary:")):
                total = max(total, int(line.split()[1]))
        totals[trigger] = total
    return totals


def instructions_per_request(
    setup_class: type[Setup], name: str, args: argparse.Namespace
) -> float:
    """Start the fake backend and ``setup_class`` (its gateway or picker under callgrind,
    the first of its processes), send the requests, count; the requests' instructions
    (less an idle span as long) divided by the requests."""
    for stale in args.out.glob(f"{name}.cg*"):
        stale.unlink()
    port = free_port()
    backend, backend_port = fake_backend(args.out)
    setup = setup_class(name, backend_port, port, args.out)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 16}
    body["stream"] = args.stream

    def send(client: httpx.Client, i: int) -> None:
        key = TENANT_KEYS[i % len(TENANT_KEYS)]
        answer = client.post(setup.url, json=body, headers={"authorization": f"Bearer {key}"})
        if answer.status_code != 200:
            raise SystemExit(f"{name}: request {i} answered {answer.status_code}")

    try:
        backend.start()
        wait_http(backend, "127.0.0.1", backend_port)
        setup.start()
        pid = setup.procs[0].pid
        with httpx.Client(timeout=120.0) as client:
            for i in range(args.warmup):
                send(client, i)
            admin = setup.http_port if isinstance(setup, EnvoyEpp) else setup.port
            _after_a_scrape(client, f"http://127.0.0.1:{admin}")
            subprocess.run(
                ["callgrind_control", "-i", "on", str(pid)], check=True, capture_output=True
            )
            start = time.monotonic()
            for i in range(args.requests):
                send(client, i)
                time.sleep(args.gap_s)
            busy_s = time.monotonic() - start
            _dump(pid, "busy")
            time.sleep(busy_s)  # the same span with no request: what the background costs
            _dump(pid, "idle")
        if 2 * busy_s > SCRAPE_INTERVAL_S - 1:
            print(f"{name}: the spans took {2 * busy_s:.0f} s, a scrape may have landed in one")
    finally:
        setup.stop()
        backend.stop()
    totals = _totals(args.out, name)
    busy = next(v for k, v in totals.items() if "busy" in k)
    idle = next(v for k, v in totals.items() if "idle" in k)
    return (busy - idle) / args.requests


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=150)
    p.add_argument("--warmup", type=int, default=100, help="requests before counting starts")
    p.add_argument("--stream", action="store_true")
    p.add_argument(
        "--picker", action="store_true", help="sluicegate epp behind Envoy (Envoy not counted)"
    )
    p.add_argument(
        "--gap-s",
        type=float,
        default=SNAPSHOT_MAX_AGE_S + 0.01,
        help="pause between requests (the idle span subtracts it)",
    )
    p.add_argument("--baseline", type=Path, default=os.environ.get("SLUICEGATE_BASELINE"))
    p.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "hotpath-instr")
    args = p.parse_args(argv)
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    args.out.mkdir(parents=True, exist_ok=True)
    trees: list[tuple[str, type[Setup]]] = [
        ("sluicegate", _counted_picker(EnvoyEpp) if args.picker else _counted(Sluicegate))
    ]
    if args.baseline:
        os.environ["SLUICEGATE_BASELINE"] = str(Path(args.baseline).resolve())
        base = _counted_picker(EnvoyEppBaseline) if args.picker else _counted(SluicegateBaseline)
        trees.append(("sluicegate-baseline", base))
    counts = {name: instructions_per_request(cls, name, args) for name, cls in trees}
    return print_pair(counts, args, lambda count: f"{count / 1e3:8.0f} k instructions per request")


if __name__ == "__main__":
    raise SystemExit(main())
