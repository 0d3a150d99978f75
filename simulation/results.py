"""One row per (policy, N) run, and the CSV both ``simulate`` and ``swarm`` write."""

from __future__ import annotations

import csv
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from simulation.csv_records import write_records
from simulation.metrics import Summary


@dataclass(frozen=True)
class RunKey:
    """Which run a row is of. No slots of its own (``__slots__ = ()``), so that ``Row`` can
    take both it and the slotted ``Summary`` as bases."""

    __slots__ = ()
    source: str  # "simulate" or "swarm"
    policy: str
    n_agents: int
    seed: int


@dataclass(frozen=True, slots=True)
class Row(Summary, RunKey):
    """The seed table's columns: the run's key, then its ``Summary`` (seconds, turns/s,
    fractions; the agent-felt wait among them)."""

    @classmethod
    def of(cls, source: str, policy: str, n_agents: int, seed: int, s: Summary) -> Row:
        return cls(source, policy, n_agents, seed, **asdict(s))


COLUMNS = [f.name for f in fields(Row)]


def write_csv(rows: list[Row], path: Path) -> None:
    write_records(path, COLUMNS, (_formatted(asdict(row)) for row in rows))


def _formatted(values: dict[str, Any]) -> dict[str, Any]:
    return {k: f"{v:.4f}" if isinstance(v, float) else v for k, v in values.items()}


def read_csv(path: Path) -> list[Row]:
    with path.open(encoding="utf-8") as f:
        out = []
        for raw in csv.DictReader(f):
            kinds = {f.name: f.type for f in fields(Row)}
            out.append(Row(**{k: _parse(kinds[k], v) for k, v in raw.items()}))
        return out


def _parse(kind: object, text: str) -> Any:
    if kind in (int, "int"):
        return int(text)
    if kind in (float, "float"):
        return float(text)
    return text


def format_table(rows: list[Row]) -> str:
    """A Markdown table: one line per run."""
    head = "| policy | N | goodput (turns/s) | p99 queue wait (s) | deferred | p99 agent-felt (s) |"
    lines = [head, "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r.policy} | {r.n_agents} | {r.goodput_tps:.3f} | {r.p99_queue_wait_s:.1f} | "
            f"{r.deferral_share:.0%} | {r.p99_felt_wait_s:.1f} |"
        )
    return "\n".join(lines)
