"""``python -m bench.soak --minutes 30``: mixed traffic against the gateway in front of two
emulators (streams and not, clients leaving mid-stream and before the answer, 429s from a
quota and from deadlines, 401s, vLLM's 503 engine busy, agent runs, a hot reload every few
seconds with every third file invalid, and with ``--fault-every-s`` a frozen or killed
emulator), in rounds; after each round, once the gateway has drained, the
books are checked (``bench/soak/ledger.py``) and the gateway's RSS, open file
descriptors and asyncio tasks sampled (``--samples FILE``: every sample as JSON lines,
read with ``python -m bench.soak.summary FILE``). Exit status 0 when every check passed
and the footprint is flat."""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from dataclasses import fields
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.soak.fleet import ProbeSettings
from bench.soak.report import render, verdict
from bench.soak.run import Settings, soak
from simulation.flags import field_defaults, number_flag

SETTINGS_FIELDS = {f.name for f in fields(Settings)}
"""A flag of one of these names is passed on to ``Settings`` (those it must convert, too);
the flags' defaults are the fields'."""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    d = field_defaults(Settings)
    p.add_argument("--minutes", type=float, default=30.0)
    number_flag(p, "--round-s", d["round_s"], "traffic between quiet points")
    number_flag(p, "--workers", d["workers"], "closed-loop clients")
    number_flag(p, "--think-s", d["think_s"], "mean pause between requests")
    number_flag(p, "--reload-every-s", d["reload_every_s"])
    number_flag(p, "--speed", d["speed"], "emulator speed-up")
    faults = "a backend fault (frozen, then killed emulator) this often; 0: none"
    number_flag(p, "--fault-every-s", d["fault_every_s"], faults)
    p.add_argument("--samples", type=Path, help="append every footprint sample (JSON lines)")
    p.add_argument(
        "--probe",
        action="store_true",
        help="the gateway with a memory probe read at every quiet point (bench/soak/probe.py)",
    )
    p.add_argument(
        "--tracemalloc",
        type=int,
        default=0,
        metavar="FRAMES",
        help="with --probe: tracemalloc on in the gateway, FRAMES deep; 0: off",
    )
    p.add_argument(
        "--malloc-trim",
        action="store_true",
        help="with --probe: glibc's malloc_trim(0) at every quiet point, RSS before and after",
    )
    p.add_argument("--workdir", type=Path, help="logs and config (default: a temp dir)")
    args = p.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="sluicegate-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    probe = ProbeSettings(workdir / "probes", args.tracemalloc, args.malloc_trim)
    converted = {"workdir": workdir, "probe": probe if args.probe else None}
    same = {k: v for k, v in vars(args).items() if k in SETTINGS_FIELDS}
    settings = Settings(duration_s=args.minutes * 60, **{**same, **converted})
    print(f"soak: {args.minutes:g} min, logs in {workdir}", flush=True)
    report = asyncio.run(soak(settings, lambda line: print(line, flush=True)))
    print(render(report))
    return 0 if not verdict(report) else 1


if __name__ == "__main__":
    sys.exit(main())
