"""What any admission policy can reach beside a noisy tenant, from an engine profile's step
time model: the victim's request rate against the noisy tenant's throughput, for every
number of noisy sequences the policy lets run beside the victim's.

A gateway decides which requests enter the engine, so what it controls is the batch: how
many of the noisy tenant's sequences run beside the victim's (``k``). For each ``k`` the
step time of the profile's fitted model (``emulator/profile.py``: base + prefill tokens +
decoding sequences + context tokens) gives, in steady state with prefill amortised over
each request's decode:

- the victim's share: its turn time alone over its turn time beside ``k`` noisy sequences
  (a turn is its prefill step plus one step per output token), so its latency grows by
  the inverse of that share;
- the noisy tenant's throughput: the tokens per second of its ``k`` sequences, plus, with
  more than one backend, those of the rest of its ``clients`` spread over the other
  backends, against what it gets with the engines to itself (``direct``).

Running ``k`` for a fraction of the time and ``k'`` for the rest mixes two rows linearly, so
the reachable set is the convex hull of the rows. ``bench/noisy_neighbour/frontier.py``
prints the table; the matrix's judgement (``guard.py``) asks whether the victim goal is on
the reachable side of it in each noisy cell, and how far each preset's point lies below it.
"""

from __future__ import annotations

from dataclasses import dataclass

from emulator.profile import Profile


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


def step_s(profile: Profile, shape: Shape, victims: int, k: float) -> float:
    """Mean decode step with ``victims`` victim and ``k`` noisy sequences, prefill amortised."""
    model = profile.engine.step_time
    context = victims * (shape.victim_prompt + shape.victim_output / 2) + k * (
        shape.noisy_prompt + shape.noisy_output / 2
    )
    prefill = victims * shape.victim_prompt / shape.victim_output + (
        k * shape.noisy_prompt / shape.noisy_output
    )
    return model.duration(round(prefill), round(victims + k), round(context))


def _flood_tps(profile: Profile, shape: Shape, sequences: float) -> float:
    """Noisy tokens per second of one engine running ``sequences`` of them and no victim."""
    n = min(float(profile.engine.max_num_seqs), sequences)
    return n / step_s(profile, shape, 0, n) if n > 0 else 0.0


def rows(
    profile: Profile, shape: Shape, *, clients: int | None = None, backends: int = 1
) -> list[Row]:
    """One row per ``k`` noisy sequences beside the victims on their backend. ``clients``:
    the noisy tenant's concurrency (None: enough to fill every slot); the rest of it runs
    on the other backends."""
    slots = profile.engine.max_num_seqs
    flood = slots * backends if clients is None else clients
    direct = backends * _flood_tps(profile, shape, flood / backends)
    alone = step_s(profile, shape, shape.victims, 0)
    out = []
    for k in range(min(flood, slots - shape.victims) + 1):
        step = step_s(profile, shape, shape.victims, k)
        others = (
            (backends - 1) * _flood_tps(profile, shape, (flood - k) / (backends - 1))
            if backends > 1
            else 0.0
        )
        out.append(Row(k, step, alone / step, (k / step + others) / direct))
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


def unlimited(table: list[Row], *, clients: int, backends: int) -> Row:
    """The row nobody limits: the noisy tenant's clients spread evenly over the backends."""
    return table[min(len(table) - 1, round(clients / backends))]


def gap(table: list[Row], victim_share: float, noisy_share: float) -> float:
    """How far a measured point lies below the frontier: the best victim share reachable
    at its noisy share, minus its own (0 on or above the frontier)."""
    top = max(r.noisy_share for r in table)
    best = best_share(table, min(noisy_share, top))
    return max(0.0, (best or 0.0) - victim_share)
