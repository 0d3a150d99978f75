"""The calls in flight of each agent run, cut at once when their run ends.

One future per open run that has a call in flight (not one per call): every upstream
attempt of the run watches it (``StallWatch``'s ``ended``), and the run's end sets it to
the reason, which cuts the attempt the way a client's disconnect does (the upstream
response is closed, so the engine aborts the request and frees its slot). A run that
ended recently answers with a future already done, so a call handed its ticket just
before the end is cut too.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict

from policies.runs.run import RunEnd, RunEnded
from policies.types import Reason

Key = tuple[str, str]
_RECENT = 4096
"""Ended runs remembered, so that a late attempt of one is cut at once."""


class RunCuts:
    def __init__(self) -> None:
        self._open: dict[Key, asyncio.Future[Reason]] = {}
        self._recent: OrderedDict[Key, Reason] = OrderedDict()

    def __len__(self) -> int:
        return len(self._open)

    def future(self, tenant: str, run_id: str) -> asyncio.Future[Reason]:
        """Done (with the reason) when the run ends."""
        key = (tenant, run_id)
        future = self._open.get(key)
        if future is None:
            future = asyncio.get_running_loop().create_future()
            ended = self._recent.get(key)
            if ended is not None:
                future.set_result(ended)
            else:
                self._open[key] = future
        return future

    def cut(self, ended: RunEnded) -> None:
        """``ended`` ended: its calls in flight are cut (none is, for a completed run)."""
        key = (ended.tenant, ended.run_id)
        future = self._open.pop(key, None)
        if ended.end is RunEnd.COMPLETED:
            if future is not None and not future.done():
                future.cancel()  # nothing to cut: watchers ignore a cancelled future
            return
        self._recent[key] = ended.reason
        while len(self._recent) > _RECENT:
            self._recent.popitem(last=False)
        if future is not None and not future.done():
            future.set_result(ended.reason)
