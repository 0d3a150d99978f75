"""The agent workload's flags, shared by ``simulate`` and ``swarm`` (so that the simulated
and the live agents are the same ones), and the workload they describe."""

from __future__ import annotations

import argparse

from emulator.profile import Profile
from simulation.lengths import resolve_lengths
from simulation.workload import AgentWorkload, BackoffPolicy


def add_agent_workload_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", default="rx9070xt", help="emulator profile name or YAML path")
    p.add_argument(
        "--lengths",
        default="profile",
        help="turn lengths: profile, lognormal-S (profile's mean, shape S) or a "
        "YAML file with components (see simulation/lengths.py)",
    )
    p.add_argument("--think", type=float, default=4.5, help="mean think time (s), exponential")
    p.add_argument("--prompt-tokens", type=int, default=64, help="prefill per turn (tokens)")
    p.add_argument("--backoff-base", type=float, default=6.0, help="first backoff (s)")
    p.add_argument("--backoff-growth", type=float, default=2.0, help="backoff factor per deferral")
    p.add_argument("--backoff-cap", type=float, default=120.0, help="longest backoff (s)")
    p.add_argument("--backoff-jitter", type=float, default=0.0, help="jitter fraction in [0,1]")
    p.add_argument(
        "--ignore-retry-after",
        action="store_true",
        help="agents back off by their own schedule only",
    )


def agent_workload_of(args: argparse.Namespace, profile: Profile) -> AgentWorkload:
    """The workload the flags describe; ``ValueError`` for ``--lengths`` it cannot read."""
    backoff = BackoffPolicy(
        base_s=args.backoff_base,
        growth=args.backoff_growth,
        cap_s=args.backoff_cap,
        jitter=args.backoff_jitter,
        honour_retry_after=not args.ignore_retry_after,
    )
    lengths = resolve_lengths(args.lengths, profile.output_lengths)
    return AgentWorkload(lengths, args.think, args.prompt_tokens, backoff=backoff)
