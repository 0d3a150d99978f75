"""An ordinary day, watched by a real Prometheus: one tenant's chat calls and streams, some
of them refused by its quota (``max_concurrent``), and nothing else.

No agent runs and no async handoff (both switched off: the run book is on by default,
the handoff off), no deadlines, no client
retries, no refused request, no backend failure. A second tenant is configured and sends
nothing. The traffic comes in waves, each one seen by a Prometheus scrape before the next
is sent (``rate()`` counts the increments between scrapes, not within one).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from gateway.request.auth import key_digest
from tests.prometheus.api import poll
from tests.prometheus.fleet import (
    MODEL,
    PHASE_TIMEOUT_S,
    Run,
    api_key,
    send,
    slots,
    watched_fleet,
)

WAVES = 4
CALLS, STREAMS = 4, 4
"""Per wave, alice's chat calls and streams, sent at once."""
MAX_CONCURRENT = 5
"""alice's quota: with ``CALLS + STREAMS`` at once, some are refused (429)."""
SENDER, SILENT = "alice", "carol"


def ordinary_config(port: int, backends: list[str]) -> dict[str, Any]:
    return {
        "server": {"host": "127.0.0.1", "port": port, "log_records": False},
        "tenants": [
            {"name": name, "api_key_sha256": [key_digest(api_key(name))]}
            for name in (SENDER, SILENT)
        ],
        "backends": [
            {"name": f"emu-{i}", "url": url, "models": [MODEL], "max_num_seqs": slots()}
            for i, url in enumerate(backends)
        ],
        "health": {"interval_s": 0.5, "timeout_s": 1.0, "failures_to_down": 2},
        "scrape": {"enabled": True, "interval_s": 0.2},
        "policy": {
            "name": "ordinary",
            "runs": {"enabled": False},  # a feature switched off: its row must say so
            "gates": [
                {
                    "name": "quota",
                    "type": "tenant_quota",
                    "parameters": {"tenants": {SENDER: {"max_concurrent": MAX_CONCURRENT}}},
                },
            ],
        },
    }


def _scraped(run: Run, sent: int) -> Callable[[], bool]:
    """Whether Prometheus has scraped the outcomes of the first ``sent`` calls."""

    def check() -> bool:
        found = run.prometheus.instant(f'sum(sluicegate_outcomes_total{{tenant="{SENDER}"}})')
        return sum(float(r["value"][1]) for r in found) >= sent

    return check


def ordinary_traffic(run: Run, base: str) -> None:
    sent = 0
    for wave in range(WAVES):
        send(run, base, (SENDER, CALLS, 32), (SENDER, STREAMS, 32, None, True))
        sent += CALLS + STREAMS
        poll(_scraped(run, sent), PHASE_TIMEOUT_S, f"wave {wave} scraped")
    run.mark("ordinary traffic sent")


@contextlib.contextmanager
def ordinary_run(workdir: Path) -> Iterator[Run]:
    """The ordinary day; yields the run with the gateway and Prometheus still up."""
    with watched_fleet(workdir, ordinary_config) as fleet:
        ordinary_traffic(fleet.run, fleet.base)
        fleet.run.ended = time.time()
        yield fleet.run
