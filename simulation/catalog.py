"""The policies the seed table compares, as ``policy:`` sections for ``build_policy``.

The reference leaves some parameters unstated; the choices are documented in
``docs/seed-table.md``:

- *unbounded*: the gateway queue never sheds (``max_wait_s`` beyond any run) and dispatches
  while the engine reports room (the default ``server_signals`` limit).
- *fixed-cap-12*: at most 12 turns in the system (running + waiting in the engine); a turn
  that finds no room is rejected at once (a one-token queue bound means "never queue"),
  so the agent backs off and resubmits.
- *codel-8s*: the gateway queue under CoDel (RFC 8289) with target 8 s, dropping queued
  turns at dequeue.
- *codel-admission-8s*: the same state machine on the head-of-line sojourn, applied at
  submit: while it is in its dropping state, new submissions are deferred (the seed's
  reading of "CoDel defers X % of submissions"); ``-law`` defers one per control-law tick.

A name that is a path to a YAML file loads that file's ``policy:`` section (or the whole
file when it has none), so any preset runs in the simulator unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from simulation.policy_file import read_policy_file
from simulation.workload import BackoffPolicy

NEVER_S = 1.0e9
"""A queue wait bound no simulated run reaches: "never expire"."""

CODEL_INTERVAL_S = 8.5
"""Unstated in the seed. The production CoDel requires interval > target; the shortest
interval above the 8 s target sheds the most, which is closest to the seed's deferral
shares (see docs/seed-table.md)."""

CODEL_ADMISSION_INTERVAL_S = 16.0
"""Unstated in the seed: twice the target. Shorter intervals shed more (12 s: +2-4 points
of deferral at N = 20-24), longer ones less (24 s: -5 points at N = 20); see seed-table.md."""


NO_LADDER: dict[str, Any] = {"steps": []}
"""The seed's card never degrades a turn. The scheduler's default ladder caps max_tokens at
512 once the engine looks saturated (KV usage, waiting, or a stale scrape); the gateway
applies that cap, so a live seed run with the default ladder serves truncated turns."""


OFF_THE_CARD: dict[str, Any] = {
    "ladder": NO_LADDER,
    "prefill_backlog": {"enabled": False},
}
"""What the seed's card never had, switched off: the degrade ladder (above) and the prefill
backlog bound (on by default; it holds dispatches while earlier prompts are unprefilled,
which caps the engine's batch below the seed's policies and shortens their queue waits).
Retry-After's promises are off too (``retry_after.promise``): the seed's Retry-After was an
estimate that held nothing for the client it refused."""


def _on_the_card(policy: dict[str, Any]) -> dict[str, Any]:
    """``policy`` as every catalogue policy runs: as the seed ran it, never degraded and
    without mechanisms the seed did not have."""
    retry_after = {**policy.get("retry_after", {}), "promise": False}
    return {**policy, **OFF_THE_CARD, "retry_after": retry_after}


def _codel_admission(name: str, shed: str) -> dict[str, Any]:
    params = {"target_s": 8.0, "interval_s": CODEL_ADMISSION_INTERVAL_S, "shed": shed}
    return {
        "name": name,
        "queue": {"max_wait_s": NEVER_S},
        "gates": [{"type": "codel_admission", "parameters": params}],
    }


_SEED: dict[str, dict[str, Any]] = {
    "unbounded": {
        "name": "unbounded",
        "queue": {"max_wait_s": NEVER_S},
    },
    "fixed-cap-12": {
        "name": "fixed-cap-12",
        "limit": {"type": "fixed", "parameters": {"max_in_flight": 12}},
        "queue": {"max_wait_s": NEVER_S, "max_queued_tokens": 1},
    },
    "codel-8s": {
        "name": "codel-8s",
        "queue": {
            "max_wait_s": NEVER_S,
            "discipline": {
                "type": "codel",
                "parameters": {"target_s": 8.0, "interval_s": CODEL_INTERVAL_S},
            },
        },
    },
    "codel-admission-8s": _codel_admission("codel-admission-8s", "while_dropping"),
    "codel-admission-8s-law": _codel_admission("codel-admission-8s-law", "control_law"),
}
SEED_POLICIES = {name: _on_the_card(policy) for name, policy in _SEED.items()}


EXPONENTIAL = BackoffPolicy()
"""Seed-table agents: max(Retry-After, 6 s x 2^k), capped at 120 s (see seed-table.md)."""
EXACT = BackoffPolicy(base_s=0.0, growth=1.0, cap_s=0.0)
"""Agents that come back exactly when Retry-After says."""


def _reservation(target_s: float) -> dict[str, Any]:
    return {
        "name": f"reservation-{target_s:g}s",
        "queue": {"max_wait_s": 60.0},
        "gates": [{"type": "wait_reservation", "parameters": {"target_wait_s": target_s}}],
        "retry_after": {"jitter": 0.0, "max_s": 120.0},
    }


_FRONTIER: dict[str, tuple[dict[str, Any], BackoffPolicy]] = {
    "unbounded": (SEED_POLICIES["unbounded"], EXPONENTIAL),
    "fixed-cap-12": (SEED_POLICIES["fixed-cap-12"], EXPONENTIAL),
    "codel-8s": (SEED_POLICIES["codel-8s"], EXPONENTIAL),
    "codel-admission-8s": (SEED_POLICIES["codel-admission-8s"], EXPONENTIAL),
    "fixed-cap-12/exact": (SEED_POLICIES["fixed-cap-12"], EXACT),
    "queue-deadline-12s/exact": (
        {
            "name": "queue-deadline-12s",
            "queue": {"max_wait_s": 12.0},
            "retry_after": {"jitter": 0.0},
        },
        EXACT,
    ),
    "adaptive-qt/exact": (
        {
            "name": "adaptive-qt",
            "queue": {"max_wait_s": 12.0},
            "limit": {"type": "adaptive", "parameters": {"signal": "queue_time"}},
            "retry_after": {"jitter": 0.0},
        },
        EXACT,
    ),
    "reservation-3s/exact": (_reservation(3.0), EXACT),
    "reservation-4s/exact": (_reservation(4.0), EXACT),
    "reservation-5s/exact": (_reservation(5.0), EXACT),
}
FRONTIER = {name: (_on_the_card(policy), agents) for name, (policy, agents) in _FRONTIER.items()}
"""Candidates for "beyond the seed", each with the agent behaviour it assumes."""


def resolve(name_or_path: str) -> tuple[str, dict[str, Any]]:
    """(label, ``policy:`` mapping) for a catalogue name or a YAML file."""
    if name_or_path in SEED_POLICIES:
        return name_or_path, SEED_POLICIES[name_or_path]
    path = Path(name_or_path)
    if not path.exists():
        known = ", ".join(SEED_POLICIES)
        raise ValueError(f"unknown policy {name_or_path!r}: not one of {known}, nor a file")
    return read_policy_file(path)
