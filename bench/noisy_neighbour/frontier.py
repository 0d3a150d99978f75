"""What any admission policy can reach on an engine whose step time model is known: the
victim's request rate against the noisy tenant's throughput, for every number of noisy
sequences the engine could be running beside the victim's.

    python -m bench.noisy_neighbour.frontier --profile cpu-tiny

A gateway decides which requests enter the engine, so what it controls is the batch: how
many of the noisy tenant's sequences run beside the victim's. For each count k the step
time of the emulator profile's fitted model (``emulator/profile.py``: base + prefill tokens
+ decoding sequences + context tokens) gives, in steady state with prefill amortised over
each request's decode:

- the victim's share: its turn time alone over its turn time beside k noisy sequences
  (a turn is its prefill step plus one step per output token);
- the noisy tenant's throughput: k tokens per step, against what it gets from the engine
  directly (every slot held by the flood, the victim starved).

Running k for a fraction of the time and k' for the rest mixes two rows linearly, so the
reachable set is the convex hull of the rows; the report gives the best victim share at
the issue's noisy-throughput goal on that hull.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from emulator.profile import Profile, load_profile


@dataclass(frozen=True)
class Shape:
    victims: int = 2
    victim_prompt: int = 50
    victim_output: int = 32
    noisy_prompt: int = 1500
    noisy_output: int = 256


@dataclass(frozen=True)
class Row:
    k: int
    step_s: float
    victim_share: float
    noisy_share: float


def _step(profile: Profile, shape: Shape, victims: int, k: int) -> float:
    """Mean decode step with ``victims`` victim and ``k`` noisy sequences, prefill amortised."""
    model = profile.engine.step_time
    context = victims * (shape.victim_prompt + shape.victim_output / 2) + k * (
        shape.noisy_prompt + shape.noisy_output / 2
    )
    prefill = victims * shape.victim_prompt / shape.victim_output + (
        k * shape.noisy_prompt / shape.noisy_output
    )
    return model.duration(round(prefill), victims + k, round(context))


def rows(profile: Profile, shape: Shape) -> list[Row]:
    slots = profile.engine.max_num_seqs
    alone = _step(profile, shape, shape.victims, 0)
    direct = slots / _step(profile, shape, 0, slots)  # the flood alone fills every slot
    out = []
    for k in range(slots - shape.victims + 1):
        step = _step(profile, shape, shape.victims, k)
        out.append(Row(k, step, alone / step, (k / step) / direct))
    return out


def best_share(table: list[Row], noisy_goal: float) -> float | None:
    """The highest victim share on the convex hull of ``table`` at ``noisy_goal``."""
    best: float | None = None
    for a in table:
        for b in table:
            if a.noisy_share <= noisy_goal <= b.noisy_share and b.noisy_share > a.noisy_share:
                w = (noisy_goal - a.noisy_share) / (b.noisy_share - a.noisy_share)
                share = (1 - w) * a.victim_share + w * b.victim_share
                best = share if best is None else max(best, share)
            elif a.noisy_share >= noisy_goal:
                best = a.victim_share if best is None else max(best, a.victim_share)
    return best


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.noisy_neighbour.frontier")
    p.add_argument("--profile", default="cpu-tiny")
    p.add_argument("--noisy-prompt", type=int, default=1500)
    p.add_argument("--noisy-max-tokens", type=int, default=256)
    p.add_argument("--noisy-goal", type=float, default=0.8)
    args = p.parse_args(argv)
    shape = Shape(noisy_prompt=args.noisy_prompt, noisy_output=args.noisy_max_tokens)
    table = rows(load_profile(args.profile), shape)
    print(f"# profile {args.profile}: victim share and noisy throughput share per noisy k")
    print("| noisy sequences k | step ms | victim req/s share | noisy tok/s share of direct |")
    print("|---|---|---|---|")
    for r in table:
        print(f"| {r.k} | {r.step_s * 1000:.2f} | {r.victim_share:.2f} | {r.noisy_share:.2f} |")
    best = best_share(table, args.noisy_goal)
    shown = "unreachable" if best is None else f"{best:.2f}"
    print(f"\nbest victim share with noisy >= {args.noisy_goal:.0%} of direct: {shown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
