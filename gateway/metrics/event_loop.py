"""The gateway's event loop, read at scrape time: the number of asyncio tasks alive.

At rest (nothing in flight) the count is the fixed set of background loops (health, scrape,
reload watch, ...) plus the one serving the scrape; a count that grows from one quiet
moment to the next is a task leaked per request, per backend or per reload.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from gateway.metrics.exporter import GaugeSample

TASKS = "sluicegate_event_loop_tasks"


def event_loop_gauges() -> Iterable[GaugeSample]:
    try:
        tasks = len(asyncio.all_tasks())
    except RuntimeError:  # read outside the loop (no running loop): nothing to say
        return
    yield TASKS, "asyncio tasks alive in the gateway's event loop", {}, float(tasks)
