"""``python -m tests.fuzz [--examples N] [--config-examples M] [--seed S]``: the long fuzz
campaign. Generates N requests (default 100,000) and M config files (default N / 10) in
chunks, keeps going past findings, and prints the rate and every kind of finding found
(one example each). Exit status 1 when anything was found."""

from __future__ import annotations

import argparse
import collections
import logging
import time

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
    driver = GatewayDriver()
    try:
        _chunks(
            "requests",
            requests,
            first_seed,
            lambda n, s: run_requests(driver, n, collect=findings, at_seed=s),
            lambda: driver.exchanges,
            findings,
        )
    finally:
        driver.close()
    checker = ConfigChecker()
    try:
        _chunks(
            "config files",
            configs,
            first_seed,
            lambda n, s: run_configs(checker, n, collect=findings, at_seed=s),
            lambda: checker.checked,
            findings,
        )
    finally:
        checker.close()


def _chunks(
    what: str, total: int, first_seed: int, run: object, done: object, findings: list[Finding]
) -> None:
    started = time.perf_counter()
    left, chunk_seed = total, first_seed
    while left > 0:
        n = min(CHUNK, left)
        run(n, chunk_seed)  # type: ignore[operator]
        left -= n
        chunk_seed += 1
        count = done()  # type: ignore[operator]
        rate = count / (time.perf_counter() - started)
        kinds = len({f.signature for f in findings})
        print(
            f"{what}: {count} generated, {rate:.0f}/s; findings so far: {len(findings)}"
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
