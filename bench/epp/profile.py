"""Profile one EPP setup's picker under wrk load with py-spy; print where its CPU goes.

    python -m bench.epp.profile [--setup envoy-epp] [--mode non-stream] [--conns 64] [--native]

``bench.hotpath.profile``'s procedure for the picker process (the real one or the null
picker): raw folded stacks in --out, self time by function, inclusive time of the
gateway's own frames, and the share of frames from grpc, protobuf and asyncio.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from bench.epp.run import SETUPS
from bench.hotpath.procs import fake_backend, wait_http
from bench.hotpath.profile import (
    folded_stacks,
    profile_args,
    python_pid,
    record_under_load,
    summarize,
)
from scripts.vllm.serve import free_port

LAYERS = {
    "grpc": ("grpc/", "cygrpc", "_cygrpc"),
    "protobuf": ("google/protobuf", "upb"),
    "asyncio": ("asyncio/",),
    "sluicegate": ("gateway/", "policies/"),
}
"""Substrings of a frame that put a sample's stack in a layer (inclusive)."""


def _args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = profile_args(__doc__, SETUPS, "envoy-epp", 200, "epp-profile")
    p.add_argument("--native", action="store_true", help="py-spy --native (C/Cython frames)")
    return p.parse_args(argv)


def layers(folded: Path) -> str:
    """The share of samples whose stack holds a frame of each layer, and of the handler's
    own code (``gateway/epp``)."""
    counts: Counter[str] = Counter()
    total = 0
    for stack, n in folded_stacks(folded):
        total += n
        for name, marks in {**LAYERS, "gateway/epp": ("gateway/epp/",)}.items():
            if any(m in stack for m in marks):
                counts[name] += n
    if not total:
        return "no samples"
    return "\n".join(
        ["inclusive share by layer:"]
        + [f"  {100 * counts[n] / total:5.1f}%  {n}" for n in (*LAYERS, "gateway/epp")]
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = _args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    backend, port = fake_backend(args.out)
    setup = SETUPS[args.setup](args.setup, port, free_port(), args.out, "1")
    folded = args.out / f"{args.setup}-{args.mode}-c{args.conns}.folded"
    try:
        backend.start()
        wait_http(backend, "127.0.0.1", port)
        setup.start()
        picker = next(p for p in setup.procs if p.name.endswith("-picker"))
        record_under_load(
            setup.url,
            setup.keys,
            lambda: python_pid(picker.pid),
            folded,
            conns=args.conns,
            duration=args.duration,
            stream=args.mode == "stream",
            rate=args.rate,
            native=args.native,
        )
    finally:
        setup.stop()
        backend.stop()
    print(summarize(folded, args.top))
    print()
    print(layers(folded))
    print(f"\nfolded stacks: {folded}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
