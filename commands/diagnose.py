"""``sluicegate diagnose``: latency breakdown, wave fingerprint and capacity from /metrics.

    sluicegate diagnose --url http://127.0.0.1:8000 [--window 60] [--max-num-seqs 8]
    sluicegate diagnose --config fleet.yaml [--window 60]
    sluicegate diagnose --from-dumps START.txt [END.txt]

Live modes sample each backend's /metrics every ``--interval`` seconds over the window.
With two dumps the window is END - START; with one dump, everything since server start.
Exit status: 0 when every backend produced a report, 1 when one could not be read, 2 on
usage errors.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import httpx
import yaml

from gateway.backends.scrape.engines import ENGINES
from gateway.backends.scrape.parse import parse_narrow, wanted_names
from gateway.backends.scrape.report import render
from gateway.backends.scrape.sample import extract
from gateway.backends.scrape.scraper import MetricsScraper, ScrapeSettings, ScrapeTarget
from gateway.backends.scrape.signals import Observation, derive


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sluicegate diagnose", description=__doc__.split("\n")[0])
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--url", action="append", help="a backend's base URL (repeatable)")
    source.add_argument(
        "--config", type=Path, help="fleet config: backends[].url/name/max_num_seqs"
    )
    source.add_argument("--from-dumps", nargs="+", type=Path, metavar="DUMP", help="1 or 2 files")
    p.add_argument("--window", type=float, default=60.0, help="seconds to sample (default 60)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between scrapes")
    p.add_argument("--max-num-seqs", type=int, default=None, help="vLLM's --max-num-seqs")
    p.add_argument("--engine", default="vllm-0.32", choices=sorted(ENGINES))
    return p


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _parser().parse_args(list(argv) if argv is not None else None)
    except SystemExit as exc:  # argparse exits on --help and on usage errors
        return int(exc.code or 0)
    if args.from_dumps is not None:
        return from_dumps(args.from_dumps, args.max_num_seqs, args.engine)
    try:
        targets = _targets(args)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        print(f"sluicegate diagnose: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(live(targets, window_s=args.window, interval_s=args.interval))


def from_dumps(paths: Sequence[Path], max_num_seqs: int | None, engine_name: str) -> int:
    if len(paths) > 2:
        print("sluicegate diagnose: --from-dumps takes one or two files", file=sys.stderr)
        return 2
    engine = ENGINES[engine_name]
    wanted = wanted_names(engine)
    samples = [extract(parse_narrow(p.read_text(), wanted), engine) for p in paths]
    if any(s.families_found == 0 for s in samples):
        print(f"sluicegate diagnose: no {engine.engine} metric in a dump", file=sys.stderr)
        return 1
    # dumps carry no timestamps: the window has no length, so no rates, only deltas
    observations = [Observation(0.0, s) for s in samples]
    baseline = observations[0] if len(observations) == 2 else None
    derived = derive(baseline, observations[-1], max_num_seqs)
    title = " -> ".join(p.name for p in paths)
    print("\n".join(render(title, derived)))
    return 0


async def live(
    targets: Sequence[ScrapeTarget],
    *,
    window_s: float,
    interval_s: float,
    client: httpx.AsyncClient | None = None,
) -> int:
    """Scrape ``targets`` for ``window_s`` seconds and print one report per backend."""
    settings = ScrapeSettings(
        interval_s=interval_s, window_s=window_s + 10 * interval_s, timeout_s=max(interval_s, 2.0)
    )
    async with client or httpx.AsyncClient() as http:
        scraper = MetricsScraper(http, targets, clock=time.monotonic, settings=settings)
        print(f"sampling {len(targets)} backend(s) for {window_s:g} s ...", file=sys.stderr)
        task = asyncio.create_task(scraper.run())
        await asyncio.sleep(window_s)  # the sampling window itself, not a wait for a condition
        scraper.stop()
        await task
        for target in targets:
            await scraper.scrape_once(target.name)  # close the window at "now"
    status = 0
    for target in targets:
        state = scraper.state(target.name)
        if state is None or state.derived is None:
            error = state.last_error if state else "unknown"
            print(f"== {target.name}: no usable /metrics ({error})\n")
            status = 1
            continue
        title = target.metrics_url
        if not target.metrics_url.startswith(target.name):
            title = f"{target.name} @ {target.metrics_url}"
        print("\n".join(render(title, state.derived)))
    return status


def _targets(args: argparse.Namespace) -> list[ScrapeTarget]:
    if args.url:
        return [
            ScrapeTarget(url, _metrics_url(url), args.max_num_seqs, args.engine) for url in args.url
        ]
    return load_fleet(args.config, args.engine)


def load_fleet(path: Path, engine: str) -> list[ScrapeTarget]:
    """Read ``backends: [{url, name?, max_num_seqs?, engine?}]`` from a fleet YAML file."""
    data = yaml.safe_load(path.read_text())
    backends = data.get("backends") if isinstance(data, dict) else None
    if not isinstance(backends, list) or not backends:
        raise ValueError(f"{path}: no 'backends' list")
    targets = []
    for i, entry in enumerate(backends):
        if not isinstance(entry, dict) or not isinstance(entry.get("url"), str):
            raise ValueError(f"{path}: backends[{i}] has no url")
        name = str(entry.get("name") or entry["url"])
        seqs = entry.get("max_num_seqs")
        targets.append(
            ScrapeTarget(
                name,
                _metrics_url(entry["url"]),
                int(seqs) if seqs is not None else None,
                str(entry.get("engine", engine)),
            )
        )
    return targets


def _metrics_url(base: str) -> str:
    base = base.rstrip("/")
    base = base.removesuffix("/v1")
    return base if base.endswith("/metrics") else base + "/metrics"


if __name__ == "__main__":
    raise SystemExit(main())
