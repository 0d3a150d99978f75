"""``python -m tests.fuzz [--examples N] [--config-examples M] [--seed S]``: the long fuzz
campaign. Generates N requests (default 100,000) and M config files (default N / 10) in
chunks, keeps going past findings, and prints the rate and every kind of finding found
(one example each). Exit status 1 when anything was found."""

from __future__ import annotations

import argparse
import collections
import logging
import time
from collections.abc import Callable
from typing import Any

from tests.fuzz.campaign import run_configs, run_requests
from tests.fuzz.harness import ConfigChecker, Finding, GatewayDriver

CHUNK = 2000
"""Examples per hypothesis run (each run has its own seed): keeps its memory bounded."""


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    parser.add_argument("--examples", type=int, default=100_000, help="generated requests")
    parser.add_argument("--config-examples", type=int, default=None, help="config files")
    parser.add_argument("--seed", type=int, default=0, help="first chunk's seed")
    args = parser.parse_args()
    configs = args.examples // 10 if args.config_examples is None else args.config_examples
    logging.getLogger("sluicegate").setLevel(logging.INFO)
    findings: list[Finding] = []
    try:
        _campaigns(args.examples, configs, args.seed, findings)
    except KeyboardInterrupt:
        print("interrupted: the summary covers what ran")
    return _summary(findings)


def _campaigns(requests: int, configs: int, first_seed: int, findings: list[Finding]) -> None:
    """The requests, then the config files: each harness is closed before the next opens."""
    campaigns = (
        ("requests", requests, GatewayDriver, run_requests, lambda driver: driver.exchanges),
        ("config files", configs, ConfigChecker, run_configs, lambda checker: checker.checked),
    )
    for what, total, harness_type, run, count in campaigns:
        harness = harness_type()
        try:
            _chunks(what, total, first_seed, harness, run, count, findings)
        finally:
            harness.close()


def _chunks(
    what: str,
    total: int,
    first_seed: int,
    harness: Any,
    run: Callable[..., None],
    count: Callable[[Any], int],
    findings: list[Finding],
) -> None:
    """``total`` examples through ``harness`` in chunks of ``CHUNK``, one seed each."""
    started = time.perf_counter()
    left, chunk_seed = total, first_seed
    while left > 0:
        n = min(CHUNK, left)
        run(harness, n, collect=findings, at_seed=chunk_seed)
        left -= n
        chunk_seed += 1
        done = count(harness)
        rate = done / (time.perf_counter() - started)
        kinds = len({f.signature for f in findings})
        print(
            f"{what}: {done} generated, {rate:.0f}/s; findings so far: {len(findings)}"
            f" ({kinds} kinds)",
            flush=True,
        )


def _summary(findings: list[Finding]) -> int:
    kinds = collections.Counter(f.signature for f in findings)
    print(f"findings: {len(findings)} ({len(kinds)} kinds)")
    first = {}
    for f in findings:
        first.setdefault(f.signature, f)
    for signature, count in kinds.most_common():
        print(f"  {count} x {signature}\n      e.g. {first[signature].example[:400]}")
    return 1 if findings else 0


if __name__ == "__main__":
    raise SystemExit(main())
