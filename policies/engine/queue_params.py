"""Parameters of ``queue.py``, apart from it for mypyc (see ``policies/params.py``)."""

from __future__ import annotations

from pydantic import Field

from policies.params import Params


class QueueParams(Params):
    max_wait_s: float = Field(default=30.0, gt=0)
    """Longest a request without its own deadline may wait in the gateway queue."""
    max_queued_tokens: int | None = Field(default=None, gt=0)
    """Work-weighted bound on the whole queue (estimated tokens); None: time bound only."""
