"""Print what any admission policy can reach on an engine whose step time model is known:
the victim's request rate against the noisy tenant's throughput, for every number of noisy
sequences the engine could be running beside the victim's.

    python -m bench.noisy_neighbour.frontier --profile cpu-tiny

The model is ``simulation/matrix/frontier.py``, which the scenario matrix also uses to
judge each noisy cell; the report gives the best victim share at the issue's
noisy-throughput goal on the convex hull of the rows, and per row the least wait the
victim's TTFT p99 spends behind the flood's prefill steps (``tail_wait_s``, the tail the
matrix also judges by).
"""

from __future__ import annotations

import argparse

from emulator.profile import load_profile
from simulation.matrix.frontier import Shape, best_share, rows, tail_wait_s


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.noisy_neighbour.frontier")
    p.add_argument("--profile", default="cpu-tiny")
    p.add_argument("--noisy-prompt", type=int, default=1500)
    p.add_argument("--noisy-max-tokens", type=int, default=256)
    p.add_argument("--noisy-goal", type=float, default=0.8)
    args = p.parse_args(argv)
    shape = Shape(noisy_prompt=args.noisy_prompt, noisy_output=args.noisy_max_tokens)
    profile = load_profile(args.profile)
    table = rows(profile, shape)
    print(f"# profile {args.profile}: victim share and noisy throughput share per noisy k")
    print(
        "| noisy sequences k | step ms | victim req/s share | noisy tok/s share of direct "
        "| victim TTFT p99 wait behind the flood's prefill, ms |"
    )
    print("|---|---|---|---|---|")
    for r in table:
        wait = tail_wait_s(profile, shape, r) * 1000
        print(
            f"| {r.k} | {r.step_s * 1000:.2f} | {r.victim_share:.2f} | {r.noisy_share:.2f} "
            f"| {wait:.1f} |"
        )
    best = best_share(table, args.noisy_goal)
    shown = "unreachable" if best is None else f"{best:.2f}"
    print(f"\nbest victim share with noisy >= {args.noisy_goal:.0%} of direct: {shown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
