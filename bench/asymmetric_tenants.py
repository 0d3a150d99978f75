"""Two tenants that spend the engine differently, side by side under each policy, in the
matrix's simulator: a shape the matrix does not hold (its tenants share one shape, or are
a flood beside a light victim).

``rag`` sends 2,000-token prompts for 16-token answers; ``writer`` 50-token prompts for
512-token answers; both closed loop, equal weights, ``--clients`` each (default: the
engine's slots, so both are backlogged). For each profile and policy it prints each
tenant's requests completed per second, its median wait in the gateway's queue, its TTFT
p99, and its share of the engine's time over the window (its prompt tokens at the
profile's prefill cost, its output tokens at a full batch's step time over the batch: the
step time model's marginal costs). ``no-reserve`` is the default without its headroom
reserve (``headroom.reserve_fraction: 0``), to show what the reserve decides.

    python -m bench.asymmetric_tenants                  # cpu-tiny, rx9070xt, mi300x
    python -m bench.asymmetric_tenants --profiles rx9070xt --seeds 1,2,3
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emulator.profile import Profile, load_profile
from simulation.matrix.cells import DURATION_S
from simulation.matrix.loop import MatrixSimulation, Request
from simulation.matrix.traffic import Shape, Tenant, fixed_length
from simulation.metrics import percentile
from simulation.policy_file import read_policy_file

PRESETS = Path(__file__).resolve().parent.parent / "presets"
TENANTS = {"rag": (2000, 16), "writer": (50, 512)}


@dataclass(frozen=True)
class Served:
    per_s: float
    queue_p50_s: float
    ttft_p99_s: float
    engine_s: float


def _policy(name: str) -> dict[str, Any]:
    if name == "default":
        return {}
    if name == "no-reserve":
        return {"headroom": {"reserve_fraction": 0.0}}
    return read_policy_file(PRESETS / f"{name}.yaml")[1]


def _costs(p: Profile) -> tuple[float, float]:
    """(seconds of engine time per prompt token, per output token at a full batch)."""
    model, seqs = p.engine.step_time, p.engine.max_num_seqs
    return model.per_prefill_token_s, model.duration(0, seqs, 0) / seqs


def run(p: Profile, policy: dict[str, Any], clients: int, seed: int) -> dict[str, Served]:
    tenants = [
        Tenant(name, Shape(prompt, fixed_length(output)), clients=clients)
        for name, (prompt, output) in TENANTS.items()
    ]
    duration = DURATION_S[p.name]
    sim = MatrixSimulation(
        tenants=tenants,
        policy=policy,
        profile=p,
        backends=1,
        duration_s=duration,
        seed=seed,
        probe=False,
    )
    start, span = duration / 4, duration * 3 / 4
    done = [
        r
        for r in sim.run().requests
        if r.finished is not None and start <= r.finished < duration and r.first_token
    ]
    prefill_s, output_s = _costs(p)
    out = {}
    for name in TENANTS:
        mine = [r for r in done if r.tenant == name]
        out[name] = Served(
            per_s=len(mine) / span,
            queue_p50_s=percentile([_queued(r) for r in mine], 50.0) if mine else float("nan"),
            ttft_p99_s=percentile([_ttft(r) for r in mine], 99.0) if mine else float("nan"),
            engine_s=sum(r.prompt_tokens * prefill_s + r.output_tokens * output_s for r in mine),
        )
    return out


def _queued(r: Request) -> float:
    assert r.dispatched is not None
    return r.dispatched - r.first_submit


def _ttft(r: Request) -> float:
    assert r.first_token is not None
    return r.first_token - r.first_submit


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profiles", default="cpu-tiny,rx9070xt,mi300x")
    ap.add_argument("--policies", default="default,no-reserve,fair-share")
    ap.add_argument("--clients", type=int, default=0, help="per tenant (0: the engine's slots)")
    ap.add_argument("--seeds", default="1")
    args = ap.parse_args(argv)
    print("profile   policy      seed tenant   req/s  queue p50  TTFT p99  engine share")
    for profile in args.profiles.split(","):
        p = load_profile(profile)
        clients = args.clients or p.engine.max_num_seqs
        for name in args.policies.split(","):
            for seed in (int(s) for s in args.seeds.split(",")):
                served = run(p, _policy(name), clients, seed)
                engine = sum(s.engine_s for s in served.values()) or 1.0
                for tenant, s in served.items():
                    print(
                        f"{profile:9} {name:11} {seed:4} {tenant:7} {s.per_s:6.2f} "
                        f"{s.queue_p50_s:10.3f} {s.ttft_p99_s:9.3f} {s.engine_s / engine:13.2f}"
                    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
