"""Registers every built-in policy under its YAML ``type`` name."""

from __future__ import annotations

from policies.fair_fifo import Fifo
from policies.limit_signals import ServerSignals
from policies.queue_deadline import DeadlineOnly
from policies.registry import register

register("limit")(ServerSignals)
register("fairness")(Fifo)
register("discipline")(DeadlineOnly)
