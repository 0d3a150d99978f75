"""Parse cost of one vLLM /metrics body: prometheus_client vs the narrow parser.

    python bench/scrape_parse.py [DUMP] [--repeat N]

Prints CPU ms per parse (process time; parse + extract into a MetricsSample) and the
ratio. Also checks both parsers agree on the sample, so a fast wrong parser cannot win.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from gateway.backends.scrape.engines import VLLM_0_32
from gateway.backends.scrape.parse import RawSeries, parse_narrow, parse_reference, wanted_names
from gateway.backends.scrape.sample import extract

DEFAULT_DUMP = Path(__file__).parent.parent / "tests/fixtures/vllm-0.32-metrics-under-load.txt"


def per_call_ms(fn: Callable[[], object], repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        start = time.process_time()
        fn()
        samples.append((time.process_time() - start) * 1000.0)
    return samples


def _parse_and_extract(
    parse: Callable[[str, frozenset[str]], RawSeries], text: str, wanted: frozenset[str]
) -> object:
    return extract(parse(text, wanted), VLLM_0_32)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("dump", nargs="?", type=Path, default=DEFAULT_DUMP)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args(argv)
    text = args.dump.read_text()
    wanted = wanted_names(VLLM_0_32)
    parsers: dict[str, Callable[[str, frozenset[str]], RawSeries]] = {
        "prometheus_client": parse_reference,
        "narrow": parse_narrow,
    }
    results = {name: extract(p(text, wanted), VLLM_0_32) for name, p in parsers.items()}
    if results["narrow"] != results["prometheus_client"]:
        print("parsers disagree: the narrow parser is wrong", file=sys.stderr)
        return 1
    lines = text.count("\n")
    print(f"{args.dump.name}: {lines} lines, {len(text)} bytes, repeat {args.repeat}")
    medians: dict[str, float] = {}
    for name, parse in parsers.items():
        ms = per_call_ms(functools.partial(_parse_and_extract, parse, text, wanted), args.repeat)
        medians[name] = statistics.median(ms)
        p90 = sorted(ms)[int(0.9 * len(ms))]
        print(f"  {name:<18} median {medians[name]:.3f} ms  p90 {p90:.3f} ms")
    ratio = medians["prometheus_client"] / medians["narrow"]
    print(f"  narrow is {ratio:.1f}x faster")
    for hz, n in ((4, 4), (1, 100), (1, 1000)):
        cores = {k: v / 1000.0 * hz * n for k, v in medians.items()}
        print(
            f"  {n} backends at {hz} Hz: prometheus_client {cores['prometheus_client']:.3f} cores, "
            f"narrow {cores['narrow']:.3f} cores (parse only)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
