"""Does every counter add up? Read at a quiet point (no request open on the client side).

- every request the clients sent with a valid key ended in exactly one outcome
  (``sluicegate_outcomes_total``), every wrong key in one refusal
  (``sluicegate_invalid_requests_total``);
- one decision record per outcome, with the same outcome counts (and one per refusal);
- decisions = outcomes: the terminal decisions counted (admit, degrade, reject) are one
  per dispatch attempt plus one per rejection, as the records tell them;
- nothing queued or in flight, every charged token released;
- one reload counted per file written, ``ok`` or ``error`` as the file was.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

TERMINAL = ("admit", "degrade", "reject")


@dataclass
class Expected:
    scheduled: int
    refused: int
    reloads_ok: int
    reloads_error: int


@dataclass
class Books:
    """What the gateway says, at one quiet point."""

    metrics: dict[str, defaultdict[str, float]]
    scheduler: dict[str, Any]
    records: Counter[str] = field(default_factory=Counter)
    record_decisions: int = 0
    """One per dispatch attempt plus one per rejection, summed over the records."""
    refusals: Counter[str] = field(default_factory=Counter)


def by_label(text: str, name: str, label: str) -> defaultdict[str, float]:
    """Sum of the samples of ``name`` by one label's value."""
    out: defaultdict[str, float] = defaultdict(float)
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                out[s.labels.get(label, "")] += s.value
    return out


async def read_books(base_url: str, records: Records) -> Books:
    async with httpx.AsyncClient(base_url=base_url, timeout=30.0) as c:
        text = (await c.get("/metrics")).text
        scheduler = (await c.get("/admin/scheduler")).json()
    metrics = {
        "outcomes": by_label(text, "sluicegate_outcomes_total", "outcome"),
        "decisions": by_label(text, "sluicegate_decisions_total", "decision"),
        "invalid": by_label(text, "sluicegate_invalid_requests_total", "status"),
        "reloads": by_label(text, "sluicegate_config_reloads_total", "result"),
        "in_flight": by_label(text, "sluicegate_in_flight", ""),
        "queued": by_label(text, "sluicegate_queue_depth", ""),
    }
    records.read()
    return Books(
        metrics, scheduler, Counter(records.outcomes), records.decisions, Counter(records.refusals)
    )


async def gateway_counts(base_url: str) -> tuple[float, float, float]:
    """(outcomes, reloads counted, in flight + queued), the cheap part of the books."""
    async with httpx.AsyncClient(base_url=base_url, timeout=30.0) as c:
        text = (await c.get("/metrics")).text
    open_now = sum(by_label(text, "sluicegate_in_flight", "").values()) + sum(
        by_label(text, "sluicegate_queue_depth", "").values()
    )
    outcomes = sum(by_label(text, "sluicegate_outcomes_total", "outcome").values())
    reloads = sum(by_label(text, "sluicegate_config_reloads_total", "result").values())
    return outcomes, reloads, open_now


class Records:
    """The gateway's decision records (JSON lines in its log), read on from where the last
    read stopped."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.outcomes: Counter[str] = Counter()
        self.refusals: Counter[str] = Counter()
        """Records of requests refused before scheduling, by status."""
        self.decisions = 0
        """One per dispatch attempt plus one per rejection."""

    def read(self) -> None:
        with self.path.open("rb") as f:
            f.seek(self.offset)
            chunk = f.read()
        end = chunk.rfind(b"\n") + 1
        self.offset += end
        for line in chunk[:end].splitlines():
            if line.startswith(b'{"event":"request"'):
                rec = json.loads(line)
                if rec["decision"] is None:  # refused before scheduling
                    self.refusals[str(rec["status"])] += 1
                    continue
                self.outcomes[rec["outcome"]] += 1
                self.decisions += rec["attempts"] + (rec["decision"] == "reject")


def problems(books: Books, want: Expected) -> list[str]:
    """Every way the books fail to add up (empty: they do)."""
    m, out = books.metrics, []
    outcomes = sum(m["outcomes"].values())
    terminal = sum(m["decisions"][d] for d in TERMINAL)
    checks = [
        ("outcomes = requests sent with a valid key", outcomes, want.scheduled),
        ("401 refusals = wrong keys sent", m["invalid"]["401"], want.refused),
        ("other refusals", sum(m["invalid"].values()) - m["invalid"]["401"], 0),
        ("decision records = outcomes", sum(books.records.values()), outcomes),
        (
            "records of refusals = refusals",
            sum(books.refusals.values()),
            sum(m["invalid"].values()),
        ),
        ("terminal decisions = attempts + rejections", terminal, books.record_decisions),
        ("in flight (gauge)", sum(m["in_flight"].values()), 0),
        ("queued (gauge)", sum(m["queued"].values()), 0),
        ("in flight (scheduler)", books.scheduler["in_flight"], 0),
        ("queued (scheduler)", books.scheduler["queued"], 0),
        (
            "released tokens = charged",
            books.scheduler["released_tokens"],
            books.scheduler["charged_tokens"],
        ),
        ("reloads ok", m["reloads"]["ok"], want.reloads_ok),
        ("reloads refused", m["reloads"]["error"], want.reloads_error),
    ]
    out = [f"{what}: {got:g} != {expected:g}" for what, got, expected in checks if got != expected]
    for outcome in set(books.records) | set(m["outcomes"]):
        if books.records[outcome] != m["outcomes"][outcome]:
            out.append(
                f"records of outcome {outcome}: {books.records[outcome]} "
                f"!= counter {m['outcomes'][outcome]:g}"
            )
    return out
