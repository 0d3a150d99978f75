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
the reachable set is the convex hull of the rows.

That is a mean: it bounds how much the victim's turns slow down, not the tail of its time to
first token. The tail has a floor of its own (``tail_limited``): a victim's prompt that
arrives while the engine prefills one of the noisy prompts waits for the rest of that step,
however the gateway orders its queue, and at the noisy tenant's rate a fixed share of the
victim's arrivals land in one; and a victim's prompt waits for the engine's current step
(each one decodes the ``k`` noisy sequences) and then its own, so with many of them beside
it its TTFT p99 is a multiple of its time alone (``step_wait_s``).
``bench/noisy_neighbour/frontier.py``
prints the table; the matrix's judgement (``guard.py``) asks whether the victim goal is on
the reachable side of it in each noisy cell, and how far each preset's point lies below it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from emulator.profile import Profile

TAIL = 0.01
"""The share of the victim's requests its TTFT p99 is the edge of."""


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


def prefill_steps_s(profile: Profile, shape: Shape) -> list[float]:
    """The least time of each step that prefills one noisy prompt: its chunks of at most
    the engine's ``max_num_batched_tokens``, each with nothing else in the step."""
    model, chunk = profile.engine.step_time, profile.engine.max_num_batched_tokens
    sizes = [chunk] * (shape.noisy_prompt // chunk)
    if shape.noisy_prompt % chunk:
        sizes.append(shape.noisy_prompt % chunk)
    return [model.duration(size, 0, 0) for size in sizes]


def tail_wait_s(profile: Profile, shape: Shape, row: Row) -> float:
    """The least wait the noisy tenant's prefill adds to the victim's TTFT p99 with
    ``row.k`` noisy sequences beside it: their prompts begin at k / step / output per
    second, each holding the engine for ``prefill_steps_s``; a victim arriving at a uniform
    moment waits out the rest of a step it lands in, so the share of arrivals that wait
    longer than w is starts x sum(max(0, step - w)), and the p99 waits the w at which that
    share falls to ``TAIL``."""
    if row.k == 0 or row.step_s <= 0.0:
        return 0.0
    starts = row.k / row.step_s / shape.noisy_output
    steps = prefill_steps_s(profile, shape)

    def beyond(w: float) -> float:
        return starts * sum(max(0.0, s - w) for s in steps)

    if beyond(0.0) <= TAIL:
        return 0.0
    lo, hi = 0.0, max(steps)
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if beyond(mid) > TAIL else (lo, mid)
    return lo


def step_wait_s(profile: Profile, shape: Shape, row: Row) -> float:
    """The least time to first token of a victim's prompt with ``row.k`` noisy sequences
    decoding: it arrives at a uniform moment of the engine's steps, each at least one
    decode step of the ``k`` (no prefill, their contexts at least their prompts), so the
    ``TAIL`` share of arrivals waits at least ``1 - TAIL`` of one such step, and then its
    own first step (its prompt beside the ``k``) ends before its first token. 0 without
    noisy sequences: the victim's time alone is measured, not modelled."""
    if row.k == 0:
        return 0.0
    model = profile.engine.step_time
    context = row.k * shape.noisy_prompt
    decode = model.duration(0, row.k, context)
    own = model.duration(shape.victim_prompt, row.k + 1, context + shape.victim_prompt)
    return (1.0 - TAIL) * decode + own


def tail_limited(table: list[Row], profile: Profile, shape: Shape, alone_s: float) -> list[Row]:
    """``table`` with each row's victim share no better than its TTFT p99 allows: a victim
    whose TTFT alone is ``alone_s`` reaches at most alone / (alone + the wait the noisy
    prefill adds), and at most alone / (the wait for a step beside the noisy decodes, and
    its own step: ``step_wait_s``). Taking the lowest per row and mixing rows afterwards
    overstates what a mix reaches (the wait is concave in the share of time spent
    prefilling), so a goal this finds out of reach is out of reach."""
    if alone_s <= 0.0:
        return table
    return [
        replace(
            r,
            victim_share=min(
                r.victim_share,
                alone_s / (alone_s + tail_wait_s(profile, shape, r)),
                alone_s / max(alone_s, step_wait_s(profile, shape, r)),
            ),
        )
        for r in table
    ]
